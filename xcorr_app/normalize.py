"""Normalizations of correlation surfaces, computed from summed-area tables.

The correlation kernels return raw sums ``c[k] = sum_n a[n + k] b[n]`` over the overlap of
each shift.  Zero-normalized cross-correlation (ZNCC) needs, per shift, the sums of ``a``,
``a**2`` over the part of ``a`` in the overlap and of ``b``, ``b**2`` over the part of ``b``:
rectangles, so four look-ups in a summed-area table each.  This keeps the expensive part in the
definition-based kernels and adds O(outputs) work.

``zncc[k] = (c - Sa Sb / n) / sqrt((Saa - Sa**2 / n) (Sbb - Sb**2 / n))`` with ``n`` the number
of overlapping pixels; shifts with an overlap smaller than ``min_overlap`` of the smaller image,
or a zero variance, read -1 (ZNCC lies in [-1, 1]).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.reference import xcorr_direct
>>> a = np.random.default_rng(0).random((6, 7))
>>> z = zncc(xcorr_direct(a, a[None], "one_to_many", 2), a, a[None], max_shift=2)
>>> round(float(z[0, 2, 2]), 6)
1.0
"""

from __future__ import annotations

from .backend import array_module_of
from .shifts import first_shift, output_shape


def _sat(x, xp):
    """Summed-area table with a leading row and column of zeros: (..., H + 1, W + 1), float64."""
    s = xp.zeros(x.shape[:-2] + (x.shape[-2] + 1, x.shape[-1] + 1), dtype=xp.float64)
    s[..., 1:, 1:] = x.astype(xp.float64).cumsum(axis=-2).cumsum(axis=-1)
    return s


def _rect_sums(sat, y0, y1, x0, x1):
    """Sums over rectangles [y0, y1) x [x0, x1) for index vectors y* (Ho,) and x* (Wo,)."""
    Y0, Y1 = y0[:, None], y1[:, None]
    X0, X1 = x0[None, :], x1[None, :]
    return sat[..., Y1, X1] - sat[..., Y0, X1] - sat[..., Y1, X0] + sat[..., Y0, X0]


def overlap_bounds(left_shape, right_shape, max_shift, xp):
    """Per shift: overlap rectangle in right coordinates ``[ya, yb) x [xa, xb)`` and the offset k."""
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
    ky, kx, ya, yb, xa, xb = overlap_bounds(left.shape, right.shape, max_shift, xp)
    n = ((yb - ya)[:, None] * (xb - xa)[None, :]).astype(xp.float64)
    sl, sl2 = _sat(left, xp), _sat(left.astype(xp.float64) ** 2, xp)
    sr, sr2 = _sat(right, xp), _sat(right.astype(xp.float64) ** 2, xp)
    sa = _rect_sums(sl, ya + ky, yb + ky, xa + kx, xb + kx)
    saa = _rect_sums(sl2, ya + ky, yb + ky, xa + kx, xb + kx)
    sb = _rect_sums(sr, ya, yb, xa, xb)
    sbb = _rect_sums(sr2, ya, yb, xa, xb)
    nn = xp.maximum(n, 1.0)
    num = corr.astype(xp.float64) - sa * sb / nn
    var = xp.maximum(saa - sa * sa / nn, 0.0) * xp.maximum(sbb - sb * sb / nn, 0.0)
    smaller = min(left.shape[-2] * left.shape[-1], right.shape[-2] * right.shape[-1])
    ok = (n >= max(min_overlap * smaller, 1.0)) & (var > 0)
    out = xp.where(ok, num / xp.sqrt(xp.where(ok, var, 1.0)), -1.0)
    return out.astype(xp.float32)
