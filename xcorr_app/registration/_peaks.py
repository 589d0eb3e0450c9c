"""Peak finding on batched correlation surfaces.

A correlation surface ``corr`` has shape ``(..., Ho, Wo)``; every leading axis is a batch axis
and all functions here work on the whole batch at once (no Python loop), on NumPy or CuPy
arrays (the result has the module of the input).

Layout convention of xcorr: ``corr[iy, ix] = sum_n reference[n + k] * moving[n]`` with
``k = (iy - oy, ix - ox)``, where ``origin = (oy, ox)`` is the index of zero shift.  The shift
of a peak at ``(iy, ix)`` is therefore ``(iy - oy, ix - ox)``: the ``(dy, dx)`` to apply to the
moving image to align it with the reference (the convention of
``skimage.registration.phase_cross_correlation``).

Examples
--------
>>> import numpy as np
>>> yy, xx = np.mgrid[:9, :9]
>>> corr = np.exp(-((yy - 5.2) ** 2 + (xx - 3.0) ** 2) / 2.0)
>>> shifts, peak, conf = find_shifts(corr, origin=(4, 4), subpixel="gaussian")
>>> np.round(shifts, 6)
array([ 1.2, -1. ])
"""

from __future__ import annotations

import numpy as np

from ..backend import array_module_of
from ..errors import InputError
from ._peak_math import border_flags, fits, subpixel_shifts, surface_argmax

SUBPIXEL_METHODS = ("gaussian", "parabolic", "gaussian3", "parabolic3", "none")


def _check_surface(corr):
    if corr.ndim < 2:
        raise InputError(f"a correlation surface needs at least 2 dimensions, got shape {corr.shape}")


def _gather(corr, iy, ix):
    """``corr[..., iy, ix]`` per surface, as float64 of shape ``iy.shape``."""
    xp = array_module_of(corr)
    wo = corr.shape[-1]
    flat = corr.reshape(corr.shape[:-2] + (-1,))
    idx = (iy * wo + ix).astype(xp.int64)[..., None]
    return xp.take_along_axis(flat, idx, axis=-1)[..., 0].astype(xp.float64)


def peak_index(corr):
    """Integer position of the maximum of each surface.

    Parameters
    ----------
    corr : (..., Ho, Wo) ndarray
        Correlation surfaces (NumPy or CuPy).

    Returns
    -------
    iy, ix : int64 ndarrays of shape ``corr.shape[:-2]``
        Row and column of the first maximum of each surface.

    Examples
    --------
    >>> import numpy as np
    >>> corr = np.zeros((2, 4, 5)); corr[0, 1, 3] = 1; corr[1, 2, 0] = 1
    >>> iy, ix = peak_index(corr)
    >>> iy.tolist(), ix.tolist()
    ([1, 2], [3, 0])
    """
    _check_surface(corr)
    xp = array_module_of(corr)
    if xp is not np and fits(corr):  # one kernel (peak_math.cu), the same first maximum
        return surface_argmax(corr)[:2]
    # Row by row, then over the rows' maxima: the same first maximum in row-major order as a
    # flat argmax, but a GPU reduction with Ho outputs per surface instead of one.
    col = xp.asarray(corr.argmax(axis=-1), dtype=xp.int64)                      # (..., Ho)
    row_max = xp.take_along_axis(corr, col[..., None], axis=-1)[..., 0]
    iy = xp.asarray(row_max.argmax(axis=-1), dtype=xp.int64)
    ix = xp.take_along_axis(col, iy[..., None], axis=-1)[..., 0]
    return iy, ix


def _neighbours(corr, iy, ix, axis):
    """Values before, at and after the peak along ``axis`` (-2 rows, -1 columns), and whether
    both neighbours lie inside the surface."""
    xp = array_module_of(corr)
    n = corr.shape[axis]
    pos = iy if axis == -2 else ix
    before = xp.clip(pos - 1, 0, n - 1)
    after = xp.clip(pos + 1, 0, n - 1)
    if axis == -2:
        cm, cp = _gather(corr, before, ix), _gather(corr, after, ix)
    else:
        cm, cp = _gather(corr, iy, before), _gather(corr, iy, after)
    inside = (pos > 0) & (pos < n - 1)
    return cm, _gather(corr, iy, ix), cp, inside


