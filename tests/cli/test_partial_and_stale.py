"""Through a real subprocess: a rerun with ``--force --no-aligned`` leaves no aligned.tif of an
earlier run, a damaged page is named by its frame, ``--readable-frames`` uses the frames of a
truncated file before the break (one warning line), and a bad argument is an InputError."""

import subprocess
import sys

import numpy as np
import pytest
import tifffile

from sample_paths import stack_path
from cli_helpers import assert_clean_error, child_env, digest, xcorr
from synthetic import write_cut_tiff, write_damaged_tiff

FAST = ("--device", "cpu", "--max-shift", "4", "-q")


def _hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_force_no_aligned_removes_the_aligned_tif_of_an_earlier_run(tmp_path):
    src, out = stack_path("moon"), tmp_path / "out"
    before = digest(src)
    assert xcorr("align", src, "--out", out, *FAST).returncode == 0
    assert (out / "aligned.tif").exists()
    first_csv = (out / "shifts.csv").read_text()
    # without --force an earlier output is refused, the stale aligned.tif included
    res = xcorr("align", src, "--out", out, "--no-aligned", *FAST)
    assert_clean_error(res, "exists", "--force")
    res = xcorr("align", src, "--out", out, "--no-aligned", "--force", "--device", "cpu",
                "--max-shift", "4")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        ["drift.png", "quality.png", "shifts.csv", "shifts.json"]
    assert (out / "shifts.csv").read_text() == first_csv
    assert "removed" in res.stdout and "aligned.tif" in res.stdout
    assert _hidden(out) == []  # no temporary file, no backup left
    assert digest(src) == before


def test_force_with_aligned_keeps_writing_it(tmp_path):
    src, out = stack_path("moon"), tmp_path / "out"
    assert xcorr("align", src, "--out", out, "--no-aligned", *FAST).returncode == 0
    assert not (out / "aligned.tif").exists()
    assert xcorr("align", src, "--out", out, "--force", *FAST).returncode == 0
    assert tifffile.imread(out / "aligned.tif").shape == (12, 120, 160)


@pytest.mark.parametrize("cmd", ["align", "filter"])
def test_a_damaged_page_is_named_by_its_frame(tmp_path, rng, cmd):
    data = rng.integers(0, 4000, size=(20, 48, 64), dtype=np.uint16)
    path = write_damaged_tiff(tmp_path / "damaged.tif", data, page=7)
    before = digest(path)
    extra = ("--kernel", "box:3", "--out", tmp_path / "f.tif") if cmd == "filter" else (
        "--out", tmp_path / "o")
    res = xcorr(cmd, path, *extra, "--device", "cpu")
    assert_clean_error(res, "damaged.tif", "frame 7 (counted from 0) of 20", "damaged")
    assert res.returncode == 2 and digest(path) == before
    assert not (tmp_path / "f.tif").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize("layout,cut,readable", [("plain", 0.5, 10), ("zlib", 0.5, 9),
                                                 ("imagej", 0.9, 18)])
@pytest.mark.parametrize("cmd", ["align", "filter"])
def test_readable_frames_of_a_truncated_file(tmp_path, rng, cmd, layout, cut, readable):
    data = rng.integers(0, 4000, size=(20, 48, 64), dtype=np.uint16)
    path = write_cut_tiff(tmp_path / "cut.tif", data, layout, cut)
    before = digest(path)
    out = tmp_path / ("f.tif" if cmd == "filter" else "o")
    extra = ("--kernel", "box:3", "--out", out) if cmd == "filter" else ("--out", out)
    # without the option: the error of a truncated file (unchanged)
    res = xcorr(cmd, path, *extra, "--device", "cpu")
    assert_clean_error(res, "cut.tif", f"truncated or damaged after frame {readable} of 20",
                       "--readable-frames")
    res = xcorr(cmd, path, *extra, "--device", "cpu", "--readable-frames", "-q")
    assert res.returncode == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: "), res.stderr
    assert str(path) in lines[0] and f"frames {readable} to 19 cannot be read" in lines[0]
    written = tifffile.imread(out if cmd == "filter" else out / "aligned.tif")
    assert written.shape == (readable, 48, 64)
    if cmd == "align":
        assert len((out / "shifts.csv").read_text().splitlines()) == readable + 1
    assert digest(path) == before


def test_readable_frames_is_refused_with_dask(tmp_path, rng):
    data = rng.integers(0, 4000, size=(20, 48, 64), dtype=np.uint16)
    path = write_cut_tiff(tmp_path / "cut.tif", data, "zlib", 0.5)
    res = xcorr("align", path, "--out", tmp_path / "o", "--readable-frames", "--workers", "2")
    assert_clean_error(res, "--readable-frames", "--workers")
    assert res.returncode == 2 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("args", [
    ("filter", "{src}", "--kernel", "box:3", "--bank", "dog:1,2", "--out", "f.tif"),
    ("filter", "{src}", "--mix", "luma", "--channel", "0", "--out", "f.tif"),
    ("filter", "{src}", "--kernel", "box:3", "--gpus", "0", "--workers", "1", "--out", "f.tif"),
    ("align", "{src}", "--workers", "1", "--scheduler", "tcp://localhost:1", "--out", "o"),
    ("align", "{src}", "--gpus", "0", "--device", "cpu", "--out", "o"),
    ("align", "{src}", "--interpolate-low", "--out", "o"),
])
def test_a_bad_argument_is_an_input_error(tmp_path, args):
    """XCORR_DEBUG=1 shows the exception: an InputError (a ValueError), not a bare
    XcorrError (which is kept for failures that are not the user's input)."""
    args = [a.format(src=stack_path("moon")) for a in args]
    env = child_env(XCORR_DEBUG="1")
    res = subprocess.run([sys.executable, "-m", "xcorr_app.cli", *args], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode != 0
    assert res.stderr.strip().splitlines()[-1].startswith("xcorr_app.errors.InputError: "), \
        res.stderr[-500:]
