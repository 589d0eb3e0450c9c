"""Gauss-Newton refinement of every frame's shift against the reference image itself, inside the
measuring pass (``lucas_kanade="reference"``; what ``auto`` picks for steady stacks that are
not noisy).

The correlation's 3x3 peak fit leaves steady, well-lit stacks about five times their
Cramer-Rao bound (docs/performance.md, "Accuracy").  As each chunk of the last pass is
measured, every frame's shift ``s`` is refined by one Gauss-Newton step of the model
``frame(q) = a * V(q + s) + b`` over the frame's pixels whose place in the reference lies inside
it (:func:`fit_margin` px from both edges: past the prefilter's reach), where

- ``frame`` and the reference are both filtered by the run's prefilter (unfiltered frames
  against a smoothed reference: 3.3 times the bound instead of 3.1 on the bench's plain
  stacks, seeds 0-1);
- ``V`` is the reference's cubic B-spline (its coefficients made once a run:
  :func:`spline_coefficients`), evaluated with its own derivatives at ``q + s``: the reference
  is warped, not the frame, so the frame's noise stays as it was measured (warping the frame
  instead: 3.3x; the reference's cubic convolution (Keys) 4.2x, bilinear 3.8x, the B-spline
  3.05x, a Fourier shift 2.97x at an FFT a frame).

Both devices take the same sums: NumPy here (:func:`fit_sums`, its taps in float32), the
kernels of ``kernels/alignment/reference_fit.cu`` on the GPU (the sums of a chunk in one
launch, the step solved and written into the chunk's result block by another: no host wait,
no CuPy kernel compiled on a first run).  A step that fails or moves farther than
:data:`~._refine_lk.LK_MAX_STEP` px keeps the correlation's shift.

Examples
--------
>>> yy, xx = np.mgrid[:40, :40]
>>> ref = np.exp(-((yy - 19.0) ** 2 + (xx - 21.0) ** 2) / 40.0)
>>> frame = np.exp(-((yy - 19.3) ** 2 + (xx - 20.8) ** 2) / 40.0)  # ref(q + s), s = (-0.3, 0.2)
>>> sums = fit_sums(frame[None].astype(np.float32), spline_coefficients(ref, np),
...                 np.array([[-0.25, 0.15]]))
>>> np.round(fit_steps(sums, np.array([[-0.25, 0.15]])), 3).tolist()
[[-0.3, 0.2]]
"""

from __future__ import annotations

import numpy as np

from ..._cuda import KernelFamily
from ...filters import taps_along
from ...streaming import host_copies
from ..rigid import COLUMN, filter_reach
from ._refine_lk import LK_MAX_STEP
from ._template import kept_rows

__all__ = ["ReferenceFit", "fit_margin", "reference_coefficients", "spline_coefficients",
           "fit_sums", "fit_steps", "REFERENCE_MARGIN"]

#: the fitted pixels' least distance (px) from the frame's edges and, moved by the shift, from
#: the reference's: this beyond the prefilter's reach (:func:`fit_margin`; the spline's taps
#: need 2), 5 for the default gaussian:1
MARGIN_PAST_REACH = 3
REFERENCE_MARGIN = 5
#: the B-spline's prefilter as a finite filter: its pole, and the taps on either side kept
#: (the infinite filter's tail past them is under 2e-7 of its centre)
SPLINE_POLE = np.sqrt(3.0) - 2.0
SPLINE_RADIUS = 12
#: the sums of a frame (the kernel's order: V V, V, V Vy, V Vx, 1, Vy, Vx, Vy Vy, Vy Vx, Vx Vx,
#: F V, F, F Vy, F Vx), and each pair's of the columns V, 1, Vy, Vx
SUMS = 14
PAIR = ((0, 1, 2, 3), (1, 4, 5, 6), (2, 5, 7, 8), (3, 6, 8, 9))
THREADS = 128
SUMS_KERNEL = KernelFamily("reference_fit.cu", "reference_fit_sums", [(THREADS,)])
STEP_KERNEL = KernelFamily("reference_fit.cu", "reference_fit_step", [(THREADS,)])
SPLINE = KernelFamily("reference_fit.cu", "spline_axis",
                      [("float", "double", 0), ("double", "float", 1)])
#: rows of a block's band (kernels/alignment/reference_fit.cu BAND_ROWS)
BAND_ROWS = 24
#: rows of a band of the CPU's sums (its temporaries: a few float64 arrays of the band)
FIT_BAND = 64
#: the grid's y extent (frames a launch)
MAX_GRID_Y = 65535


