"""``xcorr align A.tif B.tif ...``: a session of recordings in one command, each into its own
folder as a single ``xcorr align`` of it writes, one summary table, resumable; a damaged
recording fails alone with exit status 2."""

import csv
import json

import h5py
import numpy as np
import pytest

from cli_helpers import assert_clean_error, digest, xcorr
from synthetic import drift_stack, write_cut_tiff, write_stack

#: the options of every run here (small and quick on the CPU)
FAST = ("--device", "cpu", "--max-shift", "4", "--no-quality")


@pytest.fixture
def recordings(tmp_path):
    """Two TIFFs and an HDF5 dataset (named by its source path FILE:/DATASET), uint16."""
    folder = tmp_path / "in"
    folder.mkdir()
    a, _ = drift_stack(np.random.default_rng(5), n=6, shape=(40, 48), max_shift=3)
    b, _ = drift_stack(np.random.default_rng(6), n=4, shape=(44, 36), max_shift=3,
                       image="coins")
    c, _ = drift_stack(np.random.default_rng(7), n=5, shape=(32, 48), max_shift=3)
    write_stack(folder / "a.tif", a)
    write_stack(folder / "b.tif", b)
    with h5py.File(folder / "c.h5", "w") as f:
        f["movie"] = c
    return [folder / "a.tif", folder / "b.tif", f"{folder / 'c.h5'}:/movie"]


