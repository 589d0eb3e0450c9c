"""Kernels compiled before they are needed: the GPU stages of a run warmed up side by side.

A first run on a fresh machine compiles every kernel it launches, one after the other, at
first use: about 130 NVRTC compilations (CuPy's elementwise and reduction kernels for each
operation and type, and xcorr's own), 27.6 of the 30.5 s of a cold ``xcorr align`` of the cell
sample on an H100 (``tools/cold_profile.sh``, 2026-11-22).  Compiling releases the GIL, so the
independent stages of a run -- preparing frames, the correlation and its surfaces, the
subpixel refinement, the FFT reference check -- compile at once in threads, each on two small
frames of the run's own type and shape, while the main thread prepares the reference.  Warm
(kernels cached in memory or on disk) each stage takes milliseconds.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.alignment._options import AlignOptions
>>> warm_up(AlignOptions(), (64, 64), np.uint16, np)  # nothing to compile on the CPU
[]
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

from ..registration._fft_register import fft_shifts, periodic_spectrum
from ..registration._peaks import refined_shifts
from ._options import FFT_REFERENCE_UPSAMPLE, fft_reference

#: frames each stage runs on (the kernels are the same for any count)
FRAMES = 2


def _stages(opts, frame_shape, dtype, xp, plan):
    """``{name: callable}``: each runs one stage on :data:`FRAMES` frames of random data."""
    from ._pipeline import Measurer

    h, w = frame_shape
    rs = xp.random.RandomState(0)

    def frames(real=True):
        f = rs.standard_normal((FRAMES, h, w), dtype=xp.float32)
        return f if real else (f * 100 + 1000).astype(dtype)

    def prepare():
        opts.preparer(xp, frame_shape)(frames(real=False))

    def measure():
        f = frames()
        ref = f[:FRAMES] if opts.previous else f[0]
        Measurer.of(opts, xp, frame_shape, plan)(ref, f)

    def refine():
        ho, wo = min(h, 9), min(w, 9)
        corr = rs.random_sample((FRAMES, ho, wo)).astype(xp.float32)
        iy = xp.full(FRAMES, ho // 2, xp.int64)
        refined_shifts(corr, iy, iy * 0 + wo // 2, (ho // 2, wo // 2), opts.subpixel
                       if opts.subpixel != "upsample" else "none")

    def verify():
        kw = fft_reference(opts.normalization)[0]
        f = frames()
        spectrum = xp.fft.fft2(f[0])
        if kw["periodic"]:
            spectrum = periodic_spectrum(f[0], spectrum)
        fft_shifts(spectrum, f, upsample_factor=FFT_REFERENCE_UPSAMPLE, **kw,
                   reference_is_fft=True, return_integer=True)

    stages = {"prepare": prepare, "measure": measure, "refine": refine}
    if opts.verify:
        stages["verify"] = verify
    return stages


def warm_up(opts, frame_shape, dtype, xp, plan=None, *, wait=True, skip=()):
    """Compile the kernels of a run of ``opts`` on frames of ``frame_shape`` and ``dtype``
    (stages in threads at once); GPU only (``xp`` CuPy), a no-op on the CPU.

    Parameters
    ----------
    opts : AlignOptions
    frame_shape : (int, int)
    dtype : dtype
        The input's pixel type.
    xp : module
    plan : Plan, optional
        The run's correlation plan (the planner's choice for the real problem), so that the
        kernel compiled is the one the run launches.
    wait : bool
        Wait for every stage (re-raising a failure); else return the futures.
    skip : sequence of str
        Stages not to run (``"prepare"``, ``"measure"``, ``"refine"``, ``"verify"``): those
        the caller runs itself meanwhile.

    Returns
    -------
    list
        The names of the stages run (``wait``) or their futures.
    """
    if xp is np:
        return []
    device = xp.cuda.Device()
    stages = {k: v for k, v in _stages(opts, tuple(frame_shape), np.dtype(dtype), xp,
                                        plan).items() if k not in skip}

    def run(fn):
        with device:
            fn()
            xp.cuda.get_current_stream().synchronize()

    pool = concurrent.futures.ThreadPoolExecutor(len(stages), "xcorr-warm")
    futures = {name: pool.submit(run, fn) for name, fn in stages.items()}
    pool.shutdown(wait=False)
    if not wait:
        return list(futures.values())
    for f in futures.values():
        f.result()
    return list(futures)