def _vertex(cm, c0, cp, ok):
    """Vertex offset of the parabola through (-1, cm), (0, c0), (1, cp); 0 where not ``ok``."""
    xp = array_module_of(c0)
    denom = cm - 2.0 * c0 + cp
    ok = ok & (denom < 0) & xp.isfinite(denom)  # a maximum, not flat or a minimum
    off = 0.5 * (cm - cp) / xp.where(ok, denom, -1.0)
    return xp.where(ok, xp.clip(off, -0.5, 0.5), 0.0) + 0.0  # + 0.0 turns -0.0 into 0.0


def subpixel_parabolic(corr, iy, ix):
    """Sub-pixel peak offsets from 3-point parabolas along the rows and columns of the peak.

    A parabola through three values along each of the three rows and three columns of the
    peak's 3x3 neighbourhood; the rows' vertices lie on a line, the columns' on another, and
    the offset is where they cross (on a peak elongated along a diagonal the vertex of the
    middle row alone is biased towards the diagonal).  Where that does not hold (a border, a
    fit that is not a maximum, lines near parallel, a crossing beyond one pixel) it is the
    classic fit through the middle row and column.

    Parameters
    ----------
    corr : (..., Ho, Wo) ndarray
        Correlation surfaces.
    iy, ix : int ndarrays of shape ``corr.shape[:-2]``
        Integer peak positions (usually from :func:`peak_index`).

    Returns
    -------
    fy, fx : float64 ndarrays of shape ``corr.shape[:-2]``
        Offsets in ``[-1, 1]`` to add to ``iy`` and ``ix`` (``[-0.5, 0.5]`` from the classic
        fit).  The offset along an axis is 0 where the peak lies on the border of that axis, or
        where the three values do not make a maximum (flat or convex: denominator ``>= 0``).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(7.0)
    >>> corr = -((x[:, None] - 3.25) ** 2) - (x[None, :] - 2.0) ** 2
    >>> fy, fx = subpixel_parabolic(corr, *peak_index(corr))
    >>> float(fy), float(fx)
    (0.25, 0.0)
    """
    _check_surface(corr)
    if array_module_of(corr) is not np and fits(corr, iy, ix):
        out = subpixel_shifts(corr, iy, ix, "parabolic3")  # one kernel: peak_math.cu
        return out[..., 0], out[..., 1]
    return _ridge_fit(corr, iy, ix, log=False)


def _gaussian_axis(corr, iy, ix, axis):
    xp = array_module_of(corr)
    cm, c0, cp, inside = _neighbours(corr, iy, ix, axis)
    positive = (cm > 0) & (c0 > 0) & (cp > 0)
    logs = [xp.log(xp.where(positive, c, 1.0)) for c in (cm, c0, cp)]
    return xp.where(positive, _vertex(*logs, inside), _vertex(cm, c0, cp, inside))


def _axis_fits(corr, iy, ix, log):
    """The classic 3-point fits through the integer row and column of the peak (Gaussian with
    ``log``, falling back to the parabola where a value is ``<= 0``)."""
    if log:
        return _gaussian_axis(corr, iy, ix, -2), _gaussian_axis(corr, iy, ix, -1)
    return _vertex(*_neighbours(corr, iy, ix, -2)), _vertex(*_neighbours(corr, iy, ix, -1))


def _window(corr, iy, ix, log):
    """The 3x3 neighbourhood ``w[dy, dx]`` of each peak (of ``log(corr)`` with ``log``), and
    where it lies inside the surface (and, with ``log``, is positive)."""
    xp = array_module_of(corr)
    ho, wo = corr.shape[-2:]
    inside = (iy >= 1) & (iy <= ho - 2) & (ix >= 1) & (ix <= wo - 2)
    cy, cx = xp.clip(iy, 1, max(ho - 2, 1)), xp.clip(ix, 1, max(wo - 2, 1))
    w = {}
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            v = _gather(corr, xp.clip(cy + dy, 0, ho - 1), xp.clip(cx + dx, 0, wo - 1))
            if log:
                inside &= v > 0
                v = xp.log(xp.where(v > 0, v, 1.0))
            w[dy, dx] = v
    return w, inside


