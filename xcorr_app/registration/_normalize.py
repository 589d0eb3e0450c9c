"""Normalizations of correlation surfaces, computed from summed-area tables.

The correlation kernels return raw sums ``c[k] = sum_n a[n + k] b[n]`` over the overlap of
each shift.  Zero-normalized cross-correlation (ZNCC) needs, per shift, the sums of ``a``,
``a**2`` over the part of ``a`` in the overlap and of ``b``, ``b**2`` over the part of ``b``:
rectangles, so four look-ups in a summed-area table each.  This keeps the expensive part in the
definition-based kernels and adds O(outputs) work.

``zncc[k] = (c - Sa Sb / n) / sqrt((Saa - Sa**2 / n) (Sbb - Sb**2 / n))`` with ``n`` the number
of overlapping pixels, sums in float64; shifts with an overlap smaller than ``min_overlap`` of
the smaller image, or constant on either side (variance at most :data:`FLAT` of the sum of
squares), read -1 (ZNCC lies in [-1, 1]).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.correlate._direct import xcorr_direct
>>> a = np.random.default_rng(0).random((6, 7))
>>> z = zncc(xcorr_direct(a, a[None], "one_to_many", 2), a, a[None], max_shift=2)
>>> round(float(z[0, 2, 2]), 6)
1.0
"""

from __future__ import annotations

import numpy as np

from ..backend import array_module_of
from ..correlate._shifts import first_shift, output_shape


def _prefix_rows(x, rows, xp):
    """``T[..., k, :] = sum_{r < rows[k]} x[..., r, :]`` (float64) for host row indices ``rows``
    (sorted, in 0..H), reading only the rows it needs: prefix sums from the top for indices in
    the upper half, column totals minus suffix sums from the bottom for the lower half."""
    h = x.shape[-2]
    top, bot = rows[rows <= h // 2], rows[rows > h // 2]
    parts = []
    if len(top):
        head = xp.zeros(x.shape[:-2] + (int(top.max()) + 1, x.shape[-1]), dtype=xp.float64)
        xp.cumsum(x[..., :int(top.max()), :], axis=-2, dtype=xp.float64, out=head[..., 1:, :])
        parts.append(head[..., top, :])
    if len(bot):
        y0 = int(bot.min())
        tail = xp.zeros(x.shape[:-2] + (h - y0 + 1, x.shape[-1]), dtype=xp.float64)
        xp.cumsum(x[..., y0:, :][..., ::-1, :], axis=-2, dtype=xp.float64,
                  out=tail[..., 1:, :])  # tail[j] = sum of the last j rows
        total = x.sum(axis=-2, dtype=xp.float64)[..., None, :]
        parts.append(total - tail[..., h - bot, :])
    return parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=-2)


def _corner_sums(x, ys, xs, xp):
    """Summed-area-table values ``sum x[..., :y, :x]`` on the grid ``ys`` x ``xs`` (host int
    arrays), without building the whole table: O((rows needed) x W) work."""
    uy, iy = np.unique(ys, return_inverse=True)
    ux, ix = np.unique(xs, return_inverse=True)
    rows = _prefix_rows(x, uy, xp)  # (..., len(uy), W)
    cols = xp.zeros(rows.shape[:-1] + (rows.shape[-1] + 1,), dtype=xp.float64)
    xp.cumsum(rows, axis=-1, out=cols[..., 1:])
    grid = cols[..., xp.asarray(ux)]
    return grid[..., xp.asarray(iy)[:, None], xp.asarray(ix)[None, :]]


def _rect_sums(x, y0, y1, x0, x1, xp):
    """Sums of ``x`` over the rectangles ``[y0, y1) x [x0, x1)`` for host index vectors y* (Ho,)
    and x* (Wo,): (..., Ho, Wo) float64."""
    ho, wo = len(y0), len(x0)
    g = _corner_sums(x, np.concatenate([y0, y1]), np.concatenate([x0, x1]), xp)
    return g[..., ho:, wo:] - g[..., :ho, wo:] - g[..., ho:, :wo] + g[..., :ho, :wo]


#: an overlap whose variance is at most this fraction of its sum of squares counts as constant
#: (float64 rounding of ``sum x**2 - (sum x)**2 / n`` leaves about 1e-16 of it)
FLAT = 1e-12


def overlap_bounds(left_shape, right_shape, max_shift, xp=np):
    """Per shift: overlap rectangle in right coordinates ``[ya, yb) x [xa, xb)`` and the offset k
    (host arrays unless ``xp`` says otherwise)."""
    (lh, lw), (rh, rw) = left_shape[-2:], right_shape[-2:]
    ho, wo = output_shape(left_shape, right_shape, max_shift)
    ky0, kx0 = first_shift(left_shape, right_shape, max_shift)
    ky = xp.arange(ky0, ky0 + ho)
    kx = xp.arange(kx0, kx0 + wo)
    ya, yb = xp.maximum(0, -ky), xp.minimum(rh, lh - ky)
    xa, xb = xp.maximum(0, -kx), xp.minimum(rw, lw - kx)
    yb, xb = xp.maximum(yb, ya), xp.maximum(xb, xa)  # empty overlap -> zero-size rectangle
    return ky, kx, ya, yb, xa, xb


def zncc(corr, left, right, max_shift=None, min_overlap=0.25):
    """Zero-normalized cross-correlation from raw correlation sums.

    Parameters
    ----------
    corr : (..., M, Ho, Wo) ndarray
        Raw correlations of ``left`` with each of ``right`` (form ``one_to_many``, or one left
        per right when ``left`` is 3-D).
    left : (H, W) or (M, H, W) ndarray
    right : (M, H', W') ndarray
    max_shift : int or pair, optional
        The bound ``corr`` was computed with.
    min_overlap : float
        Shifts whose overlap covers less than this fraction of the smaller image get -1.

    Returns
    -------
    float32 ndarray shaped like ``corr``.
    """
    xp = array_module_of(corr, left, right)
    ky, kx, ya, yb, xa, xb = overlap_bounds(left.shape, right.shape, max_shift)
    n = xp.asarray(((yb - ya)[:, None] * (xb - xa)[None, :]).astype(np.float64))
    # the overlap in left and right coordinates (an empty one stays empty, inside the images)
    (lh, lw), (rh, rw) = left.shape[-2:], right.shape[-2:]
    lr = [np.clip(v, 0, m) for v, m in ((ya + ky, lh), (yb + ky, lh), (xa + kx, lw), (xb + kx, lw))]
    rr = [np.clip(v, 0, m) for v, m in ((ya, rh), (yb, rh), (xa, rw), (xb, rw))]
    sa = _rect_sums(left, *lr, xp)
    saa = _rect_sums(xp.square(left, dtype=xp.float64), *lr, xp)
    sb = _rect_sums(right, *rr, xp)
    sbb = _rect_sums(xp.square(right, dtype=xp.float64), *rr, xp)
    nn = xp.maximum(n, 1.0)
    num = corr.astype(xp.float64) - sa * sb / nn
    va, vb = saa - sa * sa / nn, sbb - sb * sb / nn
    var = xp.maximum(va, 0.0) * xp.maximum(vb, 0.0)
    smaller = min(left.shape[-2] * left.shape[-1], right.shape[-2] * right.shape[-1])
    flat = (va <= FLAT * saa) | (vb <= FLAT * sbb)  # constant up to rounding
    ok = (n >= max(min_overlap * smaller, 1.0)) & (var > 0) & ~flat
    out = xp.where(ok, num / xp.sqrt(xp.where(ok, var, 1.0)), -1.0)
    return out.astype(xp.float32)
