"""HDF5 and NWB inputs keep their calibration in every aligned stack (issue 74): a CaImAn movie
(``movie.save('x.hdf5')``: dataset ``mov``, ``fr`` in frames per second), a suite2p one
(``/data``, nothing said), NWB series by pynwb with a ``rate`` or regular ``timestamps`` and an
imaging plane's ``grid_spacing`` (in micrometers or meters) are aligned by ``xcorr align`` to
every ``--out-format``; the shifts are the drift's and the output says the input's pixel size
and frame interval (read by xcorr's ``calibration`` and by tifffile, h5py, zarr).  Attributes
that say nothing usable are a note, never a failure."""

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner

from xcorr_app.cli._main import cli
from xcorr_app.io import calibration, describe

from synthetic import fourier_moved, periodic_texture
from test_axes import write_nwb

h5py = pytest.importorskip("h5py")

#: (dy, dx) of each frame against the first; xcorr reports the shift that aligns it
MOVES = np.array([(0, 0), (1.25, -0.5), (-1.75, 2.0), (0.5, 1.5), (-0.25, -2.25),
                  (2.0, 0.75), (-1.0, -1.5), (0.75, 2.5)])
SIZE = (48, 64)




@pytest.fixture(scope="module")
def frames():
    base = periodic_texture(np.random.default_rng(741), SIZE)
    return (np.stack([fourier_moved(base, m) for m in MOVES]) * 1000).astype(np.float32)


# ---------------------------------------------------------------- files as each library writes

def caiman_file(path, frames, fr=20.0):
    """As CaImAn's ``movie.save`` writes a ``.hdf5`` (caiman/base/timeseries.py)."""
    with h5py.File(path, "w") as f:
        dset = f.create_dataset("mov", data=frames)
        dset.attrs["fr"] = fr
        dset.attrs["start_time"] = 0
        dset.attrs["file_name"] = [a.encode("utf8") for a in "movie.tif"]
    return path


def suite2p_file(path, frames):
    """suite2p's ``data.h5`` layout: ``/data`` (frames, rows, cols), no attributes."""
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=frames)
    return path


def nwb_file(path, frames, *, grid_spacing=(0.5, 0.25), unit="micrometers", **timing):
    """A TwoPhotonSeries by pynwb, stored in NWB's (frames, x, y) order, ``timing``:
    ``rate=`` or ``timestamps=``; its imaging plane's ``grid_spacing`` is (x, y)."""
    pytest.importorskip("pynwb")
    return write_nwb(path, np.ascontiguousarray(frames.transpose(0, 2, 1)),
                     imaging_plane=dict(grid_spacing=list(grid_spacing),
                                        grid_spacing_unit=unit), **timing)


#: each input: (how it is written, its pixel size (y, x) in µm, its frame interval)
INPUTS = {
    "caiman": (lambda p, f: caiman_file(p / "movie.hdf5", f), None, 0.05),
    "suite2p": (lambda p, f: suite2p_file(p / "data.h5", f), None, None),
    "nwb-rate": (lambda p, f: nwb_file(p / "rate.nwb", f, rate=25.0), (0.25, 0.5), 0.04),
    "nwb-timestamps-meters": (
        lambda p, f: nwb_file(p / "stamps.nwb", f, grid_spacing=(5e-7, 2.5e-7), unit="meters",
                              timestamps=3.0 + 0.1 * np.arange(len(f))), (0.25, 0.5), 0.1),
}


def _align(tmp_path, source, fmt):
    out = tmp_path / f"out-{fmt}"
    r = CliRunner().invoke(cli, ["align", str(source), "--out", str(out), "--device", "cpu",
                                 "--out-format", fmt, "--max-shift", "6", "--no-quality",
                                 "--no-verify", "-q"])
    assert r.exit_code == 0, r.output
    table = np.loadtxt(out / "shifts.csv", delimiter=",", skiprows=1, usecols=(2, 3))
    return out, table


def _raw(out, fmt):
    """``(pixel size (y, x), its unit, frame interval)`` as each format's own reader says it."""
    if fmt == "tiff":
        with tifffile.TiffFile(out / "aligned.tif") as tif:
            page, meta = tif.pages.first, tif.imagej_metadata or {}
            (xn, xd), (yn, yd) = page.tags["XResolution"].value, page.tags["YResolution"].value
            said = "unit" in meta
            return ((yd / yn, xd / xn) if said else None), meta.get("unit"), \
                meta.get("finterval")
    if fmt == "ome-tiff":
        with tifffile.TiffFile(out / "aligned.ome.tif") as tif:
            pixels = tifffile.xml2dict(tif.ome_metadata)["OME"]["Image"]["Pixels"]
        size = (pixels["PhysicalSizeY"], pixels["PhysicalSizeX"]) \
            if "PhysicalSizeX" in pixels else None
        return size, pixels.get("PhysicalSizeXUnit"), pixels.get("TimeIncrement")
    if fmt == "hdf5":
        with h5py.File(out / "aligned.h5") as f:
            attrs = f["aligned"].attrs
            # (Fiji's z, y and x: the frames a step of 1)
            size = tuple(attrs["element_size_um"][1:]) if "element_size_um" in attrs else None
            fr = attrs.get("fr")  # (frames per second, as CaImAn reads it)
            return size, "µm" if size else None, (1 / fr if fr is not None else None)
    zarr = pytest.importorskip("zarr")
    image = zarr.open_group(str(out / "aligned.ome.zarr"), mode="r").attrs["multiscales"][0]
    scale = image["datasets"][0]["coordinateTransformations"][0]["scale"]
    units = {a["name"]: a.get("unit") for a in image["axes"]}
    return ((scale[-2], scale[-1]) if units["x"] else None), units["x"], \
        (scale[0] if units["t"] == "second" else None)