def _free_vertex(cm, c0, cp, ok):
    """Vertex offset of the parabola through (-1, cm), (0, c0), (1, cp), not clipped, and
    ``ok`` narrowed to where it is a maximum."""
    xp = array_module_of(c0)
    denom = cm - 2.0 * c0 + cp
    ok = ok & (denom < 0) & xp.isfinite(denom)
    return 0.5 * (cm - cp) / xp.where(ok, denom, -1.0), ok


def _ridge_fit(corr, iy, ix, log):
    """3-point fits along the three rows and the three columns of the peak's 3x3 neighbourhood,
    intersected.

    On a peak elongated along a diagonal the vertex of a row's fit moves with the row (on a
    line, for a 2-D quadratic or Gaussian), so the classic fits through the integer row and
    column are biased (0.25 px on the moon sample); the rows' vertices give that line
    ``x = rx + sx * y``, the columns' ``y = cy + sy * x``, and their crossing is the peak.
    Falls back to the classic fits where the window does not fit, a fit is not a maximum, the
    lines are near parallel or the crossing lies beyond one pixel.
    """
    xp = array_module_of(corr)
    w, ok = _window(corr, iy, ix, log)
    rx, cy = {}, {}
    for k in (-1, 0, 1):
        rx[k], ok = _free_vertex(w[k, -1], w[k, 0], w[k, 1], ok)
        cy[k], ok = _free_vertex(w[-1, k], w[0, k], w[1, k], ok)
    sx, sy = (rx[1] - rx[-1]) / 2, (cy[1] - cy[-1]) / 2
    den = 1.0 - sx * sy
    ok &= den > 0.1  # within 0.1 of parallel: the crossing is noise
    fx = (rx[0] + sx * cy[0]) / xp.where(ok, den, 1.0)
    fy = cy[0] + sy * fx
    ok &= (xp.abs(fx) <= 1) & (xp.abs(fy) <= 1)
    gy, gx = _axis_fits(corr, iy, ix, log)
    return xp.where(ok, fy, gy) + 0.0, xp.where(ok, fx, gx) + 0.0


def subpixel_gaussian(corr, iy, ix):
    """Sub-pixel peak offsets from 3-point Gaussian fits along the rows and columns of the peak.

    The parabolas of :func:`subpixel_parabolic` are fitted through the logarithms of the
    values, which is exact for a Gaussian peak, also one elongated along a diagonal.  Where a
    value of the 3x3 neighbourhood is ``<= 0`` the classic fit through the middle row and
    column is used, with the plain parabola where one of its three values is ``<= 0``.

    Parameters
    ----------
    corr : (..., Ho, Wo) ndarray
        Correlation surfaces.
    iy, ix : int ndarrays of shape ``corr.shape[:-2]``
        Integer peak positions.

    Returns
    -------
    fy, fx : float64 ndarrays of shape ``corr.shape[:-2]``
        Offsets in ``[-1, 1]``; 0 at a border or for a degenerate fit.

    Examples
    --------
    >>> import numpy as np
    >>> yy, xx = np.mgrid[:8, :8]
    >>> corr = np.exp(-((yy - 4.4) ** 2 + (xx - 2.7) ** 2) / 3.0)
    >>> fy, fx = subpixel_gaussian(corr, *peak_index(corr))
    >>> round(float(fy), 9), round(float(fx), 9)
    (0.4, -0.3)
    """
    _check_surface(corr)
    if array_module_of(corr) is not np and fits(corr, iy, ix):
        out = subpixel_shifts(corr, iy, ix, "gaussian3")  # one kernel: peak_math.cu
        return out[..., 0], out[..., 1]
    return _ridge_fit(corr, iy, ix, log=True)


