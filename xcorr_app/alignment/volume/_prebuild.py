"""The 3-D path's later kernels built in helper processes on a machine that never ran it
(:mod:`xcorr_app._cuda.helpers`: why, and how a helper runs).

A first GPU :func:`~._api.align_volumes` compiled CuPy kernels one after the other, most of a
cold one-shot `xcorr align --volumes`.  The run builds its first stage itself (the upload, the
spectra and their product); helpers build the later ones meanwhile, each on a tiny stack (the
kernels are the same for any size): ``peak`` (the bounded integer peak and its runner-up),
``refine`` (the subvoxel samples and the direct check of the FFT's peak), ``apply`` (the
aligned volumes' warp, where they are written).

Examples
--------
>>> volume_key("refine", None, 20.0)[:13]
'volume-refine'
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ..._cuda import start_helpers
from ..._version import __version__
from ...backend import gpu_available

__all__ = ["VOLUME_STAGES", "volume_key", "run_volume_stage", "prebuild_volumes"]

#: the later stages of a 3-D run a helper builds
VOLUME_STAGES = ("peak", "refine", "apply")
#: the tiny stack a helper runs a stage on: (volumes, Z, Y, X)
SHAPE = (2, 6, 10, 12)


def volume_key(stage, bounds, upsample) -> str:
    """The marker name of a 3-D stage built for these settings (the bounded peak's kernels
    depend on which axes are bounded)."""
    what = {"v": __version__, "stage": stage, "upsample": float(upsample),
            "bounded": None if bounds is None else [b is not None for b in bounds]}
    digest = hashlib.sha1(json.dumps(what, sort_keys=True).encode()).hexdigest()
    return f"volume-{stage}-{digest[:16]}"


def run_volume_stage(args, xp=None) -> None:
    """A helper's work (:func:`xcorr_app._cuda.helpers.child`): one 3-D stage on a tiny stack
    of random volumes, on the current GPU (or on ``xp``'s device)."""
    from ._dft3 import bounded_peak, correlate, cross_spectra, refine3d, samples3d, spectrum
    from ._shift import shift_volumes

    if xp is None:
        import cupy as xp
    vols = xp.asarray(np.random.default_rng(0).standard_normal(SHAPE), xp.float32)
    shape = SHAPE[1:]
    stage = args["stage"]
    if stage == "apply":
        shift_volumes(vols, np.array([[0.5, -1.25, 2.0], [0.0, 0.0, 0.0]]),
                      device="cpu" if xp is np else "gpu")
        return
    ref = spectrum(vols[:1], xp)[0]
    product = cross_spectra(ref, vols)  # (the run builds these first itself)
    bounds = args["bounds"]
    bounds = None if bounds is None else tuple(1 if b is not None else None for b in bounds)
    if stage == "peak":
        bounded_peak(correlate(product, shape, normalized=False), bounds)  # (as the run)
    elif stage == "refine":
        coarse = np.zeros((SHAPE[0], 3))
        samples3d(product, shape, coarse, 1.0, 1, nyquist=True)
        refine3d(product, coarse, shape, args["upsample"])


def prebuild_volumes(bounds, upsample, *, aligned=False, device=0) -> list:
    """Start the helpers of a 3-D run's later stages whose markers are absent (``aligned``:
    also the warp of the aligned volumes); returns the processes (none without a usable
    GPU).  Where xcorr's kernels ship built for the GPU, the subvoxel samples and an unbounded
    peak launch only those (nothing for a helper to build: each helper is a process and a
    CUDA context, a cost of its own beside a cold one-shot run)."""
    if not gpu_available():
        return []
    from ..._cuda import shipped_here

    shipped = shipped_here()
    stages = [s for s in VOLUME_STAGES if (s != "apply" or aligned)
              and not (shipped and (s == "refine" or (s == "peak" and bounds is None)))]
    bounds = None if bounds is None else [None if b is None else int(b) for b in bounds]
    runner = f"{__name__}:run_volume_stage"
    return start_helpers([(runner, {"stage": s, "bounds": bounds, "upsample": float(upsample),
                                    "device": int(device),
                                    "key": volume_key(s, bounds, upsample)})
                          for s in stages])
