"""``numpy.gradient`` on either device (:func:`gradient`), for the GPU paths that must not
hand a CuPy array to a NumPy ufunc.

Examples
--------
>>> import numpy as np
>>> gradient(np.array([1.0, 2.0, 4.0, 7.0])).tolist()
[1.0, 1.5, 2.5, 3.0]
"""

from __future__ import annotations

import functools

import numpy as np

from ..backend import array_module_of
from ..errors import InputError

__all__ = ["gradient"]


def gradient(array, axis=None):
    """``numpy.gradient(array, axis=axis)`` of unit spacing (central differences inside,
    one-sided at the edges), the same numbers, on the array's device: a tuple of arrays, one
    an axis, as NumPy's (one array where one axis is differentiated).

    Not ``cupy.gradient``: it divides a CuPy array by a Python number, which CuPy hands to
    NumPy's ufunc protocol, whose first use in a process imports cupyx and SciPy (a large
    share of a one-shot ``xcorr align``'s quality report).

    Parameters
    ----------
    array : ndarray (NumPy or CuPy)
        Floating point, at least 2 elements along every axis differentiated.
    axis : None, int or tuple of int

    Examples
    --------
    >>> import numpy as np
    >>> a = np.array([[1.0, 2.0, 4.0], [7.0, 11.0, 16.0]])
    >>> [g.tolist() for g in gradient(a)]
    [[[6.0, 9.0, 12.0], [6.0, 9.0, 12.0]], [[1.0, 1.5, 2.0], [4.0, 4.5, 5.0]]]
    >>> gradient(a, axis=1).tolist() == np.gradient(a, axis=1).tolist()
    True
    """
    xp = array_module_of(array)
    axes = tuple(range(array.ndim)) if axis is None else \
        (axis,) if np.ndim(axis) == 0 else tuple(axis)
    out = []
    if xp is not np:
        array = xp.ascontiguousarray(array)  # (the kernel's index arithmetic; once)
    for ax in axes:
        ax = int(ax) % array.ndim
        if array.shape[ax] < 2:
            raise InputError(f"gradient: axis {ax} has {array.shape[ax]} element(s); it needs "
                             "2 or more")

        if xp is not np:
            out.append(_gpu_axis(array, ax))
            continue

        def cut(part, ax=ax):
            return tuple(part if i == ax else slice(None) for i in range(array.ndim))
        g = xp.empty_like(array)
        inner = g[cut(slice(1, -1))]
        xp.subtract(array[cut(slice(2, None))], array[cut(slice(None, -2))], out=inner)
        xp.multiply(inner, 0.5, out=inner)  # (exactly numpy's / 2.0)
        xp.subtract(array[cut(slice(1, 2))], array[cut(slice(0, 1))], out=g[cut(slice(0, 1))])
        xp.subtract(array[cut(slice(-1, None))], array[cut(slice(-2, -1))],
                    out=g[cut(slice(-1, None))])
        out.append(g)
    return out[0] if len(out) == 1 else tuple(out)


def _gpu_axis(array, ax):
    """The gradient along ``ax`` of a C-contiguous CuPy array, by one kernel: as four CuPy
    operations on slices it compiled a kernel per operation, dtype and slice layout on a first
    run (eight in a run's quality report, 1 s)."""
    import cupy as cp

    stride = int(np.prod(array.shape[ax + 1:], dtype=np.int64))
    g = cp.empty_like(array)
    _gradient_kernel()(array, np.int64(array.shape[ax]), np.int64(stride), g)
    return g


@functools.cache
def _gradient_kernel():
    import cupy as cp

    # inside (a[k+1] - a[k-1]) * 0.5 rounded as NumPy's subtract then halving; one-sided at
    # the ends
    return cp.ElementwiseKernel(
        "raw T a, int64 n, int64 stride", "T g",
        "const long long k = (i / stride) % n;"
        " if (k == 0) g = a[i + stride] - a[i];"
        " else if (k == n - 1) g = a[i] - a[i - stride];"
        " else { const T d = a[i + stride] - a[i - stride]; g = d * (T)0.5; }",
        "xcorr_gradient_axis")
