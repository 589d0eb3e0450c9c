"""``numpy.gradient`` on either device (:func:`gradient`), for the GPU paths that must not
hand a CuPy array to a NumPy ufunc.

Examples
--------
>>> import numpy as np
>>> gradient(np.array([1.0, 2.0, 4.0, 7.0])).tolist()
[1.0, 1.5, 2.5, 3.0]
"""

from __future__ import annotations

import numpy as np

from ..backend import array_module_of
from ..errors import InputError

__all__ = ["gradient"]


def gradient(array, axis=None):
    """``numpy.gradient(array, axis=axis)`` of unit spacing (central differences inside,
    one-sided at the edges), the same numbers, on the array's device: a tuple of arrays, one
    an axis, as NumPy's (one array where one axis is differentiated).

    Not ``cupy.gradient``: it divides a CuPy array by a Python number, which CuPy hands to
    NumPy's ufunc protocol, whose first use in a process imports cupyx and SciPy (0.35 s of
    a one-shot ``xcorr align``'s quality report, H100 2026-11-25).

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
    for ax in axes:
        ax = int(ax) % array.ndim
        if array.shape[ax] < 2:
            raise InputError(f"gradient: axis {ax} has {array.shape[ax]} element(s); it needs "
                             "2 or more")

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
