"""The aligned stack keeps its input's calibration (issue 74: aligned.tif dropped the pixel size,
its unit, the frame interval and the channel names, so Fiji showed pixels): an ImageJ or an
OME-TIFF input, written by tifffile as Fiji and OME writers do, aligned by ``xcorr align`` and by
``AlignResult.save``, gives an ImageJ aligned.tif whose resolution, unit, frame interval and
channel labels say what the input said, read back by tifffile and by ``xcorr_app.io.describe``."""

import numpy as np
import pytest
import tifffile
from scipy import ndimage as ndi

from click.testing import CliRunner

from xcorr_app import align
from xcorr_app.cli._main import cli
from xcorr_app.io import describe, imagej_calibration

from cli_helpers import xcorr


def _frames(rng, n=6, shape=(64, 72)):
    base = ndi.gaussian_filter(rng.random((shape[0] + 8, shape[1] + 8)), 2.0)
    return np.stack([base[4 + i % 3:4 + i % 3 + shape[0], 4 - i % 2:4 - i % 2 + shape[1]]
                     for i in range(n)]).astype(np.float32)


def _calibration(path):
    with tifffile.TiffFile(path) as tif:
        page, meta = tif.pages.first, tif.imagej_metadata or {}
        (xn, xd), (yn, yd) = page.tags["XResolution"].value, page.tags["YResolution"].value
        return (yd / yn, xd / xn), meta.get("unit"), meta.get("finterval"), tif.series[0].axes


@pytest.fixture
def imagej_input(tmp_path):
    path = tmp_path / "fiji.tif"
    tifffile.imwrite(path, _frames(np.random.default_rng(3)), imagej=True,
                     resolution=(1 / 0.25, 1 / 0.5),
                     metadata={"axes": "TYX", "unit": "um", "finterval": 0.2})
    return path


def test_the_command_keeps_an_imagej_inputs_calibration(imagej_input, tmp_path):
    r = xcorr("align", imagej_input, "--out", tmp_path / "out", "--device", "cpu", "-q")
    assert r.returncode == 0, r.stderr
    size, unit, interval, axes = _calibration(tmp_path / "out" / "aligned.tif")
    assert size == pytest.approx((0.5, 0.25)) and unit == "um" and axes == "TYX"
    assert interval == pytest.approx(0.2)
    d = describe(tmp_path / "out" / "aligned.tif")
    assert d["pixel_size"][:2] == pytest.approx((0.5, 0.25)) and d["pixel_size"][2] == "um"
    assert d["frame_interval"] == pytest.approx(0.2)


def test_save_keeps_an_ome_tiffs_calibration(tmp_path):
    path = tmp_path / "scope.ome.tif"
    tifffile.imwrite(path, _frames(np.random.default_rng(4)), ome=True,
                     metadata={"axes": "TYX", "PhysicalSizeX": 0.3, "PhysicalSizeY": 0.3,
                               "PhysicalSizeXUnit": "µm", "PhysicalSizeYUnit": "µm",
                               "TimeIncrement": 50, "TimeIncrementUnit": "ms"})
    res = align(path, device="cpu")
    res.save(tmp_path / "out")
    size, unit, interval, _ = _calibration(tmp_path / "out" / "aligned.tif")
    assert size == pytest.approx((0.3, 0.3)) and unit == "um"
    assert interval == pytest.approx(0.05)


def test_channel_names_label_every_page_of_the_hyperstack(tmp_path):
    one = _frames(np.random.default_rng(5))
    path = tmp_path / "two.tif"
    tifffile.imwrite(path, np.stack([one, one ** 2], axis=1), imagej=True,
                     resolution=(4.0, 4.0),
                     metadata={"axes": "TCYX", "unit": "um", "Labels": ["GCaMP", "tdTomato"] * 6})
    assert describe(path)["channel_names"] == ["GCaMP", "tdTomato"]
    r = xcorr("align", path, "--out", tmp_path / "out", "--device", "cpu", "-q", "--channel", "0",
              "--apply-to", "all")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out" / "aligned.tif"
    with tifffile.TiffFile(out) as tif:
        assert tif.series[0].axes == "TCYX" and tif.imagej_metadata["Labels"][:4] == \
            ["GCaMP", "tdTomato", "GCaMP", "tdTomato"]
    assert describe(out)["channel_names"] == ["GCaMP", "tdTomato"]


