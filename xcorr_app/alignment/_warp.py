"""Applying shifts to frames (batched, NumPy or CuPy).

Examples
--------
>>> import numpy as np
>>> f = np.zeros((1, 5, 5)); f[0, 2, 2] = 1.0
>>> out = shift_frames(f, np.array([[1.0, -1.0]]))
>>> np.argwhere(out[0] == 1.0).tolist()
[[3, 1]]
"""

from __future__ import annotations

import numpy as np

from ..backend import array_module_of, to_xp
from ..correlate._fft import fft_of
from ..errors import InputError


RESAMPLE = ("bilinear", "fourier")


def shift_frames(frames, shifts, fill=0.0, method="bilinear"):
    """Shift every frame by its ``(dy, dx)`` (bilinear interpolation or a Fourier phase ramp).

    ``out[n, y, x] = frames[n, y - dy, x - dx]``: applying the shifts that
    :func:`xcorr_app.align` returns aligns the frames with the reference.  Pixels whose source
    lies outside the frame get ``fill``; NaN shifts are treated as 0.

    Parameters
    ----------
    frames : (N, H, W) ndarray
    shifts : (N, 2) ndarray
    fill : float
    method : {"bilinear", "fourier"}
        ``fourier`` multiplies each frame's spectrum by the phase ramp of its shift: exact for
        band-limited frames, no smoothing; the area shifted in from outside gets ``fill``.

    Returns
    -------
    (N, H, W) float32 ndarray of the module of ``frames``.
    """
    if method not in RESAMPLE:
        raise InputError(f"unknown resampling {method!r}; use bilinear or fourier")
    xp = array_module_of(frames)
    frames = frames.astype(xp.float32, copy=False)
    shifts = xp.nan_to_num(to_xp(shifts, xp).astype(xp.float64), nan=0.0)
    if method == "fourier":
        return _shift_fourier(frames, shifts, fill, xp)
    n, h, w = frames.shape
    ys = xp.arange(h, dtype=xp.float64)[None, :, None] - shifts[:, 0, None, None]
    xs = xp.arange(w, dtype=xp.float64)[None, None, :] - shifts[:, 1, None, None]
    y0, x0 = xp.floor(ys), xp.floor(xs)
    wy, wx = (ys - y0).astype(xp.float32), (xs - x0).astype(xp.float32)
    y0, x0 = y0.astype(xp.int64), x0.astype(xp.int64)
    batch = xp.arange(n)[:, None, None]
    out = xp.zeros((n, h, w), dtype=xp.float32)
    weight = xp.zeros((n, h, w), dtype=xp.float32)
    for dy, wy_ in ((0, 1 - wy), (1, wy)):
        yy = y0 + dy
        vy = (yy >= 0) & (yy < h)
        yy = xp.clip(yy, 0, h - 1)
        for dx, wx_ in ((0, 1 - wx), (1, wx)):
            xx = x0 + dx
            vx = (xx >= 0) & (xx < w)
            xx = xp.clip(xx, 0, w - 1)
            wgt = (wy_ * wx_) * (vy & vx)
            out += wgt * frames[batch, yy, xx]
            weight += wgt
    # Where part of the stencil falls outside, blend towards the fill value.
    return out + (1 - weight) * np.float32(fill)


def _shift_fourier(frames, shifts, fill, xp):
    n, h, w = frames.shape
    ky = xp.fft.fftfreq(h)[None, :, None]
    kx = xp.fft.fftfreq(w)[None, None, :]
    ramp = xp.exp(-2j * np.pi * (ky * shifts[:, 0, None, None] + kx * shifts[:, 1, None, None]))
    fft = fft_of(xp)
    out = fft.ifft2(fft.fft2(frames) * ramp.astype(xp.complex64)).real.astype(xp.float32)
    ys = xp.arange(h)[None, :, None] - shifts[:, 0, None, None]
    xs = xp.arange(w)[None, None, :] - shifts[:, 1, None, None]
    inside = (ys > -1) & (ys < h) & (xs > -1) & (xs < w)  # the source lies in the frame
    return xp.where(inside, out, np.float32(fill)).astype(xp.float32)
