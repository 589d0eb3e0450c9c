"""Lucas-Kanade (Gauss-Newton) refinement of every frame's shift against a denoised,
leave-one-out template (``lucas_kanade="on"``, or ``"auto"``: on for noisy stacks).

At low light (25 photons at the brightest pixel) the correlation peak of one noisy frame
against another, or against the template of ``reference="refined"``, stays about twice above
the Cramer-Rao bound.  After the template pass of
:func:`~xcorr_app.alignment._run.measure_passes`, the last measuring pass refines each
frame's correlation shift ``s`` by a few Gauss-Newton steps of the model
``frame(x) = a * T(x + s) + b`` (least squares over the pixels whose source lies inside the
template; ``a``, ``b`` absorb brightness changes), where ``T`` is

- the template **without the frame itself** (leave one out: its sum and coverage less the
  frame's own warped contribution).  With the frame in it, the frame's noise correlates with
  the template's and pulls the fit (a prototype on the low-light stacks of ``xcorr bench
  accuracy``, seeds 0-2: 0.48 px RMS with it, 0.16 without);
- smoothed by a gaussian of :data:`LK_SIGMA` px: the average of 20 frames at 25 photons is
  still noisy, and the gradient of its noise, not of the scene, would dominate the fit (on
  those stacks, seeds 0-2 / 3-5: sigma 0.8: 0.143 / 0.144 px, 1: 0.137 / 0.137, 1.25: 0.134 /
  0.145, 1.5: 0.133 / 0.165; the prototype without smoothing: 0.22).

The steps run batched on ``xp``'s device (NumPy or CuPy, one source): the bilinear warp of
:func:`~xcorr_app.alignment.warp._warp.shift_frames`, ``xp.gradient`` and per-frame 4x4 normal
equations.  A fit that fails or moves more than :data:`LK_MAX_STEP` px from the correlation's
shift keeps the correlation's shift.

``lucas_kanade="auto"`` decides from a few frames whether the stack is noisy enough for the
fit (:mod:`xcorr_app.alignment.refine._lk_decision`).
"""

from __future__ import annotations

import concurrent.futures

import numpy as np

from ... import backend
from ...filters import gradient
from ...streaming import cpu_threads
from ..rigid import parse_prefilter
from ..rigid import COLUMN, scaled_by
from ..warp import shift_frames

__all__ = ["LucasKanade", "gauss_newton_shifts", "LK_SIGMA"]

#: gaussian smoothing (px) of the leave-one-out template
LK_SIGMA = 1.0
#: Gauss-Newton steps (a fixed number: nothing waits for the device to test convergence; from
#: the correlation's shift 2 steps give what 4 give on the low-light stacks, 1 is 0.002 px worse)
LK_ITERATIONS = 2
#: farther than this (px, on either axis) from the correlation's shift, the fit is not trusted
LK_MAX_STEP = 1.0
#: the fitted pixels' least distance (px) from the trusted template's edge: the gradient's
#: stencil (2 px, room for the steps too, costs 0.136 -> 0.145 px on the low-light stacks)
LK_MARGIN = 1
#: the template's pixels fitted: covered by at least this fraction of the most-covered one's
LK_MIN_COVERAGE = 0.5
#: frames fitted at once, and the most pixels of a batch (bounds the temporaries: about 14
#: float64 frames each; one frame at a time from 2048x2048 on)
LK_BATCH = 8
LK_BATCH_PIXELS = 1 << 22
def _gaussian(sigma):
    return parse_prefilter(f"gaussian:{sigma:g}")


def _coverage(shifts, shape, xp):
    """``shift_frames`` of frames of ones of ``shape`` (N, H, W) by ``shifts``: the product of
    the two axes' coverage (the bilinear weights are separable), at the cost of two 1-D warps."""
    n, h, w = shape
    zero = xp.zeros_like(shifts[:, :1])
    cy = shift_frames(xp.ones((n, h, 1), xp.float32), xp.concatenate([shifts[:, :1], zero], 1))
    cx = shift_frames(xp.ones((n, 1, w), xp.float32), xp.concatenate([zero, shifts[:, 1:]], 1))
    return cy * cx


