"""One-shot ``xcorr`` processes, as a user runs them: wall time, peak memory and the shifts
written, with the caches cold (empty plan and kernel caches) or warm (those of the run before).

Examples
--------
>>> caches = Caches()
>>> sorted(caches.env("cold"))
['CUDA_CACHE_PATH', 'CUPY_CACHE_DIR', 'XCORR_CACHE_DIR']
>>> caches.close()
"""

from __future__ import annotations

import contextlib
import csv
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["TIMEOUT_S", "Caches", "OneShot", "run_process", "xcorr_argv", "python_argv",
           "read_shifts_csv", "bytecode_line"]


def bytecode_line(root=None) -> str:
    """How the one-shot processes import xcorr (the package at ``root``, default this one):
    from compiled bytecode, as an installed xcorr does (pip compiles it), or compiling modules
    from their source in every process (no bytecode beside them and ``PYTHONDONTWRITEBYTECODE``
    set, as on the device machines), which slows a one-shot run (docs/performance.md, Method).

    >>> bytecode_line().startswith("xcorr's modules: ")
    True
    """
    import importlib.util

    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    sources = sorted(root.rglob("*.py"))
    missing = sum(not Path(importlib.util.cache_from_source(str(p))).exists() for p in sources)
    if not missing:
        return "xcorr's modules: compiled bytecode, as an installed xcorr has"
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return (f"xcorr's modules: {missing} of {len(sources)} without bytecode, written by the "
                "first process (untimed before warm rows)")
    return (f"xcorr's modules: {missing} of {len(sources)} without bytecode and "
            "PYTHONDONTWRITEBYTECODE set: every process compiles them from source, unlike an "
            f"installed xcorr (python -m compileall {root} first)")


class Caches:
    """Folders for CuPy's kernel cache, xcorr's tuning cache and the CUDA driver's JIT cache:
    ``env("cold")`` empties them first, ``env("warm")`` keeps what the runs before left."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="xcorr-bench-caches-"))

    def env(self, state) -> dict:
        folders = {"CUPY_CACHE_DIR": self.root / "cupy", "XCORR_CACHE_DIR": self.root / "xcorr",
                   "CUDA_CACHE_PATH": self.root / "cuda"}
        if state == "cold":
            for folder in folders.values():
                shutil.rmtree(folder, ignore_errors=True)
        return {k: str(v) for k, v in folders.items()}

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


class OneShot(dict):
    """What :func:`run_process` saw: ``seconds`` (wall clock), ``peak_bytes`` (the child's
    own peak resident memory), ``returncode``, ``stderr`` (its last line) and ``shifts``."""


def read_shifts_csv(path) -> np.ndarray:
    """The ``(dy, dx)`` columns of an ``xcorr align`` ``shifts.csv``."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return np.array([[float(r["dy"]), float(r["dx"])] for r in rows])


#: the child's own peak memory: read from /proc/self/status at exit (``VmHWM``, the high-water
#: mark of the process's own memory since it started Python).  Not ``ru_maxrss`` from
#: ``wait4``: Linux counts in it the pages the child shared with this process between fork and
#: exec, so every child "peaked" at the benchmark's own size (2.9 GB with a 629 MB stack read).
_PEAK_HOOK = ("import atexit, os, runpy, sys\n"
              "def _peak():\n"
              "    try:\n"
              "        hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
              "        open(os.environ['XCORR_BENCH_PEAK'], 'w').write(hwm[0].split()[1])\n"
              "    except (OSError, IndexError):\n"
              "        pass\n"
              "atexit.register(_peak)\n"
              "sys.argv = sys.argv[1:]\n")


def xcorr_argv(*args) -> list:
    """The command line of ``xcorr ARGS`` with this Python."""
    return python_argv("-m", "xcorr_app.cli", *args)


def python_argv(*args) -> list:
    """``python ARGS`` (``-m MODULE ...`` or ``-c CODE ...``) run under the peak-memory hook."""
    if args[0] == "-m":
        body = f"runpy.run_module({args[1]!r}, run_name='__main__', alter_sys=True)"
        rest = args[2:]
        argv0 = args[1]
    else:
        body, rest, argv0 = f"exec(compile({args[1]!r}, '<bench>', 'exec'))", args[2:], "-c"
    return [sys.executable, "-c", _PEAK_HOOK + body, argv0, *map(str, rest)]


#: seconds a one-shot process may run before the bench stops it (a failed row, not a hang):
#: the longest, 32 GiB on one GPU with patches, takes about 20 s
TIMEOUT_S = 900


def run_process(argv, env=None, out=None, timeout=TIMEOUT_S) -> OneShot:
    """Run ``argv`` (from :func:`xcorr_argv` or :func:`python_argv`) in a fresh process and
    wait for it, at most ``timeout`` seconds (then it and the processes it started are killed:
    return code -9, the last line says so; so on Ctrl-C, which is raised again); ``env`` is
    added to the environment; ``out``: the output folder whose ``shifts.csv`` is read back.
    ``peak_bytes``: the child's own high-water mark (None where /proc is missing)."""
    with tempfile.TemporaryDirectory(prefix="xcorr-bench-peak-") as tmp:
        peak_file = Path(tmp) / "peak"
        full_env = {**os.environ, **(env or {}), "XCORR_BENCH_PEAK": str(peak_file)}
        start = time.perf_counter()
        # (a session of its own: a stop ends the helper processes xcorr starts too)
        proc = subprocess.Popen(list(map(str, argv)), env=full_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
            code = proc.returncode
        except BaseException as exc:  # the timeout, or Ctrl-C of the bench
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            code, stderr = -9, stderr + f"\nstopped after {timeout:g} s".encode()
        seconds = time.perf_counter() - start
        peak = int(peak_file.read_text()) * 1024 if peak_file.exists() else None
    err = stderr.decode(errors="replace")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    shifts = None
    if out is not None and code == 0 and (Path(out) / "shifts.csv").exists():
        shifts = read_shifts_csv(Path(out) / "shifts.csv")
    return OneShot(seconds=seconds, peak_bytes=peak, returncode=code,
                   stderr=lines[-1] if lines else "", shifts=shifts)
