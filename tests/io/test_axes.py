"""One axes model at the reader (issue 74): T, Z, C, Y, X from a file's own metadata, or as the
caller names them (``--axes`` in every command that reads a stack, ``axes=`` in the API,
``PATH?axes=...``), whatever library wrote the file.

Files are written by tifffile, zarr, h5py and pynwb (h5py in pynwb's layout where pynwb is not
installed) in TYX, TCYX, TZYX and TCZYX layouts, with and without axes metadata.  Frames are a
smooth periodic texture moved by Fourier phase ramps, so a right reading aligns within 0.02 px
RMS of the moves, and a wrong one (rows and columns swapped, planes as frames) does not."""

from datetime import datetime, timezone

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner

from xcorr_app import align, apply_shifts
from xcorr_app.alignment import align_volumes
from xcorr_app.cli._main import cli
from xcorr_app.errors import InputError
from xcorr_app.io import AxesUnknown, HoldsVolumes, describe, open_stack

from synthetic import fourier_moved, periodic_texture

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")

#: (dy, dx) of each frame (volume) against the first; xcorr reports the shift that aligns it
MOVES = np.array([(0, 0), (1.25, -0.5), (-1.75, 2.0), (0.5, 1.5), (-0.25, -2.25)])
TRUTH = -MOVES
SIZE = (36, 44)




@pytest.fixture(scope="module")
def data():
    """``tyx`` (5, 36, 44); ``tcyx`` its frames and their negative as channel 1; ``tzyx``
    4 volumes of 5 planes moved (0, dy, dx); ``tczyx`` (channel 0: ``tzyx``)."""
    rng = np.random.default_rng(74)
    base = periodic_texture(rng, SIZE)
    tyx = np.stack([fourier_moved(base, m) for m in MOVES]).astype(np.float32)
    tcyx = np.stack([tyx, 1 - tyx], axis=1)
    vol = periodic_texture(rng, (5, 28, 32))
    tzyx = np.stack([fourier_moved(vol, m) for m in MOVES[:4]]).astype(np.float32)
    tczyx = np.stack([tzyx, 1 - tzyx], axis=1)
    return {"TYX": tyx, "TCYX": tcyx, "TZYX": tzyx, "TCZYX": tczyx}


def rms(shifts, truth=TRUTH):
    return float(np.sqrt(np.mean((np.asarray(shifts) - truth[:len(shifts)]) ** 2)))


def write_nwb(path, frames, *, dimension=None, imaging_plane=None, **timing):
    """An NWB file of one TwoPhotonSeries whose ``data`` are ``frames`` as given: by pynwb
    where it is installed (it writes a NumPy movie as it is), else by h5py in its layout;
    ``imaging_plane``: more of its plane's fields (pynwb), ``timing``: ``rate=`` (30 Hz) or
    ``timestamps=``."""
    try:
        import pynwb
    except ImportError:
        with h5py.File(path, "w") as f:
            series = f.create_group("acquisition/TwoPhotonSeries")
            series.attrs["neurodata_type"] = "TwoPhotonSeries"
            series.attrs["namespace"] = "core"
            series["data"] = frames
            if dimension is not None:
                series["dimension"] = np.asarray(dimension, np.int32)
        return path
    from pynwb.ophys import OpticalChannel, TwoPhotonSeries

    nwb = pynwb.NWBFile(session_description="axes", identifier="axes",
                        session_start_time=datetime(2026, 1, 1, tzinfo=timezone.utc))
    device = nwb.create_device(name="scope")
    plane = nwb.create_imaging_plane(
        name="plane", optical_channel=OpticalChannel(name="g", description="g",
                                                     emission_lambda=520.0),
        description="V1", device=device, excitation_lambda=920.0, indicator="GCaMP",
        location="V1", imaging_rate=30.0, **(imaging_plane or {}))
    nwb.add_acquisition(TwoPhotonSeries(name="TwoPhotonSeries", imaging_plane=plane,
                                        data=frames, unit="n.a.", dimension=dimension,
                                        **(timing or {"rate": 30.0})))
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    return path


