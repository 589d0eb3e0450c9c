"""``align(out=)``: the aligned frames of a run, delivered by the run itself.

With ``patches`` the last patch pass warps every chunk by its field while the chunk is on the
device (:func:`~xcorr_app.alignment.piecewise._patch_pass.measure_range`); rigid runs, and runs on
several GPUs, apply the result once it is known (:func:`fill_out`: ``interpolate_low`` and
``lucas_kanade`` change shifts after the pass that measured them).  On the GPU a run that keeps
its stack on the device (:mod:`xcorr_app.streaming._stash`) reads it from there: the stack
crosses the bus once.  Either way the frames are those of :meth:`AlignResult.apply` with its
defaults (bilinear, fill 0, the whole frame).

Examples
--------
>>> import numpy as np
>>> check_aligned_out(np.zeros((2, 4, 5), np.float32), (2, 4, 5), "cpu")
>>> check_aligned_out(np.zeros((2, 4, 5)), (2, 4, 5), "cpu")
Traceback (most recent call last):
...
xcorr_app.errors.InputError: out must be a writeable C-contiguous float32 array of shape (2, 4, 5) (NumPy, or CuPy on a GPU run) or a callable(start, chunk), got float64 (2, 4, 5)
"""

from __future__ import annotations

import numpy as np

from .. import backend
from ..errors import InputError


def check_aligned_out(out, shape, device):
    """InputError unless ``out`` is None, a callable, or a writeable C-contiguous float32
    array of ``shape`` (NumPy, or CuPy where ``device`` is ``"gpu"``)."""
    if out is None or callable(out):
        return
    cupy_out = backend.is_cupy_array(out)
    ok = (isinstance(out, np.ndarray) or (cupy_out and device == "gpu")) \
        and out.dtype == np.float32 and tuple(out.shape) == tuple(shape) \
        and out.flags.c_contiguous and (cupy_out or out.flags.writeable)
    if not ok:
        got = f"{out.dtype} {tuple(out.shape)}" if hasattr(out, "dtype") else type(out).__name__
        if cupy_out and device != "gpu":
            got += " on a CPU run"
        raise InputError(f"out must be a writeable C-contiguous float32 array of shape "
                         f"{tuple(shape)} (NumPy, or CuPy on a GPU run) or a "
                         f"callable(start, chunk), got {got}")


def fill_out(res, out, target, device, gpus=None):
    """``out`` (checked) filled with ``res.apply(target)``'s frames, chunk by chunk (a CuPy
    ``out`` from a CuPy ``target``: the shifts applied on the device)."""
    from .warp import shift_frames

    kwargs = {} if res.motion_field is not None or gpus is None else {"gpus": gpus}
    if backend.is_cupy_array(out) and backend.is_cupy_array(target) \
            and res.motion_field is None:
        import cupy

        c = res.settings.get("chunk_frames") or 64
        for a in range(0, len(out), c):
            out[a:a + c] = shift_frames(target[a:a + c], cupy.asarray(res.shifts[a:a + c]))
        return
    into = out if isinstance(out, np.ndarray) else None
    for start, chunk in res.apply(target, out=into, device=device, **kwargs):
        if callable(out):
            out(start, chunk)
        elif into is None:  # CuPy out
            out[start:start + len(chunk)] = backend.xp_for("gpu").asarray(chunk)
