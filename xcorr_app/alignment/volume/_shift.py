"""Aligned volumes: each volume of a stack moved by its (dz, dy, dx), one at a time
(:func:`shift_volumes`), by trilinear interpolation (SciPy's or CuPy's ``ndimage.shift``,
``order=1``, ``grid-constant``): voxels moved in from outside the volume take ``fill``.

Examples
--------
>>> import numpy as np
>>> vol = np.zeros((4, 6, 6), np.float32); vol[1, 2, 3] = 1
>>> out = next(shift_volumes(vol[None], [[1, -1, 2]], device="cpu"))
>>> np.argwhere(out).tolist()
[[2, 1, 5]]
"""

from __future__ import annotations

import numpy as np

from ...backend import compute_device, to_numpy, xp_for
from ...errors import InputError
from ._source import open_volumes


def shift_volumes(stack, shifts, fill=0.0, device="auto", *, channel=None):
    """Yield each volume of ``stack`` (T, Z, Y, X) moved by ``shifts`` (T, 3) as a float32
    NumPy array (Z, Y, X): memory for one volume at a time, the input unchanged.

    Parameters
    ----------
    stack : (T, Z, Y, X) array_like or path
    shifts : (T, 3) array_like
        (dz, dy, dx) per volume, as :attr:`VolumeResult.shifts` gives them.
    fill : float
        Value of voxels moved in from outside the volume.
    device : {"auto", "cpu", "gpu"}
    channel : int, optional
        The channel moved, of a path to a multi-channel file (:func:`align_volumes`'s).
    """
    source = open_volumes(stack, channel=channel)
    shifts = np.asarray(shifts, np.float64)
    if shifts.shape != (source.shape[0], 3) or not np.isfinite(shifts).all():
        raise InputError(f"shifts of shape {shifts.shape} for {source.shape[0]} volumes: give "
                         "one finite (dz, dy, dx) per volume")
    dev = compute_device(source.data, device=device)
    xp = xp_for(dev)
    if xp is np:
        from scipy import ndimage
    else:
        from cupyx.scipy import ndimage
    finite = np.isfinite(float(fill))
    for t in range(source.shape[0]):
        vol = source.read(t, t + 1, xp)[0]
        # grid-constant: a voxel half outside blends with fill (constant drops it whole)
        moved = ndimage.shift(vol, tuple(shifts[t]), order=1, mode="grid-constant",
                              cval=float(fill) if finite else 0.0)
        if not finite:  # (a NaN or infinite fill is the voxel where a tap of weight lies
            # outside, as in 2-D: its blend with a weight of 0 would be NaN)
            outside = ndimage.shift(xp.zeros(vol.shape, xp.float32), tuple(shifts[t]),
                                    order=1, mode="grid-constant", cval=1.0)
            moved = xp.where(outside > 0, xp.float32(fill), moved)
        yield to_numpy(moved)
