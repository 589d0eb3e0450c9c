"""``--out-format nwb`` (issue 77): the aligned movie as a ``MotionCorrection`` in
``processing/ophys`` of a copy of the NWB input (``aligned.nwb``) or, with ``--in-place``, of the
input itself: read by pynwb, valid for its validator, the same frames as ``aligned.tif`` of the
same run in NWB's (frames, x, y), ``xy_translation`` the shifts (x, y), the input unchanged;
the guards (an earlier run's movie, a failure while writing, a non-NWB input, pynwb missing)."""

import csv
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile
from click.testing import CliRunner

from xcorr_app import align
from xcorr_app.cli._main import cli
from xcorr_app.errors import InputError, OutputError
from xcorr_app.io import open_stack

from cli_helpers import ROOT, assert_clean_error, digest
from synthetic import fourier_moved, periodic_texture
from test_axes import write_nwb

pynwb = pytest.importorskip("pynwb")

#: the moves of the frames (dy, dx): xcorr's shifts are their negatives
MOVES = [(0.0, 0.0), (1.5, -2.0), (-1.0, 3.25), (2.0, 1.0), (0.5, -0.5), (-2.5, 0.75)]
STACK = "/processing/ophys/MotionCorrection/TwoPhotonSeries"


def movie(shape=(24, 30), dtype=np.float32, seed=0):
    """Frames ``(T, H, W)`` of a periodic texture moved by :data:`MOVES`."""
    base = periodic_texture(np.random.default_rng(seed), shape)
    frames = np.stack([fourier_moved(base, m) for m in MOVES])
    if np.dtype(dtype).kind in "iu":
        return np.round(frames * 1000 + 100).astype(dtype)
    return frames.astype(dtype)


@pytest.fixture
def nwb_input(tmp_path):
    """An NWB file of one TwoPhotonSeries stored (frames, x, y), as NWB orders it."""
    frames = movie()
    return write_nwb(tmp_path / "m.nwb", np.ascontiguousarray(frames.transpose(0, 2, 1))), frames


def run(*args):
    return CliRunner().invoke(cli, ["align", *map(str, args), "--device", "cpu",
                                    "--boundary", "circular", "--no-quality", "-q"])


def read_stack(path):
    """``(corrected (T, x, y), xy_translation, description, comments, identifier)``."""
    with pynwb.NWBHDF5IO(str(path), "r") as io:
        nwb = io.read()
        stack = nwb.processing["ophys"]["MotionCorrection"]["TwoPhotonSeries"]
        assert stack.original is nwb.acquisition["TwoPhotonSeries"]
        return (stack.corrected.data[:], stack.xy_translation.data[:],
                stack.corrected.description, stack.corrected.comments, nwb.identifier)


def shifts_csv(folder):
    with open(folder / "shifts.csv") as f:
        rows = list(csv.DictReader(f))
    return np.array([[float(r["dy"]), float(r["dx"])] for r in rows])


@pytest.mark.parametrize("extra", [[], ["--resample", "fourier", "--crop"]])
def test_nwb_output_is_valid_and_holds_the_aligned_movie_and_shifts(tmp_path, nwb_input,
                                                                    extra):
    """(``extra``: the movie written by the run as it goes, or warped after it.)"""
    path, frames = nwb_input
    before = digest(path)
    res = run(path, "--out", tmp_path / "o", "--out-format", "nwb", *extra)
    assert res.exit_code == 0, res.output
    assert digest(path) == before
    out = tmp_path / "o" / "aligned.nwb"
    assert pynwb.validate(path=str(out)) == []
    corrected, xy, description, comments, identifier = read_stack(out)
    assert identifier != "axes"  # (a new file: a new identifier)
    assert description.startswith("aligned by xcorr ")
    assert json.loads(comments) == json.loads((tmp_path / "o" / "shifts.json").read_text()
                                              )["settings"]
    assert run(path, "--out", tmp_path / "t", *extra).exit_code == 0
    tif = tifffile.imread(tmp_path / "t" / "aligned.tif")
    assert corrected.shape == (len(MOVES), tif.shape[2], tif.shape[1])
    np.testing.assert_array_equal(corrected, tif.transpose(0, 2, 1))
    shifts = shifts_csv(tmp_path / "o")
    np.testing.assert_allclose(xy, shifts[:, ::-1], atol=1e-6)  # (x, y)
    np.testing.assert_allclose(xy, -np.array(MOVES)[:, ::-1], atol=0.02)
    assert json.loads((tmp_path / "o" / "shifts.json").read_text())["aligned"] == "aligned.nwb"


