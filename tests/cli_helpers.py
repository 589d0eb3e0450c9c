"""Running the ``xcorr`` command in a subprocess, as a user does, and checking its errors
(used by the CLI tests of several subpackages)."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra) -> dict:
    """The environment of a child process of the tests: this one's, the checkout first on
    ``PYTHONPATH`` and then the path the suite runs with (a device's carried wheels), plus
    ``extra``."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def xcorr(*args, cwd=None):
    env = child_env()
    env.pop("XCORR_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "xcorr_app.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


#: the child's program in :func:`from_a_terminal`
_WITH_TERMINAL_SIGNALS = """
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # what Python installs by default
for name in ("SIGHUP", "SIGTERM"):
    signal.signal(getattr(signal, name), signal.SIG_DFL)
option, what = sys.argv[1:3]
if option == "-m":  # as python -m runs it (sys.argv[0]: the module's file)
    sys.argv[1:] = sys.argv[3:]
    runpy.run_module(what, run_name="__main__", alter_sys=True)
else:
    sys.argv[:] = ["-c", *sys.argv[3:]]
    exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
"""


def from_a_terminal(*args, python_code=None):
    """The command line of ``python -m xcorr_app.cli ARGS`` (or ``python -c PYTHON_CODE ARGS``)
    whose process has the signal dispositions of one a user starts from a terminal: a test run
    started in the background passes SIGINT (and under nohup SIGHUP) on as ignored, and Python
    then installs no KeyboardInterrupt.  A few lines of Python set them, then run the command:
    not ``Popen(preexec_fn=)``, which Python documents as unsafe where the parent has threads
    (after Dask or a thread pool has run in the test process)."""
    what = ["-m", "xcorr_app.cli"] if python_code is None else ["-c", python_code]
    return [sys.executable, "-c", _WITH_TERMINAL_SIGNALS, *what, *map(str, args)]


def assert_clean_error(res, *words):
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines() if not ln.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def digest(path: Path) -> str:
    """A hash of a file, or of every file of a folder (names and contents): inputs are hashed
    before and after a run to show it left them untouched."""
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()
