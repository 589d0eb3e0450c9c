"""Kernels built before they are needed: a GPU run's later stages compiled in helper processes.

A first run on a fresh machine compiles every kernel it launches at first use, one after the
other: many NVRTC compilations (CuPy's elementwise and reduction kernels, one per operation
and type, and xcorr's own), most of a cold run's time (docs/how-align-works.md, measurements).
Compiled in threads of one process they serialize; compiled in other processes they do not.  So at the start
of a run whose kernels were never built (no marker in the cache folder), :func:`prebuild` starts
one short-lived process per later stage of the run -- the prefilter, the correlation and its
surfaces, the subpixel refinement, the FFT reference check, the warp of the aligned stack --
each running its stage once on two small frames of the run's pixel type; they write CuPy's
kernel cache on disk, where the run finds the kernels it reaches after them instead of
compiling them (a kernel the run reaches first it compiles itself, as before: nothing waits).
Each helper leaves a marker, so later runs start none; a process waits for its helpers at exit
(at most :data:`EXIT_GRACE` seconds, then stops them).  ``xcorr info --compile`` builds the
kernels of the usual runs ahead, in the same way.

Examples
--------
>>> from xcorr_app.alignment._options import AlignOptions
>>> stage_key(AlignOptions(), "refine", (64, 80), "uint16", None)[:6]
'refine'
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .._config import cache_dir
from .._version import __version__

#: the stages a helper process can build: ``prepare`` whole (``xcorr info --compile``), or its
#: prefilter and window alone (a run prepares its reference first itself: the helper builds the
#: filter's kernels meanwhile), ``apply`` the warp of the aligned stack (default resampling)
STAGES = ("prepare", "prefilter", "measure", "refine", "verify", "apply")
#: the stages a run starts helpers for
RUN_STAGES = ("prefilter", "measure", "refine", "verify", "apply")
#: at exit, how long a process waits for its helpers before stopping them (seconds)
EXIT_GRACE = 15.0
#: frames each stage runs on (the kernels are the same for any count)
FRAMES = 2


def _opts_fields(opts) -> dict:
    return {k: v for k, v in vars(opts).items() if k not in ("reference",)} | {
        "previous": bool(opts.previous)}


def stage_key(opts, stage, frame_shape, dtype, plan) -> str:
    """The marker name of a stage built for these settings (the kernels it compiles depend on
    them: the options, the pixel type, and for ``measure`` the frame shape and the plan)."""
    what = {"v": __version__, "stage": stage, "dtype": str(np.dtype(dtype)),
            "opts": _opts_fields(opts)}
    if stage == "measure":
        what |= {"shape": list(frame_shape), "plan": str(plan)}
    digest = hashlib.sha1(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    return f"{stage}-{digest[:16]}"


def _marker(key) -> Path:
    return cache_dir() / "prebuilt" / key


def kernels_built(opts, frame_shape, dtype) -> bool:
    """Whether helper processes built this run's kernels on this machine (the markers of its
    stages; ``measure``, whose marker needs the plan, is left out)."""
    return all(_marker(stage_key(opts, s, frame_shape, dtype, None)).exists()
               for s in RUN_STAGES if s != "measure" and (s != "verify" or opts.verify))


def run_stage(opts, stage, frame_shape, dtype, plan, xp):
    """Run one stage on :data:`FRAMES` frames of random data (its kernels compile on first use)."""
    from ..correlate import Plan
    from ..registration import fft_shifts, periodic_spectrum, refined_shifts
    from .rigid import FFT_REFERENCE_UPSAMPLE, fft_reference
    from .rigid import Measurer

    h, w = frame_shape
    rs = xp.random.RandomState(0)
    f = rs.standard_normal((FRAMES, h, w)).astype(xp.float32)
    if stage == "prepare":
        opts.preparer(xp, frame_shape)((f * 100 + 1000).astype(dtype))
    elif stage == "prefilter":
        from .rigid import prefilter_for
        from .rigid import window

        fn = prefilter_for(opts.prefilter, opts.normalization, opts.features)
        g = f if fn is None else fn(f).astype(xp.float32, copy=False)
        win = window(opts.window, frame_shape, xp)
        if win is not None:
            g = g * win
    elif stage == "apply":
        from .warp import shift_frames

        shift_frames(f, xp.asarray([[0.25, -1.5], [2.0, 0.5]]), fill=0.0, method="bilinear")
    elif stage == "measure":
        plan = None if plan in (None, "None") else Plan.parse(plan)
        Measurer.of(opts, xp, frame_shape, plan)(f if opts.previous else f[0], f)
    elif stage == "refine":
        ho, wo = min(h, 9), min(w, 9)
        corr = rs.random_sample((FRAMES, ho, wo)).astype(xp.float32)
        iy = xp.full(FRAMES, ho // 2, xp.int64)
        refined_shifts(corr, iy, iy * 0 + wo // 2, (ho // 2, wo // 2),
                       "none" if opts.subpixel == "upsample" else opts.subpixel)
    elif stage == "verify" and opts.verify:
        kw = fft_reference(opts.normalization)[0]
        spectrum = xp.fft.fft2(f[0])
        if kw["periodic"]:
            spectrum = periodic_spectrum(f[0], spectrum)
        fft_shifts(spectrum, f, upsample_factor=FFT_REFERENCE_UPSAMPLE, **kw,
                   reference_is_fft=True, return_integer=True)
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def _child(payload: str) -> None:
    """A helper process: build one stage, then leave its marker."""
    import cupy

    from ._options import AlignOptions

    args = json.loads(payload)
    opts = AlignOptions(**args["opts"])
    with cupy.cuda.Device(args["device"]):
        run_stage(opts, args["stage"], tuple(args["shape"]), args["dtype"], args["plan"], cupy)
    marker = _marker(args["key"])
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps(args))
    _marker(args["key"] + ".log").unlink(missing_ok=True)  # its errors, kept only on failure


def _payload(opts, stage, frame_shape, dtype, plan, device) -> dict:
    fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(opts).items()}
    if not isinstance(fields.get("reference"), (str, int)) or fields["reference"] is None:
        fields["reference"] = "previous" if opts.previous else "first"
    return {"opts": fields, "stage": stage, "shape": list(frame_shape),
            "dtype": str(np.dtype(dtype)), "plan": None if plan is None else str(plan),
            "device": int(device), "key": stage_key(opts, stage, frame_shape, dtype, plan)}


_RUNNING: list = []
_GRACES: list = []  # each prebuild's exit grace; the process waits for the longest


def _finish_at_exit():
    stop(_RUNNING, grace=max(_GRACES, default=0.0))


def prebuild(opts, frame_shape, dtype, plan=None, *, stages=RUN_STAGES, device=0,
             wait=False, exit_grace=EXIT_GRACE) -> list:
    """Start a helper process per stage of ``stages`` whose kernels were not built yet for
    these settings; returns the processes (``wait``: waits for them, returning their exit
    codes).  Nothing is started where the markers say the stages were built, or without a GPU.
    At exit the process waits at most ``exit_grace`` seconds for them, then stops them.
    """
    todo = [s for s in stages if s != "verify" or opts.verify]
    procs = []
    for stage in todo:
        payload = _payload(opts, stage, frame_shape, dtype, plan, device)
        if _marker(payload["key"]).exists():
            continue
        code = ("import sys; from xcorr_app.alignment._prebuild import _child; "
                "_child(sys.argv[1])")
        log = _marker(payload["key"] + ".log")  # a helper's traceback, if it fails
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            err = open(log, "wb")
        except OSError:
            err = subprocess.DEVNULL
        try:
            procs.append(subprocess.Popen([sys.executable, "-c", code, json.dumps(payload)],
                                          stdout=subprocess.DEVNULL, stderr=err,
                                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                              p for p in sys.path if p)}))
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