# ------------------------------------------------------------- files that align to the truth

def _tiff(path, layout, data, named):
    array = data[layout]
    if named:  # (ImageJ orders its axes TZCYX: OME-TIFF for TCZYX)
        imagej = layout in ("TYX", "TCYX", "TZYX")
        tifffile.imwrite(path, array, imagej=imagej, ome=not imagej, metadata={"axes": layout})
    else:
        tifffile.imwrite(path, array)  # (tifffile names unknown axes Q: QQYX)
    return str(path)


def _zarr(path, layout, data, named):
    names = list(layout.lower()) if named else None
    zarr.create_array(str(path), data=data[layout], chunks=(2, *data[layout].shape[1:]),
                      dimension_names=names)
    return str(path)


def _hdf5(path, layout, data, named, labels=False):
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", data=data[layout])  # (suite2p's layout: /data, TYX)
        if named and labels:
            for i, letter in enumerate(layout.lower()):
                ds.dims[i].label = letter
        elif named:
            ds.attrs["axes"] = layout
    return str(path)


WRITERS = {"tiff": (_tiff, "s.tif"), "zarr": (_zarr, "s.zarr"), "hdf5": (_hdf5, "s.h5")}


@pytest.mark.parametrize("fmt", list(WRITERS))
@pytest.mark.parametrize("layout, named, axes, pick", [
    ("TYX", True, None, {}),
    ("TCYX", True, None, {"channel": 1}),
    ("TCYX", False, "TCYX", {"channel": 0}),
    ("TCZYX", True, None, {"channel": 0, "z": 2}),
    ("TZYX", False, "tzyx", {"z": 3}),
])
def test_every_layout_aligns_to_the_truth(tmp_path, data, fmt, layout, named, axes, pick):
    write, name = WRITERS[fmt]
    path = write(tmp_path / name, layout, data, named)
    z = pick.get("z")
    source = path if z is None else f"{path}?z={z}"
    res = align(source, device="cpu", max_shift=5, channel=pick.get("channel"), axes=axes,
                verify=False, quality=False)
    assert len(res.shifts) == (4 if "Z" in layout else 5)
    assert rms(res.shifts) < 0.02, res.shifts  # (channel 1, the negative, moves alike)


def test_hdf5_dimension_labels_name_the_axes(tmp_path, data):
    path = _hdf5(tmp_path / "l.h5", "TZYX", data, True, labels=True)
    with open_stack(path) as src:
        assert src.axes == "TZYX" and isinstance(src.volumes, HoldsVolumes)
        assert any("holds 4 volumes of 5 Z planes: read plane by plane, T then Z" in n
                   for n in src.notes)
    assert rms(align(path + "?z=1", device="cpu", verify=False, quality=False).shifts) < 0.02


# ----------------------------------------------------------------------------------- NWB

def test_nwb_stored_as_frames_rows_cols_reads_right_with_axes_tyx(tmp_path, data):
    """(pynwb writes the movie as given: (frames, rows, cols), where NWB's order is (frames,
    x, y); read in NWB's order dy and dx were swapped.)"""
    path = write_nwb(tmp_path / "s.nwb", data["TYX"])
    spec = align(str(path), device="cpu", max_shift=5, verify=False, quality=False)
    assert spec.frame_shape == SIZE[::-1]  # (NWB's order, as the file does not say)
    np.testing.assert_allclose(spec.shifts, TRUTH[:, ::-1], atol=0.02)
    assert any("read as (frames, x, y), NWB's order" in n and "axes=TYX" in n
               for n in spec.settings["notes"])
    res = align(str(path), device="cpu", max_shift=5, axes="TYX", verify=False, quality=False)
    assert res.frame_shape == SIZE and rms(res.shifts) < 0.02
    assert res.source.endswith("s.nwb?axes=TYX")
    out = CliRunner().invoke(cli, ["align", str(path), "--axes", "TYX", "--device", "cpu",
                                   "--out", str(tmp_path / "o"), "--no-quality", "--no-verify",
                                   "--max-shift", "5", "-q"])
    assert out.exit_code == 0, out.output
    table = np.loadtxt(tmp_path / "o" / "shifts.csv", delimiter=",", skiprows=1, usecols=(2, 3))
    assert rms(table) < 0.02  # (frame, source, dy, dx, ...)


