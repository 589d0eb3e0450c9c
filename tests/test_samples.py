"""The bundled samples are found in the installed package first, then in the checkout, by one
function (napari's sample data and ``xcorr bench align --first-runs`` both call it)."""

import shutil
from pathlib import Path

import pytest

from xcorr_app import InputError, _samples
from xcorr_app.bench import _align_first_runs as first_runs

SAMPLE_DATA = Path(__file__).resolve().parents[1] / "sample_data"


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """``(packaged, checkout)``: empty folders standing for the installed package's and the
    checkout's ``sample_data``."""
    packaged, checkout = tmp_path / "site" / "sample_data", tmp_path / "checkout" / "sample_data"
    packaged.mkdir(parents=True), checkout.mkdir(parents=True)
    monkeypatch.setattr(_samples, "PACKAGED", packaged)
    monkeypatch.setattr(_samples, "CHECKOUT", checkout)
    return packaged, checkout


def _copy(name, folder):
    for file in _samples.sample_files(name):
        shutil.copyfile(SAMPLE_DATA / file, folder / file)


def test_the_checkouts_samples_are_found_in_a_checkout():
    path = _samples.sample_path("cell")
    assert path.is_file() and path.name == "cell_drift.tif"
    assert _samples.sample_path("hubble", truth=True).read_text().startswith("frame,dy,dx")


@pytest.mark.parametrize("where", ["package", "checkout", "both"])
def test_the_packages_copy_comes_first_then_the_checkouts(folders, where):
    packaged, checkout = folders
    for folder in {"package": [packaged], "checkout": [checkout],
                   "both": [packaged, checkout]}[where]:
        _copy("moon", folder)
    expect = packaged if where != "checkout" else checkout
    assert _samples.sample_path("moon") == expect / "moon_drift.tif"
    assert _samples.sample_path("moon", truth=True) == expect / "moon_truth.csv"
    with pytest.raises(InputError, match="cell_drift.tif is in neither"):
        _samples.sample_path("cell")  # (only the moon was copied)


def test_bench_first_runs_finds_the_cell_sample_the_same_way(folders):
    packaged, _ = folders
    with pytest.raises(InputError, match="is in neither"):
        first_runs.sample_path()
    _copy("cell", packaged)
    assert first_runs.sample_path() == packaged / "cell_drift.tif"


@pytest.mark.parametrize("name", ["dog", "", "CELL"])
def test_an_unknown_sample_is_refused_by_name(name):
    with pytest.raises(InputError, match="the samples are cell, moon, hubble"):
        _samples.sample_path(name)