def test_the_corrected_movie_reads_back_aligned(tmp_path, nwb_input):
    """(Fourier resampling, cropped: every aligned frame is the same part of the texture.)"""
    path, frames = nwb_input
    args = ["--resample", "fourier", "--crop"]
    assert run(path, "--out", tmp_path / "o", "--out-format", "nwb", *args).exit_code == 0
    corrected = tmp_path / "o" / "aligned.nwb:corrected"
    with open_stack(str(corrected)) as src:
        got = src.read(0, 6)
    h, w = got.shape[1:]
    assert (h, w) == (19, 23)  # (the moves span 4.5 rows and 5.25 columns)
    info = CliRunner().invoke(cli, ["info", str(corrected)])
    assert info.exit_code == 0, info.output
    assert f"shape 6 x {w} x {h} (axes TXY)" in info.output, info.output
    np.testing.assert_allclose(got, np.broadcast_to(got[0], got.shape), atol=2e-3)
    found = [(y, x) for y in range(24 - h + 1) for x in range(30 - w + 1)
             if np.allclose(got[0], frames[0][y:y + h, x:x + w], atol=2e-3)]
    assert len(found) == 1  # (the texture's own rows and columns: not transposed)
    again = align(str(corrected), device="cpu", quality=False)
    assert np.abs(again.shifts).max() < 0.01


def test_in_place_adds_the_module_once_unless_forced(tmp_path, nwb_input):
    path, _ = nwb_input
    res = run(path, "--out", tmp_path / "o", "--out-format", "nwb", "--in-place")
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "o" / "aligned.nwb").exists()
    assert pynwb.validate(path=str(path)) == []
    corrected, xy, _, _, identifier = read_stack(path)
    assert identifier == "axes" and corrected.shape == (6, 30, 24)
    np.testing.assert_allclose(xy, shifts_csv(tmp_path / "o")[:, ::-1], atol=1e-6)
    before = digest(path)
    named = f"{path}:TwoPhotonSeries"  # (the file holds two series now)
    again = run(named, "--out", tmp_path / "o2", "--out-format", "nwb", "--in-place")
    assert again.exit_code == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "already holds xcorr's corrected movie" in lines[0] \
        and "--force" in lines[0], again.stderr
    assert digest(path) == before and not (tmp_path / "o2").exists()
    forced = run(named, "--out", tmp_path / "o2", "--out-format", "nwb", "--in-place", "--force")
    assert forced.exit_code == 0, forced.output
    assert pynwb.validate(path=str(path)) == []
    np.testing.assert_array_equal(read_stack(path)[0], corrected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nwb", "o", "o2"]  # (no temps)


@pytest.mark.parametrize("in_place", [False, True])
def test_a_failure_while_writing_leaves_nothing(tmp_path, nwb_input, monkeypatch, in_place):
    from xcorr_app.io._nwb_out import NwbCopy

    path, _ = nwb_input
    before = digest(path)
    res = align(str(path), device="cpu", quality=False, chunk_frames=2)
    calls, put = [], NwbCopy.put

    def failing(self, at, chunk):  # (the second chunk of frames fails)
        calls.append(at)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        put(self, at, chunk)
    monkeypatch.setattr(NwbCopy, "put", failing)
    with pytest.raises(OutputError, match="No space left"):
        res.save(tmp_path / "o", format="nwb", in_place=in_place)
    assert len(calls) == 2
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nwb"]


def test_save_keeps_the_type_and_refuses_what_nwb_cannot_hold(tmp_path):
    frames = movie(dtype=np.uint16)
    path = write_nwb(tmp_path / "u.nwb", np.ascontiguousarray(frames.transpose(0, 2, 1)))
    res = align(str(path), device="cpu", quality=False, boundary="circular")
    written = res.save(tmp_path / "o", format="nwb", keep_dtype=True)
    assert written["aligned.nwb"] == tmp_path / "o" / "aligned.nwb"  # (keyed by its name)
    corrected, xy, *_ = read_stack(written["aligned.nwb"])
    assert corrected.dtype == np.uint16
    np.testing.assert_allclose(xy, res.shifts[:, ::-1])
    tif = res.save(tmp_path / "t", keep_dtype=True)["aligned.tif"]
    np.testing.assert_array_equal(corrected, tifffile.imread(tif).transpose(0, 2, 1))
    with pytest.raises(InputError, match="in_place=True .* needs format='nwb'"):
        res.save(tmp_path / "x", in_place=True)
    stack = np.stack([frames[0]] * 3).astype(np.float32)
    with pytest.raises(InputError, match="NWB output needs an NWB input"):
        align(stack, device="cpu", quality=False).save(tmp_path / "x", format="nwb")
    assert not (tmp_path / "x").exists()


def test_a_non_nwb_input_is_one_error_line(tmp_path):
    tif = tmp_path / "m.tif"
    tifffile.imwrite(tif, movie())
    res = run(tif, "--out", tmp_path / "o", "--out-format", "nwb")
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: an NWB output needs an NWB input "
                                                   "(m.tif is none)"), res.stderr
    res = run(tif, "--out", tmp_path / "o", "--in-place")
    assert res.exit_code == 2 and "--in-place writes the aligned movie into the NWB input" \
        in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tif"]


