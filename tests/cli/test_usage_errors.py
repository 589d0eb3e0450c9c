"""Usage errors, damaged and unusual inputs through a real subprocess: one ``error: ...`` line,
exit status 2, inputs unchanged."""

import hashlib
import os
import threading

import numpy as np
import pytest
import tifffile

from sample_paths import stack_path
from cli_helpers import assert_clean_error, xcorr
from synthetic import write_cut_tiff


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("cmd,args,words", [
    ("align", ("--channel", "abc"), ("--channel", "not a valid integer")),
    ("align", ("--upsample", "0"), ("--upsample",)),
    ("align", ("--chunk-frames", "0"), ("--chunk-frames",)),
    ("align", ("--min-confidence", "-1"), ("--min-confidence",)),
    ("align", ("--bogus",), ("--bogus",)),
    ("align", ("--out",), ("--out", "requires an argument")),
    ("filter", ("--kernel", "box:3", "--mode", "foo", "--out", "f.tif"), ("--mode", "foo")),
    ("filter", ("--kernel", "box:3", "--out"), ("--out",)),
    # (click keeps the last of an option given twice, silently)
    ("filter", ("--kernel", "gaussian:2", "--kernel=laplace", "--out", "f.tif"),
     ("--kernel is given more than once", "give it once")),
    ("filter", ("--kernel", "box:3", "--mode", "wrap", "--out", "f.tif", "--mode", "wrap"),
     ("--mode is given more than once",)),
    ("align", ("--max-shift", "4", "--max-shift", "8"), ("--max-shift is given more than once",)),
    ("apply", ("shifts.csv", "--fill", "0", "--fill", "1"), ("--fill is given more than once",)),
    ("info", ("--axes", "TYX", "--axes", "ZYX"), ("--axes is given more than once",)),
])
def test_usage_error_is_one_line_and_status_2(tmp_path, cmd, args, words):
    src = stack_path("moon")
    before = sha(src)
    res = xcorr(cmd, src, *args, cwd=tmp_path)
    assert_clean_error(res, *words)
    assert res.returncode == 2
    assert "Usage:" not in res.stderr and "Try " not in res.stderr
    assert sha(src) == before and not any(tmp_path.iterdir())


@pytest.mark.parametrize("args,words", [
    (("--bogus",), ("--bogus",)),
    (("nope",), ("nope",)),
    (("align",), ("PATH",)),
    (("bench", "filter", "--frames", "0"), ("--frames",)),
    (("bench", "filter", "--frames", "2", "--frames", "3"), ("--frames is given more than once",)),
])
def test_group_usage_errors(tmp_path, args, words):
    res = xcorr(*args, cwd=tmp_path)
    assert_clean_error(res, *words)
    assert res.returncode == 2


def test_help_and_version_still_exit_0():
    for args in (("--help",), ("-h",), ("align", "--help"), ("bench", "--help"),
                 ("bench", "align", "--help")):
        res = xcorr(*args)
        assert res.returncode == 0 and "Usage" in res.stdout, (args, res.stderr)
    res = xcorr("--version")
    assert res.returncode == 0 and "xcorr" in res.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.parametrize("cmd", ["align", "filter"])
def test_named_pipe_is_refused_not_read(tmp_path, cmd):
    fifo = tmp_path / "pipe.tif"
    os.mkfifo(fifo)
    extra = ("--kernel", "box:3", "--out", tmp_path / "f.tif") if cmd == "filter" else ()
    try:
        res = xcorr(cmd, fifo, *extra, "--out" if cmd == "align" else "--force",
                    *((tmp_path / "o",) if cmd == "align" else ()))
    finally:
        # a reader blocked on the pipe would hang the test: open the write end to free it
        threading.Thread(target=lambda: _unblock(fifo), daemon=True).start()
    assert_clean_error(res, "pipe.tif", "not a regular file")
    assert res.returncode == 2


def _unblock(fifo):
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


@pytest.mark.parametrize("cut", ["page1", 0.5, 0.9])
@pytest.mark.parametrize("layout", ["plain", "imagej", "zlib", "imagej-zlib"])
@pytest.mark.parametrize("cmd", ["align", "filter"])
def test_truncated_stack_is_an_error(tmp_path, rng, layout, cut, cmd):
    data = rng.integers(0, 4000, size=(20, 48, 64), dtype=np.uint16)
    path = write_cut_tiff(tmp_path / "cut.tif", data, layout, cut)
    before = sha(path)
    extra = ("--kernel", "box:3", "--out", tmp_path / "f.tif") if cmd == "filter" else (
        "--out", tmp_path / "o")
    res = xcorr(cmd, path, *extra, "--device", "cpu")
    assert_clean_error(res, "cut.tif", "truncated or damaged after frame", "of 20")
    assert res.returncode == 2
    assert sha(path) == before
    assert not (tmp_path / "f.tif").exists() and not (tmp_path / "o").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root reads files whatever their mode")
def test_unreadable_file_says_permission_denied(tmp_path):
    path = tmp_path / "locked.tif"
    tifffile.imwrite(path, np.zeros((3, 8, 8), np.uint16), photometric="minisblack")
    path.chmod(0)
    try:
        res = xcorr("align", path, "--out", tmp_path / "o")
    finally:
        path.chmod(0o644)
    assert_clean_error(res, "locked.tif", "permission denied")
    assert res.returncode == 2 and "uncorrupted" not in res.stderr


@pytest.mark.parametrize("name, value, words", [("XCORR_TUNE", "2", "must be 0 or 1"),
                                                ("XCORR_PLANNER", "bogus", "must be model")])
def test_a_bad_planner_setting_is_said_on_every_device(tmp_path, name, value, words):
    """The planner reads XCORR_TUNE and XCORR_PLANNER on a GPU alone: a value the docs call an
    error was taken silently by a CPU run (exit 0)."""
    import subprocess
    import sys

    from cli_helpers import child_env

    res = subprocess.run([sys.executable, "-m", "xcorr_app.cli", "filter",
                          str(stack_path("cell")), "--kernel", "box:3", "--device", "cpu",
                          "--out", str(tmp_path / "f.tif")], capture_output=True, text=True,
                         env=child_env(**{name: value}), timeout=300)
    assert_clean_error(res, name, words)
    assert not (tmp_path / "f.tif").exists()
