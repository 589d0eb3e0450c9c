"""Never lose or fake data, through a real subprocess: no output replaces or lands inside an
input, one writer per output, signals clean up, and the outputs of a run appear together."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tifffile

from sample_paths import folder_path, stack_path
from cli_helpers import assert_clean_error, child_env, digest, from_a_terminal, xcorr

OUTPUTS = ["aligned.tif", "drift.png", "quality.png", "shifts.csv", "shifts.json"]


def _env():
    return child_env()


def _start(*args, python_code=None):
    """The command in a subprocess with a terminal's signal dispositions."""
    return subprocess.Popen(from_a_terminal(*args, python_code=python_code),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def _wait_for(proc, ready, timeout=120.0):
    t0 = time.monotonic()
    while not ready() and proc.poll() is None and time.monotonic() - t0 < timeout:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended too early: " + proc.communicate()[1]


def _big_stack(tmp_path, rng, n=800):
    src = tmp_path / "s.tif"
    tifffile.imwrite(src, rng.integers(0, 4000, size=(n, 192, 192), dtype=np.uint16),
                     imagej=True, metadata={"axes": "TYX"})
    return src


ALIGN_SLOW = ("--device", "cpu", "--max-shift", "2", "--no-verify", "--prefilter", "none",
              "--chunk-frames", "8")


# ------------------------------------------------------------------- outputs apart from inputs

def test_filter_refuses_to_overwrite_its_input(tmp_path):
    src = tmp_path / "in.tif"
    src.write_bytes(stack_path("cell").read_bytes())
    before = digest(src)
    res = xcorr("filter", src, "--kernel", "box:3", "--device", "cpu", "--out", src, "--force")
    assert res.returncode == 2
    assert_clean_error(res, "input")
    assert digest(src) == before
    assert sorted(os.listdir(tmp_path)) == ["in.tif"]


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_filter_refuses_an_output_that_is_the_input_by_a_link(tmp_path, link):
    src = tmp_path / "in.tif"
    src.write_bytes(stack_path("cell").read_bytes())
    before = digest(src)
    out = tmp_path / "out.tif"
    (os.symlink if link == "symlink" else os.link)(src, out)
    res = xcorr("filter", src, "--kernel", "box:3", "--device", "cpu", "--out", out, "--force")
    assert res.returncode == 2
    assert_clean_error(res, "input")
    assert digest(src) == before and os.path.samefile(src, out)


def _copy_of_cell_frames(tmp_path):
    """A copy of the cell sample's folder of TIFFs (the inputs of a folder run)."""
    src = tmp_path / "frames"
    src.mkdir()
    for f in folder_path("cell").iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    return src


def test_align_refuses_an_output_folder_in_its_input_folder(tmp_path):
    src = _copy_of_cell_frames(tmp_path)
    before = digest(src)
    for out in (src, src / "sub", src / ".." / "frames" / "x"):
        res = xcorr("align", src, "--device", "cpu", "--out", out, "--force")
        assert res.returncode == 2, res.stderr
        assert_clean_error(res, "input")
        assert digest(src) == before
    assert not (src / "sub").exists() and not (src / "x").exists()
    link = tmp_path / "link"
    link.symlink_to(src)
    res = xcorr("align", src, "--device", "cpu", "--out", link, "--force")
    assert res.returncode == 2 and digest(src) == before
    assert_clean_error(res, "input")
    # and the folder still aligns: nothing of a refused run was left in it
    res = xcorr("align", src, "--device", "cpu", "--out", tmp_path / "ok", "--no-aligned")
    assert res.returncode == 0, res.stderr


def test_filter_refuses_an_output_inside_an_input_folder(tmp_path):
    src = _copy_of_cell_frames(tmp_path)
    before = digest(src)
    res = xcorr("filter", src, "--kernel", "box:3", "--device", "cpu", "--out", src / "f.tif")
    assert res.returncode == 2
    assert_clean_error(res, "input")
    assert digest(src) == before


def test_align_refuses_its_input_file_as_output_folder(tmp_path):
    src = tmp_path / "in.tif"
    src.write_bytes(stack_path("cell").read_bytes())
    before = digest(src)
    res = xcorr("align", src, "--device", "cpu", "--out", src, "--force")
    assert res.returncode == 2
    assert_clean_error(res, "input")
    assert digest(src) == before


def test_failed_run_leaves_no_folder_it_created(tmp_path):
    tifffile.imwrite(tmp_path / "small.tif", np.zeros((50, 160), np.uint16))
    out = tmp_path / "a" / "b"
    assert_clean_error(xcorr("align", stack_path("hubble"), "--reference", tmp_path / "small.tif",
                             "--device", "cpu", "--out", out), "reference image")
    assert not (tmp_path / "a").exists()


# ------------------------------------------------------------------------ one writer at a time

@pytest.mark.parametrize("command", ["align", "filter"])
def test_a_second_writer_to_the_same_output_is_refused(tmp_path, rng, command):
    src = _big_stack(tmp_path, rng)
    before = digest(src)
    if command == "align":
        out = tmp_path / "o"
        args = ("align", src, "--out", out, *ALIGN_SLOW, "--force")
    else:
        out = tmp_path / "f.tif"
        args = ("filter", src, "--kernel", "gaussian:3", "--device", "cpu", "--chunk-frames", "4",
                "--out", out, "--force")
    first = _start(*args)
    try:
        folder = out if command == "align" else out.parent
        _wait_for(first, lambda: folder.exists() and any(
            p.name.startswith("." + ("aligned.tif" if command == "align" else out.name) + ".tmp-")
            for p in folder.iterdir()))
        second = xcorr(*args)
        assert second.returncode == 2
        assert_clean_error(second, "another xcorr run", f"pid {first.pid}")
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 130, err
    assert digest(src) == before
    assert sorted(os.listdir(tmp_path)) == ["s.tif"]  # the first run cleaned up after itself


# ------------------------------------------------------------------------------------ signals

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_while_writing_leave_nothing(tmp_path, rng, sig):
    src = _big_stack(tmp_path, rng)
    before = digest(src)
    out = tmp_path / "o"
    proc = _start("align", src, "--out", out, *ALIGN_SLOW)
    _wait_for(proc, lambda: out.exists() and any(p.name.startswith(".aligned.tif.tmp-")
                                                 for p in out.iterdir()))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, (proc.returncode, err)  # the shell's convention
    assert "interrupted" in err and "Traceback" not in err
    assert not out.exists(), list(out.iterdir())
    assert digest(src) == before


def test_stale_temporary_files_of_dead_writers_are_removed(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [out / f".aligned.tif.tmp-{dead.pid}-0badcafe.tif",
             out / f".shifts.csv.tmp-{dead.pid}-12345678.csv"]
    alive = out / f".shifts.json.tmp-{os.getpid()}-87654321.json"  # this process runs
    other = [out / "notes.txt", out / f".notes.txt.tmp-{dead.pid}-00000000.txt"]
    for p in stale + [alive] + other:
        p.write_bytes(b"partial")
    res = xcorr("align", stack_path("cell"), "--device", "cpu", "--out", out)
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(out)) == sorted(OUTPUTS + [alive.name] + [p.name for p in other])


# ------------------------------------------------------------- the outputs appear all together

_INTERRUPT_AFTER_ALIGNED = """
import os, signal, sys, time
from xcorr_app.io import _writer
original = _writer.AtomicTarget.commit
def commit(self):
    original(self)
    if self.path.name == "aligned.tif":
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2)
_writer.AtomicTarget.commit = commit
from xcorr_app.cli._main import main
sys.argv[0] = "xcorr"
main()
"""

_INTERRUPT_DURING_RENAMES = """
import os, signal, sys, time
replace = os.replace
def replace_then_interrupt(src, dst):
    replace(src, dst)
    if os.path.basename(dst) == "aligned.tif":
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
os.replace = replace_then_interrupt
from xcorr_app.cli._main import main
sys.argv[0] = "xcorr"
main()
"""


_SIGTERM_SWALLOWED_BY_A_CALLBACK = """
import os, signal, sys, weakref
from xcorr_app.io import _writer
original = _writer.AtomicTarget.commit
def signal_inside(ref):
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # (the handler runs here: Python prints its exception, goes on)
        pass
class Thing:
    pass
def commit(self):
    original(self)
    if self.path.name == "aligned.tif":
        thing = Thing()
        ref = weakref.ref(thing, signal_inside)
        del thing
_writer.AtomicTarget.commit = commit
from xcorr_app.cli._main import main
sys.argv[0] = "xcorr"
main()
"""


def test_a_stop_signal_swallowed_by_a_callback_still_stops_the_run(tmp_path):
    """A SIGTERM handled inside a weakref callback (its exception printed and dropped by
    Python; on a GPU machine SIGHUP once let the run exit 0) stops the run at its commit: exit
    143, the interrupted line alone, nothing left."""
    out = tmp_path / "o"
    proc = _start("align", stack_path("cell"), "--device", "cpu", "--out", out,
                  python_code=_SIGTERM_SWALLOWED_BY_A_CALLBACK)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "no partial output" in err and "Traceback" not in err and "ignored" not in err, err
    assert not out.exists(), list(out.iterdir())


def test_sigint_after_aligned_tif_is_written_leaves_nothing(tmp_path):
    """aligned.tif done, the tables not yet: the run is undone, as the message says."""
    out = tmp_path / "o"
    proc = _start("align", stack_path("cell"), "--device", "cpu", "--out", out,
                  python_code=_INTERRUPT_AFTER_ALIGNED)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "no partial output" in err and "Traceback" not in err
    assert not out.exists(), list(out.iterdir())
    res = xcorr("align", stack_path("cell"), "--device", "cpu", "--out", out)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("force", [False, True])
def test_sigint_while_the_outputs_are_renamed_keeps_a_whole_run(tmp_path, force):
    """An interrupt while the finished outputs are renamed waits for the renames: the output
    folder holds one whole run (and says so), never a mix or a part."""
    out = tmp_path / "o"
    if force:
        assert xcorr("align", stack_path("moon"), "--device", "cpu", "--out", out).returncode == 0
    proc = _start("align", stack_path("cell"), "--device", "cpu", "--out", out,
                  *(["--force"] if force else []), python_code=_INTERRUPT_DURING_RENAMES)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and "no partial output" not in err
    assert proc.returncode == 0, err
    assert "outputs were complete" in err
    assert sorted(os.listdir(out)) == OUTPUTS
    ref = xcorr("align", stack_path("cell"), "--device", "cpu", "--out", tmp_path / "ref")
    assert ref.returncode == 0
    assert (out / "shifts.csv").read_bytes() == (tmp_path / "ref" / "shifts.csv").read_bytes()
    assert digest(out / "aligned.tif") == digest(tmp_path / "ref" / "aligned.tif")


@pytest.mark.parametrize("fmt", ["tiff", "hdf5"])
def test_an_input_named_in_bytes_that_are_not_utf8_is_aligned(tmp_path, fmt):
    """A file name of Latin-1 bytes (Python keeps them as lone surrogates): every output
    format failed as an internal error when shifts.csv (or HDF5's attribute) took the name."""
    name = os.fsdecode(b"caf\xe9.tif")
    src = tmp_path / name
    src.write_bytes(stack_path("cell").read_bytes())
    res = xcorr("align", src, "--device", "cpu", "--out", tmp_path / "o", "--out-format", fmt,
                "-q")
    assert res.returncode == 0, res.stderr
    table = (tmp_path / "o" / "shifts.csv").read_text(encoding="utf-8")
    assert "caf\\udce9.tif" in table.splitlines()[1]
