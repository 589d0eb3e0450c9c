"""Helper processes that build a run's later kernels while the run builds its first ones.

A first run on a fresh machine compiles every kernel it launches at first use, one after the
other (CuPy's elementwise and reduction kernels by NVRTC, one per operation and type, and
xcorr's own): most of a cold run's time.  Compiled in threads of one process they serialize;
compiled in other processes they do not.  So a run whose kernels were never built starts one
short-lived process per later stage (:func:`start_helpers`), each running that stage once on
tiny data; they fill CuPy's kernel cache on disk, where the run finds the kernels it reaches
after them instead of compiling them (a kernel the run reaches first it compiles itself, as
before: nothing waits).  Each helper leaves a marker (:func:`marker`), so later runs start
none; a process waits for its helpers at exit (at most the longest ``exit_grace`` asked,
then stops them).

A stage is named by a *runner*, ``"package.module:function"``, called in the helper with the
job's payload (a JSON-able dict holding at least its ``key`` and its ``device``): the 2-D
pipeline's stages (:mod:`xcorr_app.alignment._prebuild`) and the 3-D one's
(:mod:`xcorr_app.alignment.volume._prebuild`).

Examples
--------
>>> marker("measure-0123").name
'measure-0123'
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .._config import cache_dir

__all__ = ["EXIT_GRACE", "marker", "start_helpers", "stop"]

#: at exit, how long a process waits for its helpers before stopping them (seconds)
EXIT_GRACE = 15.0

_RUNNING: list = []
_GRACES: list = []  # each call's exit grace; the process waits for the longest
_STARTED: set = set()  # keys this process started helpers for (their markers may be to come)


def marker(key) -> Path:
    """The file a helper leaves once its stage is built (``key``: the stage and its settings)."""
    return cache_dir() / "prebuilt" / key


def _finish_at_exit():
    stop(_RUNNING, grace=max(_GRACES, default=0.0))


def start_helpers(jobs, *, wait=False, exit_grace=EXIT_GRACE) -> list:
    """Start a helper process for each ``(runner, payload)`` of ``jobs`` whose marker
    (``payload["key"]``) is absent and that this process did not start before; returns the
    processes (``wait``: waits for them, returning their exit codes).  A failing helper's
    traceback is kept beside its marker (``KEY.log``)."""
    procs = []
    for runner, payload in jobs:
        if payload["key"] in _STARTED or marker(payload["key"]).exists():
            continue
        _STARTED.add(payload["key"])
        code = "import sys; from xcorr_app._cuda.helpers import child; child(*sys.argv[1:])"
        log = marker(payload["key"] + ".log")
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            err = open(log, "wb")
        except OSError:
            err = subprocess.DEVNULL
        try:
            procs.append(subprocess.Popen(
                [sys.executable, "-c", code, runner, json.dumps(payload)],
                stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}))
        finally:
            if err is not subprocess.DEVNULL:
                err.close()
    if wait:
        return [p.wait() for p in procs]
    if procs and not _RUNNING:
        atexit.register(_finish_at_exit)  # helpers finish (or stop) before the process ends
    _RUNNING.extend(procs)
    _GRACES.extend([float(exit_grace)] * bool(procs))
    return procs


def child(runner: str, payload: str) -> None:
    """A helper process: run ``runner`` on the payload on its device, then leave the marker."""
    import cupy

    args = json.loads(payload)
    module, name = runner.split(":")
    fn = getattr(importlib.import_module(module), name)
    with cupy.cuda.Device(args.get("device", 0)):
        fn(args)
        cupy.cuda.get_current_stream().synchronize()
    done = marker(args["key"])
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps({"runner": runner, **args}))
    marker(args["key"] + ".log").unlink(missing_ok=True)  # (kept only on failure)


def stop(procs, grace=0.0) -> None:
    """Stop helper processes still running after ``grace`` seconds."""
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