def test_the_measured_channel_alone_keeps_its_name(tmp_path):
    """``--channel 1`` without ``--apply-to`` writes channel 1: its name, in the command and in
    ``save``."""
    one = _frames(np.random.default_rng(6))
    path = tmp_path / "two.tif"
    tifffile.imwrite(path, np.stack([one, one ** 2], axis=1), imagej=True,
                     metadata={"axes": "TCYX", "Labels": ["GCaMP", "tdTomato"] * 6})
    r = xcorr("align", path, "--out", tmp_path / "out", "--device", "cpu", "-q", "--channel", "1")
    assert r.returncode == 0, r.stderr
    assert describe(tmp_path / "out" / "aligned.tif")["channel_names"] == ["tdTomato"]
    align(path, device="cpu", channel=1).save(tmp_path / "saved")
    assert describe(tmp_path / "saved" / "aligned.tif")["channel_names"] == ["tdTomato"]


def test_an_uncalibrated_input_writes_no_calibration(tmp_path):
    assert imagej_calibration({"pixel_size": None, "frame_interval": None}) == {}
    assert imagej_calibration({"pixel_size": (0.0, 1.0, "um")}) == {}  # (unusable: not carried)
    path = tmp_path / "plain.tif"
    tifffile.imwrite(path, _frames(np.random.default_rng(6)))
    r = xcorr("align", path, "--out", tmp_path / "out", "--device", "cpu", "-q")
    assert r.returncode == 0, r.stderr
    d = describe(tmp_path / "out" / "aligned.tif")
    assert d["pixel_size"] is None and d["frame_interval"] is None


@pytest.mark.parametrize("labels, names", [(["GCaMP"] * 6, ["GCaMP"]),
                                            ([f"t{i}" for i in range(6)], [])])
def test_one_channels_name_is_the_label_of_every_page(tmp_path, labels, names):
    """(A one-channel ImageJ stack's slice labels were all its "channel names", and xcorr info
    listed them; a one-channel name reached no aligned.tif.)  Labels that differ name slices."""
    path = tmp_path / "one.tif"
    tifffile.imwrite(path, _frames(np.random.default_rng(8)), imagej=True,
                     metadata={"axes": "TYX", "Labels": labels})
    assert describe(path)["channel_names"] == names
    assert imagej_calibration({"channel_names": ["GCaMP"]}, 3) == {
        "metadata": {"Labels": ["GCaMP"] * 3}}
    r = CliRunner().invoke(cli, ["align", str(path), "--out", str(tmp_path / "out"), "--device",
                                 "cpu", "-q", "--no-quality", "--no-verify"])
    assert r.exit_code == 0, r.output
    with tifffile.TiffFile(tmp_path / "out" / "aligned.tif") as tif:
        assert tif.imagej_metadata.get("Labels") == (names * 6 or None)
    assert describe(tmp_path / "out" / "aligned.tif")["channel_names"] == names


def _ome(path):
    with tifffile.TiffFile(path) as tif:
        assert tif.is_ome
        return tif.series[0].axes, tif.series[0].shape, tif.series[0].dtype, \
            tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]["Pixels"]


