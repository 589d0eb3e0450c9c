"""One-shot ``xcorr`` processes, as a user runs them: wall time, peak memory and the shifts
written, with the caches cold (empty plan and kernel caches) or warm (those of the run before).

Examples
--------
>>> caches = Caches()
>>> sorted(caches.env("cold"))
['CUPY_CACHE_DIR', 'XCORR_CACHE_DIR']
>>> caches.close()
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["Caches", "OneShot", "run_process", "xcorr_argv", "read_shifts_csv"]


class Caches:
    """Folders for CuPy's kernel cache and xcorr's tuning cache: ``env("cold")`` empties them
    first, ``env("warm")`` keeps what the runs before left."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="xcorr-bench-caches-"))

    def env(self, state) -> dict:
        cupy, xcorr = self.root / "cupy", self.root / "xcorr"
        if state == "cold":
            shutil.rmtree(cupy, ignore_errors=True)
            shutil.rmtree(xcorr, ignore_errors=True)
        return {"CUPY_CACHE_DIR": str(cupy), "XCORR_CACHE_DIR": str(xcorr)}

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


class OneShot(dict):
    """What :func:`run_process` saw: ``seconds`` (wall clock), ``peak_bytes`` (the child's
    maximum resident set), ``returncode``, ``stderr`` (its last line) and ``shifts``."""


def read_shifts_csv(path) -> np.ndarray:
    """The ``(dy, dx)`` columns of an ``xcorr align`` ``shifts.csv``."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return np.array([[float(r["dy"]), float(r["dx"])] for r in rows])


def xcorr_argv(*args) -> list:
    """The command line of ``xcorr ARGS`` with this Python."""
    return [sys.executable, "-m", "xcorr_app.cli", *map(str, args)]


def run_process(argv, env=None, out=None) -> OneShot:
    """Run ``argv`` (e.g. :func:`xcorr_argv`) in a fresh process and wait for it.

    ``env`` is added to the environment; ``out``: the output folder whose ``shifts.csv`` is
    read back.  The peak memory comes from ``os.wait4`` (the child's own ``ru_maxrss``)."""
    full_env = {**os.environ, **(env or {})}
    start = time.perf_counter()
    proc = subprocess.Popen(list(map(str, argv)), env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    shifts = None
    if out is not None and proc.returncode == 0 and (Path(out) / "shifts.csv").exists():
        shifts = read_shifts_csv(Path(out) / "shifts.csv")
    return OneShot(seconds=seconds, peak_bytes=int(usage.ru_maxrss) * 1024,
                   returncode=proc.returncode, stderr=lines[-1] if lines else "",
                   shifts=shifts)