def fit_margin(opts) -> int:
    """The fitted pixels' margin (px) for the run's prefilter: :data:`MARGIN_PAST_REACH` past
    its reach (:func:`~xcorr_app.alignment.rigid.filter_reach`: the edges' filtered pixels
    hold what does not move with the scene).

    >>> from xcorr_app.alignment import AlignOptions
    >>> [fit_margin(AlignOptions(prefilter=p)) for p in ("gaussian:1", "dog:1,4")]
    [5, 11]
    """
    return MARGIN_PAST_REACH + filter_reach(opts.prefilter)


def spline_coefficients(image, xp):
    """The cubic B-spline coefficients (float32, on ``xp``'s device) of the 2-D ``image``
    (mirrored at its edges, as ``scipy.ndimage.spline_filter(mode="mirror")``): the exact
    inverse filter ``sqrt(3) * z**|k|`` cut at :data:`SPLINE_RADIUS` taps a side, an axis at a
    time in float64 (:func:`~xcorr_app.filters.taps_along`: no SciPy, one definition on both
    devices)."""
    k = np.arange(-SPLINE_RADIUS, SPLINE_RADIUS + 1)
    taps = np.sqrt(3.0) * SPLINE_POLE ** np.abs(k)
    if xp is not np:  # (the same sums in two kernels: no CuPy kernel compiled on a first run)
        return _spline_on_gpu(xp.ascontiguousarray(image), taps)
    out = np.asarray(image, np.float64)
    for axis in (0, 1):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (SPLINE_RADIUS, SPLINE_RADIUS)
        # (NumPy's "reflect", d c b | a b c d | c b a, is SciPy's "mirror")
        out = taps_along(np.pad(out, pad, mode="reflect"), taps, axis, 0, out.shape[axis])
    return np.ascontiguousarray(out, np.float32)


