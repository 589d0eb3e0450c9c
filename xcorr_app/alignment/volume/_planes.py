"""Per-plane refinement after the rigid 3-D pass: each plane's residual (dy, dx) against the
reference's plane (:func:`refine_planes`), for scanning microscopes whose planes are acquired
at different times (a volume's planes then drift apart in x and y).

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> vol = ndi.gaussian_filter(np.random.default_rng(0).random((4, 32, 32)), 1.5)
>>> moved = vol.copy(); moved[2] = np.roll(vol[2], 2, axis=1)  # one plane 2 px off in x
>>> res = refine_planes(np.stack([vol, moved]), np.zeros((2, 3)), upsample=1, device="cpu")
>>> res[1].round(1).tolist()
[[0.0, 0.0], [0.0, 0.0], [0.0, -2.0], [0.0, 0.0]]
"""

from __future__ import annotations

import numpy as np

from ...backend import xp_for
from ...correlate import fft_of
from ...errors import InputError
from ...registration import DEFAULT_UPSAMPLE, refine_upsampled
from ._api import VolumeOptions, parse_max_shift, reference_volume
from ._dft3 import window_lags
from ._shift import shift_volumes
from ._source import open_volumes


def refine_planes(stack, shifts, reference="first", max_shift=None,
                  upsample=DEFAULT_UPSAMPLE, device="auto"):
    """The residual (dy, dx) of every plane of every volume beyond its rigid ``shifts``:
    the volume moved along z by its dz (linear interpolation; none in x and y, which would
    blur the planes and fill their edges), each plane's (dy, dx) measured against the same
    plane of the reference volume (within the rigid (dy, dx) +- ``max_shift``), less the
    rigid (dy, dx).

    Parameters
    ----------
    stack : (T, Z, Y, X) array_like or path
    shifts : (T, 3) array_like
        The rigid (dz, dy, dx) of :func:`~._api.align_volumes`.
    reference : {"first", "mean"} or int
        As for :func:`~._api.align_volumes` (the same reference, unaligned).
    max_shift : None, int or (dy, dx)
        Largest residual searched, px.
    upsample : float
        Subpixel refinement (:func:`~xcorr_app.registration.refine_upsampled`); 1: whole px.
    device : {"auto", "cpu", "gpu"}

    Returns
    -------
    (T, Z, 2) float64 ndarray
        (dy, dx) to apply to each plane after the rigid shift (scikit-image's convention);
        NaN for planes whose content the z shift moved in from outside the volume.
    """
    source = open_volumes(stack)
    xy = (max_shift,) * 2 if np.ndim(max_shift) == 0 else tuple(max_shift)
    if len(xy) != 2:
        raise InputError(f"max_shift {max_shift!r}: give one bound or two (dy, dx), px")
    bound = parse_max_shift((0,) + xy)[1:] if max_shift is not None else (None, None)
    t, (z, h, w) = source.shape[0], source.shape[1:]
    ref, _, dev = reference_volume(source, VolumeOptions(reference=reference, device=device))
    xp = xp_for(dev)
    fft = fft_of(xp)
    ref = ref.astype(xp.float32)
    ref = ref - ref.mean(axis=(1, 2), keepdims=True)
    ref_spec = fft.rfft2(ref)
    shifts = np.asarray(shifts, np.float64)
    out = np.full((t, z, 2), np.nan)
    only_z = np.c_[shifts[:, :1], np.zeros((len(shifts), 2))] if shifts.ndim == 2 else shifts
    # (a volume without a shift, a constant one's NaN: not moved, its planes left NaN)
    unmeasured = np.isnan(shifts).all(axis=1) if shifts.ndim == 2 else np.zeros(0, bool)
    if unmeasured.any():
        only_z = np.where(unmeasured[:, None], np.nan, only_z)
    # moved along z only: an x/y interpolation would blur and zero-fill the planes' edges
    for i, vol in enumerate(shift_volumes(source.data, only_z, device=dev)):
        if unmeasured[i]:
            continue
        planes = xp.asarray(vol, dtype=xp.float32)
        planes = planes - planes.mean(axis=(1, 2), keepdims=True)
        surf = fft.irfft2(ref_spec * xp.conj(fft.rfft2(planes)), s=(h, w))
        # the window: the rigid (dy, dx) +- the bound
        lags = [window_lags(n, None) if b is None else np.arange(-b, b + 1) + int(round(c))
                for n, b, c in zip((h, w), bound, shifts[i, 1:])]
        for axis, lag in zip((1, 2), lags):
            surf = xp.take(surf, xp.asarray(lag % surf.shape[axis]), axis=axis)
        idx = xp.argmax(surf.reshape(z, -1), axis=1)
        iy, ix = xp.unravel_index(idx, surf.shape[1:])
        iy, ix = (a.get() if hasattr(a, "get") else np.asarray(a) for a in (iy, ix))
        coarse = np.stack([lags[0][iy], lags[1][ix]], axis=1).astype(np.float64)
        fine = refine_upsampled(ref, planes, coarse, upsample, boundary="linear")
        fine = fine.get() if hasattr(fine, "get") else np.asarray(fine)
        source_z = np.arange(z) - shifts[i, 0]  # where each plane's content came from
        inside = (source_z >= -0.5) & (source_z <= z - 0.5)
        out[i, inside] = fine[inside] - shifts[i, 1:]
    return out
