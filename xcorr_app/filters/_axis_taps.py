"""GPU launcher of :func:`~xcorr_app.filters._api.taps_along` (``kernels/filters/axis_taps.cu``):
a correlation along one axis of a float CuPy array in one pass, with the numbers of the
slices' multiplies and adds (each tap a product then a sum, in order, no fused multiply-add;
bit for bit on normal numbers: subnormals are flushed to zero or kept as the kernel was built).

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

__all__ = ["axis_taps", "kernel_takes", "AXIS_TYPES"]

#: array types the kernel takes (others keep the slices' way)
AXIS_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
THREADS = 256
AXIS_TAPS = KernelFamily("axis_taps.cu", "axis_taps", [(t,) for t in ("float", "double")])


def kernel_takes(array, taps, axis, start, length) -> bool:
    """Whether :func:`axis_taps` computes this correlation: an array of :data:`AXIS_TYPES`,
    an axis it has, taps, and every slice inside the axis (others keep the slices' way, which
    answers or refuses them as NumPy's slicing does)."""
    if np.dtype(array.dtype) not in AXIS_TYPES or not -array.ndim <= axis < array.ndim:
        return False
    n = array.shape[axis]
    return len(taps) >= 1 and length >= 0 and 0 <= start and start + len(taps) - 1 + length <= n


def axis_taps(array, taps, axis, start, length):
    """``sum_k taps[k] * array[start + k : start + k + length]`` along ``axis`` (>= 0) of a CuPy
    array, in its type (:func:`~xcorr_app.filters._api.taps_along`'s numbers), where
    :func:`kernel_takes` it."""
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
