"""Zeiss CZI files written by pylibCZIrw (Zeiss's library): every frame read as written, the
shifts of a channel those of the same frames as an array, the pixel size and channel names of
its metadata; a damaged file and a missing library are one error line.  End to end (issue 74):
a TYX, a TCYX and a TZYX file with known subpixel drift aligned by ``xcorr align`` within
0.02 px RMS of the truth (TZYX as volumes, in 3-D), the pixel size and channel names read back
from every output format by xcorr and by each format's own reader.  (pylibCZIrw writes no time
interval: its metadata have no place for one but a custom attribute, which xcorr does not read
as one; the outputs then carry none.)"""

import json
import subprocess
import sys

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner

from xcorr_app import align
from xcorr_app.cli._main import cli
from xcorr_app.io import calibration, describe, open_stack, source_path

from cli_helpers import ROOT, assert_clean_error, xcorr
from synthetic import drift_stack, fourier_moved, periodic_texture

pyczi = pytest.importorskip("pylibCZIrw.czi")


@pytest.fixture(scope="module")
def czi(tmp_path_factory):
    """T=8, C=2, Z=2 uint16: channel 1 the negative of channel 0, plane 1 rolled by 3 rows."""
    stack, _ = drift_stack(np.random.default_rng(13), n=8, shape=(40, 48))
    data = np.stack([stack, stack.max() - stack], axis=1)
    data = np.stack([data, np.roll(data, 3, axis=-2)], axis=2).astype(np.uint16)
    path = tmp_path_factory.mktemp("czi") / "scan.czi"
    with pyczi.create_czi(str(path)) as f:
        for t in range(8):
            for c in range(2):
                for z in range(2):
                    f.write(data=data[t, c, z], plane={"T": t, "C": c, "Z": z})
        f.write_metadata(channel_names={0: "GCaMP", 1: "red"}, scale_x=0.5e-6, scale_y=0.5e-6)
    return path, data


def test_czi_planes_and_shifts_as_the_array(czi):
    path, data = czi
    with open_stack(source_path(path, z=1), channel=1) as src:
        assert (src.format, src.axes, src.n_frames) == ("CZI", "TCZYX", 8)
        np.testing.assert_array_equal(src.read(2, 7), data[2:7, 1, 1])
        assert src.channel_names == ["GCaMP", "red"]
        assert src.pixel_size == pytest.approx((0.5, 0.5, "µm"))
    got = align(source_path(path, z=0), channel=0, device="cpu", chunk_frames=3).shifts
    np.testing.assert_array_equal(got, align(data[:, 0, 0], device="cpu", chunk_frames=3).shifts)
    assert describe(path)["channels"] == 2