def subpixel_fit2d(corr, iy, ix, log=False):
    """Sub-pixel offsets from a least-squares paraboloid over the 3x3 neighbourhood of the peak.

    Fits ``f(y, x) = a + b x + c y + d x**2 + e x y + g y**2`` (to ``log(corr)`` with ``log=True``:
    a 2-D gaussian) and returns its vertex.  Like :func:`subpixel_gaussian`, it follows peaks
    that are elongated along a diagonal (its cross term ``e``), by least squares over the nine
    values.  Where the 3x3 window does not fit (border, non-positive values with ``log``) or the
    fit is not a maximum, the classic 3-point fits through the peak's row and column are used.

    Returns
    -------
    fy, fx : float64 ndarrays of shape ``corr.shape[:-2]``, within ``[-1, 1]``.

    Examples
    --------
    >>> import numpy as np
    >>> yy, xx = np.mgrid[:9, :9].astype(float)
    >>> u, v = yy - 4.3, xx - 3.8
    >>> corr = np.exp(-(u**2 + 1.6 * u * v + v**2) / 4)  # elongated along a diagonal
    >>> fy, fx = subpixel_fit2d(corr, *peak_index(corr), log=True)
    >>> round(float(fy), 6), round(float(fx), 6)
    (0.3, -0.2)
    """
    _check_surface(corr)
    xp = array_module_of(corr)
    if xp is not np and fits(corr, iy, ix):
        out = subpixel_shifts(corr, iy, ix, "gaussian" if log else "parabolic")  # one kernel
        return out[..., 0], out[..., 1]
    w, inside = _window(corr, iy, ix, log)
    col = {dx: w[-1, dx] + w[0, dx] + w[1, dx] for dx in (-1, 0, 1)}
    row = {dy: w[dy, -1] + w[dy, 0] + w[dy, 1] for dy in (-1, 0, 1)}
    b, c = (col[1] - col[-1]) / 6, (row[1] - row[-1]) / 6
    d, g = (col[1] + col[-1] - 2 * col[0]) / 6, (row[1] + row[-1] - 2 * row[0]) / 6
    e = (w[1, 1] - w[-1, 1] - w[1, -1] + w[-1, -1]) / 4
    det = 4 * d * g - e * e
    ok = inside & (d < 0) & (g < 0) & (det > 0)
    safe = xp.where(ok, det, 1.0)
    fx = (e * c - 2 * g * b) / safe
    fy = (e * b - 2 * d * c) / safe
    ok &= (xp.abs(fx) <= 1) & (xp.abs(fy) <= 1)
    fy3, fx3 = _axis_fits(corr, iy, ix, log)
    return xp.where(ok, fy, fy3) + 0.0, xp.where(ok, fx, fx3) + 0.0


def _neighbourhood(pad, reduce, xp):
    """``reduce`` (``xp.maximum`` or ``xp.minimum``) over every 3x3 neighbourhood, centre
    included, of the surfaces padded by one on each side: separable, four passes."""
    rows = reduce(pad[..., :, :-2], pad[..., :, 1:-1])
    reduce(rows, pad[..., :, 2:], out=rows)
    out = reduce(rows[..., :-2, :], rows[..., 1:-1, :])
    return reduce(out, rows[..., 2:, :], out=out)


def _strict_local_maxima(corr, xp):
    """Points >= all 8 neighbours and > at least one (flat plateaus are not peaks); outside the
    surface counts as -inf.

    A point is >= its neighbours where it equals the maximum of its 3x3 neighbourhood, and >
    one of them where the minimum of that neighbourhood is smaller: two separable passes of
    four elementwise steps, instead of 16 full-size comparisons (3.5x faster on the CPU).
    """
    if corr.dtype.kind != "f":
        corr = corr.astype(xp.float64)
    pad = xp.pad(corr, [(0, 0)] * (corr.ndim - 2) + [(1, 1), (1, 1)], constant_values=-xp.inf)
    with np.errstate(invalid="ignore"):  # a NaN anywhere in the 3x3: hi is NaN, not a peak
        hi = _neighbourhood(pad, xp.maximum, xp)
        lo = _neighbourhood(pad, xp.minimum, xp)
        return (corr >= hi) & (lo < corr)