#: each output format's name for micrometers
MICROMETER = {"tiff": "um", "ome-tiff": "µm", "hdf5": "µm", "ome-zarr": "micrometer"}


@pytest.mark.parametrize("fmt", ["tiff", "ome-tiff", "ome-zarr", "hdf5"])
@pytest.mark.parametrize("kind", list(INPUTS))
def test_every_output_keeps_the_inputs_calibration(tmp_path, frames, kind, fmt):
    if fmt == "ome-zarr":
        pytest.importorskip("zarr")
    write, size, interval = INPUTS[kind]
    source = write(tmp_path, frames)
    said = calibration(source)
    assert said["pixel_size"] == (None if size is None else (*size, "µm"))
    assert said["frame_interval"] == pytest.approx(interval)
    out, table = _align(tmp_path, source, fmt)
    assert np.sqrt(np.mean((table + MOVES) ** 2)) < 0.02, table
    name = {"tiff": "aligned.tif", "ome-tiff": "aligned.ome.tif",
            "ome-zarr": "aligned.ome.zarr", "hdf5": "aligned.h5"}[fmt]
    back = calibration(out / name)
    raw_size, raw_unit, raw_interval = _raw(out, fmt)
    if size is None:
        # (an OME-Zarr's axes always have a scale: 1 without a unit is no calibration)
        assert back["pixel_size"] is None and raw_size is None
    else:
        assert back["pixel_size"][:2] == pytest.approx(size)
        assert raw_size == pytest.approx(size) and raw_unit == MICROMETER[fmt]
    if interval is None:
        assert back["frame_interval"] is None and raw_interval is None
    else:
        assert back["frame_interval"] == pytest.approx(interval, rel=1e-9)
        assert raw_interval == pytest.approx(interval, rel=1e-9)


@pytest.mark.parametrize("kind, lines", [
    ("caiman", ["pixel size unknown", "frame interval 0.05 s"]),
    ("nwb-rate", ["pixel size 0.25 x 0.5 µm", "frame interval 0.04 s"]),
    ("nwb-timestamps-meters", ["pixel size 0.25 x 0.5 µm", "frame interval 0.1 s"]),
    ("suite2p", ["pixel size unknown", "frame interval unknown"]),
])
def test_info_says_the_frame_interval(tmp_path, frames, kind, lines):
    source = INPUTS[kind][0](tmp_path, frames)
    r = CliRunner().invoke(cli, ["info", str(source)])
    assert r.exit_code == 0, r.output
    for line in lines:
        assert f"  {line}\n" in r.output, r.output


def test_an_hdf5_output_gives_caiman_its_frame_rate(tmp_path, frames):
    """(CaImAn's ``load`` reads ``fr`` of the dataset: 1 / the frame interval.)"""
    source = caiman_file(tmp_path / "m.hdf5", frames[:4].astype(np.uint16), fr=7.5)
    out, _ = _align(tmp_path, source, "hdf5")
    with h5py.File(out / "aligned.h5") as f:
        assert float(f["aligned"].attrs["fr"]) == pytest.approx(7.5, rel=1e-12)
    assert describe(out / "aligned.h5")["frame_interval"] == pytest.approx(1 / 7.5)


# --------------------------------------------------------------- attributes that say nothing

@pytest.mark.parametrize("fr, shown", [(0.0, "fr 0.0"), ("abc", "fr abc"), (b"abc", "fr abc"),
                                       ([1, 2], "fr [1 2]"), (-30.0, "fr -30.0"),
                                       (np.nan, "fr nan"), (np.int64(0), "fr 0")])
def test_a_bad_fr_is_a_note_and_no_interval(tmp_path, frames, fr, shown):
    source = caiman_file(tmp_path / "bad.hdf5", frames[:3], fr=fr)
    d = describe(source)
    assert d["frame_interval"] is None and d["frames"] == 3
    assert [n for n in d["notes"] if "fr" in n] == [
        f"bad.hdf5:/mov: {shown} is no frame rate (frames per second): frame interval unknown"]


def test_a_bad_fr_still_aligns_and_the_output_says_no_interval(tmp_path, frames):
    source = caiman_file(tmp_path / "bad.hdf5", frames, fr="abc")
    out, table = _align(tmp_path, source, "hdf5")
    assert np.sqrt(np.mean((table + MOVES) ** 2)) < 0.02
    with h5py.File(out / "aligned.h5") as f:
        assert "fr" not in f["aligned"].attrs
    assert calibration(out / "aligned.h5")["frame_interval"] is None


