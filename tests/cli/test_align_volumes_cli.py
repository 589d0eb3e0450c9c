"""``xcorr align STACK --volumes``: shifts.csv with dz from a (T, Z, Y, X) stack."""

import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from cli_helpers import xcorr

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "alignment" / "volume"))
from volume_samples import shifted_stack, volume  # noqa: E402


@pytest.fixture(scope="module")
def stack_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("volumes")
    true = np.array([[0, 0, 0], [1.25, -0.5, 2.0], [-0.75, 1.5, -1.0]])
    np.save(folder / "stack.npy", shifted_stack(volume(depth=16, size=32), true,
                                                photons=1e4))
    return folder / "stack.npy", true


def test_writes_shifts_with_dz(stack_path):
    path, true = stack_path
    out = path.parent / "out"
    res = xcorr("align", path, "--volumes", "--out", out, "--max-shift", "3,5,5",
                "--voxel-size", "2,0.5,0.5", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "xcorr align --volumes: 3 volumes on CPU" in res.stdout
    rows = list(csv.DictReader((out / "shifts.csv").open()))
    got = np.array([[float(r[k]) for k in ("dz", "dy", "dx")] for r in rows])
    np.testing.assert_allclose(got, -true, atol=0.05)
    assert float(rows[1]["dz_um"]) == pytest.approx(2 * got[1, 0], abs=1e-5)
    assert (out / "drift.png").read_bytes()[:4] == b"\x89PNG"
    doc = json.loads((out / "shifts.json").read_text())
    assert doc["notes"][0] == "reference: the first volume" and len(doc["volumes"]) == 3
    with tifffile.TiffFile(out / "aligned.tif") as tif:
        assert tif.series[0].axes == "TZYX"
        aligned = tif.asarray()
    assert aligned.shape == (3, 16, 32, 32) and aligned.dtype == np.float32
    inner = (slice(None), slice(3, -3), slice(3, -3), slice(3, -3))  # (moved-in edges: 0)
    stack = np.load(path)
    for t in (1, 2):  # trilinear: a blur of a few percent, far below the moved volume's
        assert (np.abs(aligned[t][inner[1:]] - stack[0][inner[1:]]).mean()
                < 0.3 * np.abs(stack[t][inner[1:]] - stack[0][inner[1:]]).mean())


def test_no_aligned(stack_path):
    path, _ = stack_path
    out = path.parent / "out2"
    res = xcorr("align", path, "--volumes", "--out", out, "--no-aligned", "--upsample", "1",
                "--device", "cpu", "--quiet")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "drift.png", "shifts.csv", "shifts.json"]


@pytest.mark.parametrize("args, message", [
    (["--volumes", "--reference", "previous"], "use first, mean or a volume INDEX"),
    (["--volumes", "--voxel-size", "1,2"], "--voxel-size takes Z,Y,X"),
    (["--volumes", "--patches", "2x2"], "--patches takes GZxGYxGX with volumes"),
    (["--volumes", "--patch-template-passes", "1"],
     "--patch-template-passes does not apply to --volumes"),
    (["--volumes", "--out-format", "hdf5"], "--out-format does not apply to --volumes"),
    (["--max-shift", "1,2,3"], "--max-shift takes N or SY,SX (SZ,SY,SX with --volumes)"),
    (["--voxel-size", "1,1,1"], "--voxel-size is for --volumes"),
])
def test_errors_are_one_line(stack_path, args, message):
    path, _ = stack_path
    res = xcorr("align", path, *args, "--device", "cpu", cwd=path.parent)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


@pytest.mark.parametrize("name", ["plain.tif", "plain.h5"])
def test_a_4d_file_naming_no_axes_writes_its_aligned_volumes(tmp_path, name):
    """A 4-D array naming no axes is read as TZYX by the volumes' reader, and so by the writer
    of aligned.tif (it asked the file's axes again and failed after the measurement)."""
    stack = np.random.default_rng(2).random((3, 6, 20, 24)).astype(np.float32)
    path = tmp_path / name
    if name.endswith(".h5"):
        h5py = pytest.importorskip("h5py")
        with h5py.File(path, "w") as f:
            f["data"] = stack
    else:
        tifffile.imwrite(path, stack)
    r = xcorr("align", path, "--volumes", "--device", "cpu", "-q", "--out", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    with tifffile.TiffFile(tmp_path / "o" / "aligned.tif") as tif:
        assert tif.series[0].shape == stack.shape


def test_a_file_of_volumes_takes_the_volumes_options_without_volumes(stack_path, tmp_path):
    """A TZYX hyperstack is registered in 3-D without --volumes, but its own options (--max-shift
    SZ,SY,SX, --voxel-size) were refused until --volumes was added; a file of frames still
    refuses them."""
    path, true = stack_path
    hyper = tmp_path / "tzyx.tif"
    tifffile.imwrite(hyper, np.load(path).astype(np.float32), imagej=True,
                     metadata={"axes": "TZYX"})
    res = xcorr("align", hyper, "--out", tmp_path / "o", "--max-shift", "3,5,5", "--voxel-size",
                "2,0.5,0.5", "--device", "cpu", "--no-aligned")
    assert res.returncode == 0, res.stderr
    assert "registered in 3-D as with --volumes" in res.stderr
    with open(tmp_path / "o" / "shifts.csv") as f:
        rows = list(csv.DictReader(f))
    got = np.array([[float(r[k]) for k in ("dz", "dy", "dx")] for r in rows])
    np.testing.assert_allclose(got, -true, atol=0.1)
    assert "dz_um" in rows[0]
    frames = tmp_path / "frames.tif"
    tifffile.imwrite(frames, np.load(path)[:, 0], imagej=True, metadata={"axes": "TYX"})
    res = xcorr("align", frames, "--out", tmp_path / "f", "--max-shift", "3,5,5")
    assert res.returncode == 2 and "SZ,SY,SX with --volumes" in res.stderr


def test_out_format_tiff_given_is_what_volumes_write(stack_path, tmp_path):
    """--out-format tiff, the one format volumes are written in, was refused as not applying
    (another format still is)."""
    path, _ = stack_path
    hyper = tmp_path / "tzyx.tif"
    tifffile.imwrite(hyper, np.load(path).astype(np.float32), imagej=True,
                     metadata={"axes": "TZYX"})
    for extra in ((), ("--volumes",)):
        res = xcorr("align", hyper, *extra, "--out-format", "tiff", "--out",
                    tmp_path / f"o{len(extra)}", "--device", "cpu", "-q")
        assert res.returncode == 0, res.stderr
    res = xcorr("align", hyper, "--out-format", "hdf5", "--out", tmp_path / "h", "--device",
                "cpu")
    assert res.returncode == 2 and "--out-format does not apply to volumes" in res.stderr