def test_missing_pynwb_is_one_error_line(tmp_path, nwb_input):
    path, _ = nwb_input
    code = ("import sys; sys.modules['pynwb'] = None; sys.argv[0] = 'xcorr'\n"
            "from xcorr_app.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "align", str(path), "--device", "cpu",
                          "--out", str(tmp_path / "o"), "--out-format", "nwb"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert_clean_error(res, "writing NWB files needs the pynwb package: pip install "
                            "'xcorr-app[nwb]'")
    assert not (tmp_path / "o").exists()


def test_an_input_with_an_empty_ophys_module_gets_the_correction_there(tmp_path):
    """(an empty processing module is falsy: a second "ophys" was made, and pynwb refused it)"""
    frames = movie(seed=3)
    path = write_nwb(tmp_path / "e.nwb", np.ascontiguousarray(frames.transpose(0, 2, 1)))
    with pynwb.NWBHDF5IO(str(path), "a") as io:
        nwb = io.read()
        nwb.create_processing_module("ophys", "processed later")
        io.write(nwb)
    res = run(path, "--out", tmp_path / "o", "--out-format", "nwb")
    assert res.exit_code == 0, res.output
    assert pynwb.validate(path=str(tmp_path / "o" / "aligned.nwb")) == []
    assert read_stack(tmp_path / "o" / "aligned.nwb")[0].shape == (6, 30, 24)


def test_in_place_keeps_the_inputs_mode_and_writes_through_a_link(tmp_path, nwb_input):
    path, _ = nwb_input
    os.chmod(path, 0o640)
    link = tmp_path / "link.nwb"
    link.symlink_to(path.name)
    res = run(link, "--out", tmp_path / "o", "--out-format", "nwb", "--in-place")
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and os.readlink(link) == path.name  # (the link kept)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert read_stack(path)[0].shape == (6, 30, 24)


def test_in_place_is_renamed_onto_the_input_with_the_other_outputs(tmp_path, nwb_input,
                                                                    monkeypatch):
    """The input is written in the one commit of the run's outputs: a rename of that commit
    that fails leaves the input as it was and no output (it was replaced before the commit)."""
    from xcorr_app.io import _writer

    path, _ = nwb_input
    before = digest(path)
    real = _writer.os.replace

    def failing(src, dst):
        if Path(dst).name == "shifts.json":
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(_writer.os, "replace", failing)
    res = run(path, "--out", tmp_path / "o", "--out-format", "nwb", "--in-place")
    assert res.exit_code == 2 and "No space left" in res.stderr
    assert digest(path) == before and not (tmp_path / "o").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nwb"]  # (no temporary file)


def apply_(*args):
    return CliRunner().invoke(cli, ["apply", *map(str, args), "--device", "cpu", "-q"])


def test_apply_writes_an_nwb_copy_with_the_shifts_applied(tmp_path, nwb_input):
    """``xcorr apply SHIFTS IN.nwb --out X.nwb``: the same frames as its TIFF output, the
    shifts applied as the translation, a valid file, the input unchanged."""
    path, _ = nwb_input
    assert run(path, "--out", tmp_path / "o", "--no-aligned").exit_code == 0
    before = digest(path)
    shifts = tmp_path / "o" / "shifts.csv"
    res = apply_(shifts, path, "--out", tmp_path / "applied.nwb")
    assert res.exit_code == 0, res.output
    assert digest(path) == before
    assert pynwb.validate(path=str(tmp_path / "applied.nwb")) == []
    corrected, xy, description, comments, identifier = read_stack(tmp_path / "applied.nwb")
    assert identifier != "axes" and description.startswith("aligned by xcorr ")
    assert "xcorr apply of shifts.csv" in description
    assert json.loads(comments)["applied"] == str(shifts)
    assert apply_(shifts, path, "--out", tmp_path / "applied.tif").exit_code == 0
    tif = tifffile.imread(tmp_path / "applied.tif")
    np.testing.assert_array_equal(corrected, tif.transpose(0, 2, 1))
    np.testing.assert_allclose(xy, shifts_csv(tmp_path / "o")[:, ::-1], atol=1e-6)
    np.testing.assert_allclose(xy, -np.array(MOVES)[:, ::-1], atol=0.02)
    # (an existing output is kept without --force; with it, replaced)
    again = apply_(shifts, path, "--out", tmp_path / "applied.nwb")
    assert again.exit_code == 2 and "error:" in again.output
    assert apply_(shifts, path, "--out", tmp_path / "applied.nwb", "--force").exit_code == 0


def test_apply_refuses_nwb_output_of_another_input_or_onto_the_input(tmp_path, nwb_input):
    path, frames = nwb_input
    assert run(path, "--out", tmp_path / "o", "--no-aligned").exit_code == 0
    shifts = tmp_path / "o" / "shifts.csv"
    tif = tmp_path / "m.tif"
    tifffile.imwrite(tif, frames.transpose(0, 1, 2))
    before = digest(path)
    for args in ([shifts, tif, "--out", tmp_path / "x.nwb"],
                 [shifts, path, "--out", path, "--force"]):
        res = apply_(*args)
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), res.output
        assert not (tmp_path / "x.nwb").exists()
    assert digest(path) == before
