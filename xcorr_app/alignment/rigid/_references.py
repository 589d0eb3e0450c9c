"""The reference image of an alignment: ``first``, ``mean[:N]``, a frame index, a file, an array.

``previous`` (frame to frame) has no single reference; :func:`xcorr_app.align` handles it.
``refined[:ITER]`` starts from the first frame and refines a template from the aligned frames
(:mod:`xcorr_app.alignment.refine._template`); here it names the initial reference only.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.io import ArraySource
>>> src = ArraySource(np.arange(4.0)[:, None, None] * np.ones((4, 2, 3)))
>>> float(reference_frame("mean:2", src, np, 2)[0, 0]), float(reference_frame(-1, src, np, 2)[0, 0])
(0.5, 3.0)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import InputError

CHOICES = "refined, refined:ITER, first, mean, mean:N, previous, a frame index or an image file"
#: template refinement passes of ``reference="refined"`` (``refined:ITER`` takes 1 or 2)
REFINED_PASSES = 1
MAX_REFINED_PASSES = 2


def is_previous(reference) -> bool:
    return isinstance(reference, str) and reference == "previous"


def refined_passes(reference):
    """How many template passes ``reference`` asks for (``refined``: :data:`REFINED_PASSES`,
    ``refined:ITER``: ITER, 1 or 2), or ``None`` when it is not ``refined``; a bad ITER is an
    :class:`InputError`.

    >>> refined_passes("refined:2"), refined_passes("first")
    (2, None)
    """
    if not (isinstance(reference, str) and reference.partition(":")[0] == "refined"):
        return None
    if reference == "refined":
        return REFINED_PASSES
    arg = reference.partition(":")[2]
    if not arg.isdigit() or not 1 <= int(arg) <= MAX_REFINED_PASSES:
        raise InputError(f"reference {reference!r}: refined:ITER takes 1 to "
                         f"{MAX_REFINED_PASSES} template passes")
    return int(arg)


def mean_frame(src, xp, chunk_frames, n_frames=None):
    """The mean of the first ``n_frames`` frames (all by default) that are finite, in one
    streaming pass (:func:`finite_sums`, :func:`mean_of`)."""
    n = src.n_frames if n_frames is None else min(int(n_frames), src.n_frames)
    return mean_of([finite_sums(src, xp, 0, n, chunk_frames)], xp)


def finite_sums(src, xp, start, stop, chunk):
    """``(sum, count)`` of frames ``start:stop`` with no NaN or Inf pixel: their float64 sum
    on ``xp``'s device, a chunk at a time, and how many (a frame of the mean with a NaN pixel
    is left out of it, as a run leaves that frame unmeasured, not the whole reference NaN)."""
    acc, kept = xp.zeros(src.frame_shape, xp.float64), 0
    for a in range(start, stop, chunk):
        f = xp.asarray(src.read(a, min(a + chunk, stop))).astype(xp.float64)
        finite = xp.isfinite(f).all(axis=(1, 2)) if f.dtype.kind == "f" else None
        if finite is not None and not bool(finite.all()):
            f = f[finite]
        acc += f.sum(axis=0)
        kept += len(f)
    return acc, kept


def mean_of(parts, xp):
    """The mean image of the ranges' :func:`finite_sums` in frame order (on ``xp``'s device;
    each part's sum NumPy or on it); an :class:`InputError` where no frame was finite."""
    acc, kept = xp.asarray(parts[0][0]), parts[0][1]
    for s, k in parts[1:]:  # in frame order
        acc, kept = acc + xp.asarray(s), kept + k
    if not kept:
        raise InputError("every frame of the mean reference has NaN or Inf pixels; give "
                         "reference='first' (or a frame index) with mask='nan', or replace "
                         "them first")
    return xp.divide(acc, kept)  # (not ``/``: see filters.gradient)


def mean_count(reference, n_frames):
    """How many leading frames ``reference`` averages (``mean``: all, ``mean:N``: N), or
    ``None`` when it is not a mean."""
    if not (isinstance(reference, str) and reference.partition(":")[0] == "mean"):
        return None
    arg = reference.partition(":")[2]
    if reference == "mean":
        return n_frames
    if not arg.isdigit() or int(arg) < 1:
        raise InputError(f"reference {reference!r}: mean:N takes a number of frames >= 1")
    return min(int(arg), n_frames)


def reference_index(reference):
    """The frame index a reference spec names (an int or a string of digits), else ``None``."""
    if isinstance(reference, (int, np.integer)):
        return int(reference)
    if isinstance(reference, str) and reference.lstrip("-").isdigit():
        return int(reference)
    return None


def own_frame(reference, n):
    """The frame of a stack of ``n`` that is the reference itself (``first``, a frame index),
    else None (a template, an image, ``previous``).

    >>> own_frame("first", 5), own_frame(-1, 5), own_frame("mean", 5)
    (0, 4, None)
    """
    if isinstance(reference, str) and reference == "first":
        return 0 if n else None
    index = reference_index(reference)
    return index % n if index is not None and n else None


def check_reference(reference, n_frames):
    """InputError where ``reference`` names a frame a stack of ``n_frames`` does not hold
    (checked as the stack opens: before a thread starts or a frame is read)."""
    idx = reference_index(reference)
    if idx is not None and not -n_frames <= idx < n_frames:
        raise InputError(f"reference index {idx} is out of range for {n_frames} frames")


def reference_frame(reference, src, xp, chunk_frames, channel=None):
    """The reference image (on ``xp``'s device) for every choice but ``previous`` (an index
    checked as the run opens the stack: :func:`check_reference`)."""
    idx = reference_index(reference)
    if idx is not None:
        idx %= src.n_frames
        return xp.asarray(src.read(idx, idx + 1)[0])
    if isinstance(reference, str) and (reference == "first" or refined_passes(reference)):
        return xp.asarray(src.read(0, 1)[0])
    count = mean_count(reference, src.n_frames)
    if count is not None:
        return mean_frame(src, xp, chunk_frames, count)
    if isinstance(reference, (str, Path)):
        if not Path(reference).exists():
            raise InputError(f"unknown reference {reference!r} (no such file): use {CHOICES}")
        from ...io import read_image

        img = read_image(reference, channel=channel)
        if tuple(img.shape) != tuple(src.frame_shape):
            raise InputError(f"reference image {reference} is {img.shape[0]}x{img.shape[1]} but the "
                             f"frames are {src.frame_shape[0]}x{src.frame_shape[1]}")
        return xp.asarray(img)
    ref = xp.asarray(reference)  # an array
    if tuple(ref.shape) != tuple(src.frame_shape):
        raise InputError(f"reference of shape {ref.shape} does not match frames {src.frame_shape}")
    return ref
