"""GPU launcher of :func:`~xcorr_app.filters._api.taps_along` (``kernels/filters/axis_taps.cu``):
a correlation along one axis of a float CuPy array in one pass, with the numbers of the
slices' multiplies and adds (each tap a product then a sum, in order, no fused multiply-add).

The slices' way takes two elementwise operations a tap, each a pass over the array: the 3-D
Gauss-Newton steps' gaussian and Keys' shift made 54 passes over each volume.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> axis_taps(cp.arange(6.0), [0.5, 0.5], 0, 1, 3).tolist()  # doctest: +SKIP
[1.5, 2.5, 3.5]
"""

from __future__ import annotations

import numpy as np

from .._cuda import KernelFamily, stride_blocks

__all__ = ["axis_taps", "AXIS_TYPES"]

#: array types the kernel takes (others keep the slices' way)
AXIS_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
THREADS = 256
AXIS_TAPS = KernelFamily("axis_taps.cu", "axis_taps", [(t,) for t in ("float", "double")])


def axis_taps(array, taps, axis, start, length):
    """``sum_k taps[k] * array[start + k : start + k + length]`` along ``axis`` of a CuPy array
    of :data:`AXIS_TYPES`, in its type (:func:`~xcorr_app.filters._api.taps_along`'s
    numbers)."""
    import cupy as cp

    array = cp.ascontiguousarray(array)
    shape = array.shape
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    out_shape = shape[:axis] + (int(length),) + shape[axis + 1:]
    out = cp.empty(out_shape, array.dtype)
    weights = cp.asarray(np.asarray(taps, np.float64).astype(array.dtype))
    if out.size:
        AXIS_TAPS.get(AXIS_TYPES[np.dtype(array.dtype)])(
            (stride_blocks(out.size, THREADS),), (THREADS,),
            (array, out, np.int64(outer), np.int32(shape[axis]), np.int32(length),
             np.int64(inner), np.int32(start), weights, np.int32(len(weights))))
    return out
