"""The patch pass's rule for untrusted patches (:mod:`xcorr_app.alignment.piecewise._patches`): which
patches are low (:func:`low_patches`) and the median of their good neighbours in their place
(:func:`fill_low`), on either device; on the GPU also in one kernel of ours per call
(:func:`fill_low_gpu`, ``kernels/alignment/patch_field.cu``) that decides, fills and writes the
pass's rows without the host: the patch pass then queues a chunk's work without waiting for it (the
host rule cost the pass two waits a chunk).

Examples
--------
>>> d = np.zeros((1, 4, 2)); d[0, :, 0] = [1.0, 2.0, 3.0, 50.0]
>>> low = low_patches(d, np.ones((1, 4)), np.array([[2.0, 2.0, 2.0, 0.5]]),
...                   np.zeros((1, 4), bool))
>>> low.tolist(), fill_low(d, low, (2, 2))[0, 3].tolist()
([[False, False, False, True]], [2.0, 0.0])
"""

from __future__ import annotations

import numpy as np

from ... import backend
from ..._cuda import KernelFamily

FILL = KernelFamily("patch_field.cu", "fill_low_patches",
                    [(scores, rows) for scores in (True, False) for rows in (False, True)])
#: the largest grid the kernel takes (one thread per patch of a frame's block)
FILL_MAX_PATCHES = 1024


def low_patches(deviation, peak, confidence, border, min_confidence=None):
    """Which patches ``(N, P)`` are not trusted (:mod:`._patches`' rule): the peak on the
    border of the search, a deviation or peak not finite, a confidence at most 1 (no distinct
    peak) or below ``min_confidence``."""
    xp = backend.array_module_of(deviation)
    low = border | ~xp.isfinite(deviation).all(axis=-1) | ~xp.isfinite(peak)
    low |= ~(confidence > 1.0)
    if min_confidence is not None:
        low |= confidence < min_confidence
    return low


