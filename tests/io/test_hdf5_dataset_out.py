"""``--out-format hdf5:/NAME`` (issue 74): the HDF5 aligned stack's dataset named as the user's
pipeline reads it (suite2p: ``data``), in ``xcorr align``, ``xcorr apply --out NAME.h5:/DATA``
and ``AlignResult.save(format="hdf5:/NAME")``, groups made for ``/a/b/data``; the calibration
on that dataset, its name in shifts.json, read back as ``FILE.h5:/NAME`` (the readers'
syntax); ``--force`` over an earlier run; a bad name one ``error:`` line, nothing written."""

import json

import numpy as np
import pytest
import tifffile

from xcorr_app import align
from xcorr_app.errors import InputError
from xcorr_app.io import describe, open_stack, parse_out_format, parse_out_path

from cli_helpers import assert_clean_error, xcorr
from synthetic import drift_stack

h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """An ImageJ hyperstack of two named channels (uint16, 0.5 x 0.25 µm pixels)."""
    stack, _ = drift_stack(np.random.default_rng(11), n=6, shape=(40, 48), max_shift=3.0,
                           peak_counts=2000.0)
    path = tmp_path_factory.mktemp("in") / "two.tif"
    tifffile.imwrite(path, np.stack([stack, stack // 3], axis=1), imagej=True,
                     resolution=(4.0, 2.0),
                     metadata={"axes": "TCYX", "unit": "um", "finterval": 0.1,
                               "Labels": ["GCaMP", "tdTomato"] * 6})
    return path


@pytest.fixture(scope="module")
def result(calibrated):
    return align(calibrated, channel=0, device="cpu", quality=False)


def datasets(path):
    found = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: found.append(name) if hasattr(item, "dtype") else None)
    return found


def run(path, out, *args):
    r = xcorr("align", path, "--channel", "0", "--device", "cpu", "--out", out, "-q",
              "--no-quality", *args)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("channels", [1, 2])
def test_element_size_um_is_fijis_z_y_x_and_reads_back(tmp_path, channels):
    """element_size_um of a TYX or TCYX output is Fiji's three sizes, z y x (the frames its Z,
    a step of 1): it held the Y and X sizes alone, which Fiji does not read; read back by h5py
    and by xcorr, the pixel size is the input's and no Z step is made up."""
    from xcorr_app.io import stack_writer

    path = tmp_path / "out.h5"
    frames = np.random.default_rng(2).random((4 * channels, 12, 10)).astype(np.float32)
    with stack_writer(path, (12, 10), 4 * channels, channels=channels,
                      metadata={"pixel_size": (500.0, 250.0, "nm")}) as w:
        w.write(frames)
    with h5py.File(path, "r") as f:
        assert f["aligned"].ndim == 2 + channels
        np.testing.assert_allclose(f["aligned"].attrs["element_size_um"], [1.0, 0.5, 0.25])
    d = describe(path, channel=0)
    assert d["pixel_size"] == pytest.approx((0.5, 0.25, "µm")) and d["z_step"] is None


def test_align_names_the_dataset_and_it_reads_back(tmp_path, calibrated):
    run(calibrated, tmp_path / "plain", "--out-format", "hdf5")
    run(calibrated, tmp_path / "named", "--out-format", "hdf5:/data")
    out = tmp_path / "named" / "aligned.h5"
    assert datasets(out) == ["data"]
    with h5py.File(out, "r") as f, h5py.File(tmp_path / "plain" / "aligned.h5", "r") as g:
        data = f["data"]
        assert data.attrs["axes"] == "TYX" and data.dtype == np.float32
        np.testing.assert_allclose(data.attrs["element_size_um"], [1.0, 0.5, 0.25])
        np.testing.assert_array_equal(data[...], g["aligned"][...])  # (the same frames)
    doc = json.loads((tmp_path / "named" / "shifts.json").read_text())
    assert doc["aligned"] == "aligned.h5:/data"
    assert json.loads((tmp_path / "plain" / "shifts.json").read_text())["aligned"] == \
        "aligned.h5:/aligned"
    info = xcorr("info", f"{out}:/data")
    assert info.returncode == 0, info.stderr
    assert "pixel size 0.5 x 0.25 µm" in info.stdout and "6 x 40 x 48" in info.stdout
    assert describe(f"{out}:/data")["pixel_size"][:2] == pytest.approx((0.5, 0.25))


def test_save_writes_nested_groups_with_the_channels(tmp_path, result):
    res = result
    res.save(tmp_path / "out", format="hdf5:/scan/reg/data", channels=[0, 1], keep_dtype=True)
    out = tmp_path / "out" / "aligned.h5"
    assert datasets(out) == ["scan/reg/data"]
    with h5py.File(out, "r") as f:
        data = f["scan/reg/data"]
        assert data.shape == (6, 2, 40, 48) and data.dtype == np.uint16
        assert data.attrs["axes"] == "TCYX"
        assert [str(n) for n in data.attrs["channel_names"]] == ["GCaMP", "tdTomato"]
        got = data[...]
    with open_stack(f"{out}:/scan/reg/data", channel=1) as src:
        assert src.channel_names == ["GCaMP", "tdTomato"]
        np.testing.assert_array_equal(src.read(0, src.n_frames), got[:, 1])
    doc = json.loads((tmp_path / "out" / "shifts.json").read_text())
    assert doc["aligned"] == "aligned.h5:/scan/reg/data"
    # the TIFF output of the same result holds the same frames
    res.save(tmp_path / "tif", channels=[0, 1], keep_dtype=True)
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "tif" / "aligned.tif"), got)


