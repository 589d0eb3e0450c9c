"""The command line's faults (cli/_main.py, io/_writer.py, distributed's local_client): a
warning is one ``note:`` line (none with ``--quiet``), a full disk while writing the small
outputs is one ``error:`` line naming the file (and leaves nothing), and a Dask run leaves no
``dask-scratch-space`` in the temporary folder."""

import errno
import os
import subprocess
import sys

import pytest

from cli_helpers import ROOT, assert_clean_error
from sample_paths import stack_path

#: the ``xcorr`` command in a child whose run first does ``PATCH`` (a few lines of Python)
RUN = """
import sys
{patch}
from xcorr_app.cli._main import main
sys.argv[0] = "xcorr"
main()
"""


def run_patched(patch, *args, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("XCORR_DEBUG", None)
    return subprocess.run([sys.executable, "-c", RUN.format(patch=patch), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


WARN = """
import threading, warnings
from xcorr_app.io import _reader
real = _reader.open_stack
def warned(*a, **k):
    warnings.warn("overflow encountered in cast\\nsecond line", RuntimeWarning)
    t = threading.Thread(target=lambda: warnings.warn("from a thread", UserWarning))
    t.start(); t.join()
    return real(*a, **k)
_reader.open_stack = warned
"""


def test_a_warning_is_one_note_and_none_with_quiet(tmp_path):
    res = run_patched(WARN, "align", stack_path("cell"), "--out", tmp_path / "a", "--device",
                      "cpu")
    assert res.returncode == 0, res.stderr
    assert "note: RuntimeWarning: overflow encountered in cast\n" in res.stderr
    assert "note: UserWarning: from a thread\n" in res.stderr
    assert "second line" not in res.stderr and "warnings.warn" not in res.stderr
    assert "Warning:" not in res.stderr.replace("note: RuntimeWarning:", "").replace(
        "note: UserWarning:", "")
    quiet = run_patched(WARN, "align", stack_path("cell"), "--out", tmp_path / "q", "--device",
                        "cpu", "-q")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


FULL = f"""
import errno
from PIL import Image
def full(self, fp, *a, **k):
    raise OSError({errno.ENOSPC}, "No space left on device")
Image.Image.save = full
"""


def test_a_full_disk_while_writing_the_plot_names_it_and_leaves_nothing(tmp_path):
    out = tmp_path / "o"
    res = run_patched(FULL, "align", stack_path("cell"), "--out", out, "--device", "cpu")
    assert_clean_error(res, f"cannot write {out / 'drift.png'}", "No space left on device")
    assert res.returncode == 2
    assert not out.exists() or not list(out.iterdir())


def test_atomic_path_names_its_file_on_an_os_error(tmp_path):
    from xcorr_app.errors import OutputError
    from xcorr_app.io import atomic_path

    with pytest.raises(OutputError, match="cannot write .*t.csv .No space left on device"):
        with atomic_path(tmp_path / "t.csv") as tmp:
            tmp.write_text("x")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_a_dask_run_leaves_no_scratch_space(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    res = run_patched("", "filter", stack_path("cell"), "--kernel", "gaussian:2", "--workers",
                      "2", "--out", tmp_path / "f.tif", env={"TMPDIR": str(temp)})
    assert res.returncode == 0, res.stderr
    assert list(temp.iterdir()) == []
    assert "Warning" not in res.stderr  # (the workers' CPU fallback: noted once, not raw)
