"""The command line's faults (cli/_main.py, io/_writer.py, distributed's local_client): a
warning is one ``note:`` line (none with ``--quiet``), a full disk while writing the small
outputs is one ``error:`` line naming the file (and leaves nothing), a Dask run leaves no
``dask-scratch-space`` in the temporary folder, and runs over frames with NaN or Inf pixels or
constant frames print no ``note: RuntimeWarning`` lines."""

import errno
import subprocess
import sys

import numpy as np
import pytest

from cli_helpers import ROOT, assert_clean_error, child_env
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
    env = child_env(**(env or {}))
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


def _hostile(kind, dtype=np.float32, n=6, shape=(48, 56)):
    """Stacks that made NumPy warn ("note: RuntimeWarning: ...") in ordinary runs (seed 3)."""
    from scipy import ndimage as ndi

    base = ndi.gaussian_filter(np.random.default_rng(3).random((shape[0] + 8, shape[1] + 8)), 2)
    stack = np.stack([base[k % 3:k % 3 + shape[0], k % 4:k % 4 + shape[1]]
                      for k in range(n)]).astype(dtype)
    if kind == "inf pixel":
        stack[2, 5, 7] = np.inf
    elif kind == "nan first":
        stack[0] = np.nan
    elif kind == "nan frame":
        stack[3] = np.nan
    elif kind == "constant frame":
        stack[1] = 7
    return stack


@pytest.mark.parametrize("kind, options", [
    ("inf pixel", {}), ("inf pixel", {"patches": (2, 2)}), ("inf pixel", {"lucas_kanade": "on"}),
    ("nan first", {"reference": "previous"}), ("nan frame", {"patches": (2, 2)}),
    ("constant frame", {"patches": (2, 2)}), ("constant frame", {"reference": "refined"}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hostile_frames_raise_no_runtime_warning(tmp_path, kind, options, dtype):
    """Frames the run flags (NaN or Inf pixels, constant) are measured, reported and saved
    without NumPy's warnings (the CLI printed each as a ``note: RuntimeWarning`` line): an
    Inf pixel's 0-weight taps in the warp, a NaN template's determinant, the motion field
    plot's mean of a frame without a field."""
    import warnings

    from xcorr_app import align

    stack = _hostile(kind, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        res = align(stack, device="cpu", **options)
        res.save(tmp_path / "out")
    assert (tmp_path / "out" / "shifts.csv").is_file()
    bad = {"inf pixel": [2], "nan first": [0], "nan frame": [3], "constant frame": [1]}[kind]
    assert np.flatnonzero(res.low_confidence).tolist() == bad or kind == "nan first"


def test_cli_hostile_frames_print_only_meaningful_notes(tmp_path):
    import tifffile

    path = tmp_path / "inf.tif"
    tifffile.imwrite(path, _hostile("inf pixel"))
    res = run_patched("", "align", path, "--out", tmp_path / "o", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "RuntimeWarning" not in res.stderr and "Warning" not in res.stdout
    assert "1 frame with NaN or Inf pixels" in res.stdout
    res = run_patched("", "filter", path, "--kernel", "dog:1,3", "--out", tmp_path / "f.tif",
                      "--device", "cpu")
    assert res.returncode == 0 and "RuntimeWarning" not in res.stderr, res.stderr