def test_force_replaces_an_earlier_hdf5_run(tmp_path, calibrated):
    run(calibrated, tmp_path / "o", "--out-format", "hdf5")
    r = xcorr("align", calibrated, "--channel", "0", "--device", "cpu", "--out", tmp_path / "o",
              "-q", "--out-format", "hdf5:/data")
    assert_clean_error(r, "exists", "--force")
    assert datasets(tmp_path / "o" / "aligned.h5") == ["aligned"]  # (kept as it was)
    run(calibrated, tmp_path / "o", "--out-format", "hdf5:/data", "--force")
    assert datasets(tmp_path / "o" / "aligned.h5") == ["data"]  # (a new file, not added to)
    r = xcorr("align", calibrated, "--channel", "0", "--device", "cpu", "--out",
              tmp_path / "o", "--no-quality", "--force")
    assert r.returncode == 0, r.stderr
    assert "removed" in r.stdout and "aligned.h5" in r.stdout  # (stale: another format now)
    assert not (tmp_path / "o" / "aligned.h5").exists()
    assert (tmp_path / "o" / "aligned.tif").exists()


def test_apply_names_the_dataset(tmp_path, calibrated):
    run(calibrated, tmp_path / "o", "--out-format", "hdf5:/data")
    out = tmp_path / "day2.h5"
    r = xcorr("apply", tmp_path / "o" / "shifts.csv", calibrated, "--channel", "0",
              "--out", f"{out}:/a/data", "-q")
    assert r.returncode == 0, r.stderr
    assert datasets(out) == ["a/data"]
    with h5py.File(out, "r") as f, h5py.File(tmp_path / "o" / "aligned.h5", "r") as g:
        np.testing.assert_array_equal(f["a/data"][...], g["data"][...])
        np.testing.assert_allclose(f["a/data"].attrs["element_size_um"], [1.0, 0.5, 0.25])
    r = xcorr("apply", tmp_path / "o" / "shifts.csv", calibrated, "--channel", "0",
              "--out", tmp_path / "plain.h5", "-q")
    assert r.returncode == 0, r.stderr
    assert datasets(tmp_path / "plain.h5") == ["aligned"]


BAD_FORMATS = [("hdf5:", "names no dataset"), ("hdf5:/", "names a group"),
               ("hdf5:/a/", "names a group"), ("hdf5:/a//b", "empty group name"),
               ("hdf5:/../b", ". or .."), ("hdf5:/a\tb", "control character"),
               ("tiff:/data", "only an HDF5 output"), ("ome-zarr:/0", "only an HDF5 output"),
               ("h5:/data", "no format"), ("", "no format")]


@pytest.mark.parametrize("spec, why", BAD_FORMATS)
def test_a_bad_dataset_name_is_refused_and_nothing_written(tmp_path, calibrated, result, spec,
                                                           why):
    r = xcorr("align", calibrated, "--channel", "0", "--device", "cpu", "--out", tmp_path / "o",
              "--out-format", spec)
    assert r.returncode == 2
    assert_clean_error(r, "--out-format", why)
    assert not (tmp_path / "o").exists()
    with pytest.raises(InputError, match=why.replace(".", r"\.")):
        result.save(tmp_path / "api", format=spec)
    assert not (tmp_path / "api").exists()


@pytest.mark.parametrize("name, why", [("day2.h5:", "names no dataset"),
                                       ("day2.hdf5:/x/", "names a group"),
                                       ("day2.tif:/data", "only an HDF5 output"),
                                       ("day2.ome.zarr:/0", "only an HDF5 output")])
def test_apply_refuses_a_bad_dataset_name(tmp_path, calibrated, name, why):
    run(calibrated, tmp_path / "o", "--no-aligned")
    before = sorted(p.name for p in tmp_path.iterdir())
    r = xcorr("apply", tmp_path / "o" / "shifts.csv", calibrated, "--channel", "0",
              "--out", f"{tmp_path}/{name}")  # (a str: pathlib would drop a trailing /)
    assert r.returncode == 2
    assert_clean_error(r, "--out", why)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_parsed_once_into_format_and_dataset():
    assert parse_out_format("hdf5:data") == ("hdf5", "/data")  # (the leading / implied)
    assert parse_out_format(" hdf5:/a/b/data ") == ("hdf5", "/a/b/data")
    assert parse_out_format("ome-zarr") == ("ome-zarr", None)
    assert parse_out_path("x/D.HDF5:/scan") == (parse_out_path("x/D.HDF5")[0], "/scan")
    assert parse_out_path("x/d.h5") == (parse_out_path("x/d.h5")[0], "/aligned")
    assert parse_out_path("x/d.ome.tif") == (parse_out_path("x/d.ome.tif")[0], None)