def test_ome_tiff_out_keeps_the_calibration(imagej_input, tmp_path):
    r = xcorr("align", imagej_input, "--out", tmp_path / "out", "--device", "cpu", "-q",
              "--out-format", "ome-tiff", "--keep-dtype")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out" / "aligned.ome.tif"
    axes, shape, dtype, pixels = _ome(out)
    assert (axes, shape, dtype) == ("TYX", (6, 64, 72), np.float32)
    assert (pixels["PhysicalSizeY"], pixels["PhysicalSizeX"]) == pytest.approx((0.5, 0.25))
    assert pixels["PhysicalSizeXUnit"] == "µm" and pixels["TimeIncrement"] == pytest.approx(0.2)
    # the frames are the ImageJ output's
    ref = xcorr("align", imagej_input, "--out", tmp_path / "ref", "--device", "cpu", "-q")
    assert ref.returncode == 0, ref.stderr
    np.testing.assert_array_equal(tifffile.imread(out),
                                  tifffile.imread(tmp_path / "ref" / "aligned.tif"))


def test_ome_tiff_out_of_channels_and_by_apply(tmp_path):
    one = (_frames(np.random.default_rng(5)) * 1000).astype(np.uint16)
    path = tmp_path / "two.tif"
    tifffile.imwrite(path, np.stack([one, one // 2], axis=1), imagej=True,
                     metadata={"axes": "TCYX", "Labels": ["GCaMP", "tdTomato"] * 6})
    res = align(path, channel=0, device="cpu")
    res.save(tmp_path / "out", format="ome-tiff", channels=[0, 1], keep_dtype=True)
    axes, shape, dtype, pixels = _ome(tmp_path / "out" / "aligned.ome.tif")
    assert (axes, shape, dtype) == ("TCYX", (6, 2, 64, 72), np.uint16)
    assert [c["Name"] for c in pixels["Channel"]] == ["GCaMP", "tdTomato"]
    assert describe(tmp_path / "out" / "aligned.ome.tif")["channel_names"] == \
        ["GCaMP", "tdTomato"]
    r = xcorr("apply", tmp_path / "out" / "shifts.csv", path, "--channel", "0",
              "--out", tmp_path / "applied.ome.tif", "--keep-dtype")
    assert r.returncode == 0, r.stderr
    assert _ome(tmp_path / "applied.ome.tif")[:2] == ("TYX", (6, 64, 72))


def test_an_ome_tiff_writer_that_fails_leaves_nothing(tmp_path):
    from xcorr_app.io import stack_writer

    out = tmp_path / "aligned.ome.tif"
    with pytest.raises(RuntimeError):
        with stack_writer(out, (8, 9), 4) as w:
            w.write(np.zeros((2, 8, 9), np.float32))
            raise RuntimeError("a run stopped half way")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    from xcorr_app.errors import InputError

    with pytest.raises(InputError, match="expected 4"):
        with stack_writer(out, (8, 9), 4) as w:
            w.write(np.zeros((3, 8, 9), np.float32))
    assert list(tmp_path.iterdir()) == []


def test_ome_zarr_out_of_channels_is_valid_ome_ngff(tmp_path):
    """Every channel has a color and a display window (napari's OME-Zarr reader and the schema
    need them), the time axis is in seconds by the frame interval; checked by ome-zarr-models."""
    zarr = pytest.importorskip("zarr")
    image = pytest.importorskip("ome_zarr_models.v04.image")
    one = _frames(np.random.default_rng(8))
    path = tmp_path / "two.tif"
    tifffile.imwrite(path, np.stack([one, one * 2], axis=1), imagej=True, resolution=(4.0, 4.0),
                     metadata={"axes": "TCYX", "unit": "um", "finterval": 0.5,
                               "Labels": ["GCaMP", "tdTomato"] * 6})
    r = xcorr("align", path, "--out", tmp_path / "out", "--device", "cpu", "-q", "--channel", "0",
              "--apply-to", "all", "--out-format", "ome-zarr")
    assert r.returncode == 0, r.stderr
    group = zarr.open_group(str(tmp_path / "out" / "aligned.ome.zarr"), mode="r")
    image.Image.from_zarr(group)  # (raises where the metadata break the schema)
    channels = group.attrs["omero"]["channels"]
    assert [c["label"] for c in channels] == ["GCaMP", "tdTomato"]
    data = np.asarray(group["0"])
    for k, c in enumerate(channels):
        assert c["color"] and c["window"]["start"] == pytest.approx(float(data[:, k].min()))
        assert c["window"]["end"] == pytest.approx(float(data[:, k].max()))
    axes = group.attrs["multiscales"][0]["axes"]
    scale = group.attrs["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]["scale"]
    assert axes[0] == {"name": "t", "type": "time", "unit": "second"}
    assert scale == pytest.approx([0.5, 1.0, 0.25, 0.25])
    # and read back: the store's calibration goes on into the next output
    store = tmp_path / "out" / "aligned.ome.zarr"
    assert describe(store)["frame_interval"] == pytest.approx(0.5)
    again = align(store, channel=1, device="cpu")
    again.save(tmp_path / "again")
    size, unit, interval, _ = _calibration(tmp_path / "again" / "aligned.tif")
    assert size == pytest.approx((0.25, 0.25)) and unit == "um"
    assert interval == pytest.approx(0.5)


def test_an_imagej_frame_interval_is_read_in_its_time_unit(tmp_path):
    path = tmp_path / "ms.tif"
    tifffile.imwrite(path, _frames(np.random.default_rng(9)), imagej=True,
                     metadata={"axes": "TYX", "finterval": 50, "tunit": "ms"})
    assert describe(path)["frame_interval"] == pytest.approx(0.05)
    res = align(path, device="cpu")
    res.save(tmp_path / "out")
    with tifffile.TiffFile(tmp_path / "out" / "aligned.tif") as tif:
        meta = tif.imagej_metadata
    assert meta["finterval"] == pytest.approx(0.05) and meta["tunit"] == "sec"


def test_an_ome_tiff_writer_whose_disk_fills_fails_at_once(tmp_path, monkeypatch):
    """The writer's thread fails (a full disk): the next write or the close says so in one
    error instead of waiting for room in its queue, and nothing is left."""
    from xcorr_app.errors import OutputError
    from xcorr_app.io import _stack_writers, stack_writer

    class FullDisk:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, pages, **kwargs):
            next(iter(pages))
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(_stack_writers.tifffile, "TiffWriter", FullDisk)
    out = tmp_path / "aligned.ome.tif"
    with pytest.raises(OutputError, match="No space left"):
        with stack_writer(out, (8, 9), 400) as w:
            for _ in range(100):  # (more chunks than the queue holds)
                w.write(np.zeros((4, 8, 9), np.float32))
    assert list(tmp_path.iterdir()) == []


def _volumes(rng, n=5, depth=4, shape=(40, 44)):
    base = ndi.gaussian_filter(rng.random((depth + 4, shape[0] + 8, shape[1] + 8)), 1.5)
    return (1000 * np.stack([base[2:2 + depth, 4 + i % 3:4 + i % 3 + shape[0],
                                  4 - i % 2:4 - i % 2 + shape[1]] for i in range(n)])
            ).astype(np.uint16)


@pytest.mark.parametrize("kind", ["imagej", "ome-tiff", "ome-zarr"])
def test_aligned_volumes_keep_the_z_step(tmp_path, kind):
    """The distance between Z planes (ImageJ's spacing, OME's PhysicalSizeZ in its own unit,
    an OME-Zarr z scale) is said by ``xcorr info`` and carried into the aligned volumes'
    aligned.tif as Fiji's voxel depth (it was dropped: Fiji showed 1 um)."""
    v = _volumes(np.random.default_rng(5))
    if kind == "imagej":
        path = tmp_path / "fiji.tif"
        tifffile.imwrite(path, v, imagej=True, resolution=(5, 5),
                         metadata={"axes": "TZYX", "unit": "um", "spacing": 1.5})
    elif kind == "ome-tiff":
        path = tmp_path / "scope.ome.tif"
        tifffile.imwrite(path, v, ome=True, metadata={
            "axes": "TZYX", "PhysicalSizeX": 0.2, "PhysicalSizeY": 0.2, "PhysicalSizeXUnit":
            "µm", "PhysicalSizeYUnit": "µm", "PhysicalSizeZ": 1500, "PhysicalSizeZUnit": "nm"})
    else:
        zarr = pytest.importorskip("zarr")
        path = tmp_path / "v.ome.zarr"
        group = zarr.open_group(str(path), mode="w", zarr_format=2)
        group.create_array("0", data=v, chunks=(1, *v.shape[1:]))
        space = [{"name": a, "type": "space", "unit": "micrometer"} for a in "zyx"]
        group.attrs["multiscales"] = [{"version": "0.4", "axes": [
            {"name": "t", "type": "time"}, *space], "datasets": [{"path": "0",
            "coordinateTransformations": [{"type": "scale", "scale": [1, 1.5, 0.2, 0.2]}]}]}]
    assert describe(path)["z_step"] == pytest.approx(1.5)
    info = xcorr("info", path)
    assert info.returncode == 0 and "z step 1.5 " in info.stdout, info.stdout
    r = xcorr("align", path, "--volumes", "--out", tmp_path / "out", "--device", "cpu", "-q")
    assert r.returncode == 0, r.stderr
    with tifffile.TiffFile(tmp_path / "out" / "aligned.tif") as tif:
        meta = tif.imagej_metadata
        assert meta["spacing"] == pytest.approx(1.5) and meta["unit"] == "um"
        assert tif.series[0].axes == "TZYX"
    assert describe(tmp_path / "out" / "aligned.tif")["z_step"] == pytest.approx(1.5)


def test_a_z_stack_without_a_z_step_says_unknown(tmp_path):
    path = tmp_path / "plain.tif"
    tifffile.imwrite(path, _volumes(np.random.default_rng(6)), imagej=True,
                     metadata={"axes": "TZYX"})
    assert describe(path)["z_step"] is None
    assert "z step unknown" in xcorr("info", path).stdout


def test_the_filtered_stack_keeps_the_pixel_size_and_the_frame_interval(imagej_input,
                                                                          tmp_path):
    """``xcorr filter`` wrote a stack of 1 x 1 pixels without a frame interval."""
    out = tmp_path / "f.tif"
    r = xcorr("filter", imagej_input, "--kernel", "gaussian:1", "--out", out, "--device", "cpu",
              "-q")
    assert r.returncode == 0, r.stderr
    size, unit, interval, axes = _calibration(out)
    assert size == pytest.approx((0.5, 0.25)) and unit == "um" and axes == "TYX"
    assert interval == pytest.approx(0.2)


@pytest.mark.parametrize("option", [("--kernel", "box:3"), ("--bank", "dog:1,2,3")])
def test_a_filtered_hyperstack_keeps_its_time_points_and_z_planes(tmp_path, option):
    """A TZYX (TZCYX) ImageJ hyperstack, read plane by plane, is written back as one: its T
    and Z apart with the Z step, not 12 time points at the frame interval (Fiji then showed
    3 x 4 planes as a time series); each output plane is its own input plane's filter."""
    rng = np.random.default_rng(4)
    shape = (3, 4, 2, 37, 53) if option[0] == "--bank" else (3, 4, 37, 53)
    path, out = tmp_path / "tz.tif", tmp_path / "f.tif"
    tifffile.imwrite(path, (rng.random(shape) * 1000).astype(np.uint16), imagej=True,
                     resolution=(5, 5), metadata={"axes": "TZCYX" if len(shape) == 5 else "TZYX",
                                                  "spacing": 1.5, "unit": "um", "finterval": 2.0})
    r = xcorr("filter", path, *option, "--out", out, "--device", "cpu", "-q")
    assert r.returncode == 0, r.stderr
    with tifffile.TiffFile(out) as t:
        got, axes, meta = t.asarray(), t.series[0].axes, t.imagej_metadata
    assert axes == ("TZCYX" if option[0] == "--bank" else "TZYX")
    assert (meta["frames"], meta["slices"], meta["spacing"], meta["finterval"]) == (3, 4, 1.5, 2.0)
    src = tifffile.imread(path).astype(np.float32)
    if option[0] == "--kernel":
        want = ndi.uniform_filter(src[1, 2], 3, mode="reflect")
        np.testing.assert_allclose(got[1, 2], want, rtol=1e-5, atol=1e-3)
    else:  # (the bank's first filter on the channels' mean)
        mean = src[1, 2].mean(axis=0)
        want = ndi.gaussian_filter(mean, 1, mode="constant", truncate=15) \
            - ndi.gaussian_filter(mean, 2, mode="constant", truncate=7.5)
        np.testing.assert_allclose(got[1, 2, 0], want, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("kind", ["ome", "hdf5"])
def test_a_hyperstack_stored_z_then_t_is_filtered_in_time_order(tmp_path, kind, device):
    """A ZTYX file (OME-TIFF, HDF5 with axes ZTYX) is read in time order and written back a
    TZYX hyperstack whose plane (t, z) is the input's (t, z): its planes were written in the
    file's order and labelled TZYX (every plane in the wrong place); the note says so.  On
    the GPU too, whose reads of an uncompressed TIFF copy the file's pages: the time order
    offers none (``stored`` None)."""
    from xcorr_app.io import open_stack, time_order

    times, planes = 3, 4
    v = np.zeros((times, planes, 9, 11), np.uint16)
    for t in range(times):
        for z in range(planes):
            v[t, z] = 100 * t + 10 * z
    stored = np.moveaxis(v, 1, 0)  # (Z, T, Y, X)
    if kind == "ome":
        path = tmp_path / "zt.ome.tif"
        tifffile.imwrite(path, stored, metadata={"axes": "ZTYX"})
    else:
        h5py = pytest.importorskip("h5py")
        path = tmp_path / "zt.h5"
        with h5py.File(path, "w") as f:
            f["data"] = stored
            f["data"].attrs["axes"] = "ZTYX"
    with time_order(open_stack(path)) as src:
        assert src.stored is None and src.frame_layout == (("T", times), ("Z", planes))
        assert src.read(0, 5)[:, 0, 0].tolist() == [0, 10, 20, 30, 100]
    out = tmp_path / "f.tif"
    r = xcorr("filter", path, "--kernel", "box:1", "--out", out, "--device", device)
    assert r.returncode == 0, r.stderr
    assert "in time order (stored Z then T)" in r.stderr + r.stdout
    with tifffile.TiffFile(out) as t:
        got, axes = t.asarray(), t.series[0].axes
    assert axes == "TZYX" and got.shape == v.shape
    np.testing.assert_array_equal(got, v.astype(np.float32))
    if device == "cpu":  # (a cluster would read the stored order: refused before it starts)
        r = xcorr("filter", path, "--kernel", "box:1", "--out", tmp_path / "g.tif",
                  "--workers", "2")
        assert r.returncode == 2 and "Z then T" in r.stderr and r.stderr.count("error:") == 1
        assert not (tmp_path / "g.tif").exists()


@pytest.mark.parametrize("unit, reads, um", [("mm", "mm", 250.0), ("nm", "nm", 0.00025),
                                             ("\\u00B5m", "µm", 0.25)])
def test_a_pixel_size_in_any_length_unit_reaches_every_output(tmp_path, unit, reads, um):
    """Fiji writes the micro sign escaped (``\\u00B5m``): it reads as µm (it was shown raw,
    and OME-TIFF and HDF5 outputs dropped it); HDF5's element_size_um is in micrometers
    whatever the input's unit (a size in mm or nm was dropped without a note)."""
    import h5py

    path = tmp_path / "in.tif"
    tifffile.imwrite(path, _frames(np.random.default_rng(5)), imagej=True,
                     resolution=(4.0, 4.0), metadata={"axes": "TYX", "unit": unit})
    size = describe(path)["pixel_size"]
    assert size[:2] == pytest.approx((0.25, 0.25)) and size[2] == reads
    for fmt, name in (("hdf5", "aligned.h5"), ("ome-tiff", "aligned.ome.tif")):
        out = tmp_path / fmt
        r = xcorr("align", path, "--out", out, "--out-format", fmt, "--device", "cpu", "-q")
        assert r.returncode == 0, r.stderr
        if fmt == "hdf5":
            with h5py.File(out / name) as f:
                np.testing.assert_allclose(f["aligned"].attrs["element_size_um"],
                                           [1.0, um, um])
        else:
            size = describe(out / name)["pixel_size"]
            assert size[:2] == pytest.approx((0.25, 0.25)) and size[2] == reads


@pytest.mark.parametrize("imagej", [False, True])
def test_a_resolution_per_centimeter_is_the_pixel_size(tmp_path, imagej):
    """TIFF's own ResolutionUnit: a plain TIFF's resolution per centimeter, or an ImageJ
    TIFF's that names no unit (tifffile's default), is the pixel size in µm and reaches the
    aligned stack (info said "unknown", or a size without a unit that was written as pixels);
    a resolution per inch (72 dpi: a print setting) is not read as one."""
    rng = np.random.default_rng(6)
    frames = (rng.random((4, 32, 40)) * 1000).astype(np.uint16)
    path = tmp_path / "cm.tif"
    tifffile.imwrite(path, frames, imagej=imagej, resolution=(40000, 40000),
                     resolutionunit="CENTIMETER", metadata={"axes": "TYX"},
                     photometric="minisblack")
    assert describe(path)["pixel_size"] == pytest.approx((0.25, 0.25, "µm"))
    r = xcorr("align", path, "--device", "cpu", "--out", tmp_path / "o", "-q")
    assert r.returncode == 0, r.stderr
    size, unit, _, _ = _calibration(tmp_path / "o" / "aligned.tif")
    assert size == pytest.approx((0.25, 0.25)) and unit == "um"
    inch = tmp_path / "inch.tif"
    tifffile.imwrite(inch, frames, resolution=(72, 72), resolutionunit="INCH",
                     metadata={"axes": "TYX"}, photometric="minisblack")
    assert describe(inch)["pixel_size"] is None


def test_filter_and_apply_of_one_channel_keep_its_name(tmp_path):
    """``--channel K`` of ``filter`` and ``apply`` writes channel K's name, as ``align`` does
    (both wrote none)."""
    path = tmp_path / "tcyx.ome.tif"
    stack = (np.random.default_rng(0).random((10, 2, 48, 56)) * 4000).astype(np.uint16)
    tifffile.imwrite(path, stack, metadata={"axes": "TCYX", "PhysicalSizeX": 0.1,
                                            "PhysicalSizeY": 0.1,
                                            "Channel": {"Name": ["GFP", "mCherry"]}})
    run = tmp_path / "run"
    r = xcorr("align", path, "--channel", "1", "--device", "cpu", "-q", "--out", run,
              "--no-aligned")
    assert r.returncode == 0, r.stderr
    for args in (("filter", path, "--channel", "1", "--kernel", "gaussian:1", "--out",
                  tmp_path / "f.tif"),
                 ("apply", run / "shifts.csv", path, "--channel", "1", "--out",
                  tmp_path / "a.tif"),
                 ("apply", run / "shifts.csv", path, "--channel", "1", "--out",
                  tmp_path / "a.ome.tif")):
        r = xcorr(*args, "--device", "cpu", "-q")
        assert r.returncode == 0, r.stderr
        assert "channels 1 (mCherry)" in xcorr("info", args[-1]).stdout, args[0]


def test_apply_to_a_hyperstack_writes_it_back_as_one(tmp_path):
    """``xcorr apply`` of a shift a plane to a TZYX ImageJ hyperstack writes a TZYX hyperstack
    with its Z step and frame interval (it wrote T x Z "time points" at the frame interval),
    each plane shifted by its own row; a hyperstack into another format than TIFF, or one
    stored Z then T, is refused in one line."""
    rng = np.random.default_rng(2)
    v = ndi.gaussian_filter(rng.random((3, 4, 32, 40)), (0, 0, 2, 2)).astype(np.float32)
    path = tmp_path / "tzyx.tif"
    tifffile.imwrite(path, v, imagej=True, resolution=(5, 5),
                     metadata={"axes": "TZYX", "unit": "um", "spacing": 1.5, "finterval": 10.0})
    shifts = tmp_path / "shifts.csv"
    rows = rng.uniform(-2, 2, (12, 2))
    shifts.write_text("frame,dy,dx\n" + "".join(f"{i},{dy},{dx}\n"
                                                for i, (dy, dx) in enumerate(rows)))
    out = tmp_path / "a.tif"
    r = xcorr("apply", shifts, path, "--out", out, "--device", "cpu", "-q")
    assert r.returncode == 0, r.stderr
    with tifffile.TiffFile(out) as t:
        got, axes, meta = t.asarray(), t.series[0].axes, t.imagej_metadata
    assert axes == "TZYX" and got.shape == v.shape
    assert (meta["frames"], meta["slices"], meta["spacing"], meta["finterval"]) \
        == (3, 4, 1.5, 10.0)
    t_, z_ = 2, 1
    want = ndi.shift(v[t_, z_], rows[t_ * 4 + z_], order=1, mode="constant")
    np.testing.assert_allclose(got[t_, z_][3:-3, 3:-3], want[3:-3, 3:-3], atol=1e-5)
    r = xcorr("apply", shifts, path, "--out", tmp_path / "a.ome.zarr", "--device", "cpu")
    assert r.returncode == 2 and "TIFF hyperstack" in r.stderr
    assert not (tmp_path / "a.ome.zarr").exists()
    zt = tmp_path / "zt.ome.tif"
    tifffile.imwrite(zt, np.moveaxis(v, 1, 0), metadata={"axes": "ZTYX"})
    r = xcorr("apply", shifts, zt, "--out", tmp_path / "b.tif", "--device", "cpu")
    assert r.returncode == 2 and "Z then T" in r.stderr and r.stderr.count("error:") == 1


def test_apply_of_one_planes_shifts_moves_every_plane_of_its_time_point(tmp_path):
    """Shifts measured on one plane (``align --z K``: a row a time point) applied to the whole
    T x Z hyperstack move every plane of a time point by its row (they were refused: another
    frame count), with a note; the hyperstack written back."""
    rng = np.random.default_rng(5)
    scene = ndi.gaussian_filter(rng.random((3, 48, 56)), (0, 2, 2))
    drift = rng.uniform(-3, 3, (5, 2))
    v = np.stack([ndi.shift(scene, (0, *d), order=1, mode="nearest") for d in drift])
    v = v.astype(np.float32)
    path = tmp_path / "tzyx.tif"
    tifffile.imwrite(path, v, imagej=True, metadata={"axes": "TZYX", "spacing": 2.0})
    run = tmp_path / "run"
    r = xcorr("align", path, "--z", "1", "--max-shift", "6", "--device", "cpu", "-q",
              "--out", run, "--no-aligned")
    assert r.returncode == 0, r.stderr
    rows = np.loadtxt(run / "shifts.csv", delimiter=",", skiprows=1, usecols=(2, 3))
    assert rows.shape == (5, 2) and np.abs(rows[1:]).max() > 1  # (the drift measured)
    out = tmp_path / "a.tif"
    r = xcorr("apply", run / "shifts.csv", path, "--out", out, "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "the shifts of 5 time points applied to each of their 3 Z planes" in r.stderr
    got = tifffile.imread(out)
    assert got.shape == v.shape
    for t, z in ((0, 0), (3, 2), (4, 1)):
        want = ndi.shift(v[t, z], rows[t], order=1, mode="constant")
        np.testing.assert_allclose(got[t, z][4:-4, 4:-4], want[4:-4, 4:-4], atol=1e-5)