def table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_session_equals_single_runs_and_resumes(tmp_path, recordings):
    before = [digest(tmp_path / "in" / n) for n in ("a.tif", "b.tif", "c.h5")]
    out = tmp_path / "out"
    res = xcorr("align", *recordings, "--out", out, *FAST)
    assert res.returncode == 0, res.stderr
    assert "3 recordings: 3 done" in res.stderr and res.stdout == ""
    for name, src in zip("abc", recordings):
        single = xcorr("align", src, "--out", tmp_path / f"single_{name}", *FAST, "-q")
        assert single.returncode == 0, single.stderr
        assert (out / f"{name}_xcorr" / "shifts.csv").read_text() == \
            (tmp_path / f"single_{name}" / "shifts.csv").read_text()
        assert (out / f"{name}_xcorr" / "aligned.tif").is_file()
    rows = table(out / "sessions.csv")
    assert [(r["folder"], r["status"], r["frames"]) for r in rows] == \
        [(str(out / f"{n}_xcorr"), "done", f) for n, f in zip("abc", ("6", "4", "5"))]
    stamp = (out / "a_xcorr" / "shifts.json").stat().st_mtime_ns
    again = xcorr("align", *recordings, "--out", out, *FAST)
    assert again.returncode == 0, again.stderr
    assert "3 recordings: 3 skipped" in again.stderr
    assert [r["status"] for r in table(out / "sessions.csv")] == ["skipped"] * 3
    assert (out / "a_xcorr" / "shifts.json").stat().st_mtime_ns == stamp
    forced = xcorr("align", *recordings, "--out", out, *FAST, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert [r["status"] for r in json.loads(forced.stdout)] == ["done"] * 3
    assert forced.stderr == ""  # (--json: quiet)
    assert (out / "a_xcorr" / "shifts.json").stat().st_mtime_ns != stamp
    assert [digest(tmp_path / "in" / n) for n in ("a.tif", "b.tif", "c.h5")] == before


def test_damaged_recording_fails_alone_exit_2(tmp_path, recordings):
    stack, _ = drift_stack(np.random.default_rng(8), n=20, shape=(24, 32), max_shift=2)
    cut = write_cut_tiff(tmp_path / "in" / "cut.tif", stack, "imagej-zlib", 0.5)
    out = tmp_path / "out"
    res = xcorr("align", recordings[0], cut, recordings[2], "--out", out, *FAST,
                "--no-aligned")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 of 3 recordings failed: ") and "truncated" in last
    assert "--readable-frames" in last  # (the API's words as the command's flags)
    assert [r["status"] for r in table(out / "sessions.csv")] == ["done", "failed", "done"]
    assert not (out / "cut_xcorr").exists() and (out / "c_xcorr" / "shifts.csv").is_file()
    # the frames before the cut, as a single run takes them
    res = xcorr("align", recordings[0], cut, "--out", out, *FAST, "--no-aligned",
                "--readable-frames", "-q")
    assert res.returncode == 0, res.stderr
    single = xcorr("align", cut, "--out", tmp_path / "single", *FAST, "--no-aligned",
                   "--readable-frames", "-q")
    assert single.returncode == 0, single.stderr
    assert (out / "cut_xcorr" / "shifts.csv").read_text() == \
        (tmp_path / "single" / "shifts.csv").read_text()
    n = len(table(tmp_path / "single" / "shifts.csv"))
    assert 0 < n < 20
    assert [(r["status"], r["frames"]) for r in table(out / "sessions.csv")] == \
        [("skipped", "6"), ("done", str(n))]
    assert "warning: " in res.stderr and "truncated" in res.stderr  # (said even with -q)


def test_a_quoted_pattern_is_a_session(tmp_path, recordings):
    res = xcorr("align", tmp_path / "in" / "*.tif", *FAST, "--no-aligned", "-q",
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert [r["folder"] for r in table(tmp_path / "sessions.csv")] == ["a_xcorr", "b_xcorr"]
    assert (tmp_path / "b_xcorr" / "shifts.csv").is_file()


@pytest.mark.parametrize("extra, words", [
    (("--workers", "2", "--gpus", "0"), ("--gpus", "--device cpu")),
    (("--workers", "2", "--readable-frames"), ("--readable-frames", "--workers")),
    (("--volumes",), ("--volumes", "one PATH")),
    (("--apply-to", "all"), ("--apply-to", "--channel K")),
])
def test_options_for_one_recording_refused(tmp_path, recordings, extra, words):
    res = xcorr("align", *recordings[:2], "--out", tmp_path / "out", *FAST, *extra)
    assert_clean_error(res, *words)
    assert not (tmp_path / "out").exists()


def test_pattern_matching_nothing(tmp_path):
    assert_clean_error(xcorr("align", tmp_path / "nothing" / "*.tif", "--device", "cpu"),
                       "matches no file")


def test_a_damaged_recording_on_workers_is_one_error_line(tmp_path, recordings):
    """On a cluster of worker processes tifffile's own log of the damaged page reached stderr
    beside the error line (the command quiets it in its own process)."""
    import tifffile

    plain = tmp_path / "plain.tif"  # (tifffile's own layout: its pages' entries at the end)
    tifffile.imwrite(plain, np.random.default_rng(9).random((12, 64, 64), np.float32))
    cut = tmp_path / "in" / "head.tif"
    cut.write_bytes(plain.read_bytes()[:5000])
    res = xcorr("align", recordings[0], cut, "--out", tmp_path / "out", *FAST, "--no-aligned",
                "--workers", "2", "-q")
    assert res.returncode == 2
    assert_clean_error(res, "1 of 2 recordings failed", "head.tif")


def test_a_recording_of_volumes_fails_saying_to_align_it_on_its_own(tmp_path, recordings):
    """Its reason told to pass --volumes, which a session refuses."""
    import tifffile

    vol = tmp_path / "in" / "vol.tif"
    tifffile.imwrite(vol, np.zeros((3, 4, 16, 16), np.uint16), imagej=True,
                     metadata={"axes": "TZYX"})
    res = xcorr("align", recordings[0], vol, "--out", tmp_path / "out", *FAST, "--no-aligned",
                "-q")
    assert res.returncode == 2
    assert_clean_error(res, "a session aligns 2-D recordings: align it on its own")
    assert [r["status"] for r in table(tmp_path / "out" / "sessions.csv")] == ["done", "failed"]


def test_sigterm_between_recordings_stops_the_session_as_sigint_does(tmp_path, recordings):
    """SIGTERM after a recording was written and before the next one's outputs: Python's default
    handler killed the process without a word (no interrupted line, exit -15); it stops as
    SIGINT does, the recordings written kept."""
    import os
    import subprocess
    import sys

    from cli_helpers import child_env

    program = (
        "import os, signal, sys\n"
        "import xcorr_app.alignment._sessions as S\n"
        "one = S._one\n"
        "def first_then_term(*a, **k):\n"
        "    row = one(*a, **k)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)  # (between two recordings)\n"
        "    return row\n"
        "S._one = first_then_term\n"
        "from xcorr_app.cli import run\n"
        "sys.argv = ['xcorr'] + sys.argv[1:]\n"
        "run()\n")
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-c", program, "align", *map(str, recordings),
                          "--out", str(out), *FAST], capture_output=True, text=True,
                         env=child_env(), timeout=300)
    assert res.returncode == 128 + 15, res.stderr
    assert "interrupted (SIGTERM)" in res.stderr and "Traceback" not in res.stderr
    assert (out / "a_xcorr" / "shifts.csv").is_file()
    assert not (out / "b_xcorr").exists()
