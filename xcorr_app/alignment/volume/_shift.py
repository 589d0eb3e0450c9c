"""Aligned volumes: each volume of a stack moved by its (dz, dy, dx), one at a time
(:func:`shift_volumes`), by trilinear interpolation (SciPy's or CuPy's ``ndimage.shift``,
``order=1``, ``grid-constant``): voxels moved in from outside the volume take ``fill``; or
warped by its motion field (:func:`warp_volumes`, :func:`warp_volume`: a piecewise-rigid run's),
sampled trilinearly the same way (``ndimage.map_coordinates``).

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

from ...backend import array_module_of, compute_device, to_numpy, xp_for
from ...errors import InputError
from ._piecewise import dense_field3, plan_planes
from ._source import open_volumes


def unshifted_where_unmeasured(shifts, n) -> np.ndarray:
    """``shifts`` (n, 3) float64, a volume without a shift (NaN in all three: a constant
    volume's, as :class:`VolumeResult` gives them) left where it is (0); InputError for
    another shape, an infinite shift or one with only some of dz, dy, dx."""
    shifts = np.asarray(shifts, np.float64)
    unmeasured = np.isnan(shifts).all(axis=-1) if shifts.ndim == 2 else False
    shifts = np.where(np.asarray(unmeasured)[..., None], 0.0, shifts) \
        if shifts.ndim == 2 else shifts
    if shifts.shape != (n, 3) or not np.isfinite(shifts).all():
        raise InputError(f"shifts of shape {shifts.shape} for {n} volumes: give one finite "
                         "(dz, dy, dx) per volume (NaN in all three: a volume not measured, "
                         "left where it is)")
    return shifts


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
    shifts = unshifted_where_unmeasured(shifts, source.shape[0])
    dev = compute_device(source.data, device=device)
    xp = xp_for(dev)
    ndimage = _ndimage(xp)
    for t in range(source.shape[0]):
        vol = source.read(t, t + 1, xp)[0]
        # grid-constant: a voxel half outside blends with fill (constant drops it whole)
        yield to_numpy(_with_fill(lambda v, cval, s=tuple(shifts[t]): ndimage.shift(
            v, s, order=1, mode="grid-constant", cval=cval), vol, fill, xp))


def warp_volumes(stack, field, centres, fill=0.0, device="auto", *, channel=None):
    """Yield each volume of ``stack`` (T, Z, Y, X) warped by its motion field as a float32
    NumPy array (Z, Y, X), one at a time, the input unchanged (:func:`warp_volume`).

    Parameters
    ----------
    stack : (T, Z, Y, X) array_like or path
    field : (T, gz, gy, gx, 3) array_like
        The patch shifts (dz, dy, dx) per volume, as :attr:`VolumeResult.motion_field` gives
        them (a volume of NaN shifts is left as it is).
    centres : (gz, gy, gx, 3) array_like
        The patch centres (z, y, x) in voxels (:attr:`VolumeResult.patch_centres`).
    fill, device, channel
        As :func:`shift_volumes`.
    """
    source = open_volumes(stack, channel=channel)
    field = np.asarray(field, np.float64)
    if field.ndim != 5 or field.shape[0] != source.shape[0] or field.shape[-1] != 3:
        raise InputError(f"a motion field of shape {field.shape} for {source.shape[0]} "
                         "volumes: give (T, gz, gy, gx, 3) patch shifts")
    centres = _axis_centres(centres, field.shape[1:-1])
    xp = xp_for(compute_device(source.data, device=device))
    for t in range(source.shape[0]):
        yield to_numpy(_warp(source.read(t, t + 1, xp)[0], field[t], centres, fill))


def warp_volume(volume, field, centres, fill=0.0):
    """``volume`` (Z, Y, X) warped by the motion field of ``field`` (gz, gy, gx, 3) (patch
    shifts, align's sign: ``out[q] = volume[q - s(q)]``) through the patch ``centres`` (gz,
    gy, gx, 3): float32 on the volume's device (NumPy in, NumPy out; CuPy in, CuPy out).  The
    field at every voxel is the separable spline of the 2-D path through the centres
    (:func:`~._piecewise.dense_field3`), the sampling trilinear (``map_coordinates``,
    ``order=1``), ``fill`` where the source lies outside."""
    xp = array_module_of(volume)
    field = np.asarray(to_numpy(field), np.float64)
    vol = xp.asarray(volume, dtype=xp.float32)
    if vol.ndim != 3 or field.ndim != 4 or field.shape[-1] != 3:
        raise InputError(f"warp_volume takes a (Z, Y, X) volume and a (gz, gy, gx, 3) field, "
                         f"got {tuple(vol.shape)} and {field.shape}")
    return _warp(vol, field, _axis_centres(centres, field.shape[:-1]), fill)


def _axis_centres(centres, grid):
    """The patch centres along each axis (three 1-D arrays) of ``centres`` (gz, gy, gx, 3)."""
    c = np.asarray(centres, np.float64)
    if c.shape != (*grid, 3):
        raise InputError(f"patch centres of shape {c.shape} for a grid of {grid}: give "
                         "(gz, gy, gx, 3)")
    return c[:, 0, 0, 0], c[0, :, 0, 1], c[0, 0, :, 2]


def _warp(vol, field, centres, fill):
    """:func:`warp_volume` of a float32 volume on its device, a slab of planes at a time (the
    coordinates of the dense field: :func:`~._piecewise.plan_planes`)."""
    xp = array_module_of(vol)
    if not np.isfinite(field).all():  # (a constant volume: no field, left as it is)
        return vol.copy()
    ndimage = _ndimage(xp)
    shape, k = vol.shape, plan_planes(vol.shape)
    out = xp.empty(shape, xp.float32)
    for z0 in range(0, shape[0], k):
        planes = slice(z0, min(shape[0], z0 + k))
        coords = dense_field3(field, centres, shape, planes, xp)
        at = (xp.arange(planes.start, planes.stop)[:, None, None],
              xp.arange(shape[1])[:, None], xp.arange(shape[2]))
        for a in range(3):
            xp.subtract(at[a], coords[a], out=coords[a])  # the source of each voxel
        # (CuPy: cupyx.scipy.ndimage.map_coordinates, trilinear as shift_volumes' shift)
        out[planes] = _with_fill(lambda v, cval: ndimage.map_coordinates(
            v, coords, order=1, mode="grid-constant", cval=cval), vol, fill, xp)
    return out


def _ndimage(xp):
    if xp is np:
        from scipy import ndimage
    else:
        from cupyx.scipy import ndimage
    return ndimage


def _with_fill(move, vol, fill, xp):
    """``move(vol, cval)`` with voxels from outside the volume set to ``fill``: a NaN or
    infinite fill is the voxel where a tap of weight lies outside, as in 2-D (its blend with
    a weight of 0 would be NaN)."""
    finite = np.isfinite(float(fill))
    moved = move(vol, float(fill) if finite else 0.0)
    if not finite:
        outside = move(xp.zeros(vol.shape, xp.float32), 1.0)
        moved = xp.where(outside > 0, xp.float32(fill), moved)
    return moved
