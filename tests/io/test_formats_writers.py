"""``xcorr align --out-format tiff|ome-zarr|hdf5 [--keep-dtype]``: the aligned stack in each
format reads back equal to aligned.tif, with the input's pixel size and channel names, is
replaced whole with --force, kept without it, and refused with --no-aligned."""

import numpy as np
import pytest
import tifffile

from xcorr_app.io import as_dtype, describe, open_stack

from cli_helpers import assert_clean_error, digest, xcorr
from synthetic import drift_stack

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """An OME-Zarr input of two channels (0.4 µm pixels, named channels) and its aligned.tif
    (channel 0, float32) from the default run."""
    folder = tmp_path_factory.mktemp("in")
    stack, _ = drift_stack(np.random.default_rng(3), n=10, shape=(40, 48))
    data = np.stack([stack, stack // 2], axis=1)
    root = zarr.open_group(str(folder / "in.ome.zarr"), mode="w", zarr_format=2)
    root.create_array("0", data=data, chunks=(4, 1, 40, 48))
    root.attrs["multiscales"] = [{"version": "0.4", "axes": [
        {"name": "t", "type": "time"}, {"name": "c", "type": "channel"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1, 1, 0.4, 0.4]}]}]}]
    root.attrs["omero"] = {"channels": [{"label": "GCaMP"}, {"label": "tdTomato"}]}
    res = xcorr("align", folder / "in.ome.zarr", "--channel", "0", "--device", "cpu", "--out",
                folder / "tiff", "--quiet")
    assert res.returncode == 0, res.stderr
    return folder / "in.ome.zarr", tifffile.imread(folder / "tiff" / "aligned.tif")


def run(source, out, *args):
    res = xcorr("align", source, "--channel", "0", "--device", "cpu", "--out", out, "--quiet",
                *args)
    assert res.returncode == 0, res.stderr
    return res


@pytest.mark.parametrize("fmt, name", [("ome-zarr", "aligned.ome.zarr"), ("hdf5", "aligned.h5")])
def test_each_format_reads_back_equal_with_metadata(tmp_path, source, fmt, name):
    path, want = source
    before = digest(path)
    run(path, tmp_path / "o", "--out-format", fmt)
    assert digest(path) == before  # the input store is only read
    out = tmp_path / "o" / name
    with open_stack(out) as src:
        assert src.dtype == np.float32 and src.chunks[1:] == (40, 48)
        np.testing.assert_array_equal(src.read(0, src.n_frames), want)
        assert src.pixel_size[:2] == (0.4, 0.4)
        assert src.pixel_size[2] in ("micrometer", "µm")
    assert not [p for p in (tmp_path / "o").iterdir() if p.name.startswith(".")]


def test_keep_dtype_rounds_into_the_inputs_type(tmp_path, source):
    path, want = source
    run(path, tmp_path / "o", "--out-format", "hdf5", "--keep-dtype")
    with h5py.File(tmp_path / "o" / "aligned.h5") as f:
        got = f["aligned"][...]
        assert f["aligned"].attrs["axes"] == "TYX"
    assert got.dtype == np.uint16
    np.testing.assert_array_equal(got, as_dtype(want, np.uint16))
    run(path, tmp_path / "t", "--keep-dtype")
    np.testing.assert_array_equal(tifffile.imread(tmp_path / "t" / "aligned.tif"), got)


def rounded_loop(values, dtype):
    """The definition, a value at a time in Python's integers: NaN as 0, rounded to nearest
    with ties to even (Python's round), clipped to the type's range."""
    info = np.iinfo(dtype)

    def one(v):
        if v != v:
            return 0
        if abs(v) == float("inf"):
            return info.max if v > 0 else info.min
        return min(max(round(float(v)), info.min), info.max)

    return np.array([one(v) for v in np.ravel(values)], dtype).reshape(np.shape(values))


VALUES = [-np.inf, -70000.5, -32768.5, -3.5, -2.5, -0.5, -0.0, 0.5, 1.5, 2.4999, 2.5, 254.5,
          255.5, 32767.5, 65534.5, 65535.5, 3e9, np.inf, np.nan, 4294967295.0]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32,
                                   np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("source_type", [np.float16, np.float32, np.float64])
def test_as_dtype_rounds_to_nearest_even_clips_and_makes_nan_0(dtype, source_type):
    with np.errstate(over="ignore"):  # (float16: the large values are its infinities)
        values = np.array(VALUES, source_type).reshape(4, 5)
    before = values.copy()
    got = as_dtype(values, dtype)
    assert got.dtype == dtype and got.shape == values.shape
    np.testing.assert_array_equal(got, rounded_loop(values, dtype))
    np.testing.assert_array_equal(values, before)  # (the input is left as it was)
    ints = np.array([-70000, -3, 0, 7, 300, 70000], np.int64)
    np.testing.assert_array_equal(as_dtype(ints, dtype), rounded_loop(ints, dtype))
    assert as_dtype(got, dtype) is got  # (already the type: as it is)
    assert as_dtype(values, np.float32).dtype == np.float32


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.int32])
def test_as_dtype_on_the_gpu_is_the_hosts(dtype):
    cp = pytest.importorskip("cupy")
    values = np.array(VALUES * 3, np.float32).reshape(6, 10)
    got = as_dtype(cp.asarray(values), dtype)
    assert isinstance(got, cp.ndarray) and got.dtype == dtype
    np.testing.assert_array_equal(got.get(), as_dtype(values, dtype))


def test_a_folder_output_is_kept_without_force_and_replaced_whole_with_it(tmp_path, source):
    path, want = source
    out = tmp_path / "o" / "aligned.ome.zarr"
    run(path, tmp_path / "o", "--out-format", "ome-zarr", "--keep-dtype")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    res = xcorr("align", path, "--channel", "0", "--device", "cpu", "--out", tmp_path / "o",
                "--out-format", "ome-zarr")
    assert_clean_error(res, "exists", "--force")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    run(path, tmp_path / "o", "--out-format", "ome-zarr", "--force")
    assert describe(out)["dtype"] == "float32"
    assert not [p for p in (tmp_path / "o").iterdir() if p.name.startswith(".aligned")]


def test_out_format_without_the_aligned_stack_is_refused(tmp_path, source):
    res = xcorr("align", source[0], "--channel", "0", "--out", tmp_path / "o", "--no-aligned",
                "--out-format", "hdf5")
    assert_clean_error(res, "--out-format", "--no-aligned")
    assert not (tmp_path / "o").exists()


def test_keep_dtype_of_a_float64_input_writes_float64(tmp_path):
    """A float type kept (HDF5 holds float64): the float32 frames of the run, widened."""
    stack, _ = drift_stack(np.random.default_rng(4), n=6, shape=(40, 44))
    with h5py.File(tmp_path / "in.h5", "w") as f:
        f.create_dataset("data", data=stack.astype(np.float64))
    src = f"{tmp_path / 'in.h5'}:/data"
    outs = {}
    for name, extra in (("f", []), ("k", ["--keep-dtype"])):
        res = xcorr("align", src, "--device", "cpu", "--out", tmp_path / name, "--quiet",
                    "--out-format", "hdf5", *extra)
        assert res.returncode == 0, res.stderr
        with h5py.File(tmp_path / name / "aligned.h5") as f:
            outs[name] = f["aligned"][...]
    assert outs["f"].dtype == np.float32 and outs["k"].dtype == np.float64
    np.testing.assert_array_equal(outs["k"], outs["f"].astype(np.float64))