def test_nwb_in_the_specs_order_or_saying_its_own_reads_right_unasked(tmp_path, data):
    spec = write_nwb(tmp_path / "spec.nwb", np.ascontiguousarray(data["TYX"].transpose(0, 2, 1)))
    assert rms(align(str(spec), device="cpu", max_shift=5, verify=False,
                     quality=False).shifts) < 0.02
    # a dimension of (x, y) = (44, 36) on (frames, 36, 44): stored (frames, rows, cols)
    said = write_nwb(tmp_path / "said.nwb", data["TYX"], dimension=[SIZE[1], SIZE[0]])
    with open_stack(str(said)) as src:
        assert src.axes == "TYX" and any("as its dimension says" in n for n in src.notes)
    assert rms(align(str(said), device="cpu", max_shift=5, verify=False,
                     quality=False).shifts) < 0.02


# ------------------------------------------------------------------------- T x Z volumes

@pytest.mark.parametrize("fmt", ["zarr", "hdf5", "tiff"])
def test_a_4d_array_without_axes_is_refused_naming_axes(tmp_path, data, fmt):
    """(Zarr and HDF5 were read as "5 channels"; a plain TIFF's planes as frames.)"""
    write, name = WRITERS[fmt]
    path = write(tmp_path / name, "TZYX", data, False)
    with pytest.raises(AxesUnknown, match=r"axes=TZYX \(volumes\) or axes=TCYX \(channels\)"):
        align(path, device="cpu")
    res = CliRunner().invoke(cli, ["align", path, "--device", "cpu", "--out",
                                   str(tmp_path / "o")])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--axes TZYX" in lines[0]
    assert not (tmp_path / "o").exists()
    # (info as well: it read Zarr and HDF5 as channels, exit 0, where align refused them)
    res = CliRunner().invoke(cli, ["info", path])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "--axes TZYX" in lines[0]


@pytest.mark.parametrize("fmt, named", [("zarr", False), ("zarr", True), ("hdf5", False),
                                        ("hdf5", True), ("tiff", False)])
def test_t_by_z_is_volumes_from_axes_or_metadata(tmp_path, data, fmt, named):
    """The API refuses their planes as frames (HoldsVolumes); ``align_volumes`` and ``xcorr
    align`` (as a T x Z TIFF) register them in 3-D."""
    write, name = WRITERS[fmt]
    path = write(tmp_path / name, "TZYX", data, named)
    axes = None if named else "TZYX"
    with pytest.raises(HoldsVolumes, match="4 time points of 5 Z planes"):
        align(path, device="cpu", axes=axes)
    res = align_volumes(path, axes=axes, device="cpu", upsample=50)
    want = np.column_stack([np.zeros(4), TRUTH[:4]])
    assert float(np.sqrt(np.mean((res.shifts - want) ** 2))) < 0.02, res.shifts
    args = ["align", path, "--device", "cpu", "--out", str(tmp_path / "o"), "--no-aligned",
            "--upsample", "50"] + ([] if named else ["--axes", "TZYX"])
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "holds volumes (4 time points of 5 Z planes, axes TZYX): registered in 3-D" \
        in out.stderr
    rows = np.loadtxt(tmp_path / "o" / "shifts.csv", delimiter=",", skiprows=1,
                      usecols=(1, 2, 3))
    assert float(np.sqrt(np.mean((rows - want) ** 2))) < 0.02