def _eroded(mask, r, xp):
    """``mask`` (N, H, W) bool less every pixel within ``r`` px (4-neighbourhood steps) of a
    pixel outside it or of the frame's edge."""
    m = mask.copy()
    for _ in range(r):
        e = xp.zeros_like(m)
        e[:, 1:-1, 1:-1] = (m[:, 1:-1, 1:-1] & m[:, :-2, 1:-1] & m[:, 2:, 1:-1]
                            & m[:, 1:-1, :-2] & m[:, 1:-1, 2:])
        m = e
    return m


def solve4(m, r):
    """``(x, det)``: ``x`` (N, 4) with ``m @ x = r`` for (N, 4, 4) ``m`` and (N, 4) ``r``, and
    the determinants of ``m``, both from its 2x2 minors (Laplace along the first two rows; the
    adjugate over the determinant; ``x`` undefined where ``det`` is 0 or not finite), in
    element-wise operations of ``m``'s module: ``cupy.linalg.solve`` imports cupyx (0.35 s of a
    one-shot run) and ``det`` compares with numbers inside, and one formula on both devices
    keeps their singular systems the same.

    >>> m = np.array([[[2., 1, 0, 0], [1, 3, 0, 0], [0, 0, 4, 1], [0, 0, 2, 5]]])
    >>> x, det = solve4(m, np.array([[3., 4, 5, 7]]))
    >>> x.tolist(), det.tolist(), round(float(np.linalg.det(m)[0]), 9)
    ([[1.0, 1.0, 1.0, 1.0]], [90.0], 90.0)
    """
    a, s, c, det = _minors4(m)
    # the adjugate's rows, each a combination of one row's entries and the other pair's minors
    adj = [[a[1][1] * c[5] - a[1][2] * c[4] + a[1][3] * c[3],
            -a[0][1] * c[5] + a[0][2] * c[4] - a[0][3] * c[3],
            a[3][1] * s[5] - a[3][2] * s[4] + a[3][3] * s[3],
            -a[2][1] * s[5] + a[2][2] * s[4] - a[2][3] * s[3]],
           [-a[1][0] * c[5] + a[1][2] * c[2] - a[1][3] * c[1],
            a[0][0] * c[5] - a[0][2] * c[2] + a[0][3] * c[1],
            -a[3][0] * s[5] + a[3][2] * s[2] - a[3][3] * s[1],
            a[2][0] * s[5] - a[2][2] * s[2] + a[2][3] * s[1]],
           [a[1][0] * c[4] - a[1][1] * c[2] + a[1][3] * c[0],
            -a[0][0] * c[4] + a[0][1] * c[2] - a[0][3] * c[0],
            a[3][0] * s[4] - a[3][1] * s[2] + a[3][3] * s[0],
            -a[2][0] * s[4] + a[2][1] * s[2] - a[2][3] * s[0]],
           [-a[1][0] * c[3] + a[1][1] * c[1] - a[1][2] * c[0],
            a[0][0] * c[3] - a[0][1] * c[1] + a[0][2] * c[0],
            -a[3][0] * s[3] + a[3][1] * s[1] - a[3][2] * s[0],
            a[2][0] * s[3] - a[2][1] * s[1] + a[2][2] * s[0]]]
    rows = [adj[i][0] * r[:, 0] + adj[i][1] * r[:, 1] + adj[i][2] * r[:, 2] + adj[i][3] * r[:, 3]
            for i in range(4)]
    xp = backend.array_module_of(m)
    usable = xp.isfinite(det) & xp.not_equal(det, 0)  # (no division by 0 for NumPy to warn of)
    return xp.stack(rows, axis=1) / xp.where(usable, det, 1.0)[:, None], det


def _minors4(m):
    """The entries of (N, 4, 4) ``m`` as ``a[i][j]``, the 2x2 minors of its rows 0-1 and of
    its rows 2-3 (column pairs :data:`_PAIRS4`), and the determinants."""
    a = [[m[:, i, j] for j in range(4)] for i in range(4)]
    s = [a[0][i] * a[1][j] - a[1][i] * a[0][j] for i, j in _PAIRS4]
    c = [a[2][i] * a[3][j] - a[3][i] * a[2][j] for i, j in _PAIRS4]
    det = s[0] * c[5] - s[1] * c[4] + s[2] * c[3] + s[3] * c[2] - s[4] * c[1] + s[5] * c[0]
    return a, s, c, det