def test_bad_czi_is_one_line(tmp_path, czi):
    cut = tmp_path / "cut.czi"
    cut.write_bytes(czi[0].read_bytes()[:2000])
    assert_clean_error(xcorr("align", cut, "--device", "cpu", "--out", tmp_path / "o"), "cut.czi")
    assert not (tmp_path / "o").exists()
    code = ("import sys; sys.modules['pylibCZIrw'] = None; sys.argv[0] = 'xcorr'\n"
            "from xcorr_app.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "info", str(czi[0])], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert_clean_error(res, "pip install 'xcorr-app[czi]'")


# ------------------------------------------------------------------ end to end, to the truth

#: (dy, dx) of each frame against the first; xcorr reports the shift that aligns it
MOVES = np.array([(0, 0), (1.25, -0.5), (-1.75, 2.0), (0.5, 1.5), (-0.25, -2.25), (2.0, 0.75)])
#: (dz, dy, dx) of each volume against the first
MOVES3 = np.array([(0, 0, 0), (0.5, 1.25, -0.75), (-0.75, -1.5, 2.0), (1.0, 0.5, 1.5),
                   (0.25, -2.0, -1.0), (-0.5, 1.75, 0.25)])


def rms(got, moves):
    return float(np.sqrt(np.mean((np.asarray(got, np.float64) + moves) ** 2)))


def _photons(v):
    """A [0, 1] texture as uint16 counts (a camera's range, well above the rounding)."""
    return np.round(100 + 4000 * v).astype(np.uint16)


def write_czi(path, data, names, scale=0.5e-6, scale_z=0.0):
    """``data`` (T, C, Z, Y, X) as a CZI by pylibCZIrw, a plane at a time, with the channels'
    ``names`` and the pixel size ``scale`` (metres)."""
    with pyczi.create_czi(str(path)) as f:
        for t, c, z in np.ndindex(data.shape[:3]):
            f.write(data=data[t, c, z], plane={"T": t, "C": c, "Z": z})
        f.write_metadata(channel_names=dict(enumerate(names)), scale_x=scale, scale_y=scale,
                         scale_z=scale_z)
    return path


@pytest.fixture(scope="module")
def moving(tmp_path_factory):
    """``(tyx.czi, tcyx.czi, frames)``: 6 frames (40 x 48) moved by MOVES; TCYX's channel 1
    their negative."""
    base = periodic_texture(np.random.default_rng(74), (40, 48))
    frames = np.stack([fourier_moved(base, m) for m in MOVES])
    folder = tmp_path_factory.mktemp("czi-moving")
    tyx = write_czi(folder / "tyx.czi", _photons(frames)[:, None, None], ["GCaMP"])
    two = np.stack([_photons(frames), _photons(1 - frames)], axis=1)[:, :, None]
    tcyx = write_czi(folder / "tcyx.czi", two, ["GCaMP", "red"])
    return tyx, tcyx, frames


def _run(*args):
    res = CliRunner().invoke(cli, ["align", *map(str, args), "--device", "cpu",
                                   "--max-shift", "5", "--no-quality", "--no-verify"])
    assert res.exit_code == 0, res.output
    return res


def _shifts(out, columns=(2, 3)):
    return np.loadtxt(out / "shifts.csv", delimiter=",", skiprows=1, usecols=columns)


def _raw(out, fmt):
    """``(pixel size (y, x), its unit, channel names)`` as each format's own reader says."""
    if fmt == "tiff":
        with tifffile.TiffFile(out / "aligned.tif") as tif:
            page, meta = tif.pages.first, tif.imagej_metadata
            (xn, xd), (yn, yd) = page.tags["XResolution"].value, page.tags["YResolution"].value
            assert len(tif.pages) == len(meta["Labels"])  # (a label a page)
            return (yd / yn, xd / xn), meta["unit"], meta["Labels"][:1]
    if fmt == "ome-tiff":
        with tifffile.TiffFile(out / "aligned.ome.tif") as tif:
            pixels = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]["Pixels"]
        return (pixels["PhysicalSizeY"], pixels["PhysicalSizeX"]), \
            pixels["PhysicalSizeXUnit"], [pixels["Channel"]["Name"]]
    if fmt == "ome-zarr":
        attrs = json.loads((out / "aligned.ome.zarr" / ".zattrs").read_text())
        image = attrs["multiscales"][0]
        scale = image["datasets"][0]["coordinateTransformations"][0]["scale"]
        assert [a.get("unit") for a in image["axes"]] == [None, "micrometer", "micrometer"]
        return tuple(scale[-2:]), image["axes"][-1]["unit"], \
            [c["label"] for c in attrs["omero"]["channels"]]
    h5py = pytest.importorskip("h5py")
    with h5py.File(out / "aligned.h5") as f:
        attrs = f["aligned"].attrs
        size = tuple(attrs["element_size_um"])  # (Fiji's z, y and x: the frames a step of 1)
        assert size[0] == 1.0
        return size[1:], "µm", [str(n) for n in attrs["channel_names"]]


OUT_NAMES = {"tiff": "aligned.tif", "ome-tiff": "aligned.ome.tif",
             "ome-zarr": "aligned.ome.zarr", "hdf5": "aligned.h5"}
#: each format's name for micrometers
MICROMETER = {"tiff": "um", "ome-tiff": "µm", "ome-zarr": "micrometer", "hdf5": "µm"}


@pytest.mark.parametrize("fmt", list(OUT_NAMES))
def test_a_tyx_czi_aligns_to_the_truth_and_every_output_keeps_its_calibration(tmp_path,
                                                                              moving, fmt):
    """(The name of a single channel reached only the OME-Zarr output: the ImageJ TIFF, the
    OME-TIFF and the HDF5 writers kept names of several channels alone.)"""
    if fmt == "ome-zarr":
        pytest.importorskip("zarr")
    path = moving[0]
    said = calibration(path)
    assert said["pixel_size"] == pytest.approx((0.5, 0.5, "µm"))
    assert said["channel_names"] == ["GCaMP"] and said["frame_interval"] is None
    _run(path, "--out", tmp_path / "o", "--out-format", fmt, "-q")
    assert rms(_shifts(tmp_path / "o"), MOVES) < 0.02, _shifts(tmp_path / "o")
    out = tmp_path / "o" / OUT_NAMES[fmt]
    d = describe(out)
    assert (d["frames"], d["frame_shape"], d["channels"]) == (6, (40, 48), 1)
    assert d["pixel_size"][:2] == pytest.approx((0.5, 0.5))
    assert d["pixel_size"][2] == MICROMETER[fmt] and d["channel_names"] == ["GCaMP"]
    assert d["frame_interval"] is None
    size, unit, names = _raw(tmp_path / "o", fmt)
    assert size == pytest.approx((0.5, 0.5)) and unit == MICROMETER[fmt] and names == ["GCaMP"]


