"""Kernels built before they are needed: the 2-D pipeline's later stages compiled in helper
processes (:mod:`xcorr_app._cuda.helpers`: why, and how a helper runs).

At the start of a GPU run whose kernels were never built (no marker in the cache folder),
:func:`prebuild` starts one helper per later stage of the run -- the prefilter, the correlation
and its surfaces, the subpixel refinement, the FFT reference check, the warp of the aligned
stack, the quality report -- each running its stage once on two small frames of the run's
pixel type (:func:`run_stage`); where xcorr's kernels ship built for the GPU, none
(:func:`helper_stages`).  ``xcorr info --compile`` builds the kernels of the usual runs ahead,
in the same way.

Examples
--------
>>> from xcorr_app.alignment._options import AlignOptions
>>> stage_key(AlignOptions(), "refine", (64, 80), "uint16", None)[:6]
'refine'
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from .._cuda import HELPER_EXIT_GRACE as EXIT_GRACE, built_marker as marker, start_helpers
from .._version import __version__

#: the stages a helper process can build: ``prepare`` whole (``xcorr info --compile``), or its
#: prefilter and window alone (a run prepares its reference first itself: the helper builds the
#: filter's kernels meanwhile), ``apply`` the warp of the aligned stack (default resampling),
#: ``quality`` a rigid run's quality report
PREBUILD_STAGES = ("prepare", "prefilter", "measure", "refine", "verify", "apply", "quality")
#: the stages a run starts helpers for
RUN_STAGES = ("prefilter", "measure", "refine", "verify", "apply", "quality")
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


def wanted(opts, stages) -> list:
    """Those of ``stages`` this run goes through and a helper can build (the FFT check and the
    quality report are optional; the helper's report is a rigid run's, so a piecewise run's
    builds in the run)."""
    return [s for s in stages if (s != "verify" or opts.verify)
            and (s != "quality" or (opts.quality and opts.patches is None))]


def helper_stages(shipped: bool) -> tuple:
    """The stages a run starts helpers for: none where xcorr's kernels ship built for the GPU
    (``shipped``).  There the FFT check's, the warp's and the report's stages, the last left,
    compiled only the helpers' own test data with the default, phase and upsample options
    (the options' other compilations are the measuring pass's, in the run), and a run shorter
    than a helper's start stopped them at its exit, markerless, so that every such run
    started them again: the cell sample's first GPU runs were slower with them than
    without."""
    return () if shipped else RUN_STAGES


def kernels_built(opts, frame_shape, dtype, stages=RUN_STAGES) -> bool:
    """Whether helper processes built this run's kernels on this machine (the markers of its
    ``stages``; ``measure``, whose marker needs the plan, is left out)."""
    return all(marker(stage_key(opts, s, frame_shape, dtype, None)).exists()
               for s in wanted(opts, stages) if s != "measure")


def run_stage(opts, stage, frame_shape, dtype, plan, xp):
    """Run one stage on :data:`FRAMES` frames of random data (its kernels compile on first use)."""
    from ..correlate import Plan
    from ..registration import fft_shifts, periodic_spectrum, refined_shifts
    from .rigid import FFT_REFERENCE_UPSAMPLE, fft_reference
    from .rigid import Measurer

    h, w = frame_shape
    # Drawn on the host: cuRAND's start costs a helper time and failed under a loaded GPU.
    rs = np.random.default_rng(0)
    f = xp.asarray(rs.standard_normal((FRAMES, h, w), dtype=np.float32))
    if stage == "prepare":
        opts.preparer(xp, frame_shape)((f * 100 + 1000).astype(dtype))
    elif stage == "prefilter":
        from .rigid import window

        fn = opts.prefilter_function()
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
        corr = xp.asarray(rs.random((FRAMES, ho, wo), dtype=np.float32))
        iy = xp.full(FRAMES, ho // 2, xp.int64)
        refined_shifts(corr, iy, iy * 0 + wo // 2, (ho // 2, wo // 2),
                       "none" if opts.subpixel == "upsample" else opts.subpixel)
    elif stage == "quality" and opts.quality:
        _run_quality(opts, (f * 100 + 1000).astype(dtype), xp)
    elif stage == "verify" and opts.verify:
        kw = fft_reference(opts.normalization)[0]
        spectrum = xp.fft.fft2(f[0])
        if kw["periodic"]:
            spectrum = periodic_spectrum(f[0], spectrum)
        fft_shifts(spectrum, f, upsample_factor=FFT_REFERENCE_UPSAMPLE, **kw,
                   reference_is_fft=True, return_integer=True)
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def _run_quality(opts, frames, xp):
    """The quality report of a run of ``frames`` (NumPy, read as a file's are) on ``xp``'s
    device, with subpixel shifts."""
    from ._quality import quality_of_frames

    shifts = np.zeros((len(frames), 2))
    shifts[1:] = (0.25, -0.5)
    quality_of_frames(opts, frames, shifts, xp)


def run_payload(args) -> None:
    """A helper's work (:func:`xcorr_app._cuda.helpers.child`): one stage of the payload."""
    import cupy

    from ._options import AlignOptions

    run_stage(AlignOptions(**args["opts"]), args["stage"], tuple(args["shape"]), args["dtype"],
              args["plan"], cupy)


def _payload(opts, stage, frame_shape, dtype, plan, device) -> dict:
    fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(opts).items()
              if not k.startswith("_")}
    fields["mask"] = None  # (an image; the stages' kernels are those of an unmasked run)
    if not isinstance(fields.get("reference"), (str, int)) or fields["reference"] is None:
        fields["reference"] = "previous" if opts.previous else "first"
    return {"opts": fields, "stage": stage, "shape": list(frame_shape),
            "dtype": str(np.dtype(dtype)), "plan": None if plan is None else str(plan),
            "device": int(device), "key": stage_key(opts, stage, frame_shape, dtype, plan)}


def prebuild(opts, frame_shape, dtype, plan=None, *, stages=RUN_STAGES, device=0,
             wait=False, exit_grace=EXIT_GRACE) -> list:
    """Start a helper process per stage of ``stages`` whose kernels were not built yet for
    these settings; returns the processes (``wait``: waits for them, returning their exit
    codes).  Nothing is started where the markers say the stages were built, or without a GPU.
    At exit the process waits at most ``exit_grace`` seconds for them, then stops them.
    """
    todo = wanted(opts, stages)
    runner = f"{__name__}:run_payload"
    return start_helpers([(runner, _payload(opts, s, frame_shape, dtype, plan, device))
                          for s in todo], wait=wait, exit_grace=exit_grace)
