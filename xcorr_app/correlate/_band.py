"""GPU launcher of the warp-per-result kernel (``kernels/correlate/band_xcorr.cu``): small bounded
searches over many pairs, the patch search of piecewise-rigid registration.

Our addition beyond the thesis.  A warp sums one result, all of its ``(2d + 1)**2`` shifts in
registers (``d <= 4``), walking the left rows once: each left row costs one new right row, a
row segment of the left and ``(2d + 1)**2 * C`` multiply-adds per lane (``C`` right columns a
lane), so the kernel is bound by its multiply-adds, not its loads, and needs no atomics.  The
patch pass launches it directly (:func:`band_fits`): on its problems it beats the planner's
measured best by 1.6-3.2x (docs/kernels.md).  It is not among
the planner's candidates (its cost model has no coefficients for it); ``method="band"`` asks for
it.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> t = cp.random.rand(16, 145, 145, dtype=cp.float32)  # doctest: +SKIP
>>> w = cp.random.rand(16, 256, 145, 145, dtype=cp.float32)  # doctest: +SKIP
>>> band_xcorr(t, w, "n_to_mn", max_shift=4).shape  # doctest: +SKIP
(16, 256, 9, 9)
"""

from __future__ import annotations

import numpy as np

from .._cuda import KernelFamily
from ..errors import InputError
from ._forms import FORM_IDS
from ._shifts import normalize_max_shift, output_shape
from ._warp_shuffle import geometry, launch

#: the searches compiled: +-1 .. +-4 px (``2d + 1`` shifts along each axis)
BAND_SHIFTS = (3, 5, 7, 9)
#: right columns a lane sums (a warp's column group: 32 x C columns)
BAND_COLUMNS = (2, 3, 4, 5)
BAND_FORMS = ("n_to_mn",)
WARPS_PER_BLOCK = 4  # __launch_bounds__(128, 3)
BAND = KernelFamily("band_xcorr.cu", "band_xcorr",
                    [(FORM_IDS[f], k, k, c) for f in BAND_FORMS for k in BAND_SHIFTS
                     for c in BAND_COLUMNS])


def lane_columns(right_w) -> int:
    """The right columns a lane sums: the fewest column groups of at most 32 x 5 columns,
    shared out evenly (at least 2 a lane).

    >>> lane_columns(145), lane_columns(70), lane_columns(20), lane_columns(480)
    (5, 3, 2, 5)
    """
    groups = -(-int(right_w) // (32 * BAND_COLUMNS[-1]))
    return max(BAND_COLUMNS[0], -(-int(right_w) // (32 * groups)))


def band_fits(form, left_shape, right_shape, max_shift) -> bool:
    """Whether the kernel runs a problem: ``n_to_mn`` with the same bound of 1 to 4 px along
    both axes (``(2d + 1) x (2d + 1)`` results)."""
    if form not in BAND_FORMS or max_shift is None:
        return False
    try:
        dy, dx = normalize_max_shift(max_shift)
    except (InputError, TypeError, ValueError):
        return False
    ho, wo = output_shape(tuple(left_shape[-2:]), tuple(right_shape[-2:]), (dy, dx))
    return dy == dx and ho == wo == 2 * dy + 1 and ho in BAND_SHIFTS


def configure_band(form, left_shape, right_shape, max_shift, params):
    """The launch of a problem (:func:`~._warp_shuffle.launch`); ValueError where it does not
    fit (:func:`band_fits`)."""
    if not band_fits(form, left_shape, right_shape, max_shift):
        raise ValueError(f"the band kernel runs n_to_mn searches of +-1 to +-4 px (the same "
                         f"bound along both axes), not {form} with max_shift {max_shift!r}")
    lay, out_shape, geom = geometry(form, left_shape, right_shape, max_shift)
    ho, wo = out_shape[-2:]
    fn = BAND.get(lay.form_id, ho, wo, lane_columns(lay.right_shape[1]))
    n = lay.n_results
    grid = (-(-n // WARPS_PER_BLOCK), 1, 1)
    return fn, grid, (32, WARPS_PER_BLOCK, 1), geom + (np.int32(lay.m), np.int32(n)), 0, \
        False, out_shape


def band_xcorr(left, right, form="n_to_mn", max_shift=1, out=None):
    """Cross-correlate CuPy arrays with the warp-per-result kernel.

    Parameters
    ----------
    left, right, form, max_shift, out
        As :func:`xcorr_app.cross_correlate` (:func:`band_fits` must hold; float32 result).

    Returns
    -------
    cupy.ndarray
        ``batch_shape + (2d + 1, 2d + 1)`` float32.
    """
    return launch(configure_band, left, right, form, max_shift, out, ())