def confidence(corr, iy, ix, exclusion=2):
    """Peak-to-second-peak ratio of each surface.

    The second peak is the highest *local maximum* (a point at least as high as its 8
    neighbours and higher than one of them) outside the ``(2*exclusion+1)**2`` window centred on
    the peak.  Counting only local maxima keeps the shoulders of a broad main peak out.

    Parameters
    ----------
    corr : (..., Ho, Wo) ndarray
        Correlation surfaces (meant for surfaces with a positive peak).
    iy, ix : int ndarrays of shape ``corr.shape[:-2]``
        Peak positions.
    exclusion : int, optional
        Half width of the window around the peak that is left out.

    Returns
    -------
    ratio : float64 ndarray of shape ``corr.shape[:-2]``
        ``peak / max(|second|, tiny)``, with these special cases:

        * ``inf`` when there is no local maximum outside the window (a single clean peak);
        * exactly ``1.0`` when the second value equals the peak, or for a constant surface
          (zeros included): there is no distinct peak.

        Values near 1 mean an ambiguous peak; a clean correlation peak gives a large ratio.

    Examples
    --------
    >>> import numpy as np
    >>> corr = np.zeros((9, 9)); corr[2, 2] = 4.0; corr[7, 6] = 1.0
    >>> float(confidence(corr, *peak_index(corr)))
    4.0
    """
    _check_surface(corr)
    xp = array_module_of(corr)
    ho, wo = corr.shape[-2:]
    rows = xp.arange(ho)[:, None]
    cols = xp.arange(wo)[None, :]
    window = (xp.abs(rows - iy[..., None, None]) <= exclusion) & (
        xp.abs(cols - ix[..., None, None]) <= exclusion)
    candidates = _strict_local_maxima(corr, xp) & ~window
    outside = xp.where(candidates, corr, -xp.inf)  # float64 would compare the same
    second = outside.reshape(outside.shape[:-2] + (-1,)).max(axis=-1).astype(xp.float64)
    peak = _gather(corr, iy, ix)
    flat = corr.reshape(corr.shape[:-2] + (-1,))
    constant = flat.max(axis=-1) == flat.min(axis=-1)
    return confidence_ratio(peak, second, constant, second == -xp.inf)


def confidence_ratio(peak, second, constant, nothing_outside):
    """The ratio of :func:`confidence` from its parts: peak and second-peak values, whether the
    surface is constant and whether there is no second peak (arrays of one module)."""
    xp = array_module_of(peak, second)
    tiny = np.finfo(np.float64).tiny
    with np.errstate(over="ignore", divide="ignore"):  # peak / tiny -> inf
        ratio = peak / xp.maximum(xp.abs(xp.where(nothing_outside, 1.0, second)), tiny)
    ratio = xp.where(second == peak, 1.0, ratio)
    ratio = xp.where(nothing_outside, xp.inf, ratio)
    return xp.where(constant, 1.0, ratio)