def _edit(path, where, value=None, attr=None):
    """``path``'s dataset ``where`` (or its attribute ``attr``) set to ``value``, by h5py."""
    with h5py.File(path, "r+") as f:
        if attr is not None:
            f[where].attrs[attr] = value
        else:
            unit = f[where].attrs.get("unit")
            del f[where]
            f[where] = value
            if unit is not None:
                f[where].attrs["unit"] = unit
    return path


SERIES = "acquisition/TwoPhotonSeries"
PLANE = "general/optophysiology/plane"


@pytest.mark.parametrize("where, attr, value, words", [
    (f"{SERIES}/starting_time", "rate", 0.0, "starting_time rate 0.0 is no frame rate (Hz)"),
    (f"{SERIES}/starting_time", "rate", "abc", "starting_time rate abc is no frame rate (Hz)"),
    (f"{SERIES}/starting_time", "rate", [1.0, 2.0], "starting_time rate [1. 2.] is no frame"),
    (f"{PLANE}/grid_spacing", None, [0.5], "grid_spacing [0.5] holds no x and y spacing"),
    (f"{PLANE}/grid_spacing", None, [np.nan, 0.25], "grid_spacing [ nan 0.25] holds no x and y"),
    (f"{PLANE}/grid_spacing", None, 0.5, "grid_spacing 0.5 holds no x and y spacing"),
    (f"{PLANE}/grid_spacing", "unit", "furlongs", "grid_spacing unit 'furlongs' is no length"),
])
def test_an_unusable_nwb_calibration_is_a_note(tmp_path, frames, where, attr, value, words):
    path = _edit(nwb_file(tmp_path / "s.nwb", frames[:3], rate=25.0), where, value, attr)
    d = describe(path)
    assert d["frames"] == 3
    said = [n for n in d["notes"] if "unknown" in n and "axes" not in n]
    assert len(said) == 1 and words in said[0], d["notes"]
    if "rate" in words:
        assert d["frame_interval"] is None and d["pixel_size"] == (0.25, 0.5, "µm")
    else:
        assert d["pixel_size"] is None and d["frame_interval"] == pytest.approx(0.04)
    r = CliRunner().invoke(cli, ["info", str(path)])
    assert r.exit_code == 0 and words in r.output, r.output


def test_irregular_timestamps_give_no_interval_and_no_note(tmp_path, frames):
    stamps = np.array([0.0, 0.1, 0.2, 0.35, 0.4, 0.5])
    path = nwb_file(tmp_path / "s.nwb", frames[:6], timestamps=stamps)
    d = describe(path)
    assert d["frame_interval"] is None and d["pixel_size"] == (0.25, 0.5, "µm")
    assert not [n for n in d["notes"] if "interval" in n or "rate" in n]
    # within 1 % of the median step: regular
    jitter = 0.1 * np.arange(6) + np.array([0, 2e-4, -2e-4, 2e-4, 4e-4, 0])
    d = describe(nwb_file(tmp_path / "j.nwb", frames[:6], timestamps=jitter))
    assert d["frame_interval"] == pytest.approx(0.1002)  # (the median step)


def test_an_image_series_without_plane_or_timing_reads_uncalibrated(tmp_path, frames):
    """(An h5py file in NWB's layout: an ImageSeries has no imaging plane; no rate either.)"""
    path = tmp_path / "plain.nwb"
    with h5py.File(path, "w") as f:
        series = f.create_group("acquisition/ImageSeries")
        series.attrs["neurodata_type"] = "ImageSeries"
        series["data"] = frames[:3].transpose(0, 2, 1)
    d = describe(path)
    assert d["pixel_size"] is None and d["frame_interval"] is None
    assert not [n for n in d["notes"] if "unknown" in n]


def test_an_hdf5_z_step_and_axes_stored_as_a_list_are_read(tmp_path):
    """element_size_um of a TZYX dataset ((z, y, x), Fiji's and ilastik's) gave its pixel size
    but no Z step ("z step unknown": no voxel depth in the aligned hyperstack); axes stored as
    a list of letters (h5py's array of strings) were refused as naming no Y and X."""
    vols = (np.random.default_rng(0).random((3, 5, 24, 28)) * 1000).astype(np.uint16)
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("data", data=vols)
        d.attrs["axes"] = "TZYX"
        d.attrs["element_size_um"] = [1.2, 0.3, 0.25]
        e = f.create_dataset("frames", data=vols[:, 0])
        e.attrs["axes"] = np.array(["T", "Y", "X"], dtype=h5py.string_dtype())
    d = describe(f"{path}:/data")
    assert d["z_step"] == pytest.approx(1.2) and d["pixel_size"][:2] == pytest.approx((0.3, 0.25))
    assert calibration(f"{path}:/data")["z_step"] == pytest.approx(1.2)
    assert describe(f"{path}:/frames")["axes"] == "TYX"
