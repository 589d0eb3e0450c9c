"""Normalizations of correlation surfaces, computed from summed-area tables.

The correlation kernels return raw sums ``c[k] = sum_n a[n + k] b[n]`` over the overlap of
each shift.  Zero-normalized cross-correlation (ZNCC) needs, per shift, the sums of ``a``,
``a**2`` over the part of ``a`` in the overlap and of ``b``, ``b**2`` over the part of ``b``:
rectangles, so four look-ups in a summed-area table each.  This keeps the expensive part in the
definition-based kernels and adds O(outputs) work.

``zncc[k] = (c - Sa Sb / n) / sqrt((Saa - Sa**2 / n) (Sbb - Sb**2 / n))`` with ``n`` the number
of overlapping pixels, sums in float64; shifts with an overlap smaller than ``min_overlap`` of
the smaller image, constant on either side (variance at most :data:`FLAT` of the sum of
squares) or empty (at most :data:`EMPTY` of its whole image's variance), read -1 (ZNCC lies
in [-1, 1]).

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

from typing import NamedTuple

import numpy as np

from ..backend import array_module_of
from ..correlate import first_shift, output_shape


def _cumsum_rows(x, out, xp):
    """``out[..., i, :] = sum_{r <= i} x[..., r, :]`` in float64.

    On NumPy a loop of row additions: ``np.cumsum`` along a non-contiguous axis ran 4.8x
    slower, for the same numbers (both add the rows in order)."""
    if xp is not np:
        return xp.cumsum(x, axis=-2, dtype=xp.float64, out=out)
    if x.shape[-2]:
        out[..., 0, :] = x[..., 0, :]
    for i in range(1, x.shape[-2]):
        np.add(out[..., i - 1, :], x[..., i, :], out=out[..., i, :])
    return out


class _PrefixRows:
    """``T(k) = sum_{r < k} x[..., r, :]`` (float64) of the rows ``k`` of ``needed`` (host
    indices in 0..H), reading only the rows they need: prefix sums from the top for indices in
    the upper half, the column totals less suffix sums from the bottom for the lower half;
    :meth:`at` reads them for any of those rows, in any order (no table of them all made)."""

    def __init__(self, x, needed, xp):
        self.h, self.xp = h, xp = x.shape[-2], xp
        top, bot = needed[needed <= h // 2], needed[needed > h // 2]
        if len(top):
            self.head = xp.zeros(x.shape[:-2] + (int(top.max()) + 1, x.shape[-1]), xp.float64)
            _cumsum_rows(x[..., :int(top.max()), :], self.head[..., 1:, :], xp)
        if len(bot):
            y0 = int(bot.min())
            self.tail = xp.zeros(x.shape[:-2] + (h - y0 + 1, x.shape[-1]), xp.float64)
            _cumsum_rows(x[..., y0:, :][..., ::-1, :], self.tail[..., 1:, :], xp)  # last j rows
            self.total = x.sum(axis=-2, dtype=xp.float64)[..., None, :]

    def at(self, rows):
        """``(..., len(rows), W)``: ``T`` of each of ``rows`` (host indices among those made, in
        any order: each run of upper-half or lower-half rows read at once; the bands'
        edges make one run of each)."""
        h, xp = self.h, self.xp
        upper = rows <= h // 2
        if upper.all():
            return self.head[..., xp.asarray(rows), :]
        if not upper.any():
            return self.total - self.tail[..., xp.asarray(h - rows), :]
        first = int(np.argmax(upper != upper[0]))  # (the first row of the next run)
        return xp.concatenate([self.at(rows[:first]), self.at(rows[first:])], axis=-2)


def _rect_sums(x, y0, y1, x0, x1, xp):
    """Sums of ``x`` over the rectangles ``[y0, y1) x [x0, x1)`` for host index vectors y* (Ho,)
    and x* (Wo,): (..., Ho, Wo) float64.

    The row bands ``[y0, y1)`` first (differences of the prefix rows :class:`_PrefixRows`
    reads, (..., Ho, W)), then their column prefix sums, read at ``x1`` and ``x0``: two
    gathers of Ho x Wo values, not the four of a corner grid.
    """
    return _band_sums(_PrefixRows(x, np.unique(np.concatenate([y0, y1])), xp), y0, y1,
                      x0, x1, xp)


def _band_sums(rows, y0, y1, x0, x1, xp):
    """The sums over ``[y0, y1) x [x0, x1)`` from the prefix rows ``rows`` (a
    :class:`_PrefixRows` made for them; any run of the bands: each output row is its band's
    alone): each band ``T(y1) - T(y0)``, its column prefix sums read at ``x1`` and ``x0``."""
    band = rows.at(y1) - rows.at(y0)
    cols = xp.zeros(band.shape[:-1] + (band.shape[-1] + 1,), dtype=xp.float64)
    xp.cumsum(band, axis=-1, out=cols[..., 1:])
    return xp.take(cols, xp.asarray(x1), axis=-1) - xp.take(cols, xp.asarray(x0), axis=-1)


#: an overlap whose variance is at most this fraction of its sum of squares counts as constant
#: (float64 rounding of ``sum x**2 - (sum x)**2 / n`` leaves about 1e-16 of it)
FLAT = 1e-12
#: an overlap holding at most this share of its whole image's variance counts as empty: the
#: correlation sums (float32 transforms) are exact to about 1e-7 of the images' whole energy,
#: so a ZNCC over less is their rounding (a sparse frame's empty corners read peaks of 1e5)
EMPTY = 1e-4


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


class ZnccLeft(NamedTuple):
    """What ZNCC needs of the left side, per shift: the same for every right matrix of a
    ``one_to_many`` run, so the alignment pipeline computes it once (:func:`zncc_left`)."""

    n: object          # overlap sizes, at least 1 (float64)
    mean: object       # sum of left over the overlap / n
    var: object        # its sum of squared deviations, at least 0
    bad: object        # too small an overlap, or constant or empty on the left


def zncc_left(left, right_shape, max_shift=None, min_overlap=0.25) -> ZnccLeft:
    """The left side's part of :func:`zncc` for right matrices of ``right_shape``."""
    xp = array_module_of(left)
    ky, kx, ya, yb, xa, xb = overlap_bounds(left.shape, right_shape, max_shift)
    n = xp.asarray(((yb - ya)[:, None] * (xb - xa)[None, :]).astype(np.float64))
    # the overlap in left coordinates (an empty one stays empty, inside the image)
    (lh, lw) = left.shape[-2:]
    lr = [np.clip(v, 0, m) for v, m in ((ya + ky, lh), (yb + ky, lh), (xa + kx, lw), (xb + kx, lw))]
    sa = _rect_sums(left, *lr, xp)
    saa = _rect_sums(xp.square(left, dtype=xp.float64), *lr, xp)
    nn = xp.maximum(n, 1.0)
    va = saa - sa * sa / nn
    smaller = min(left.shape[-2] * left.shape[-1], right_shape[-2] * right_shape[-1])
    bad = (n < max(min_overlap * smaller, 1.0)) | (va <= FLAT * saa)  # constant up to rounding
    bad |= va <= EMPTY * _energy(left, xp)
    return ZnccLeft(nn, sa / nn, xp.maximum(va, 0.0), bad)


