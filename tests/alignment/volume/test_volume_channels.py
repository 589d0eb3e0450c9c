"""3-D registration of multi-channel volume stacks (issue 74): ``channel`` of
:func:`align_volumes` and ``xcorr align --volumes --channel K [--apply-to all|LIST]``, for
TCZYX and TZCYX files (ImageJ hyperstacks, OME-TIFF, OME-Zarr, Zarr and HDF5 named by
``--axes``).  Channel 1 is other content than channel 0, both moved by one known subvoxel
drift: the channel asked is the one read (its voxels, compared), each gives the drift within
0.05 voxel RMS, and a file whose other channel is damaged still reads the one asked."""

import json

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner

from xcorr_app.alignment import VolumeOptions, align_volumes
from xcorr_app.alignment.volume import open_volumes, shift_volumes
from xcorr_app.cli._main import cli
from xcorr_app.errors import InputError
from xcorr_app.io import describe

from synthetic import fourier_moved, periodic_texture

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")

T, Z, Y, X = 6, 12, 40, 36
#: (dz, dy, dx) each volume's content moves by; xcorr reports the shift that undoes it
MOVES = np.array([[0, 0, 0], [1.25, -0.5, 2.0], [-0.75, 1.5, -1.25], [0.5, 2.25, -1.5],
                  [-1.5, -1.75, 0.75], [0.25, 0.75, 2.5]])
TRUTH = -MOVES




@pytest.fixture(scope="module")
def tczyx():
    """(T, C, Z, Y, X) float64 in [0.05, 0.95]: two independent textures, one drift."""
    rng = np.random.default_rng(74)
    channels = [periodic_texture(rng, (Z, Y, X), 0.1), periodic_texture(rng, (Z, Y, X), 0.1)]
    data = np.stack([[fourier_moved(v, m) for v in channels] for m in MOVES])
    return 0.05 + 0.9 * (data - data.min()) / (data.max() - data.min())


def rms(shifts):
    return float(np.sqrt(np.mean((np.asarray(shifts) - TRUTH) ** 2)))


def _as(data, dtype):
    return (data * 4000).astype(dtype) if np.dtype(dtype).kind in "iu" else data.astype(dtype)


def write(tmp_path, kind, tczyx):
    """A file of ``tczyx`` as ``kind`` says: ``(source path, axes to pass, (T, C, Z, Y, X) as
    stored)``."""
    if kind == "imagej":  # (ImageJ orders a hyperstack's axes TZCYX)
        data = _as(tczyx, np.float32)
        path = tmp_path / "hyper.tif"
        tifffile.imwrite(path, np.ascontiguousarray(data.transpose(0, 2, 1, 3, 4)),
                         imagej=True, metadata={"axes": "TZCYX"})
        return str(path), None, data
    if kind == "ome-tiff":
        data = _as(tczyx, np.uint16)
        path = tmp_path / "s.ome.tif"
        tifffile.imwrite(path, data, ome=True, metadata={"axes": "TCZYX"})
        return str(path), None, data
    if kind == "ome-zarr":  # (OME-NGFF 0.4: the axes in the group's multiscales)
        data = _as(tczyx, np.uint16)
        root = zarr.open_group(str(tmp_path / "s.ome.zarr"), mode="w", zarr_format=2)
        root.create_array("0", data=data, chunks=(1, 1, Z, Y, X))
        axes = [{"name": n, "type": t} for n, t in zip("tczyx", ("time", "channel", "space",
                                                                 "space", "space"))]
        root.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": [
            {"path": "0", "coordinateTransformations": [{"type": "scale",
                                                          "scale": [1] * 5}]}]}]
        return str(tmp_path / "s.ome.zarr"), None, data
    if kind == "zarr-tzcyx":  # (no axes metadata: named by --axes)
        data = _as(tczyx, np.int16)
        zarr.create_array(str(tmp_path / "s.zarr"), data=data.transpose(0, 2, 1, 3, 4),
                          chunks=(2, Z, 1, Y, X))
        return str(tmp_path / "s.zarr"), "TZCYX", data
    if kind == "hdf5-tczyx":
        data = _as(tczyx, np.float64)
        with h5py.File(tmp_path / "s.h5", "w") as f:
            f.create_dataset("data", data=data, chunks=(1, 1, Z, Y, X))
        return str(tmp_path / "s.h5"), "TCZYX", data
    raise AssertionError(kind)


