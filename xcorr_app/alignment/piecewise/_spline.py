"""The smooth motion field's spline, one definition on both devices: the field at pixel ``(y,
x)`` of the patch shifts ``S`` ``(gy, gx)`` (each axis) is ``(wy @ S @ wx.T)[y, x]``, a
separable natural cubic spline through the patch centres, linear beyond the outermost ones.

* :func:`spline_weights`: ``wy`` or ``wx``, the weights of each centre at every pixel.
* :func:`field_weights`: the weights of a grid, kept per grid and device on the GPU
  (:class:`DeviceWeights`, with what the kernels read).
* :func:`dense_field`: the field at every pixel (the reference; the kernels evaluate it per
  pixel instead).

Examples
--------
>>> w = spline_weights(np.array([10.0, 30.0]), 41)
>>> w[[0, 10, 20, 40]].round(3).tolist()  # linear between two centres, and beyond them
[[1.5, -0.5], [1.0, 0.0], [0.5, 0.5], [-0.5, 1.5]]
"""

from __future__ import annotations

import functools

import numpy as np

from ...backend import array_module_of


def _moments(c):
    """``(h, m)``: the centres' spacings and the spline's second derivatives at the centres
    (rows) of each unit vector (columns); natural ends (0 there), inside the continuity of the
    slopes (one small tridiagonal solve)."""
    g = len(c)
    h = np.diff(c)
    eye = np.eye(g)
    m = np.zeros((g, g))
    if g > 2:
        a = np.zeros((g - 2, g - 2))
        k = np.arange(g - 2)
        a[k, k] = 2.0 * (h[:-1] + h[1:])
        a[k[1:], k[:-1]] = h[1:-1]
        a[k[:-1], k[1:]] = h[1:-1]
        slope = (eye[1:] - eye[:-1]) / h[:, None]
        m[1:-1] = np.linalg.solve(a, 6.0 * (slope[1:] - slope[:-1]))
    return h, m


def _end_slopes(h, m):
    """The spline's slopes (of each unit vector) at the first and the last centre."""
    eye = np.eye(len(m))
    d0 = (eye[1] - eye[0]) / h[0] - h[0] * (2.0 * m[0] + m[1]) / 6.0
    d1 = (eye[-1] - eye[-2]) / h[-1] + h[-1] * (m[-2] + 2.0 * m[-1]) / 6.0
    return d0, d1


def spline_weights(centres, n):
    """``(n, len(centres))`` float64: the weights that map values at ``centres`` (increasing)
    to pixels ``0..n-1`` by a natural cubic spline, linear beyond the outermost centres.

    Written out (the spline of each unit vector: one small tridiagonal solve) rather than
    :class:`scipy.interpolate.CubicSpline`, whose import (``scipy.interpolate`` with
    ``scipy.special`` and ``scipy.linalg``) was a third of a first ``xcorr align --patches``
    run (docs/how-align-works.md, measurements); the tests compare the two to 1e-12.
    """
    c = np.asarray(centres, np.float64)
    g = len(c)
    x = np.arange(n, dtype=np.float64)
    if g == 1:
        return np.ones((n, 1))
    h, m = _moments(c)
    eye = np.eye(g)
    j = np.clip(np.searchsorted(c, np.clip(x, c[0], c[-1]), side="right") - 1, 0, g - 2)
    hj = h[j][:, None]
    left = (c[j + 1][:, None] - np.clip(x, c[0], c[-1])[:, None]) / hj  # of the interval
    right = 1.0 - left
    w = left * eye[j] + right * eye[j + 1] + hj ** 2 / 6.0 * (
        (left ** 3 - left) * m[j] + (right ** 3 - right) * m[j + 1])
    d0, d1 = _end_slopes(h, m)
    w += np.where(x < c[0], x - c[0], 0.0)[:, None] * d0 + \
        np.where(x > c[-1], x - c[-1], 0.0)[:, None] * d1
    return w


def dense_field(patch_field, centres, frame_shape, weights=None):
    """``(N, 2, H, W)`` float64: the shifts of ``patch_field`` ``(N, gy, gx, 2)`` at every
    pixel, on its device (NaN rows give 0: left unshifted)."""
    xp = array_module_of(patch_field)
    if weights is None:
        weights = field_weights(centres, frame_shape, xp)
    wy, wx = weights
    s = xp.nan_to_num(patch_field.astype(xp.float64), nan=0.0).transpose(0, 3, 1, 2)
    return wy @ s @ wx.T  # (N, 2, gy, gx) -> (N, 2, H, W)


def field_weights(centres, frame_shape, xp):
    """The spline weights ``(wy, wx)`` of both axes, on ``xp``'s device.  On the GPU a
    :class:`DeviceWeights`, kept per grid and device (read, never written, by the kernels): a
    run's patch pass otherwise left the GPU idle for their making and upload."""
    c = np.asarray(centres, np.float64)
    key = (tuple(c[:, 0, 0].tolist()), tuple(c[0, :, 1].tolist()),
           tuple(int(v) for v in frame_shape))
    if xp is np:
        return _host_weights(key)
    return _device_weights_of(key, xp.cuda.Device().id)


def _host_weights(key):
    """``(wy, wx)`` NumPy of :func:`field_weights`' key (centres y, centres x, frame shape)."""
    return tuple(spline_weights(np.asarray(a), n) for a, n in zip(key[:2], key[2]))


class DeviceWeights(tuple):
    """The spline weights ``(wy, wx)`` as CuPy arrays of one device (a tuple of the two), with
    what the kernels read: ``wx_t``, ``wx`` transposed, C-contiguous ``(gx, W)`` (a warp's
    lanes, consecutive columns, read consecutive doubles: ``along_row`` in
    ``field_sample.cuh``), and ``wx_t32``, the same as float32 (the refinement's)."""

    def __new__(cls, wy, wx, wx_t, wx_t32):
        self = super().__new__(cls, (wy, wx))
        self.wx_t, self.wx_t32 = wx_t, wx_t32
        return self


@functools.lru_cache(maxsize=16)
def _device_weights_of(key, device_id):
    import cupy as cp

    from ..._cuda import upload_shared

    with cp.cuda.Device(device_id):
        wy, wx = _host_weights(key)
        wx_t = np.ascontiguousarray(wx.T)
        return DeviceWeights(upload_shared(wy), upload_shared(wx), upload_shared(wx_t),
                             upload_shared(wx_t.astype(np.float32)))