def test_volumes_in_z_then_t_order_and_in_a_dataset(tmp_path, data):
    """``ZTYX`` planes are grouped into volumes by their T and Z, wherever they lie; an HDF5
    dataset of a file of several is named as for 2-D runs."""
    path = tmp_path / "zt.h5"
    with h5py.File(path, "w") as f:
        f["scan/zt"] = np.ascontiguousarray(data["TZYX"].transpose(1, 0, 2, 3))
        f["scan/other"] = np.zeros((2, 8, 8), np.uint16)
    got = align_volumes(f"{path}:/scan/zt", axes="ZTYX", device="cpu", upsample=50).shifts
    want = align_volumes(data["TZYX"], device="cpu", upsample=50).shifts
    np.testing.assert_allclose(got, want, atol=1e-6)
    out = CliRunner().invoke(cli, ["align", str(path), "--dataset", "/scan/zt", "--axes", "ZTYX",
                                   "--volumes", "--device", "cpu", "--no-aligned", "--out",
                                   str(tmp_path / "o"), "-q", "--upsample", "50"])
    assert out.exit_code == 0, out.output
    rows = np.loadtxt(tmp_path / "o" / "shifts.csv", delimiter=",", skiprows=1,
                      usecols=(1, 2, 3))
    np.testing.assert_allclose(rows, want, atol=1e-5)


def test_info_and_filter_read_with_axes(tmp_path, data):
    path = _zarr(tmp_path / "s.zarr", "TZYX", data, False)
    d = describe(path + "?axes=TZYX")
    assert (d["axes"], d["frames"], d["frame_shape"]) == ("TZYX", 20, (28, 32))
    res = CliRunner().invoke(cli, ["info", path, "--axes", "TZYX"])
    assert res.exit_code == 0 and "TZYX" in res.output
    tif = _tiff(tmp_path / "q.tif", "TCYX", data, False)
    assert describe(tif + "?axes=TCYX")["axes"] == "TCYX"
    out = CliRunner().invoke(cli, ["filter", tif, "--axes", "TCYX", "--channel", "1",
                                   "--kernel", "gaussian:1", "--device", "cpu", "--out",
                                   str(tmp_path / "f.tif"), "-q"])
    assert out.exit_code == 0, out.output
    assert tifffile.imread(tmp_path / "f.tif").shape == (5, *SIZE)


# ------------------------------------------------------------------------- bad axes: one line

@pytest.mark.parametrize("command", ["align", "filter", "apply", "info", "zlocate"])
@pytest.mark.parametrize("axes, words", [
    ("TQYX", "give one letter for each axis"), ("TYYX", "each once"),
    ("TZY", "Y and X among them"), ("TZCYX", "names 5 axes but"), ("", "give one letter")])
def test_a_bad_axes_is_one_line_naming_it(tmp_path, data, command, axes, words):
    path = _zarr(tmp_path / "s.zarr", "TYX", data, False) if command != "zlocate" else \
        _hdf5(tmp_path / "m.h5", "TYX", data, False)
    extra = {"align": ["--out", str(tmp_path / "o")], "filter": ["--kernel", "gaussian:1",
                                                                 "--out", str(tmp_path / "o.tif")],
             "apply": ["--out", str(tmp_path / "o.tif")], "info": [],
             "zlocate": ["--zstack", path, "--out", str(tmp_path / "o")]}[command]
    args = [command, path, "--axes", axes, *extra]
    if command == "apply":
        shifts = tmp_path / "shifts.csv"
        shifts.write_text("frame,dy,dx\n" + "".join(f"{i},0,0\n" for i in range(5)))
        args = [command, str(shifts), *args[1:]]
    res = CliRunner().invoke(cli, [*args, *(["--device", "cpu"] if command != "info" else [])])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --axes"), res.stderr
    assert words in lines[0], lines[0]
    assert not any(p.name.startswith("o") for p in tmp_path.iterdir())


@pytest.mark.parametrize("call, words", [
    (lambda p, a: align(p, axes="TX"), "axes 'TX': give one letter"),
    (lambda p, a: align(p, axes="TZYX"), "axes=TZYX names 4 axes but s.zarr has 3"),
    (lambda p, a: align(a, axes="TYX"), "axes=TYX names the axes of a file"),
    (lambda p, a: align(p + "?axes=TYX", axes="YXT"), "names its axes already"),
    (lambda p, a: align_volumes(a, axes="TZYX"), "axes=TZYX names the axes of a file"),
    (lambda p, a: apply_shifts(p, np.zeros((5, 2)), axes=3), "axes 3: give one letter"),
])
def test_the_apis_bad_axes_is_an_input_error_naming_axes(tmp_path, data, call, words):
    path = _zarr(tmp_path / "s.zarr", "TYX", data, False)
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace("?", r"\?")):
        call(path, data["TYX"])


