"""The patch pass's refinement on the GPU, fused (``kernels/alignment/refine_surfaces.cu``):
:func:`refine_template_gpu`, the template's side once a pass, and :func:`refine_surfaces_gpu`,
every window sampled through the field, tapered, correlated within +-1 px, normalized and its
peak found in one launch (the CPU's steps: :func:`~._patches.refine_shifts`).

The field along a window's rows: one launch before the refinement's makes every row's
coefficients (``field_rows``: ``sum_i wy[y, i] S[n, i, j, a]``), the refinement sums them
against the columns' weights a pixel, the grid's width compiled in (a cubic a spline segment
instead cost more in dependent loads than it saved in FMAs: docs/kernels.md).
"""

from __future__ import annotations

import numpy as np

from ..._cuda import KernelFamily, compile_together, kept_on_device
from ...backend import to_numpy
from ...errors import InputError
from ._field_resample import (MAX_GRID, check_windows, column_weights32, output_array,
                              through_field, window_starts)

SOURCE = "refine_surfaces.cu"
#: the refinement's block: 128 threads, eight blocks an SM (the fastest measured: docs/kernels.md)
REFINE_THREADS = 128
#: grid widths the refinement is compiled for (its field's sums unrolled, faster than the
#: any-width kernel); others: 0 (any width)
REFINE_GX = (1, 2, 3, 4, 5, 6, 7, 8)
REFINE = KernelFamily(SOURCE, "refine_surfaces",
                      [(REFINE_THREADS, g) for g in (0,) + REFINE_GX])
#: the field's row coefficients of a refinement launch's frames, made before it
FIELD_ROWS = KernelFamily(SOURCE, "field_rows", [()])
ROWS_THREADS = 128
#: the template's side of the refinement (its tapered patches and their sums), per pass
TEMPLATE_THREADS = 256
TEMPLATE = KernelFamily(SOURCE, "refine_template", [(TEMPLATE_THREADS,)])
#: the row coefficients of a strip of window rows (``2 gx`` floats a row) take at most this
#: many floats of shared memory (8 KiB; with the static arrays, 20.4 KiB, eight blocks an SM
#: still fit): grids at most half as many patches wide are fused (one strip a window at 8x8)
REFINE_STRIP_FLOATS = 2048
REFINE_MAX_GX = REFINE_STRIP_FLOATS // 2


def refine_template_gpu(tpatches, taper, apply_taper=True):
    """The template's side of :func:`refine_surfaces_gpu`, made on the device in one launch
    (``refine_template`` of ``kernels/alignment/refine_surfaces.cu``):
    ``(tnear, (mean, var, bad), tp)``.

    ``tnear``: the template patches ``tpatches`` ``(P, ph, pw)`` (CuPy) as
    :func:`~._patches.tapered` makes them with ``taper`` (with ``apply_taper`` False, or
    ``taper`` None: as they are); ``mean, var, bad``: ``(P, 3, 3)`` float64, float64, bool,
    :func:`~xcorr_app.registration._normalize.zncc_left` of ``tnear`` for a search of +-1 px
    (equal to float64 rounding); ``tp``: ``taper`` ``(ph, pw)`` as a float32 CuPy array, kept
    per taper and device (None stays None).  Nothing waits for the device."""
    import cupy as cp

    tpl = cp.ascontiguousarray(tpatches, cp.float32)
    if tpl.ndim != 3 or 0 in tpl.shape:
        raise InputError(f"template patches must be a non-empty (P, ph, pw) array, got "
                         f"shape {tpl.shape}")
    p, ph, pw = tpl.shape
    tp = None
    if taper is not None:
        t = np.ascontiguousarray(to_numpy(taper), np.float32)
        if t.shape != (ph, pw):
            raise InputError(f"the taper {t.shape} does not match patches of {ph}x{pw}")
        tp = kept_on_device(t)
    use = apply_taper and tp is not None
    tnear = cp.empty_like(tpl)
    mean, var = cp.empty((p, 3, 3), cp.float64), cp.empty((p, 3, 3), cp.float64)
    bad = cp.empty((p, 3, 3), cp.bool_)
    TEMPLATE.get(TEMPLATE_THREADS)((p,), (TEMPLATE_THREADS,),
                                   (tpl, tp if use else tpl, np.int32(use), tnear, mean, var,
                                    bad, np.int32(ph), np.int32(pw)))
    return (tnear if use else tpl), (mean, var, bad), tp