#: the column pairs of :func:`solve4`'s minors
_PAIRS4 = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))


def gauss_newton_shifts(frames, templates, shifts, xp, iterations=LK_ITERATIONS, valid=None):
    """Refine ``shifts`` (N, 2; xcorr's convention: ``frames[n](x) ~ templates[n](x + s)``) by
    Gauss-Newton steps of ``frame = a * T(x + s) + b``, the template warped bilinearly
    (:func:`~xcorr_app.alignment.warp._warp.shift_frames`).  The pixels fitted are chosen once, at
    the start: those whose source lies inside the template (inside ``valid`` (N, H, W) bool,
    the template's trusted pixels, when given) at least :data:`LK_MARGIN` px from its edge (the
    gradient's stencil).  ``frames``, ``templates``:
    (N, H, W) float32 on ``xp``'s device.  Returns (N, 2) float64, NaN where the normal
    equations are singular.

    >>> yy, xx = np.mgrid[:32, :32]
    >>> t = np.exp(-((yy - 15.0) ** 2 + (xx - 17.0) ** 2) / 30.0).astype(np.float32)
    >>> f = np.exp(-((yy - 15.4) ** 2 + (xx - 16.7) ** 2) / 30.0).astype(np.float32)
    >>> np.round(gauss_newton_shifts(f[None], t[None], np.zeros((1, 2)), np), 2).tolist()
    [[-0.4, 0.3]]
    """
    f = xp.asarray(frames, dtype=xp.float32)
    t = xp.asarray(templates, dtype=xp.float32)
    s = xp.asarray(shifts, dtype=xp.float64)
    n, h, w = f.shape
    trusted = xp.ones_like(t) if valid is None else xp.asarray(valid).astype(xp.float32)
    # (xp.greater & co. below: CuPy hands ``array > number`` to NumPy's ufunc protocol, which
    # imports cupyx and SciPy on a first use, 0.35 s of a one-shot run)
    m = _eroded(xp.greater_equal(shift_frames(trusted, -s), 1 - 1e-4), LK_MARGIN, xp)
    m = m.reshape(n, 1, h * w).astype(xp.float64)
    fv = f.reshape(n, h * w, 1).astype(xp.float64)
    eye = xp.broadcast_to(xp.eye(4, dtype=xp.float64), (n, 4, 4))
    for _ in range(iterations):
        tw = shift_frames(t, -s)  # T(x + s)
        gy, gx = gradient(tw, axis=(1, 2))
        raw = xp.stack([tw, xp.ones_like(tw), gy, gx], axis=1).reshape(n, 4, h * w)
        raw = raw.astype(xp.float64)
        # the masked sums of every pair of [T, 1, dT/dy, dT/dx], and of each with the frame
        masked = raw * m
        g = xp.concatenate([xp.matmul(masked, raw.transpose(0, 2, 1)), xp.matmul(masked, fv)],
                           axis=2)
        k, st, stt = g[:, 1, 1], g[:, 0, 1], g[:, 0, 0]
        sf, stf = g[:, 1, 4], g[:, 0, 4]
        var = stt - st * st / xp.maximum(k, 1)
        good = xp.greater_equal(k, 16) & xp.greater(var, 0)
        a = xp.where(good, (stf - st * sf / xp.maximum(k, 1)) / xp.where(good, var, 1), 0.0)
        b = (sf - a * st) / xp.maximum(k, 1)
        scale = xp.stack([xp.ones_like(a), xp.ones_like(a), a, a], axis=1)  # J = raw * scale
        jtj = g[:, :, :4] * scale[:, :, None] * scale[:, None, :]
        jtr = scale * (g[:, :, 4] - a[:, None] * g[:, :, 0] - b[:, None] * g[:, :, 1])
        ok = good & xp.isfinite(jtj).all(axis=(1, 2)) & xp.greater(xp.abs(a), 0)
        jtj = xp.where(ok[:, None, None], jtj, eye)
        step, det = solve4(jtj, xp.where(ok[:, None], jtr, 0.0))
        ok &= xp.isfinite(det) & xp.not_equal(det, 0)
        s = xp.where(ok[:, None], s + step[:, 2:], xp.nan)
    return s