def _spline_on_gpu(image, taps):
    """:func:`spline_coefficients` of a float32 CuPy ``image`` by ``spline_axis``."""
    import cupy as cp

    h, w = image.shape
    between = cp.empty((h, w), cp.float64)
    out = cp.empty((h, w), cp.float32)
    taps = cp.asarray(taps)
    grid = (-(-(h * w) // THREADS),)
    for args, a, b in ((("float", "double", 0), image, between),
                       (("double", "float", 1), between, out)):
        SPLINE.get(*args)(grid, (THREADS,), (a, b, taps, np.int32(SPLINE_RADIUS), np.int32(h),
                                             np.int32(w)))
    return out


def bspline_weights(t):
    """The cubic B-spline's weights of the taps at -1, 0, 1, 2 about the fraction ``t``, and
    of its derivative (two 4-tuples of floats)."""
    u = 1.0 - t
    value = (u * u * u / 6.0, ((3.0 * t - 6.0) * t * t + 4.0) / 6.0,
             (((-3.0 * t + 3.0) * t + 3.0) * t + 1.0) / 6.0, t * t * t / 6.0)
    slope = (-u * u / 2.0, (3.0 * t - 4.0) * t / 2.0, ((-3.0 * t + 2.0) * t + 1.0) / 2.0,
             t * t / 2.0)
    return value, slope


def fitted_box(shift, shape, margin=REFERENCE_MARGIN):
    """``(y0, y1, x0, x1)`` (inclusive) of the pixels fitted at ``shift`` ``(sy, sx)`` in
    frames of ``shape``, or None for none (a shift not finite or of a frame's size).

    >>> fitted_box((2.5, -1.0), (20, 30))
    (5, 11, 6, 24)
    """
    box = []
    for s, n in zip(shift, shape):
        if not (np.isfinite(s) and abs(s) < n):
            return None
        box += [max(margin, int(np.ceil(margin - s))), min(n - 1 - margin,
                                                             int(np.floor(n - 1 - margin - s)))]
    return tuple(box)


def fit_sums(frames, coef, shifts, margin=REFERENCE_MARGIN):
    """The :data:`SUMS` sums ``(N, 14)`` float64 of each frame of ``frames`` ``(N, H, W)``
    (prefiltered, float32, NumPy) against the reference's spline ``coef`` ``(H, W)`` float32 at
    its shift (``shifts`` ``(N, 2)``): over the pixels of :func:`fitted_box`, ``V`` the spline
    at ``q + s``, ``Vy``, ``Vx`` its derivatives, ``F`` the frame; zeros where no pixel is
    fitted.  The GPU's ``reference_fit_sums`` takes the same sums (its taps in float64, these in
    float32: the steps 2e-8 px apart on a textured scene, up to 3e-5 px on a noise-free one of
    1e-4 contrast)."""
    n, h, w = frames.shape
    out = np.zeros((n, SUMS))
    for i, (sy, sx) in enumerate(np.asarray(shifts, np.float64)):
        box = fitted_box((sy, sx), (h, w), margin)
        if box is None or box[1] < box[0] or box[3] < box[2]:
            continue
        y0, y1, x0, x1 = box
        cols = x1 - x0 + 1
        fy, fx = np.floor(sy), np.floor(sx)
        iy, ix = int(fy) - 1, int(fx) - 1  # the first tap's offset
        wy, dy = bspline_weights(sy - fy)
        wx, dx = bspline_weights(sx - fx)
        for a in range(y0, y1 + 1, FIT_BAND):  # (bands of rows: the CPU's memory bounded)
            b = min(y1 + 1, a + FIT_BAND)
            out[i] += _band_sums(frames[i, a:b, x0:x1 + 1], coef[a + iy:b + iy + 3],
                                 x0 + ix, cols, (wy, dy, wx, dx))
    return out


def _band_sums(frame, coef, x, cols, weights):
    """:func:`fit_sums` of a band of rows of a frame (``frame``: its fitted pixels) from the
    coefficients' rows under it (three more), their first tap's column ``x``."""
    # (the taps in float32 and the sums in float64: 1.7x faster than float64 taps; the steps
    # within noise of float64 taps, fit_sums says how close; the kernel takes both in float64)
    wy, dy, wx, dx = (np.asarray(w, np.float32) for w in weights)
    rows = frame.shape[0]
    # every row of the taps along x first (as the kernel sums; each coefficient row once for
    # the four pixels' rows that take it), then along y; in place: the band's memory, not its
    # arithmetic, is what a CPU waits for
    t = coef[:rows + 3, x:x + cols + 3]
    r, rd = t[:, :cols] * wx[0], t[:, :cols] * dx[0]
    for j in range(1, 4):
        r += wx[j] * t[:, j:j + cols]
        rd += dx[j] * t[:, j:j + cols]
    v, vy, vx = r[:rows] * wy[0], r[:rows] * dy[0], rd[:rows] * wy[0]
    for a in range(1, 4):
        v += wy[a] * r[a:a + rows]
        vy += dy[a] * r[a:a + rows]
        vx += wy[a] * rd[a:a + rows]
    v, vy, vx, f = (np.asarray(a, np.float64).ravel() for a in (v, vy, vx, frame))
    return np.array([v @ v, v.sum(), v @ vy, v @ vx, v.size, vy.sum(), vx.sum(), vy @ vy,
                     vy @ vx, vx @ vx, f @ v, f.sum(), f @ vy, f @ vx])


def fit_steps(sums, shifts, max_step=LK_MAX_STEP):
    """The shifts ``(N, 2)`` after one Gauss-Newton step from ``shifts`` by the frames'
    :func:`fit_sums`: ``a`` and ``b`` fitted at the shift, then the system of the columns ``V``,
    1, ``a Vy``, ``a Vx`` against the residual solved; a frame keeps its shift where the fit had
    fewer than 16 pixels, a gain not above 0 (not this scene), a system that is not positive
    definite, or a step over ``max_step`` px along either axis.  The definition of the GPU's
    ``reference_fit_step``."""
    g = np.asarray(sums, np.float64)
    s = np.array(shifts, np.float64)
    for i in range(len(g)):
        k, st, stt, sf, stf = g[i, 4], g[i, 1], g[i, 0], g[i, 11], g[i, 10]
        if not (k >= 16 and np.isfinite(s[i]).all()):
            continue
        var = stt - st * st / k
        if not var > 0:
            continue
        a = (stf - st * sf / k) / var
        b = (sf - a * st) / k
        if not (np.isfinite(a) and a > 0 and np.isfinite(b)):
            continue
        scale = np.array([1.0, 1.0, a, a])
        m = g[i, np.array(PAIR)] * scale[:, None] * scale[None, :]
        r = scale * (g[i, 10:] - a * g[i, [p[0] for p in PAIR]] - b * g[i, [p[1] for p in PAIR]])
        try:
            low = np.linalg.cholesky(m)  # (positive definite, as the kernel's Cholesky asks)
        except np.linalg.LinAlgError:
            continue
        x = np.linalg.solve(low.T, np.linalg.solve(low, r))
        if np.isfinite(x[2:]).all() and (np.abs(x[2:]) <= max_step).all():
            s[i] += x[2:]
    return s


class ReferenceFit:
    """The ``on_chunk`` hook of the last measuring pass with ``lucas_kanade="reference"``: the
    shifts in each chunk's result block refined in place (on ``xp``'s device, before it is sent
    back) by one Gauss-Newton step of the chunk's frames as the correlation saw them
    (prefiltered, less their means; no window) against ``coef``, the reference's spline
    (:func:`reference_coefficients`; host or device array).  Its result: the range's shifts as
    the correlation measured them ``(N, 2)`` (the wrap-around test reads those: it was made
    for them)."""

    def __init__(self, coef, margin):
        self.coef, self.margin = coef, margin

    def make(self, xp, frame_shape, start):
        return _ReferenceSteps(xp, xp.asarray(self.coef, xp.float32), self.margin)

    @staticmethod
    def result(hook):
        parts = host_copies(hook.before) if hook.xp is not np else hook.before
        return (np.concatenate(parts) if parts else np.zeros((0, 2)),)


class _ReferenceSteps:
    """:class:`ReferenceFit` on one range's device."""

    takes_filtered = True  # (the CPU's pass joins its threads' slices for it)

    def __init__(self, xp, coef, margin):
        self.xp, self.coef, self.margin = xp, coef, margin
        self.before = []  # each chunk's shifts as measured (on the device, copied at the end)

    def __call__(self, first, frames, block, filtered):
        if self.xp is not np:
            self.before.append(_steps_on_gpu(filtered, self.coef, block, self.margin))
            return
        cols = slice(COLUMN["dy"], COLUMN["dx"] + 1)
        s0 = block[:, cols].copy()
        self.before.append(s0)
        usable = kept_rows(block, np)  # (measured, a distinct peak, finite shifts)
        start = np.where(usable[:, None], s0, np.nan)
        # (one thread: the bands' small NumPy operations hold the GIL often enough that two
        # threads took longer than one on 256x256 frames)
        s = fit_steps(fit_sums(filtered, self.coef, start, self.margin), start)
        block[:, cols] = np.where(usable[:, None], s, s0)


def _steps_on_gpu(frames, coef, block, margin):
    """:func:`fit_sums` and :func:`fit_steps` of the CuPy ``frames`` (float32, C-contiguous)
    against ``coef``, the result ``block`` (float64, C-contiguous) updated in place, by the two
    kernels on the current stream; returns the block's shifts as they were ``(N, 2)``."""
    import cupy as cp

    n, h, w = frames.shape
    before = cp.empty((n, 2), cp.float64)
    if not n:
        return before
    c = COLUMN
    blocks = max(1, -(-h // BAND_ROWS))  # (bands from the rectangle's first row: enough)
    partial = cp.empty((n, SUMS, blocks), cp.float64)
    ncols = block.shape[1]
    sums = SUMS_KERNEL.get(THREADS)
    for a in range(0, n, MAX_GRID_Y):
        b = min(n, a + MAX_GRID_Y)
        sums((blocks, b - a), (THREADS,),
             (frames[a:b], coef, block[a:b], np.int32(ncols), np.int32(c["dy"]), partial[a:b],
              np.int32(h), np.int32(w), np.int32(margin)))
    STEP_KERNEL.get(THREADS)(
        (-(-n // THREADS),), (THREADS,),
        (partial, np.int32(blocks), block, np.int32(ncols), np.int32(c["dy"]),
         np.int32(c["finite"]), np.int32(c["constant"]), np.int32(c["border"]), np.int32(n),
         np.float64(LK_MAX_STEP), before))
    return before


def reference_coefficients(opts, image, xp):
    """:func:`spline_coefficients` of the reference ``image`` (on ``xp``'s device) as the run
    prepares its frames (``opts.preparer``: prefiltered, less its mean; the fit takes no
    window), on ``xp``'s device."""
    prepared = opts.preparer(xp, image.shape)(xp.asarray(image)[None])
    return spline_coefficients(prepared.frames[0], xp)
