"""The reader, the sample data and the manifest napari discovers the plugin by."""

from pathlib import Path

import numpy as np
import pytest
import tifffile

import xcorr_app
from sample_paths import SAMPLES, stack_path
from xcorr_app.napari import _reader

MANIFEST = Path(xcorr_app.__file__).parent / "napari" / "napari.yaml"


def test_the_manifest_is_valid_and_names_what_exists():
    from npe2 import PluginManifest

    manifest = PluginManifest.from_file(MANIFEST)
    for command in manifest.contributions.commands:
        module, name = command.python_name.split(":")
        assert callable(getattr(__import__(module, fromlist=[name]), name)), command.id
    assert {s.key for s in manifest.contributions.sample_data} == set(SAMPLES)


def test_tiff_stacks_and_folders_are_read_other_files_are_not(tmp_path):
    assert _reader.napari_get_reader(str(tmp_path / "a.png")) is None
    assert _reader.napari_get_reader(str(stack_path("moon"))) is _reader.read_stack
    ((data, kwargs, kind),) = _reader.read_stack(str(stack_path("moon")))
    with tifffile.TiffFile(stack_path("moon")) as tif:
        np.testing.assert_array_equal(data, tif.asarray())
    assert kind == "image" and kwargs["metadata"]["xcorr_axes"] == "TYX"


def test_channels_become_a_c_axis_and_big_stacks_stay_lazy(tmp_path, monkeypatch):
    stack = np.arange(3 * 2 * 8 * 9, dtype=np.uint16).reshape(3, 2, 8, 9)
    path = tmp_path / "two.tif"
    tifffile.imwrite(path, stack, imagej=True, metadata={"axes": "TCYX"})
    ((data, kwargs, _),) = _reader.read_stack(path)
    assert kwargs["metadata"]["xcorr_axes"] == "TCYX"
    np.testing.assert_array_equal(data, stack)
    monkeypatch.setattr(_reader, "LAZY_BYTES", 100)
    monkeypatch.setattr(_reader, "BLOCK_FRAMES", 2)
    ((lazy, _, _),) = _reader.read_stack(path)
    assert type(lazy).__module__.startswith("dask") and lazy.chunks[0] == (2, 1)
    np.testing.assert_array_equal(lazy.compute(), stack)


@pytest.mark.parametrize("name", SAMPLES)
def test_the_samples_are_the_sample_stacks(name):
    ((data, kwargs, _),) = getattr(_reader, f"{name}_sample")()
    assert data.shape[0] == 12 and kwargs["name"] == f"{name}_drift"


def test_the_samples_come_from_the_installed_package_first(tmp_path, monkeypatch):
    """(After ``pip install .`` the sample-data menu failed: the samples were looked for in
    a checkout only.)"""
    from xcorr_app import _samples

    packaged, checkout = tmp_path / "site", tmp_path / "checkout"
    packaged.mkdir(), checkout.mkdir()
    monkeypatch.setattr(_samples, "PACKAGED", packaged)
    monkeypatch.setattr(_samples, "CHECKOUT", checkout)
    with pytest.raises(ValueError, match="hubble_drift.tif is in neither"):
        _reader.hubble_sample()
    stack = np.arange(5 * 10 * 12, dtype=np.uint16).reshape(5, 10, 12)
    tifffile.imwrite(packaged / "hubble_drift.tif", stack, photometric="minisblack")
    ((data, kwargs, _),) = _reader.hubble_sample()
    np.testing.assert_array_equal(data, stack)
    assert kwargs["metadata"]["xcorr_source"] == str(packaged / "hubble_drift.tif")


def test_other_formats_are_read_and_unknown_ones_left_to_napari(tmp_path):
    (tmp_path / "a.png").write_bytes(b"\x89PNG")
    assert _reader.napari_get_reader(str(tmp_path / "a.png")) is None
    assert _reader.napari_get_reader(str(tmp_path / "absent.h5")) is None
    h5py = pytest.importorskip("h5py")
    stack = np.arange(4 * 8 * 9, dtype=np.uint16).reshape(4, 8, 9)
    with h5py.File(tmp_path / "movie.h5", "w") as f:
        f["data"] = stack
    assert _reader.napari_get_reader(str(tmp_path / "movie.h5")) is _reader.read_stack
    ((data, kwargs, _),) = _reader.read_stack(str(tmp_path / "movie.h5"))
    assert kwargs["name"] == "movie" and kwargs["metadata"]["xcorr_axes"] == "TYX"
    np.testing.assert_array_equal(data, stack)


def test_t_and_z_axes_stay_apart_eagerly_and_lazily(tmp_path, monkeypatch):
    zarr = pytest.importorskip("zarr")
    movie = np.arange(3 * 2 * 2 * 8 * 9, dtype=np.uint16).reshape(3, 2, 2, 8, 9)  # T Z C Y X
    path = tmp_path / "movie.ome.zarr"
    zarr.create_array(str(path), data=movie, chunks=(1, 1, 1, 8, 9),
                      dimension_names=["t", "z", "c", "y", "x"])
    assert _reader.napari_get_reader(str(path)) is _reader.read_stack
    ((data, kwargs, _),) = _reader.read_stack(str(path))
    assert kwargs["name"] == "movie" and kwargs["metadata"]["xcorr_axes"] == "TZCYX"
    np.testing.assert_array_equal(data, movie)
    monkeypatch.setattr(_reader, "LAZY_BYTES", 100)
    monkeypatch.setattr(_reader, "BLOCK_FRAMES", 3)  # (rounded down to whole rows of Z: 2)
    ((lazy, _, _),) = _reader.read_stack(str(path))
    assert type(lazy).__module__.startswith("dask") and lazy.chunks[:2] == ((1, 1, 1), (2,))
    np.testing.assert_array_equal(lazy.compute(), movie)


def test_the_files_pixel_size_is_the_layers_scale(tmp_path):
    stack = np.zeros((3, 8, 9), np.uint16)
    path = tmp_path / "scaled.tif"
    tifffile.imwrite(path, stack, imagej=True, resolution=(1 / 0.25, 1 / 0.5),
                     metadata={"axes": "TYX", "unit": "um"})
    ((_, kwargs, _),) = _reader.read_stack(path)
    assert kwargs["scale"] == (1.0, 0.5, 0.25)


def test_one_time_points_z_planes_are_the_frames(tmp_path):
    """t = 1, z = 5 (a CZI or OME file's usual TCZYX): five frames, as xcorr align takes them."""
    zarr = pytest.importorskip("zarr")
    movie = np.arange(1 * 5 * 8 * 9, dtype=np.uint16).reshape(1, 1, 5, 8, 9)
    zarr.create_array(str(tmp_path / "z.zarr"), data=movie, dimension_names=list("tczyx"))
    ((data, kwargs, _),) = _reader.read_stack(str(tmp_path / "z.zarr"))
    assert kwargs["metadata"]["xcorr_axes"] == "TYX"
    np.testing.assert_array_equal(data, movie[0, 0])
