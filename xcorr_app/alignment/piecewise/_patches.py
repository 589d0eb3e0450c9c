"""Piecewise-rigid registration: the shift of every patch of every frame, measured within
``max_deviation`` pixels of the frame's rigid shift (``align(..., patches=(gy, gx))``).

How (docs/how-align-works.md, "Piecewise-rigid"):

* The grid (:class:`PatchGrid`).  The patches tile the *common area* of the rigid pass (the
  part of the reference that every rigidly shifted frame covers, :func:`common_area`), less
  ``max_deviation + 2`` px on each side (:func:`patch_margin`), so that every frame's patch
  window, moved by the frame's rigid shift and its deviation, lies inside the frame: no
  padding, no invented pixels.  The field is extrapolated beyond the outermost patch centres
  (:mod:`._motion_field`).  ``gy x gx`` patches of equal size overlap by
  ``patch_overlap`` pixels (default: a quarter of the stride, area / count / 4, the ratio of
  NoRMCorre's defaults, 128-px grid cells with 32 px of overlap); the patch size is
  ``ceil((area + (g - 1) * overlap) / g)`` and the starts are spread evenly.
* The measurement (:func:`patch_shifts`).  The template patches (the rigid reference, or with
  ``reference="refined"`` the mean of the rigidly aligned frames) are correlated with the
  frames' patch windows in one ``n_to_mn`` call per chunk (left: the ``P`` template patches;
  right: for each, the same patch of the chunk's ``N`` frames), bounded by ``max_deviation``,
  normalized by ZNCC over the overlap of each shift (as the rigid path), and the peak is
  refined by the run's subpixel fit (``upsample`` and circular refinements are not used here:
  ``gaussian``), with the confidence of the rigid path (peak over second peak).  On the GPU
  the rigid path's fused kernels do all of it (:func:`patch_peaks`: ZNCC from summed-area
  tables, the peaks and confidences in two passes, the same subpixel kernel).
* The refinement (:func:`refine_shifts`, :data:`REFINE_PASSES` passes): every window is
  sampled through the smooth field of the shifts so far and measured again within +-1 px;
  the remainder is added to the patch's shift.  There both the window and the template's
  patch are weighted toward the patch centre (:func:`refine_taper`: flat over the central
  :data:`REFINE_FLAT` px, a cosine fall to the edge; patches up to that size are not
  weighted): a patch measures a texture-weighted mean of the field over its area, and where
  the spline through the centres departs from the true field inside a large patch (between
  and beyond the centres), that mean, not the value at the centre, was what the refinement
  matched (0.14 px RMS at the centres on the bench's 143-px patches, 0.07 with the weight).
* Low-confidence patches (:mod:`._low_patches`): a patch whose peak lies on the border of the
  ``max_deviation`` window, whose surface is flat or not finite, or whose confidence is at most
  1 (no distinct peak) or below ``min_confidence`` when given, takes the median of the
  deviations of its good neighbours (the 8 around it in the grid), repeated outwards until
  every patch has a value; a frame with no good patch keeps its rigid shift (deviation 0).

Examples
--------
>>> g = PatchGrid.make((4, 4), None, 4, (128, 128), (0, 128, 0, 128))
>>> g.size, g.overlap, g.starts_y.tolist()
((38, 38), (8, 8), [0, 30, 60, 90])
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import numbers

import numpy as np

from ... import backend
from ...correlate import Plan, band_fits, correlate_checked, first_shift
from ...errors import InputError
from ...registration import (SUBPIXEL_METHODS, ZnccLeft, find_shifts, on_border, refined_shifts,
                            summed_area_tables, surface_peaks, zncc, zncc_left)
from ...streaming import cpu_threads, one_blas_thread
from ._field_resample import (add_fields, check_windows, cubic_sample, gather_windows_gpu,
                              windows_through_gpu)
from ._refine_gpu import REFINE_MAX_GX, refine_surfaces_gpu, refine_template_gpu
from ._spline import dense_field

#: the smallest patch side: a patch must hold the search (2 * max_deviation + 1) and some
#: structure around it
MIN_PATCH_SIDE = 8
#: passes of refinement: every window sampled through the smooth motion field of the shifts
#: so far and measured again within +-1 px (:func:`refine_shifts`): a patch over a field
#: that varies across it measures a texture-weighted mean of the field, not its value at the
#: centre; sampled through the field, what remains is small and even
REFINE_PASSES = 3
#: a window whose correction in the pass before the last was under this (px, both axes) has
#: converged: the last pass leaves it (each pass shrinks what remains 3-5 times: it would move
#: it a few thousandths of a pixel; docs/how-align-works.md)
REFINE_CONVERGED = 0.01
#: the refinement's weight (:func:`refine_taper`): the central pixels weighted fully (motion
#: fields of microscopy vary over hundreds of pixels: within 64 px the spline and the field
#: agree); 48 px gave 0.06 px RMS on the bench stack but weighted the test's 49-px patches,
#: whose noise then grew (0.076 -> 0.10 px); 96 px gave 0.10 (docs/how-align-works.md)
REFINE_FLAT = 64


#: ``patch_template_passes``: the most templates refined from the corrected frames (as
#: ``reference="refined:ITER"``)
MAX_TEMPLATE_PASSES = 2

def parse_patches(patches, ndim=2):
    """``(gy, gx)`` from an int, a pair or ``"GYxGX"`` (positive integers), else InputError;
    ``ndim=3``: ``(gz, gy, gx)`` of volumes (an int: that many along each axis).

    >>> parse_patches(3), parse_patches("3"), parse_patches("4x6"), parse_patches((2, 5))
    ((3, 3), (3, 3), (4, 6), (2, 5))
    >>> parse_patches("1x4x4", ndim=3), parse_patches(2, ndim=3)
    ((1, 4, 4), (2, 2, 2))
    """
    if isinstance(patches, str) and patches.strip().isdigit():  # ("3": the command line's N)
        parts = [patches.strip()] * ndim
    elif isinstance(patches, str):
        parts = patches.lower().replace(",", "x").split("x")
    elif isinstance(patches, numbers.Integral):
        parts = [patches] * ndim
    else:
        try:
            parts = list(patches)
        except TypeError:
            parts = []
    try:
        grid = tuple(int(p) for p in parts)
        whole = all(float(p) == int(p) for p in parts)
    except (TypeError, ValueError):
        grid, whole = (), False
    if len(grid) != ndim or not whole:
        form, count = ("GYxGX", "two") if ndim == 2 else ("GZxGYxGX", "three")
        raise InputError(f"patches must be {form} ({count} positive integers), got {patches!r}")
    if min(grid) < 1:
        raise InputError(f"patches must be at least {'x'.join('1' * ndim)} (0 patches cannot "
                         f"be measured), got {patches!r}")
    return grid


def parse_overlap(patch_overlap, ndim=2):
    """``patch_overlap``: None, or a non-negative int for every axis, or one per axis, as
    ``ndim`` ints; else InputError."""
    if patch_overlap is None:
        return None
    ov = patch_overlap
    values = (ov,) * ndim if isinstance(ov, numbers.Integral) else tuple(ov) \
        if isinstance(ov, (tuple, list)) else ()
    if len(values) != ndim or any(isinstance(v, bool) or not isinstance(v, numbers.Integral)
                                  or v < 0 for v in values):
        raise InputError(f"patch_overlap must be a non-negative integer (or "
                         f"{'a pair' if ndim == 2 else 'one per axis (z, y, x)'}), got {ov!r}")
    return tuple(int(v) for v in values)


def check_deviation(max_deviation):
    """``max_deviation`` as an int >= 0, else InputError."""
    if isinstance(max_deviation, bool) or not isinstance(max_deviation, numbers.Integral):
        try:
            if float(max_deviation) != int(max_deviation):
                raise ValueError
        except (TypeError, ValueError):
            raise InputError(f"max_deviation must be an integer number of pixels, got "
                             f"{max_deviation!r}") from None
    if int(max_deviation) < 0:
        raise InputError(f"max_deviation must be >= 0, got {max_deviation!r}")
    return int(max_deviation)


def check_template_passes(template_passes) -> int:
    """``patch_template_passes`` as an int in 0..:data:`MAX_TEMPLATE_PASSES`, else InputError."""
    v = template_passes
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) \
            or not 0 <= int(v) <= MAX_TEMPLATE_PASSES:
        raise InputError(f"patch_template_passes must be an integer from 0 to "
                         f"{MAX_TEMPLATE_PASSES}, got {template_passes!r}")
    return int(v)


@dataclasses.dataclass(frozen=True)
class PatchGrid:
    """Where the patches lie, in reference (output) pixel coordinates."""

    grid: tuple       # (gy, gx)
    size: tuple       # (ph, pw)
    overlap: tuple    # (oy, ox) pixels between neighbouring patches (at least)
    starts_y: np.ndarray
    starts_x: np.ndarray
    max_deviation: int

    @property
    def n_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def centres(self) -> np.ndarray:
        """``(gy, gx, 2)`` float64: the ``(y, x)`` centre of every patch."""
        cy = self.starts_y + (self.size[0] - 1) / 2.0
        cx = self.starts_x + (self.size[1] - 1) / 2.0
        return np.stack(np.meshgrid(cy, cx, indexing="ij"), axis=-1)

    @classmethod
    def make(cls, patches, patch_overlap, max_deviation, frame_shape, area):
        """The grid of ``patches`` over ``area`` ``(y0, y1, x0, x1)`` (the rigid common area)
        of frames of ``frame_shape``; InputError for grids that do not fit."""
        grid = parse_patches(patches)
        dev = check_deviation(max_deviation)
        ov = parse_overlap(patch_overlap) or (None, None)
        laid = [axis_patches(g, (lo, hi), o, dev, n, name)
                for g, lo, hi, o, n, name in zip(grid, area[0::2], area[1::2], ov, frame_shape,
                                                 ("rows", "columns"))]
        size, overlaps, starts = zip(*laid)
        return cls(grid, tuple(size), tuple(overlaps), starts[0], starts[1], dev)


def axis_patches(g, span, overlap, max_deviation, n, name, item="frame", unit="px"):
    """``(size, overlap, starts)`` of ``g`` patches along an axis of ``n`` samples over
    ``span`` ``(lo, hi)`` (the part every shifted frame or volume covers), overlapping by
    ``overlap`` (None: a quarter of the stride); InputError, naming the axis (``name``),
    where they do not fit.  One rule for frames (:class:`PatchGrid`) and volumes
    (``item="volume"``, ``unit="voxels"``).

    >>> size, overlap, starts = axis_patches(3, (2, 50), None, 4, 52, "rows")
    >>> size, overlap, starts.tolist()
    (19, 4, [2, 16, 31])
    """
    lo, hi = span
    a = hi - lo
    units = "pixels" if unit == "px" else unit
    o = a // g // 4 if overlap is None else int(overlap)
    if g > n:
        raise InputError(f"{g} patches along the {name} are more than the {item}'s {n} {units}")
    p = math.ceil((a + (g - 1) * o) / g) if g > 1 else a
    if o >= p:  # (o >= a: the patches' size grows with the overlap, past the area)
        raise InputError(f"patch overlap {o} {unit} must be smaller than the patch size, and "
                         f"than the {a} {unit} the patches span along the {name}")
    if p > a:
        raise InputError(f"patches of {p} {unit} along the {name} are larger than the {item}'s "
                         f"area every shifted {item} covers ({a} {unit} of {n}): use a smaller "
                         "patch_overlap")
    least = max(MIN_PATCH_SIDE, 2 * max_deviation + 1)
    if p < least:
        raise InputError(f"patches of {p} {unit} along the {name} are too small for "
                         f"max_deviation {max_deviation} (at least {least} {unit}): use fewer "
                         "patches or a smaller max_deviation")
    return p, o, lo + np.round(np.linspace(0, a - p, g)).astype(np.int64)


def common_area(shifts, frame_shape, margin=0):
    """The region of the reference that every frame covers after its integer rigid shift,
    less ``margin`` pixels on each side (``(y0, y1, x0, x1)``; NaN shifts ignored): a patch
    window there, moved by the integer rigid shift and then by up to ``margin`` pixels more,
    lies inside the frame.

    >>> common_area([[0.0, 0.0], [2.4, -3.6]], (20, 30), margin=1)
    (3, 19, 1, 25)
    """
    (y0, y1), (x0, x1) = common_box(shifts, frame_shape, margin, min_margin=patch_margin(0))
    return y0, y1, x0, x1


def common_box(shifts, shape, margin=0, item="frame", unit="px", min_margin=0):
    """:func:`common_area` along every axis of ``shape`` (frames, or volumes with
    ``item="volume"``): ``((lo, hi), ...)``, one pair an axis (``min_margin``: the margin of a
    max_deviation of 0, where a smaller one is not suggested).

    >>> common_box([[0.0, 0.0, 0.0], [1.4, 2.4, -3.6]], (10, 20, 30), item="volume")
    ((1, 10), (2, 20), (0, 26))
    """
    d = len(shape)
    s = np.asarray(shifts, np.float64).reshape(-1, d)
    s = np.round(s[~np.isnan(s).any(axis=1)])
    if not len(s):
        s = np.zeros((1, d))
    box = tuple((max(0, int(s[:, a].max())) + margin, min(n, int(n + s[:, a].min())) - margin)
                for a, n in enumerate(shape))
    if any(hi - lo < 1 for lo, hi in box):
        if margin:
            # (a max_deviation of 0 leaves nothing smaller to suggest: frames too far apart)
            helps = "a smaller max_deviation helps" if margin > min_margin \
                else "the rigid shifts move the frames too far apart for patches"
            raise InputError(f"the rigidly shifted {item}s have no area in common {margin} "
                             f"{unit} away from their edges: patches cannot be placed "
                             f"({helps})")
        raise InputError(f"the rigidly shifted {item}s have no region in common: patches "
                         "cannot be placed")
    return box


def patch_margin(max_deviation) -> int:
    """Pixels kept free around the patches: the deviation searched and the cubic convolution's
    reach when the windows are resampled through the field (:func:`windows_through`)."""
    return int(max_deviation) + 2


def windows(frames, grid, integer_shifts, device_shifts=None, tables=False):
    """``(P, N, ph, pw)``: patch ``p`` of frame ``n`` moved by its integer rigid shift (the
    window of the frame that holds the reference's patch ``p``), gathered on ``frames``'s
    device (float32 CuPy frames: one kernel, :mod:`._field_resample`); ``integer_shifts``
    ``(N, 2)`` host ints (``device_shifts``: the same already on the GPU, int64); every window
    must lie inside the frames (InputError).  With ``tables`` (float32 CuPy frames only):
    ``(windows, (s1, s2))``, also their summed-area tables for the search of
    ``grid.max_deviation`` (:func:`patch_peaks`' ``right_tables``), made in the same pass."""
    xp = backend.array_module_of(frames)
    (ph, pw), (gy, gx) = grid.size, grid.grid
    shifts = np.asarray(backend.to_numpy(integer_shifts), np.int64).reshape(-1, 2)
    check_windows(grid.starts_y, grid.starts_x, grid.size, frames.shape[-2:], shifts)
    if xp is not np and frames.dtype == xp.float32:
        return gather_windows_gpu(frames, grid.starts_y, grid.starts_x, gx, grid.size, shifts,
                                  device_shifts=device_shifts,
                                  bound_rows=grid.max_deviation if tables else None)
    if tables:
        raise InputError("window tables are made on the GPU, from float32 frames")
    shifts = xp.asarray(shifts)
    sy, sx = xp.asarray(grid.starts_y), xp.asarray(grid.starts_x)
    rows = sy[None, :, None] - shifts[:, 0, None, None] + xp.arange(ph)[None, None, :]
    cols = sx[None, :, None] - shifts[:, 1, None, None] + xp.arange(pw)[None, None, :]
    n, h, w = frames.shape
    # (N, gy, gx, ph, pw) flat indices and one take: the values of frames[batch, rows, cols],
    # three times as fast as indexing by three arrays
    at = (xp.arange(n)[:, None, None, None, None] * (h * w) + rows[:, :, None, :, None] * w
          + cols[:, None, :, None, :])
    out = xp.ascontiguousarray(frames).reshape(-1).take(at)
    return xp.ascontiguousarray(out.reshape(n, gy * gx, ph, pw).transpose(1, 0, 2, 3))


def windows_through(frames, grid, patch_field, weights):
    """``(P, N, ph, pw)`` float32: the patch windows of ``frames`` sampled through the motion
    field of ``patch_field`` ``(N, gy, gx, 2)`` (pixel ``q`` of a patch reads the frame at
    ``q - s(q)``, the field ``s`` of :func:`~._spline.dense_field` with the spline
    ``weights`` of :func:`~._spline.field_weights`), by cubic convolution
    (:func:`~._field_resample.cubic_sample`, taps clamped to the frame).  On the GPU one
    kernel evaluates the field at each window pixel (no dense field); on the CPU a frame at a
    time, the frames shared out over :func:`~xcorr_app.streaming.cpu_threads` threads (NumPy
    lets go of the GIL in its reads and arithmetic; each frame's windows are its own)."""
    xp = backend.array_module_of(frames)
    if xp is not np:
        return windows_through_gpu(frames, grid.starts_y, grid.starts_x, grid.size,
                                   xp.asarray(patch_field), weights)
    (ph, pw), (gy, gx) = grid.size, grid.grid
    rows = np.repeat(grid.starts_y, gx)[:, None, None] + np.arange(ph)[None, :, None]
    cols = np.tile(grid.starts_x, gy)[:, None, None] + np.arange(pw)[None, None, :]
    rows, cols = np.broadcast_arrays(rows, cols)  # (P, ph, pw), row-major like windows
    out = np.empty((gy * gx, len(frames), ph, pw), np.float32)

    def sample(n):
        field = dense_field(np.asarray(patch_field[n:n + 1]), None, None, weights)[0]
        cy = rows - field[0][rows, cols]
        cx = cols - field[1][rows, cols]
        out[:, n] = cubic_sample(frames[n], cy, cx)

    threads = min(cpu_threads(), len(frames))
    if threads < 2:
        for n in range(len(frames)):
            sample(n)
        return out
    with one_blas_thread(), concurrent.futures.ThreadPoolExecutor(threads, "xcorr-cpu") as pool:
        list(pool.map(sample, range(len(frames))))  # (list: a frame's error raised here)
    return out


def template_patches(template, grid):
    """``(P, ph, pw)`` float32: the patches of the prepared template."""
    return windows(template[None], grid, np.zeros((1, 2), np.int64))[:, 0]


def patch_left(tpatches, bound):
    """What the ZNCC of every chunk needs of the template patches ``(P, ph, pw)`` for a search
    of ``-bound..bound``, made once per run: on the GPU their summed-area tables
    (:func:`~xcorr_app.registration._surfaces.summed_area_tables`, the rows that search looks
    up), on the CPU :func:`~xcorr_app.registration._normalize.zncc_left`."""
    if backend.array_module_of(tpatches) is not np:
        return summed_area_tables(tpatches, bound_rows=int(bound))
    return zncc_left(tpatches, (1, *tpatches.shape[-2:]), (int(bound), int(bound)))


#: the warp-per-result plan of small patch bounds (one object: the fast path keys on it)
BAND = Plan.parse("band")


def patch_peaks(tpatches, right, bound, subpixel, device, left, right_tables=None):
    """The ZNCC surfaces of the template patches ``(P, ph, pw)`` against their windows
    ``right`` ``(P, N, ph, pw)`` within ``-bound..bound`` (one ``n_to_mn`` call) and their
    peaks: shifts ``(P, N, 2)``, peak, confidence, iy, ix ``(P, N)``.  On the CPU
    :func:`zncc` and :func:`find_shifts` (the definition); on the GPU the fused kernels of
    :func:`~xcorr_app.registration._surfaces.surface_peaks` in their batched mode (template
    patch ``p`` against its ``N`` windows: ZNCC from eight table look-ups per shift, the peak,
    the minimum and the second peak in two passes; no cumsum, no generic peak search), the
    subpixel fit of the rigid path (``refined_shifts``).  The correlation on the GPU: the
    warp-per-result kernel (:mod:`xcorr_app.correlate._band`) where it fits (+-1 to +-4 px),
    else the planner's choice.  ``right_tables``: the GPU's summed-area tables of ``right``
    for this bound where already made (:func:`windows` with ``tables``)."""
    xp = backend.array_module_of(right)
    band = xp is not np and band_fits("n_to_mn", tpatches.shape, right.shape, bound)
    # (the run's arguments, checked when it started: not again for every chunk)
    corr = correlate_checked(tpatches, right, "n_to_mn", (int(bound), int(bound)),
                             BAND if band else None, "cpu" if xp is np else "gpu")
    method = subpixel if subpixel in SUBPIXEL_METHODS else "gaussian"
    if left is None:
        left = patch_left(tpatches, bound)
    if xp is np:
        per = ZnccLeft(left.n, left.mean[:, None], left.var[:, None], left.bad[:, None])
        corr = zncc(corr, tpatches, right, (bound, bound), left_part=per)  # (P, N, 2d+1, 2d+1)
        return find_shifts(corr, (bound, bound), method, return_index=True)
    p, n, ph, pw = right.shape
    ho, wo = corr.shape[-2:]
    rt = summed_area_tables(right.reshape(p * n, ph, pw), bound_rows=int(bound)) \
        if right_tables is None else right_tables
    z, iy, ix, peak, conf = surface_peaks(corr.reshape(p * n, ho, wo), (ph, pw),
                                          first_shift((ph, pw), (ph, pw), (bound, bound)),
                                          left_tables=left, right_tables=rt)
    s = refined_shifts(z, iy, ix, (bound, bound), method)
    return tuple(a.reshape((p, n) + a.shape[1:]) for a in (s, peak, conf, iy, ix))


def integer_parts(rigid):
    """``(whole, off)`` host arrays of the rigid shifts ``(N, 2)``: the integer shift the
    windows apply (int64, 0 where not measured) and ``whole - rigid`` (NaN there)."""
    rigid = np.asarray(rigid, np.float64)
    ok = ~np.isnan(rigid).any(axis=1)
    whole = np.where(ok[:, None], np.round(np.nan_to_num(rigid)), 0.0).astype(np.int64)
    return whole, np.where(ok[:, None], whole - rigid, np.nan)


def patch_shifts(tpatches, frames, rigid, grid, subpixel="gaussian", device="cpu", left=None,
                 uploaded=None):
    """Deviations of every patch of ``frames`` from their rigid shifts.

    Parameters
    ----------
    tpatches : (P, ph, pw) float32 array
        :func:`template_patches` of the prepared template.
    frames : (N, H, W) float32 array
        Prepared frames (on the device that computes).
    rigid : (N, 2) float64 host array
        Their rigid shifts (NaN: not measured; those rows come back NaN).
    left : optional
        :func:`patch_left` of ``tpatches`` at ``grid.max_deviation`` (computed once per run).
    uploaded : optional
        On the GPU: :func:`integer_parts` of ``rigid`` already on the device (uploaded once
        per run: a copy from host memory per chunk may wait for the queued work).

    Returns
    -------
    deviation (N, P, 2), peak (N, P), confidence (N, P), border (N, P) : arrays
        On the device of ``frames`` (no host sync).  ``deviation`` is the patch shift minus
        the frame's rigid shift (its integer part applied by the window, the fraction of the
        rigid shift taken off).
    """
    xp = backend.array_module_of(frames)
    d = grid.max_deviation
    whole, off = integer_parts(rigid)
    # (uploaded before the launches: a copy from host memory may wait for the queued work)
    off = xp.asarray(off) if uploaded is None else uploaded[1]  # NaN: not measured
    gpu = xp is not np and frames.dtype == xp.float32
    right = windows(frames, grid, whole, None if uploaded is None else uploaded[0], tables=gpu)
    right, tables = right if gpu else (right, None)
    s, peak, conf, iy, ix = patch_peaks(tpatches, right, d, subpixel, device, left, tables)
    border = on_border(iy, ix, (d, d), (d, d))
    dev = add_fields(s.transpose(1, 0, 2), off[:, None, :])  # the total minus the rigid
    return dev, peak.T, conf.T, border.T


def refine_taper(size, flat=REFINE_FLAT):
    """``(ph, pw)`` float32 NumPy, or None where no axis is longer than ``flat``: the weight of
    the refinement, a separable Tukey window, 1 over the central ``flat`` px of each axis and
    ``cos**2`` falling to 0 at the patch's edge.

    >>> refine_taper((8, 8)) is None
    True
    >>> w = refine_taper((1, 9), flat=3)
    >>> [round(float(v), 2) for v in w[0]]
    [0.07, 0.5, 0.93, 1.0, 1.0, 1.0, 0.93, 0.5, 0.07]
    """
    if max(size) <= flat:
        return None
    return np.outer(*(taper_axis(n, flat) for n in size)).astype(np.float32)


def taper_axis(n, flat):
    """``(n,)`` float64: the Tukey window of an axis of ``n`` samples, 1 over the central
    ``flat`` samples, ``cos**2`` falling to 0 at the edge (:func:`refine_taper`'s, and the
    3-D patches' template: ``xcorr_app.alignment.volume``)."""
    x = np.abs(np.arange(n) - (n - 1) / 2.0)
    half = flat / 2.0
    r = np.clip((x - half) / max(n / 2.0 - half, 1e-9), 0.0, 1.0)
    return np.cos(0.5 * np.pi * r) ** 2


def tapered(patches, taper):
    """``patches`` ``(..., ph, pw)`` less each patch's mean, times ``taper`` (on the
    patches' device; unchanged where ``taper`` is None).  The mean goes first, so that the
    weight's own shape does not enter the correlation (a bright patch would otherwise
    correlate best at no shift)."""
    if taper is None:
        return patches
    xp = backend.array_module_of(patches)
    mean = patches.mean(axis=(-2, -1), keepdims=True, dtype=xp.float64).astype(xp.float32)
    out = xp.subtract(patches, mean, dtype=xp.float32)  # float32: the windows' size again, once
    out *= xp.asarray(taper)
    return out


def refine_template(tpatches, taper):
    """``(tnear, left)``: the template patches ``tpatches`` :func:`tapered` with ``taper`` and
    what :func:`refine_shifts` needs of them (:func:`refine_left`), made once per pass; on the
    GPU in one launch, nothing waiting for the device
    (:func:`~._refine_gpu.refine_template_gpu`)."""
    if backend.array_module_of(tpatches) is np:
        tnear = tapered(tpatches, taper)
        return tnear, refine_left(tnear, taper)
    tnear, sums, tp = refine_template_gpu(tpatches, taper)
    return tnear, (sums, tp)


def refine_left(tnear, taper):
    """What :func:`refine_shifts` needs of the :func:`tapered` template patches ``tnear``: on
    the CPU :func:`patch_left` at bound 1; on the GPU, for the fused kernel
    (:func:`~._refine_gpu.refine_surfaces_gpu`), ``((mean, var, bad), taper)``: the
    :func:`~xcorr_app.registration._normalize.zncc_left` of ``tnear`` for +-1 px (equal to
    float64 rounding) and the ``taper`` on the device."""
    if backend.array_module_of(tnear) is np:
        return patch_left(tnear, 1)
    _, sums, tp = refine_template_gpu(tnear, taper, apply_taper=False)
    return sums, tp


def refine_shifts(tpatches, frames, grid, patch_field, weights, subpixel="gaussian",
                  device="cpu", left=None, taper=None, last=None):
    """``(N, P, 2)`` float64 on the frames' device: what remains of every patch's shift once
    its window is sampled through the motion field of ``patch_field`` ``(N, gy, gx, 2)``
    (spline ``weights``; :func:`windows_through`), measured within +-1 px (ZNCC, the subpixel
    fit); ``taper``: :func:`refine_taper` applied to the windows (``tpatches`` must already be
    :func:`tapered` with it); ``left``: :func:`refine_left` of ``tpatches``; ``last``: the
    corrections of the pass before (what this returned then): a window whose correction was
    under :data:`REFINE_CONVERGED` px on both axes has converged, its correction is 0 (on the
    GPU its window is not sampled again).

    On the GPU one kernel samples, tapers, correlates, normalizes and finds the peak of every
    window (:func:`~._refine_gpu.refine_surfaces_gpu`; grids up to
    :data:`~._refine_gpu.REFINE_MAX_GX` patches wide), then the run's subpixel kernel:
    the numbers of the CPU's steps below, to float rounding."""
    xp = backend.array_module_of(frames)
    # (the fused kernel addresses a frame's taps by 32-bit offsets)
    if xp is not np and grid.grid[1] <= REFINE_MAX_GX and frames[0].size < 2**31:
        sums, tp = refine_left(tpatches, taper) if left is None else left
        z, iy, ix = refine_surfaces_gpu(frames, grid.starts_y, grid.starts_x, grid.size,
                                        patch_field, weights, tp, tpatches, sums, last=last,
                                        converged=REFINE_CONVERGED)
        method = subpixel if subpixel in SUBPIXEL_METHODS else "gaussian"
        s = refined_shifts(z, iy, ix, (1, 1), method)
        return s.reshape(grid.n_patches, len(frames), 2).transpose(1, 0, 2)
    if xp is not np:  # (a grid too wide for the fused kernel: the steps one by one)
        left = None
    right = tapered(windows_through(frames, grid, patch_field, weights), taper)
    s = patch_peaks(tpatches, right, 1, subpixel, device, left)[0].transpose(1, 0, 2)
    if last is None:
        return s
    done = (xp.abs(last) < REFINE_CONVERGED).all(axis=-1)
    return xp.where(done[..., None], 0.0, s)
