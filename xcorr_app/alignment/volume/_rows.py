"""Reductions along the last axis for the 3-D path: each item's sum (:func:`item_sums`) and
each row's first maximum (:func:`row_first_max`), NumPy or CuPy.

On the GPU they run xcorr's own kernels (``kernels/alignment/row_reduce.cu``, a warp a row),
shipped built: CuPy's reductions along an axis compile at first use (CUB's block reduction,
seconds each: most of a cold ``xcorr align --volumes``), and one sum per item over all its
elements would run on a handful of blocks.

Examples
--------
>>> import numpy as np
>>> item_sums(np.arange(24, dtype=np.float32).reshape(2, 3, 4)).tolist()
[66.0, 210.0]
>>> col, value = row_first_max(np.array([[1.0, 3.0, 3.0], [np.nan, 2.0, np.nan]], np.float32))
>>> col.tolist(), value.tolist()
([1, 0], [3.0, nan])
"""

from __future__ import annotations

import numpy as np

from ..._cuda import KernelFamily
from ...backend import array_module_of

__all__ = ["item_sums", "knock_out", "row_first_max", "total64"]

#: threads a block of the row kernels (a warp a row)
ROW_THREADS = 256
ROW_SUMS = KernelFamily("row_reduce.cu", "row_sums",
                        [(t, sq, ROW_THREADS) for t in ("float", "double") for sq in (False, True)])
ROW_FIRST_MAX = KernelFamily("row_reduce.cu", "row_first_max", [("float", ROW_THREADS)])
KNOCK_OUT = KernelFamily("row_reduce.cu", "knock_out", [(ROW_THREADS,)])
_C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def item_sums(a, squares=False):
    """float64 sums (N,) of each item of ``a`` (N, ..., X) over its other axes (``squares``:
    of their squares, in ``a``'s type as ``square`` gives them): row by row, then over the
    rows' sums (many rows reduce in parallel on a GPU)."""
    n = a.shape[0]
    rows = a.reshape(-1, a.shape[-1])
    xp = array_module_of(a)
    if xp is np or np.dtype(a.dtype) not in _C_TYPES:
        rows = xp.square(rows) if squares else rows
        return rows.sum(axis=1, dtype=np.float64).reshape(n, -1).sum(axis=1)
    return _row_sums(_row_sums(rows, squares).reshape(n, -1))


def total64(a, squares=False):
    """The float64 sum of all of ``a``'s items (``squares``: of their squares, in ``a``'s type),
    NumPy's ``a.sum(dtype=float64)`` on the host; on the GPU by :func:`item_sums` (CuPy's is a
    CUB reduction that NVRTC compiles at first use, seconds of a cold run).

    >>> float(total64(np.arange(4.0), squares=True))
    14.0
    """
    xp = array_module_of(a)
    if xp is np:
        return (a * a if squares else a).sum(dtype=np.float64)
    return item_sums(xp.ascontiguousarray(a)[None], squares)[0]


def row_first_max(rows):
    """``(column, value)`` of each row's first maximum of ``rows`` (R, C), as ``argmax`` along
    the last axis finds it (NaN above every number): int (R,) and the rows' type (R,)."""
    xp = array_module_of(rows)
    if xp is np or np.dtype(rows.dtype) != np.float32:
        col = rows.argmax(axis=1)
        return col, xp.take_along_axis(rows, col[:, None], axis=1)[:, 0]
    rows = xp.ascontiguousarray(rows)
    r, c = rows.shape
    column, value = xp.empty(r, xp.int32), xp.empty(r, xp.float32)
    kernel = ROW_FIRST_MAX.get("float", ROW_THREADS)
    kernel((_blocks(r),), (ROW_THREADS,), (rows, np.int64(r), np.int32(c), column, value))
    return column, value


def knock_out(win, at, exclusion, whole, value=-np.inf):
    """In place, in each volume ``b`` of ``win`` (B, Z, Y, X) float32 CuPy (C-contiguous),
    every voxel within ``exclusion`` of ``at[b]`` (B, 3) integers along each axis set to
    ``value``: around the circle along the axes of ``whole`` (3 bools), inside the volume along
    the others (one kernel: CuPy's fancy indexing compiles four at first use)."""
    import cupy as cp

    b, z, y, x = win.shape
    side = 2 * int(exclusion) + 1
    wraps = sum(4 >> a for a in range(3) if whole[a])
    at = np.ascontiguousarray(at, np.int64).reshape(b, 3)
    for a in range(0, b, 65535):  # (the grid's y extent)
        n = min(b, a + 65535) - a
        KNOCK_OUT.get(ROW_THREADS)(
            (-(-side ** 3 // ROW_THREADS), n), (ROW_THREADS,),
            (win[a:a + n], np.int32(z), np.int32(y), np.int32(x), cp.asarray(at[a:a + n]),
             np.int32(exclusion), np.int32(wraps), np.float32(value)))
    return win


def _row_sums(rows, squares=False):
    xp = array_module_of(rows)
    rows = xp.ascontiguousarray(rows)
    r, c = rows.shape
    sums = xp.empty(r, xp.float64)
    kernel = ROW_SUMS.get(_C_TYPES[np.dtype(rows.dtype)], bool(squares), ROW_THREADS)
    kernel((_blocks(r),), (ROW_THREADS,), (rows, np.int64(r), np.int32(c), sums))
    return sums


def _blocks(rows) -> int:
    return max(1, -(-rows // (ROW_THREADS // 32)))