def test_apply_shifts_reads_with_axes(tmp_path, data):
    path = write_nwb(tmp_path / "s.nwb", data["TYX"])
    frames = np.concatenate([c for _, c in apply_shifts(str(path), TRUTH, axes="TYX",
                                                        device="cpu", resample="fourier")])
    inside = (slice(None), slice(3, -3), slice(3, -3))  # (the edges: fill where moved out)
    first = np.broadcast_to(data["TYX"][0], frames.shape)
    np.testing.assert_allclose(frames[inside], first[inside], atol=1e-3)


def test_info_says_the_frames_of_a_file_written_a_page_at_a_time_and_an_unnamed_axis(tmp_path):
    """``xcorr info`` said "shape 32 x 32 (axes YX)" beside "frames 5" for a file written one
    frame per call (a series a page), and gave a plain stack's tifffile ``Q`` axis unexplained."""
    frames = np.random.default_rng(1).integers(0, 4000, (5, 32, 40), dtype=np.uint16)
    with tifffile.TiffWriter(tmp_path / "loop.tif") as w:
        for f in frames:
            w.write(f)
    tifffile.imwrite(tmp_path / "plain.tif", frames)
    d = describe(tmp_path / "loop.tif")
    assert d["shape"] == (5, 32, 40) and d["axes"] == "TYX" and d["frames"] == 5
    out = CliRunner().invoke(cli, ["info", str(tmp_path / "plain.tif")]).output
    assert "axes QYX; Q, an axis the file does not name, is read as frames" in out, out


def test_a_tiff_z_stack_alone_says_its_planes_are_frames(tmp_path):
    """As the other formats' readers say it (a focal series read as a time series)."""
    path = tmp_path / "z.tif"
    tifffile.imwrite(path, np.zeros((6, 16, 16), np.uint16), imagej=True,
                     metadata={"axes": "ZYX"})
    with open_stack(path) as src:
        assert src.n_frames == 6
        assert any("every Z plane is a frame (axes ZYX)" in n for n in src.notes), src.notes
    tifffile.imwrite(tmp_path / "t.tif", np.zeros((6, 16, 16), np.uint16), imagej=True,
                     metadata={"axes": "TYX"})
    with open_stack(tmp_path / "t.tif") as src:
        assert not any("Z plane" in n for n in src.notes)
    # Fiji's plain stack (no hyperstack: its frames counted as slices), a time series as often
    tifffile.imwrite(tmp_path / "fiji.tif", np.zeros((6, 16, 16), np.uint16),
                     description="ImageJ=1.54f\nimages=6\nslices=6\nloop=false\n",
                     metadata=None)
    with open_stack(tmp_path / "fiji.tif") as src:
        assert src.n_frames == 6 and not any("Z plane" in n for n in src.notes), src.notes


def test_a_plane_picked_of_a_4d_array_without_axes_is_read_tzyx_by_align_too(tmp_path):
    """``--z K`` alone reads such an array TZYX (cli.md); align's calibration lookup described
    it with channel 0 as well, which made it ambiguous, and refused the run."""
    h5py = pytest.importorskip("h5py")
    stack = np.random.default_rng(2).random((5, 2, 32, 40)).astype(np.float32)
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f["t4"] = stack
    res = CliRunner().invoke(cli, ["align", str(tmp_path / "m.h5"), "--dataset", "t4", "--z",
                                   "1", "--device", "cpu", "--out", str(tmp_path / "o"), "-q"])
    assert res.exit_code == 0, res.output
    assert describe(f"{tmp_path / 'm.h5'}:/t4?z=1")["axes"] == "TZYX"