def refine_surfaces_gpu(frames, starts_y, starts_x, size, patch_field, weights, taper, tpatches,
                        left, out=None, surfaces=None, last=None, converged=0.0):
    """The refinement of the patch pass in one launch (per 65535 frames): every window of
    ``frames`` ``(N, H, W)`` float32 CuPy sampled through the field (as
    :func:`~._field_resample.windows_through_gpu`, written to ``out`` ``(P, N, ph, pw)``), less
    its mean and times ``taper`` (``(ph, pw)`` float32 CuPy, or None: as is), its ZNCC surface
    ``(P * N, 3, 3)`` float32 against ``tpatches`` ``(P, ph, pw)`` within +-1 px and the
    surface's first maximum ``iy, ix`` (int64).  ``left``: ``(mean, var, bad)`` of
    :func:`refine_template_gpu`.  Grids wider than :data:`REFINE_MAX_GX` patches: InputError
    (the caller measures them unfused).  ``surfaces``: ``(z, iy, ix)`` to write into (e.g.
    poisoned ones in the tests), else new arrays.  ``last``: the windows' corrections of the
    pass before ``(N, P, 2)`` float64 CuPy (as :func:`~._patches.refine_shifts` gives them):
    a window under ``converged`` px on both axes is not sampled again, its surface flat about
    its centre (a subpixel offset of 0)."""
    import cupy as cp

    frames, wy, _, s = through_field(frames, starts_y, starts_x, patch_field, weights,
                                     REFINE_MAX_GX)
    wx32 = column_weights32(weights)
    n, h, w = frames.shape
    gy, gx = s.shape[1:3]
    ph, pw = size
    p = gy * gx
    tpl = cp.ascontiguousarray(tpatches, cp.float32)
    lmean, lvar, lbad = left
    typed = zip((lmean, lvar, lbad, taper), (cp.float64, cp.float64, cp.bool_, cp.float32))
    if tpl.shape != (p, ph, pw) or any(a.size != p * 9 for a in left) \
            or (taper is not None and taper.shape != (ph, pw)) \
            or any(a is not None and not (isinstance(a, cp.ndarray) and a.dtype == t
                                          and a.flags.c_contiguous) for a, t in typed):
        raise InputError(f"template patches {tpl.shape}, their sums and taper do not match "
                         f"{p} windows of {ph}x{pw} (C-contiguous CuPy arrays: float64 mean "
                         f"and variance, bool flags, float32 taper)")
    check_windows(starts_y, starts_x, size, (h, w))
    out = output_array(out, (p, n, ph, pw))
    if surfaces is None:
        z = cp.empty((p * n, 3, 3), cp.float32)
        iy, ix = cp.empty(p * n, cp.int64), cp.empty(p * n, cp.int64)
    else:
        z, iy, ix = surfaces
        if z.shape != (p * n, 3, 3) or z.dtype != cp.float32 or not z.flags.c_contiguous \
                or any(i.shape != (p * n,) or i.dtype != cp.int64 or not i.flags.c_contiguous
                       for i in (iy, ix)):
            raise InputError(f"surfaces must be C-contiguous float32 ({p * n}, 3, 3) and two "
                             f"int64 ({p * n},) arrays")
    if last is not None:  # (the kernel reads it as laid out by the pass before: (P, N, 2))
        last = last.transpose(1, 0, 2)
        if last.shape != (p, n, 2) or last.dtype != cp.float64 or not last.flags.c_contiguous:
            raise InputError(f"last must be the pass before's (N, P, 2) = ({n}, {p}, 2) "
                             f"float64 corrections, a transposed C-contiguous array")
    sy, sx = window_starts(starts_y, starts_x)
    args = (REFINE_THREADS, gx if gx in REFINE_GX else 0)
    kernel, rows_kernel = compile_together([(REFINE, args), (FIELD_ROWS, ())])
    rows = cp.empty((min(n, MAX_GRID), h, 2 * gx), cp.float64)
    # the window's rows in strips of equal height, each strip's coefficients in shared memory
    most = max(1, REFINE_STRIP_FLOATS // (2 * gx))
    strip = -(-ph // -(-ph // most))
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        rows_kernel((-(-(h * 2 * gx) // ROWS_THREADS), b - a), (ROWS_THREADS,),
                    (wy, s, rows, np.int32(a), np.int32(h), np.int32(gy), np.int32(gx)))
        kernel((p, b - a), (REFINE_THREADS,),
               (frames, out, rows, wx32, sy, sx, taper if taper is not None else out,
                np.int32(taper is not None), tpl, lmean, lvar, lbad, z, iy, ix, np.int32(a),
                np.int32(n), np.int32(h), np.int32(w), np.int32(gx), np.int32(ph),
                np.int32(pw), np.int32(strip), lmean if last is None else last,
                np.int32(last is not None), np.float64(converged)),
               shared_mem=strip * 2 * gx * 4)
    return z, iy, ix