def _energy(images, xp):
    """Each image's sum of squared deviations from its mean (float64), shaped to broadcast
    against its surface's (..., 1, 1)."""
    x = images.astype(xp.float64)
    x = x - x.mean(axis=(-2, -1), keepdims=True)
    return xp.square(x).sum(axis=(-2, -1), keepdims=True)


def zncc(corr, left, right, max_shift=None, min_overlap=0.25, left_part=None):
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
    left_part : ZnccLeft, optional
        :func:`zncc_left` of ``left`` for these arguments, computed once for many calls.

    Returns
    -------
    float32 ndarray shaped like ``corr``.
    """
    xp = array_module_of(corr, left, right)
    if left_part is None:
        left_part = zncc_left(left, right.shape, max_shift, min_overlap)
    ky, kx, ya, yb, xa, xb = overlap_bounds(left.shape, right.shape, max_shift)
    (rh, rw) = right.shape[-2:]
    y0, y1, x0, x1 = [np.clip(v, 0, m) for v, m in ((ya, rh), (yb, rh), (xa, rw), (xb, rw))]
    # the right side's prefix rows once, then the surface a block of rows at a time on the
    # CPU (each row's figures its own: the same numbers; the dozen float64 passes of a block
    # stay in the core's cache, where a 1024x1024 frame's whole surface went through memory)
    needed = np.unique(np.concatenate([y0, y1]))
    ho, wo = corr.shape[-2:]
    step = max(1, ZNCC_BLOCK // max(wo, right.shape[-1]))
    energy = _energy(right, xp)
    if xp is not np or step >= ho:
        return _normalized(corr, left_part, *(
            _band_sums(_PrefixRows(v, needed, xp), y0, y1, x0, x1, xp)
            for v in (right, xp.square(right, dtype=xp.float64))), energy, xp)
    out = np.empty(corr.shape, np.float32)
    planes = np.broadcast_shapes(corr.shape[:-2], right.shape[:-2])
    for plane in np.ndindex(*planes):
        def one(a, k=plane):  # (this plane of a, or a's only one: broadcast)
            return a[k[len(k) - (a.ndim - 2):]] if a.ndim > 2 else a
        r = one(right)
        tables = [_PrefixRows(v, needed, xp) for v in (r, np.square(r, dtype=np.float64))]
        c, part, e = one(corr), [one(v) for v in left_part], one(energy)
        into = out[plane[len(plane) - (out.ndim - 2):]]
        for a in range(0, ho, step):
            rows = slice(a, a + step)
            into[rows] = _normalized(c[rows], ZnccLeft(*(v[rows] for v in part)), *(
                _band_sums(t, y0[rows], y1[rows], x0, x1, xp) for t in tables), e, xp)
    return out


#: values (float64) of a block of the CPU's ZNCC surface: a few arrays of it fit a core's cache
ZNCC_BLOCK = 32768


def _normalized(corr, left_part, sb, sbb, energy, xp):
    """:func:`zncc` of the raw sums ``corr`` from the left side's figures and the right
    side's rectangle sums ``sb``, ``sbb`` (new float64 arrays, used up) and whole
    ``energy`` (:func:`_energy`)."""
    nn, mean_a, va, bad = left_part
    # in place where the operands allow: these are the largest arrays of a CPU run
    num = corr.astype(xp.float64)
    num -= mean_a * sb
    sb *= sb
    sb /= nn
    vb = xp.subtract(sbb, sb, out=sb)  # sbb - sb**2 / n
    ok = ~bad & (vb > FLAT * sbb) & (vb > EMPTY * energy)
    xp.maximum(vb, 0.0, out=vb)
    vb *= va
    ok &= vb > 0
    vb[~ok] = 1.0
    xp.sqrt(vb, out=vb)
    num /= vb
    num[xp.broadcast_to(~ok, num.shape)] = -1.0
    return num.astype(xp.float32)