class LucasKanade:
    """The ``on_chunk`` hook of the last measuring pass: replaces the correlation shifts of the
    chunk's result block (in place, on ``xp``'s device, before it is sent back) by their
    Gauss-Newton refinement against the leave-one-out, smoothed template.

    ``total``, ``coverage``: the sums of the template pass
    (:class:`~xcorr_app.alignment.refine._template.TemplateAccumulator`); ``template``: its template
    (with its fallback); ``built``: (N, 2) host array, each frame's shift in that pass, NaN
    for the frames left out of the template; ``scale``: the frames in those sums were times
    ``2**scale`` (:func:`~xcorr_app.alignment.rigid.stack_exponent`), and so is each chunk."""

    def __init__(self, xp, total, coverage, template, built, sigma=LK_SIGMA, scale=0):
        self.xp = xp
        self.scale = scale
        self.total = total.astype(xp.float32)
        self.coverage = coverage.astype(xp.float32)
        self.template = xp.asarray(template, xp.float32)
        self.built = np.asarray(built, np.float64)
        self.smooth = _gaussian(sigma)

    def templates(self, frames, built):
        """The leave-one-out templates of ``frames`` (B, H, W) float32, placed into the
        template by ``built`` (B, 2; NaN: not in it), smoothed, and where they are trusted:
        covered by at least :data:`LK_MIN_COVERAGE` of the most-covered pixel's frames (the
        edges that few frames reach are noisy: on the low-light stacks, fitting them too
        costs 0.15 -> 0.21 px)."""
        xp = self.xp
        inb = xp.isfinite(built).all(axis=1)
        sb = xp.where(inb[:, None], built, 0.0)
        w = inb.astype(xp.float32)[:, None, None]
        total = self.total[None] - shift_frames(frames, sb) * w
        cov = self.coverage[None] - _coverage(sb, frames.shape, xp) * w
        covered = xp.greater_equal(cov, 0.5)
        t = xp.where(covered, total / xp.where(covered, cov, 1.0), self.template[None])
        trusted = cov >= LK_MIN_COVERAGE * cov.max(axis=(1, 2), keepdims=True)
        return self.smooth(t.astype(xp.float32)), trusted

    def __call__(self, first, frames, block, filtered=None):
        batch = max(1, min(LK_BATCH, LK_BATCH_PIXELS // max(1, frames[0].size)))
        starts = range(0, len(frames), batch)
        if self.xp is np and len(starts) > 1:  # the CPU: batches on the threads (NumPy's
            # gathers and products release the GIL; the rows of the block are disjoint)
            with concurrent.futures.ThreadPoolExecutor(min(cpu_threads(), len(starts)),
                                                       "xcorr-lk") as pool:
                list(pool.map(lambda a: self._fit(first, frames, block, a, batch), starts))
        else:
            for a in starts:
                self._fit(first, frames, block, a, batch)

    def _fit(self, first, frames, block, a, batch):
        """The rows ``a:a + batch`` of the chunk (``first``: its first frame's index)."""
        xp = self.xp
        c = COLUMN
        cols = slice(c["dy"], c["dx"] + 1)
        rows = block[a:a + batch]
        s0 = rows[:, cols]
        usable = xp.equal(rows[:, c["finite"]], 1) & xp.equal(rows[:, c["constant"]], 0) \
            & xp.equal(rows[:, c["border"]], 0) & xp.isfinite(s0).all(axis=1)
        f = scaled_by(frames[a:a + batch], self.scale, xp).astype(xp.float32)
        f = xp.where(xp.isfinite(f), f, 0.0)  # unusable frames keep their row anyway
        built = xp.asarray(self.built[first + a:first + a + len(f)])
        start = xp.where(usable[:, None], s0, 0.0)
        t, trusted = self.templates(f, built)
        s = gauss_newton_shifts(f, t, start, xp, valid=trusted)
        ok = usable & xp.isfinite(s).all(axis=1) \
            & xp.less_equal(xp.abs(s - start), LK_MAX_STEP).all(axis=1)
        block[a:a + batch, cols] = xp.where(ok[:, None], s, s0)
