"""The float64 reference of the filter kernels (SciPy's ``ndimage.correlate``), for tests."""

import numpy as np

__all__ = ["correlate_reference"]


def correlate_reference(stack, weights, mode="reflect", cval=0.0, origin=(0, 0)):
    """float64 ``scipy.ndimage.correlate`` of every frame of an ``(H, W)`` or ``(N, H, W)``
    NumPy stack: the reference of the filter kernels.

    >>> float(correlate_reference(np.ones((2, 4, 5)), np.ones((3, 3)))[1, 0, 0])
    9.0
    """
    import scipy.ndimage as ndi

    s = np.asarray(stack, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    frames = s if s.ndim == 3 else s[None]
    out = np.stack([ndi.correlate(f, w, mode=mode, cval=cval, origin=tuple(origin))
                    for f in frames])
    return out if s.ndim == 3 else out[0]
