"""The quality report of a run: how much better the aligned stack is than the input, frame by
frame, without trusting the shifts that made it.

Measured on the area every rigidly shifted frame covers (:func:`~.piecewise.common_area`),
in one more streaming pass over the stack (on the run's executor, like the measuring passes),
against the template the run's last pass measured against (the first frame, the mean, or the
refined template): per frame, the zero-normalized correlation with the template before
alignment (the frame as it came) and after it (shifted by its shift, bilinear, as
:meth:`AlignResult.apply` does), and the residual shift: the aligned frame measured again
against the template by one Gauss-Newton step, with the run's prefilter (what is left: close to
0 for a frame the run aligned).

For the run: the sharpness of the mean image before and after alignment (gradient energy over
variance: a drift blurs the mean) and the correlation's distribution.  A frame is flagged
``worse`` where alignment lowered its correlation, and ``poor`` where its correlation after
alignment is an outlier below the others', its residual exceeds :data:`RESIDUAL_LIMIT` px, or
it could not be measured at all.

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> from xcorr_app import align
>>> base = ndi.gaussian_filter(np.random.default_rng(0).random((60, 70)), 2)
>>> stack = np.stack([np.roll(base, (k, -k), axis=(0, 1)) for k in range(4)])
>>> q = align(stack, max_shift=6, device="cpu", boundary="linear").quality
>>> bool(q.after.min() > 0.95), q.flagged.tolist()
(True, [False, False, False, False])
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import backend
from ..io import FrameRange
from ..streaming import DEFAULT_CHUNK, DeviceChunks
from .piecewise import common_area
from .warp import shift_frames

__all__ = ["QualityReport", "measure_quality", "RESIDUAL_LIMIT"]

#: a residual larger than this (px, on either axis) flags the frame ``poor``
RESIDUAL_LIMIT = 0.5
#: a correlation after alignment this many robust deviations below the median flags it ``poor``
#: (and at least :data:`POOR_DROP` below it: on clean stacks the deviation is tiny)
POOR_DEVIATIONS = 5.0
POOR_DROP = 0.03
#: alignment "made it worse" when the correlation dropped by more than this
WORSE_BY = 0.01
#: the least common area (px per side) the report is measured on; else the whole frame
MIN_SIDE = 8


@dataclasses.dataclass
class QualityReport:
    """Per frame ``before``, ``after`` (correlation with the template), ``residual`` (N, 2) px,
    ``worse`` and ``poor`` flags; for the run the mean image's ``sharpness_before`` and
    ``sharpness_after`` and the ``area`` ``(y0, y1, x0, x1)`` measured on."""

    before: np.ndarray
    after: np.ndarray
    residual: np.ndarray
    worse: np.ndarray
    poor: np.ndarray
    sharpness_before: float
    sharpness_after: float
    area: tuple

    @property
    def flagged(self) -> np.ndarray:
        return self.worse | self.poor

    def summary(self) -> dict:
        """The run's figures (``shifts.json``'s ``quality``)."""
        after = self.after[np.isfinite(self.after)]
        q = np.percentile(after, [5, 50, 95]).tolist() if after.size else [None] * 3
        return {"sharpness_before": self.sharpness_before,
                "sharpness_after": self.sharpness_after,
                "correlation_after": {"p5": q[0], "median": q[1], "p95": q[2]},
                "median_residual_px": float(np.nanmedian(np.abs(self.residual)))
                if np.isfinite(self.residual).any() else None,
                "worse_frames": np.flatnonzero(self.worse).tolist(),
                "poor_frames": np.flatnonzero(self.poor).tolist(),
                "area": list(self.area)}

    def records(self) -> list:
        """One dict a frame (``shifts.json``'s frames)."""
        return [{"correlation_before": float(b), "correlation_after": float(a),
                 "residual_dy": float(r[0]), "residual_dx": float(r[1]),
                 "quality_flag": "worse" if w else "poor" if p else ""}
                for b, a, r, w, p in zip(self.before, self.after, self.residual, self.worse,
                                         self.poor)]


def measure_quality(opts, shifts, executor, frame_shape, template):
    """The :class:`QualityReport` of a run's ``shifts`` (N, 2) against ``template`` (the image
    the run's last pass measured against, as it came: the first frame, the mean, the refined
    template), its frames read once more through ``executor`` (its ranges, where it reads)."""
    shifts = np.asarray(shifts, np.float64)
    area = _area(shifts, frame_shape)
    y0, y1, x0, x1 = area
    chunk = opts.chunk_frames or executor.chunk or DEFAULT_CHUNK  # (the run's reads)
    t = executor.xp.asarray(template, executor.xp.float32)[y0:y1, x0:x1]
    part = functools.partial(_rows_part, opts=opts, shifts=shifts, area=area, chunk=chunk,
                             template=executor.portable(t))
    parts = executor.map(part, None)
    rows = np.concatenate([p[0] for p in parts])
    raw, aligned = (sum(p[k] for p in parts) for k in (1, 2))
    kept = sum(p[3] for p in parts)
    before, after, residual = rows[:, 0], rows[:, 1], rows[:, 2:4]
    finite = np.isfinite(after)
    med = np.median(after[finite]) if finite.any() else np.nan
    mad = 1.4826 * np.median(np.abs(after[finite] - med)) if finite.any() else np.nan
    low = after < med - max(POOR_DEVIATIONS * mad, POOR_DROP)
    off = (np.abs(residual) > RESIDUAL_LIMIT).any(axis=1)
    poor = ~finite | ~np.isfinite(residual).all(axis=1) | low | off
    worse = finite & np.isfinite(before) & (after < before - WORSE_BY)
    return QualityReport(before, after, residual, worse, poor,
                         _sharpness(raw / max(len(shifts), 1)),
                         _sharpness(aligned / kept) if kept else float("nan"), area)


def _area(shifts, frame_shape):
    """The common area of the rigidly shifted frames, or the whole frame where it is small."""
    try:
        y0, y1, x0, x1 = common_area(shifts, frame_shape)
    except ValueError:
        y0, y1, x0, x1 = 0, 0, 0, 0
    if y1 - y0 < MIN_SIDE or x1 - x0 < MIN_SIDE:
        return (0, frame_shape[0], 0, frame_shape[1])
    return (y0, y1, x0, x1)


def _aligned(frames, shifts, xp, area):
    """The chunk's frames as they came and aligned, float32, cut to ``area`` (contiguous)."""
    y0, y1, x0, x1 = area
    f = xp.asarray(frames).astype(xp.float32)
    s = xp.asarray(np.where(np.isfinite(shifts), shifts, 0.0))
    g = shift_frames(f, s)
    return (xp.ascontiguousarray(f[:, y0:y1, x0:x1]),
            xp.ascontiguousarray(g[:, y0:y1, x0:x1]))


def _rows_part(src, xp, start, stop, progress, *, opts, shifts, area, template, chunk):
    """Rows ``(before, after, residual dy, residual dx)`` of frames ``start:stop``, and the
    float64 sums of those frames as they came and aligned (those with a shift) with their
    count (host arrays).  Frames are streamed as a pass streams them (on the GPU: pinned
    copies on two streams, overlapped with the work)."""
    t = xp.asarray(template, xp.float32)
    prepare = dataclasses.replace(opts, window="none").preparer(xp, t.shape)
    fit = _Residual(prepare(t[None]).frames[0], xp)
    sums = _Sums(xp, t.shape)
    out = []
    with DeviceChunks(FrameRange(src, start, stop), chunk, xp) as chunks:
        for first, frames in chunks:
            a = start + first
            b = a + len(frames)
            f, g = _aligned(frames, shifts[a:b], xp, area)
            ok = xp.asarray(np.isfinite(shifts[a:b]).all(axis=1))
            sums.add(f, g, ok)
            before, after = _zncc(f, t, xp), _zncc(g, t, xp)
            p = prepare(g)
            usable = p.finite & ~p.constant & ok
            residual = xp.where(usable[:, None], fit(p.frames), xp.nan)
            after = xp.where(ok, after, xp.nan)
            out.append(xp.concatenate([before[:, None], after[:, None], residual], axis=1))
    if xp is not np:
        xp.cuda.Device().synchronize()  # (the chunks' streams)
    rows = np.concatenate([backend.to_numpy(r).astype(np.float64) for r in out]) if out \
        else np.zeros((0, 4))
    raw, aligned = sums.result()
    return rows, raw, aligned, int(np.isfinite(shifts[start:stop]).all(axis=1).sum())


class _Sums:
    """float64 sums of the frames as they came and aligned over the chunks (added in chunk
    order: on the GPU each chunk's sums wait for the previous chunk's, on its own stream)."""

    def __init__(self, xp, shape):
        self.xp = xp
        self.raw = xp.zeros(shape, xp.float64)
        self.aligned = xp.zeros(shape, xp.float64)
        self._done = None

    def add(self, f, g, ok):
        xp = self.xp
        if self._done is not None:
            xp.cuda.get_current_stream().wait_event(self._done)
        self.raw += f.sum(axis=0, dtype=xp.float64)
        self.aligned += (g * ok[:, None, None]).sum(axis=0, dtype=xp.float64)
        if xp is not np:
            self._done = xp.cuda.get_current_stream().record()

    def result(self):
        return backend.to_numpy(self.raw), backend.to_numpy(self.aligned)


class _Residual:
    """The shift that would align each (prepared) frame with the (prepared) template: one
    Gauss-Newton step of ``frame(x) = a * template(x + s) + b`` from ``s = 0`` (each image
    centred and scaled to unit norm; the template's gradient products made once), so a chunk
    costs a centring, a matrix product and a norm, not a search."""

    def __init__(self, template, xp):
        self.xp = xp
        t = template.astype(xp.float64)
        t = t - t.mean()
        t = t / max(float(xp.sqrt((t * t).sum())), 1e-300)
        gy, gx = xp.gradient(t)
        self.g = xp.stack([gy.ravel(), gx.ravel()]).astype(xp.float32)  # (2, P)
        # the template's own projection: (t @ g.T), subtracted from each frame's
        self.tg = (t.astype(xp.float32).ravel() @ self.g.T).astype(xp.float64)
        h = np.array([[float((gy * gy).sum()), float((gy * gx).sum())],
                      [float((gy * gx).sum()), float((gx * gx).sum())]])
        self.inverse = xp.asarray(np.linalg.inv(h)) if np.linalg.det(h) > 0 else None

    def __call__(self, frames):
        xp = self.xp
        n = len(frames)
        if self.inverse is None:
            return xp.full((n, 2), xp.nan)
        f = _centred(frames)
        norm = xp.sqrt(backend.item_sums(xp.square(f)))
        # the error's projection on the template's gradient, through the normal equations:
        # ((f / norm - t) @ g.T), the division after the product (no scaled copy)
        proj = (f.reshape(n, -1) @ self.g.T).astype(xp.float64)
        b = proj / xp.where(norm > 0, norm, 1.0)[:, None] - self.tg[None]
        step = b @ self.inverse.T
        return xp.where((norm > 0)[:, None], -step, xp.nan)


def _centred(frames):
    """Each frame (N, H, W) less its mean, float32 (a new array)."""
    xp = backend.array_module_of(frames)
    mean = (backend.item_sums(frames) / int(np.prod(frames.shape[1:]))).astype(xp.float32)
    return frames - mean[:, None, None]


def _zncc(frames, template, xp):
    """The zero-normalized correlation of each (contiguous) frame with the template (NaN where
    flat): frames centred, a matrix-vector product and the frames' norms."""
    n = len(frames)
    f = _centred(frames)
    t = template.reshape(-1).astype(xp.float32)
    t = t - t.mean()
    num = (f.reshape(n, -1) @ t).astype(xp.float64)
    den = xp.sqrt(backend.item_sums(xp.square(f)) * float((t.astype(xp.float64) ** 2).sum()))
    with np.errstate(invalid="ignore", divide="ignore"):
        return xp.where(den > 0, num / xp.where(den > 0, den, 1.0), xp.nan)


def _sharpness(image) -> float:
    """Gradient energy over variance of a mean image (scale-free; higher is sharper); the
    gradient in float32, summed in float64 (a third of the float64 gradient's time: 4 ms a
    1024x1024 image on one core, twice a run)."""
    img = np.asarray(image, np.float32)
    var = float(img.var(dtype=np.float64))
    if not np.isfinite(var) or var <= 0 or min(img.shape) < 3:
        return float("nan")
    gy, gx = np.gradient(img)
    energy = np.square(gy).sum(dtype=np.float64) + np.square(gx).sum(dtype=np.float64)
    return float(energy / img.size / var)
