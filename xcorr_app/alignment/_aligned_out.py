"""``align(out=)``: the aligned frames of a run, delivered by the run itself.

With ``patches`` the last patch pass warps every chunk by its field while the chunk is on the
device (:func:`~xcorr_app.alignment.piecewise._patch_pass.measure_range`); rigid runs, and runs on
several GPUs, apply the result once it is known (:func:`fill_out`: ``interpolate_low`` and
``lucas_kanade`` change shifts after the pass that measured them).  On the GPU a run that keeps
its stack on the device (:mod:`xcorr_app.streaming._stash`) reads it from there: the stack
crosses the bus once, and a callable is handed the chunk in pieces (:data:`PIECE_BYTES`), so
that it writes one while the next is copied; one with a true ``takes_device`` attribute (the
command line's writer thread) is handed the CuPy chunk itself and copies it while the run goes
on.  Either way the frames are those of
:meth:`AlignResult.apply` with its defaults (bilinear, fill 0, the whole frame), in the
callable's ``dtype`` where that is an integer type (:func:`chunk_type`: rounded on the
device).

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
from ..io import PIECE_BYTES  # (the pieces a callable is given from a stack kept on the GPU)


def chunk_type(out) -> np.dtype:
    """The type of the chunks a callable ``out`` is given: its ``dtype`` attribute where that is
    an integer type (the frames rounded to nearest and clipped, :func:`xcorr_app.io.as_dtype`),
    else float32 (:func:`~xcorr_app.alignment.warp.frames_type`; InputError for a type that is
    neither).

    >>> chunk_type(print), chunk_type(type("Sink", (), {"dtype": "uint16"})())
    (dtype('float32'), dtype('uint16'))
    """
    from .warp import frames_type

    return frames_type(getattr(out, "dtype", None))


def check_aligned_out(out, shape, device):
    """InputError unless ``out`` is None, a callable (:func:`chunk_type`), or a writeable
    C-contiguous float32 array of ``shape`` (NumPy, or CuPy where ``device`` is ``"gpu"``)."""
    if out is None:
        return
    if callable(out):
        chunk_type(out)
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


def check_apart(out, stack):
    """InputError where the array ``out`` may share memory with the array ``stack``: the run
    reads the frames again (later passes, the quality report) after it has written some, and
    the caller's input would be overwritten.

    >>> a = np.zeros((2, 4, 5), np.float32)
    >>> check_apart(np.zeros_like(a), a)
    >>> check_apart(a, a)
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: out is (or overlaps) the stack being aligned: the run reads the frames again after writing the aligned ones, and the input would be overwritten; give out an array of its own
    """
    if out is None or callable(out) or not hasattr(out, "shape") or not (
            isinstance(stack, np.ndarray) or backend.is_cupy_array(stack)):
        return  # (a lazy stack, h5py's or Dask's, is never out's memory: not read here)
    xp = backend.array_module_of(out)
    if xp is not backend.array_module_of(stack):
        return
    if xp.may_share_memory(out, stack):  # (bounds alone: an exact answer can take long)
        raise InputError("out is (or overlaps) the stack being aligned: the run reads the "
                         "frames again after writing the aligned ones, and the input would be "
                         "overwritten; give out an array of its own")


def fill_out(res, out, target, device, gpus=None, bidi=0.0):
    """``out`` (checked) filled with ``res.apply(target)``'s frames, chunk by chunk (from a
    CuPy ``target`` the shifts applied on the device: into a CuPy ``out``, or to a callable's
    type there and copied in pieces, or handed as they are where it ``takes_device``);
    ``bidi``: the line offset still to remove from ``target``'s frames (0: read corrected,
    or none)."""
    from .rigid import correct_bidi
    from .warp import shift_frames, shift_into

    warped = res.motion_field is not None or res.rotation_deg is not None  # (a field's warp)
    kwargs = {} if warped or gpus is None else {"gpus": gpus}
    if backend.is_cupy_array(target) and res.motion_field is None \
            and res.rotation_deg is None and not isinstance(out, np.ndarray):
        import cupy

        c = res.settings.get("chunk_frames") or 64
        dtype = chunk_type(out) if callable(out) else None
        for a in range(0, len(target), c):
            frames = correct_bidi(target[a:a + c], bidi) if bidi else target[a:a + c]
            if not callable(out):  # (in place: no copy of the chunk's result)
                shift_into(frames, cupy.asarray(res.shifts[a:a + c]), out[a:a + len(frames)])
                continue
            moved = shift_frames(frames, cupy.asarray(res.shifts[a:a + c]), dtype=dtype)
            if getattr(out, "takes_device", False):  # (it copies them to the host itself)
                cupy.cuda.get_current_stream().synchronize()
                out(a, moved)
                continue
            piece = max(1, PIECE_BYTES // (moved[0].nbytes or 1))
            for p in range(0, len(moved), piece):
                out(a + p, moved[p:p + piece].get())
        return
    into = out if isinstance(out, np.ndarray) else None
    dtype = chunk_type(out) if callable(out) else None
    if not warped:
        kwargs["bidi"] = bidi
    for start, chunk in res.apply(target, out=into, device=device, **kwargs):
        if callable(out):
            if dtype != np.float32:
                from ..io import as_dtype

                chunk = as_dtype(chunk, dtype)
            out(start, chunk)
        elif into is None:  # CuPy out
            out[start:start + len(chunk)] = backend.xp_for("gpu").asarray(chunk)