@pytest.mark.parametrize("fmt", ["tiff", "ome-zarr"])
def test_a_tcyx_czi_measured_on_channel_1_writes_both_channels_named(tmp_path, moving, fmt):
    if fmt == "ome-zarr":
        pytest.importorskip("zarr")
    path = moving[1]
    _run(path, "--out", tmp_path / "o", "--channel", "1", "--apply-to", "all",
         "--out-format", fmt, "--keep-dtype", "-q")
    assert rms(_shifts(tmp_path / "o"), MOVES) < 0.02  # (the negative moves alike)
    out = tmp_path / "o" / OUT_NAMES[fmt]
    d = describe(out)
    assert (d["frames"], d["channels"], d["channel_names"]) == (6, 2, ["GCaMP", "red"])
    assert d["pixel_size"][:2] == pytest.approx((0.5, 0.5))
    read = []
    for c in (0, 1):
        with open_stack(out, channel=c) as src:
            read.append(src.read(0, 6))
    got = np.stack(read, axis=1)
    assert got.dtype == np.uint16 and got.shape == (6, 2, 40, 48)
    # both channels aligned alike: every frame back where the first is (the inner part)
    inner = (slice(None), slice(None), slice(4, -4), slice(4, -4))
    want = np.broadcast_to(got[:1], got.shape)
    assert np.abs(got[inner].astype(float) - want[inner]).mean() < 40  # (of 4000 counts)
    assert np.abs(got[:, 0].astype(float) + got[:, 1] - 4200)[inner[1:]].max() < 40


@pytest.fixture(scope="module")
def volumes(tmp_path_factory):
    """``(tzyx.czi, volumes)``: 6 volumes of 8 Z planes (40 x 48) moved by MOVES3 in 3-D."""
    vol = periodic_texture(np.random.default_rng(7), (8, 40, 48))
    vols = _photons(np.stack([fourier_moved(vol, m) for m in MOVES3]))
    path = write_czi(tmp_path_factory.mktemp("czi-tz") / "tz.czi", vols[:, None], ["GCaMP"],
                     scale_z=2e-6)
    return path, vols


def test_a_tzyx_czi_is_registered_as_volumes_with_a_note(tmp_path, volumes):
    """``xcorr align`` without options: the T x Z planes are volumes, registered in 3-D (a
    note says so), aligned.tif a TZYX hyperstack with the pixel size and channel name (the
    3-D aligned.tif carried none)."""
    path = volumes[0]
    d = describe(path)
    assert (d["axes"], d["shape"], d["frames"]) == ("TCZYX", (6, 1, 8, 40, 48), 48)
    assert any("6 volumes of 8 Z planes" in n for n in d["notes"])
    res = CliRunner().invoke(cli, ["align", str(path), "--out", str(tmp_path / "o"),
                                   "--device", "cpu", "--upsample", "50"])
    assert res.exit_code == 0, res.output
    assert "holds volumes (6 time points of 8 Z planes, axes TCZYX): registered in 3-D" \
        in res.stderr
    assert rms(_shifts(tmp_path / "o", (1, 2, 3)), MOVES3) < 0.02
    with tifffile.TiffFile(tmp_path / "o" / "aligned.tif") as tif:
        assert tif.series[0].axes == "TZYX" and tif.series[0].shape == (6, 8, 40, 48)
        assert tif.imagej_metadata["unit"] == "um" and \
            set(tif.imagej_metadata["Labels"]) == {"GCaMP"}
    back = calibration(tmp_path / "o" / "aligned.tif")
    assert back["pixel_size"] == pytest.approx((0.5, 0.5, "um"))
    assert back["channel_names"] == ["GCaMP"]


def test_a_tzyx_czi_with_z_aligns_that_plane_and_other_formats_are_refused(tmp_path, volumes):
    path, vols = volumes
    res = CliRunner().invoke(cli, ["align", str(path), "--z", "3", "--out",
                                   str(tmp_path / "o"), "--device", "cpu", "-q",
                                   "--no-quality", "--no-verify"])
    assert res.exit_code == 0, res.output
    want = align(vols[:, 3], device="cpu", verify=False, quality=False).shifts
    np.testing.assert_allclose(_shifts(tmp_path / "o"), want, atol=1e-6)  # (plane 3, read)
    d = describe(tmp_path / "o" / "aligned.tif")
    assert (d["axes"], d["frames"], d["channel_names"]) == ("TYX", 6, ["GCaMP"])
    # volumes are written as a TIFF hyperstack only: another format is one error line
    res = xcorr("align", path, "--out-format", "ome-tiff", "--device", "cpu", "--out",
                tmp_path / "v")
    assert_clean_error(res, "tz.czi holds volumes", "--out-format does not apply to volumes")
    assert not (tmp_path / "v").exists()