def find_shifts(corr, origin, subpixel="gaussian", exclusion=2, return_index=False):
    """Shift, peak value and confidence of every correlation surface.

    Parameters
    ----------
    corr : (..., Ho, Wo) ndarray
        Correlation surfaces in the xcorr layout (see the module docstring).
    origin : (float, float)
        Index ``(oy, ox)`` of zero shift in each surface.
    subpixel : {"gaussian", "parabolic", "gaussian3", "parabolic3", "none"}, optional
        Sub-pixel refinement of the integer peak: ``gaussian`` / ``parabolic`` fit the 3x3
        neighbourhood in 2-D (:func:`subpixel_fit2d`), the ``...3`` variants intersect 3-point
        fits along its rows and columns (:func:`subpixel_gaussian`).
    exclusion : int, optional
        Half width of the window left out around the peak for :func:`confidence`.
    return_index : bool, optional
        Also return the integer peak positions ``iy, ix`` (from :func:`peak_index`), e.g. to
        tell peaks on the border of the surface (see :func:`on_border`).

    Returns
    -------
    shifts : float64 ndarray of shape ``corr.shape[:-2] + (2,)``
        ``(dy, dx)`` to apply to the moving image to align it with the reference.
    peak : float64 ndarray of shape ``corr.shape[:-2]``
        Surface value at the integer peak.
    conf : float64 ndarray of shape ``corr.shape[:-2]``
        Peak-to-second-peak ratio (see :func:`confidence`).
    iy, ix : int64 ndarrays of shape ``corr.shape[:-2]``
        Only with ``return_index=True``.

    Examples
    --------
    >>> import numpy as np
    >>> corr = np.zeros((3, 7, 7)); corr[:, 5, 1] = 1.0
    >>> shifts, peak, conf = find_shifts(corr, origin=(3, 3), subpixel="none")
    >>> shifts[0].tolist(), peak.tolist()
    ([2.0, -2.0], [1.0, 1.0, 1.0])
    """
    iy, ix = peak_index(corr)
    shifts = refined_shifts(corr, iy, ix, origin, subpixel)
    out = (shifts, _gather(corr, iy, ix), confidence(corr, iy, ix, exclusion))
    return out + (iy, ix) if return_index else out


def on_border(iy, ix, origin, bound):
    """Whether each integer peak lies on the border of the searched window.

    A maximum on the border of a bounded search (``|shift| == bound`` along an axis) is not a
    peak: the surface may rise further outside the window, so the true shift may lie beyond it
    (and the subpixel fit along that axis has no neighbour on one side).  An axis of bound 0
    (not searched) has no border.

    Parameters
    ----------
    iy, ix : int ndarrays
        Integer peak positions in the surface.
    origin : (int, int)
        Index of zero shift.
    bound : (int, int)
        The largest shift searched along each axis.

    Returns
    -------
    bool ndarray of the shape and module of ``iy``.

    Examples
    --------
    >>> import numpy as np
    >>> on_border(np.array([4, 8, 0]), np.array([4, 5, 3]), (4, 4), (4, 4)).tolist()
    [False, True, True]
    >>> on_border(np.array([0, 0]), np.array([3, 6]), (0, 3), (0, 3)).tolist()
    [False, True]
    """
    xp = array_module_of(iy, ix)
    if xp is not np and iy.dtype == ix.dtype == np.int64 and iy.shape == ix.shape:
        return border_flags(iy, ix, origin, bound)  # one kernel: peak_math.cu
    by, bx = int(bound[0]), int(bound[1])
    ky, kx = xp.abs(iy - int(origin[0])), xp.abs(ix - int(origin[1]))
    return ((ky >= by) & (by > 0)) | ((kx >= bx) & (bx > 0))


def refined_shifts(corr, iy, ix, origin, subpixel="gaussian"):
    """Shifts ``(dy, dx)`` (float64, ``iy.shape + (2,)``) of the integer peaks ``iy, ix`` of
    ``corr`` refined by ``subpixel`` (as in :func:`find_shifts`)."""
    if subpixel not in SUBPIXEL_METHODS:
        raise InputError(f"unknown subpixel method {subpixel!r}; use one of "
                         f"{', '.join(SUBPIXEL_METHODS)}")
    xp = array_module_of(corr)
    if xp is not np and fits(corr, iy, ix):  # the gather and the fit in one kernel
        return subpixel_shifts(corr, iy, ix, subpixel, origin)
    if subpixel in ("gaussian", "parabolic"):
        fy, fx = subpixel_fit2d(corr, iy, ix, log=subpixel == "gaussian")
    elif subpixel == "parabolic3":
        fy, fx = subpixel_parabolic(corr, iy, ix)
    elif subpixel == "gaussian3":
        fy, fx = subpixel_gaussian(corr, iy, ix)
    else:
        fy = fx = xp.zeros(iy.shape, dtype=xp.float64)
    oy, ox = float(origin[0]), float(origin[1])
    return xp.stack([iy - oy + fy, ix - ox + fx], axis=-1).astype(xp.float64)