KINDS = ["imagej", "ome-tiff", "ome-zarr", "zarr-tzcyx", "hdf5-tczyx"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_channel_is_read_alone_and_gives_the_drift(tmp_path, tczyx, kind):
    path, axes, data = write(tmp_path, kind, tczyx)
    source = path if axes is None else f"{path}?axes={axes}"
    for c in (0, 1):
        vols = open_volumes(source, channel=c)
        assert vols.shape == (T, Z, Y, X) and vols.n_channels == 2
        np.testing.assert_array_equal(vols.read(0, T), data[:, c].astype(np.float32))
        res = align_volumes(path, axes=axes, channel=c, device="cpu", upsample=50)
        assert rms(res.shifts) < 0.05, (c, res.shifts)
    # (the channels differ: a read of the other would fail the comparison above)
    assert np.abs(data[:, 0].astype(float) - data[:, 1]).mean() > 0.1 * np.abs(data).mean()


def _damage_tiff_channel0(path):
    with tifffile.TiffFile(path) as tif:
        spans = [(p.dataoffsets[0], p.databytecounts[0]) for p in tif.pages[::2]]
    with open(path, "r+b") as f:
        for at, n in spans:
            f.seek(at)
            f.write(b"\xff" * n)


@pytest.mark.parametrize("kind", ["tiff-zlib", "zarr", "hdf5-gzip"])
def test_the_other_channels_data_are_not_read(tmp_path, tczyx, kind):
    """Channel 0's stored data overwritten with garbage: channel 1 reads and registers as
    before (not a byte of channel 0 decoded), channel 0 is refused naming the damage."""
    data = _as(tczyx, np.uint16)
    if kind == "tiff-zlib":
        path = str(tmp_path / "z.tif")
        tifffile.imwrite(path, np.ascontiguousarray(data.transpose(0, 2, 1, 3, 4)),
                         imagej=True, metadata={"axes": "TZCYX"}, compression="zlib")
        _damage_tiff_channel0(path)
    elif kind == "zarr":
        path = str(tmp_path / "c.zarr")
        zarr.create_array(path, data=data, chunks=(1, 1, Z, Y, X),
                          dimension_names=list("tczyx"))
        for chunk in (tmp_path / "c.zarr" / "c").glob("*/0/*/*/*"):
            chunk.write_bytes(b"garbage" * 8)
    else:
        path = str(tmp_path / "g.h5")
        with h5py.File(path, "w") as f:
            ds = f.create_dataset("data", data=data, chunks=(1, 1, Z, Y, X), compression="gzip")
            ds.attrs["axes"] = "TCZYX"
            infos = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
            spans = [(i.byte_offset, i.size) for i in infos if i.chunk_offset[1] == 0]
        with open(path, "r+b") as f:
            for at, n in spans:
                f.seek(at)
                f.write(b"\xff" * n)
    assert rms(align_volumes(path, channel=1, device="cpu", upsample=50).shifts) < 0.05
    with pytest.raises(InputError, match="damaged|corrupted"):
        align_volumes(path, channel=0, device="cpu")


# ------------------------------------------------------------------------------ the command

def run(*args):
    return CliRunner().invoke(cli, ["align", *map(str, args), "--device", "cpu",
                                    "--upsample", "50"])


def _table(out):
    return np.loadtxt(out / "shifts.csv", delimiter=",", skiprows=1, usecols=(1, 2, 3))


def _aligned_well(aligned, data, c):
    """Each volume of ``aligned`` (T, Z, Y, X) closer to channel ``c``'s reference than it
    was (trilinear: a small blur), and far from the other channel's."""
    inner = (slice(3, -3),) * 3
    ref, other = data[0, c][inner].astype(float), data[0, 1 - c][inner].astype(float)
    for t in range(1, T):
        now = np.abs(aligned[t][inner] - ref).mean()
        assert now < 0.3 * np.abs(data[t, c][inner] - ref).mean(), (c, t)
        assert now < 0.3 * np.abs(aligned[t][inner] - other).mean(), (c, t)


@pytest.mark.parametrize("kind, args", [
    ("imagej", ["--volumes", "--channel", "1", "--apply-to", "all"]),
    ("hdf5-tczyx", ["--channel", "0", "--apply-to", "1,0"]),  # (the automatic route)
])
def test_apply_to_aligns_the_channels_by_the_same_shifts(tmp_path, tczyx, kind, args):
    path, axes, data = write(tmp_path, kind, tczyx)
    out = tmp_path / "out"
    res = run(path, *(["--axes", axes] if axes else []), *args, "--out", out)
    assert res.exit_code == 0, res.output
    noted = "holds volumes (6 time points of 12 Z planes" in res.stderr
    assert noted == ("--volumes" not in args)  # (the automatic route says so)
    assert rms(_table(out)) < 0.05
    doc = json.loads((out / "shifts.json").read_text())
    channels = [int(c) for c in args[args.index("--apply-to") + 1].replace("all", "0,1")
                .split(",")]
    assert doc["channel"] == int(args[args.index("--channel") + 1])
    assert doc["aligned_channels"] == channels
    with tifffile.TiffFile(out / "aligned.tif") as tif:
        assert tif.series[0].axes == "TZCYX"
        aligned = tif.asarray()
    assert aligned.shape == (T, Z, 2, Y, X) and aligned.dtype == np.float32
    for k, c in enumerate(channels):
        _aligned_well(aligned[:, :, k], data, c)


@pytest.mark.parametrize("kind", ["ome-tiff", "zarr-tzcyx"])
def test_the_channel_alone_is_aligned_on_the_automatic_route(tmp_path, tczyx, kind):
    """A T x Z file of channels and ``--channel K`` (no ``--volumes``): registered in 3-D on
    channel K; aligned.tif holds channel K's volumes."""
    path, axes, data = write(tmp_path, kind, tczyx)
    out = tmp_path / "out"
    res = run(path, *(["--axes", axes] if axes else []), "--channel", "1", "--out", out)
    assert res.exit_code == 0, res.output
    assert "registered in 3-D as with --volumes" in res.stderr
    assert rms(_table(out)) < 0.05
    with tifffile.TiffFile(out / "aligned.tif") as tif:
        assert tif.series[0].axes == "TZYX"
        aligned = tif.asarray()
    assert aligned.shape == (T, Z, Y, X)
    _aligned_well(aligned, data, 1)


@pytest.mark.parametrize("kind, args, words", [
    ("imagej", ["--volumes"], ["has 2 channels", "--channel"]),
    ("ome-zarr", [], ["has 2 channels", "--channel"]),  # (the automatic route too)
    ("zarr-tzcyx", ["--volumes"], ["has 2 channels", "--channel"]),
    ("imagej", ["--volumes", "--channel", "2"], ["--channel 2 is out of range", "0 to 1"]),
    ("hdf5-tczyx", ["--channel", "5"], ["--channel 5 is out of range"]),
    ("ome-tiff", ["--volumes", "--channel", "-1"], ["--channel must be a whole number >= 0"]),
    ("imagej", ["--volumes", "--channel", "0", "--apply-to", "0,2"],
     ["--apply-to 0,2: 2 is not one of its channels 0 to 1"]),
    ("hdf5-tczyx", ["--channel", "0", "--apply-to", "0,0"], ["a channel is named twice"]),
    ("imagej", ["--volumes", "--channel", "1", "--apply-to", "all", "--no-aligned"],
     ["--no-aligned"]),
])
def test_a_bad_channel_is_one_line_and_nothing_is_written(tmp_path, tczyx, kind, args, words):
    path, axes, _ = write(tmp_path, kind, tczyx)
    out = tmp_path / "out"
    res = run(path, *(["--axes", axes] if axes else []), *args, "--out", out)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert all(w in lines[0] for w in words), lines[0]
    assert not out.exists()


def test_apply_to_needs_the_channel(tmp_path, tczyx):
    stack = tmp_path / "one.npy"
    np.save(stack, tczyx[:, 0].astype(np.float32))
    res = run(stack, "--volumes", "--apply-to", "all", "--out", tmp_path / "o")
    assert res.exit_code == 2 and not (tmp_path / "o").exists()
    assert res.stderr.strip() == "error: --apply-to needs --channel K, the channel the " \
        "shifts are measured on"


# --------------------------------------------------------------------------------- the API

@pytest.mark.parametrize("channel", [-1, True, 1.0, "1"])
def test_volume_options_check_the_channel_once(channel):
    with pytest.raises(InputError, match="channel must be a whole number >= 0"):
        VolumeOptions(channel=channel)
    assert VolumeOptions(channel=np.int64(1)).channel == 1


def test_a_channel_of_an_array_or_npy_is_refused(tmp_path, tczyx):
    stack = tczyx[:, 0].astype(np.float32)
    with pytest.raises(InputError, match=r"stack\[:, channel\]"):
        align_volumes(stack, channel=0, device="cpu")
    np.save(tmp_path / "s.npy", stack)
    with pytest.raises(InputError, match="a .npy array of one channel"):
        align_volumes(str(tmp_path / "s.npy"), channel=0, device="cpu")
    with pytest.raises(InputError, match=r"stack\[:, channel\]"):
        next(shift_volumes(stack, np.zeros((T, 3)), channel=1))


def test_shift_volumes_moves_the_channel_asked(tmp_path, tczyx):
    path, _, data = write(tmp_path, "ome-tiff", tczyx)
    moved = np.stack(list(shift_volumes(path, TRUTH, channel=1, device="cpu")))
    _aligned_well(moved, data, 1)


# ---------------------------------------------------------------------------- the file's axes

@pytest.mark.parametrize("kind, axes", [("imagej", "TZCYX"), ("ome-tiff", "TCZYX"),
                                        ("ome-zarr", "TCZYX"), ("zarr-tzcyx", "TZCYX"),
                                        ("hdf5-tczyx", "TCZYX")])
def test_info_names_the_axes_and_the_channel(tmp_path, tczyx, kind, axes):
    path, given, _ = write(tmp_path, kind, tczyx)
    d = describe(path if given is None else f"{path}?axes={given}")
    assert (d["axes"], d["channels"], d["frames"]) == (axes, 2, T * Z)
    assert "xcorr align registers these volumes in 3-D (--channel K: measured on channel K)" \
        in d["notes"][-1]
    res = CliRunner().invoke(cli, ["info", path, *(["--axes", given] if given else [])])
    assert res.exit_code == 0 and f"(axes {axes})" in res.output, res.output


def test_a_tiffs_named_axes_are_kept(tmp_path, tczyx):
    """A TCYX hyperstack (channels, no Z) was registered as volumes of its 2 channels; a ZTYX
    OME-TIFF as volumes with T and Z swapped."""
    tcyx = tczyx[:, :, 0].astype(np.float32)
    tifffile.imwrite(tmp_path / "tc.tif", tcyx, imagej=True, metadata={"axes": "TCYX"})
    with pytest.raises(InputError, match="has 2 channels"):
        align_volumes(str(tmp_path / "tc.tif"), device="cpu")
    stack = tczyx[:, 0].astype(np.float32)
    tifffile.imwrite(tmp_path / "zt.ome.tif", np.ascontiguousarray(stack.transpose(1, 0, 2, 3)),
                     ome=True, metadata={"axes": "ZTYX"})
    vols = open_volumes(str(tmp_path / "zt.ome.tif"))
    np.testing.assert_array_equal(vols.read(0, T), stack)
    assert rms(align_volumes(str(tmp_path / "zt.ome.tif"), device="cpu", upsample=50).shifts) \
        < 0.05