def fill_low(deviation, low, grid_shape):
    """Replace the deviations of ``low`` patches (``(N, P)``) by the median of their good
    neighbours in the grid (8-connected), outwards until all are filled; frames without a good
    patch get 0 (their rigid shift).

    >>> d = np.zeros((1, 9, 2)); d[0, :, 0] = np.arange(9); low = np.zeros((1, 9), bool)
    >>> low[0, 4] = True; d[0, 4] = 99
    >>> fill_low(d, low, (3, 3))[0, 4].tolist()
    [4.0, 0.0]
    """
    xp = backend.array_module_of(deviation)
    gy, gx = grid_shape
    n = len(deviation)
    out = xp.array(deviation, xp.float64).reshape(n, gy, gx, 2)
    bad = xp.array(low, bool).reshape(n, gy, gx)
    out = xp.where(bad[..., None], xp.nan, out)
    for _ in range(gy + gx):
        if not bool(bad.any()):  # (on the GPU a host sync: called for chunks with low patches)
            break
        pad = xp.pad(out, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=xp.nan)
        around = xp.stack([pad[:, 1 + a:1 + a + gy, 1 + b:1 + b + gx]
                           for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)])
        count = (~xp.isnan(around)).sum(axis=0)  # good neighbours, (N, gy, gx, 2)
        take = bad & (count[..., 0] > 0)
        if not bool(take.any()):
            break
        # the median of the good ones (nanmedian, on either device): NaN sorts last
        ranked = xp.sort(around, axis=0)
        lo = xp.take_along_axis(ranked, xp.maximum(count - 1, 0)[None] // 2, axis=0)[0]
        hi = xp.take_along_axis(ranked, (count // 2)[None], axis=0)[0]
        out = xp.where(take[..., None], (lo + hi) * 0.5, out)
        bad = bad & ~take
    out = xp.where(bad[..., None], 0.0, out)
    return out.reshape(np.shape(deviation))


def fill_low_gpu(deviation, grid_shape, low, scores=None, min_confidence=None, decide=False,
                 rows=False, base=None):
    """:func:`fill_low` of ``deviation`` ``(N, P, 2)`` (float64 C-contiguous CuPy) in one
    launch, into a new array, the low patches read from ``low`` ``(N, P)`` bool; with
    ``decide`` they are decided first from ``scores`` ``(peak, confidence, border)``, each laid
    out ``(P, N)`` (float64, float64, bool; C-contiguous) as :func:`low_patches` decides, and
    written into ``low``.  ``rows``: also the pass's rows ``(N, P, 5)`` float64 (the filled
    deviation, peak, confidence or 0 on the border, low; from ``scores``), into a new array
    or, given one (C-contiguous float64 CuPy of that shape), into it; with ``base`` ``(N, 2)``
    (C-contiguous float64 CuPy: the frames' rigid shifts) the rows' first two columns are the
    filled deviation plus the frame's base (the field, as :mod:`._patch_rows` keeps it).
    Returns ``(filled, rows or None)``.  Other layouts or grids of more than
    :data:`FILL_MAX_PATCHES` patches: InputError (:func:`fill_low_fits` says which fit)."""
    import cupy as cp

    from ...errors import InputError

    given = rows is not True and rows is not False  # (an array to write the rows into)
    if not fill_low_fits(deviation, grid_shape, low, scores) \
            or ((decide or given or rows) and scores is None):
        raise InputError(f"fill_low_gpu takes float64 C-contiguous deviations (N, P, 2) of at "
                         f"most {FILL_MAX_PATCHES} patches, a bool low (N, P) and scores laid "
                         f"out (P, N); got {deviation.shape} {deviation.dtype}")
    n, p = deviation.shape[:2]
    gy, gx = grid_shape
    out = cp.empty_like(deviation)
    if given and not (isinstance(rows, cp.ndarray) and rows.shape == (n, p, 5)
                      and rows.dtype == cp.float64 and rows.flags.c_contiguous):
        raise InputError(f"rows to write into must be C-contiguous float64 CuPy of shape "
                         f"{(n, p, 5)}, got {getattr(rows, 'shape', type(rows).__name__)}")
    table = rows if given else cp.empty((n, p, 5), cp.float64) if rows else out
    rows = bool(given or rows)
    if base is not None and not (isinstance(base, cp.ndarray) and base.shape == (n, 2)
                                 and base.dtype == cp.float64 and base.flags.c_contiguous):
        raise InputError(f"base must be C-contiguous float64 CuPy of shape {(n, 2)}, got "
                         f"{getattr(base, 'shape', type(base).__name__)}")
    pk, cf, border = scores if scores is not None else (out, out, low)  # (not read)
    if n:
        FILL.get(bool(decide), bool(rows))(
            (n,), (max(32, -(-p // 32) * 32),),
            (deviation, out, low, pk, cf, border, table, out if base is None else base,
             np.int32(base is not None), np.int32(min_confidence is not None),
             np.float64(0.0 if min_confidence is None else min_confidence), np.int32(n),
             np.int32(gy), np.int32(gx)),
            shared_mem=p * (4 * 8 + 4))
    return out, (table if rows else None)


def fill_low_fits(deviation, grid_shape, low, scores=None) -> bool:
    """Whether :func:`fill_low_gpu` takes these arrays."""
    import cupy as cp

    n, p = deviation.shape[:2] if deviation.ndim == 3 else (0, -1)
    arrays = [(deviation, cp.float64, (n, p, 2)), (low, cp.bool_, (n, p))]
    if scores is not None:
        arrays += [(a, t, (p, n)) for a, t in zip(scores, (cp.float64, cp.float64, cp.bool_))]
    return 0 < p <= FILL_MAX_PATCHES and p == grid_shape[0] * grid_shape[1] and all(
        isinstance(a, cp.ndarray) and a.dtype == t and a.shape == s and a.flags.c_contiguous
        for a, t, s in arrays)
