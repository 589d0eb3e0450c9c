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

Piecewise-rigid runs (patches) are judged as their output is made: every frame warped by its
motion field (not its rigid shift), on the area every patch shift covers; and the same figures
and flags per patch region (:class:`_PatchQuality`: each patch of the grid, the frame's
before and after against the template's, its residual, flagged against the same patch in the
other frames), so that a region the field did not fix shows where the frame's whole does not.

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
from ._quality_figures import (AreaFigures, RegionFigures, area_blocks, frame_sums,
                               moments_of, region_moments, sharpness)
from .piecewise import common_area, field_weights, warp_chunk
from .rigid import area_float
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
    ``sharpness_after`` and the ``area`` ``(y0, y1, x0, x1)`` measured on.  Piecewise runs
    also per patch region: ``patch_before``, ``patch_after``, ``patch_worse``, ``patch_poor``
    (N, gy, gx) and ``patch_residual`` (N, gy, gx, 2); None otherwise."""

    before: np.ndarray
    after: np.ndarray
    residual: np.ndarray
    worse: np.ndarray
    poor: np.ndarray
    sharpness_before: float
    sharpness_after: float
    area: tuple
    patch_before: np.ndarray = None
    patch_after: np.ndarray = None
    patch_residual: np.ndarray = None
    patch_worse: np.ndarray = None
    patch_poor: np.ndarray = None

    @property
    def flagged(self) -> np.ndarray:
        return self.worse | self.poor

    @property
    def patch_flagged(self):
        """(N, gy, gx): patch regions flagged worse or poor (None without patches)."""
        return None if self.patch_after is None else self.patch_worse | self.patch_poor

    def summary(self) -> dict:
        """The run's figures (``shifts.json``'s ``quality``)."""
        after = self.after[np.isfinite(self.after)]
        q = _percentiles(after, (5, 50, 95)) if after.size else [None] * 3
        return {"sharpness_before": self.sharpness_before,
                "sharpness_after": self.sharpness_after,
                "correlation_after": {"p5": q[0], "median": q[1], "p95": q[2]},
                "median_residual_px": float(_nanmedian(np.abs(self.residual).reshape(-1)))
                if np.isfinite(self.residual).any() else None,
                "worse_frames": np.flatnonzero(self.worse).tolist(),
                "poor_frames": np.flatnonzero(self.poor).tolist(),
                "area": list(self.area),
                **({} if self.patch_after is None else {"patches": self._patch_summary()})}

    def _patch_summary(self) -> dict:
        """Per patch region the median correlation after alignment (gy x gx), and the
        ``[frame, row, column]`` of every patch region flagged worse, and poor (a region may
        be both, as the frames' lists)."""
        after = np.where(np.isfinite(self.patch_after), self.patch_after, np.nan)
        seen = np.isfinite(after).any(axis=0)
        median = np.full(after.shape[1:], np.nan)
        median[seen] = _nanmedian(after[:, seen])
        return {"correlation_after_median": [[None if not np.isfinite(v) else float(v)
                                              for v in row] for row in median],
                "worse": np.argwhere(self.patch_worse).tolist(),
                "poor": np.argwhere(self.patch_poor).tolist()}

    def records(self) -> list:
        """One dict a frame (``shifts.json``'s frames; piecewise runs: how many of the frame's
        patch regions are flagged worse and poor)."""
        out = [{"correlation_before": float(b), "correlation_after": float(a),
                "residual_dy": float(r[0]), "residual_dx": float(r[1]),
                "quality_flag": "worse" if w else "poor" if p else ""}
               for b, a, r, w, p in zip(self.before, self.after, self.residual, self.worse,
                                        self.poor)]
        if self.patch_after is not None:
            worse = self.patch_worse.reshape(len(out), -1)
            poor = self.patch_poor.reshape(len(out), -1)
            for rec, w, p in zip(out, worse.sum(axis=1), poor.sum(axis=1)):
                rec.update(patches_worse=int(w), patches_poor=int(p))
        return out


def measure_quality(opts, shifts, executor, frame_shape, template, patches=None):
    """The :class:`QualityReport` of a run's ``shifts`` (N, 2) against ``template`` (the image
    the run's last pass measured against, as it came: the first frame, the mean, the refined
    template), its frames read once more through ``executor`` (its ranges, where it reads).
    ``patches``: a piecewise run's ``(motion_field, patch_centres, patch_size)``, by which its
    frames are warped, and the per-patch figures."""
    shifts = np.asarray(shifts, np.float64)
    if patches is not None:
        patches = (np.asarray(patches[0], np.float64), np.asarray(patches[1], np.float64),
                   tuple(int(v) for v in patches[2]))
    area = _area(shifts if patches is None else patches[0].reshape(-1, 2), frame_shape)
    chunk = opts.chunk_frames or executor.chunk or DEFAULT_CHUNK  # (the run's reads)
    t = executor.xp.asarray(template)  # (as it came: the GPU's pass converts its area)
    part = functools.partial(_rows_part, opts=opts, shifts=shifts, area=area, chunk=chunk,
                             template=executor.portable(t), patches=patches)
    parts = executor.map(part, None)
    rows = np.concatenate([p[0] for p in parts])
    whole = [p[1]["sharpness"] for p in parts if "sharpness" in p[1]]
    if whole:  # (a part of the whole stack measured its means' sharpness where they lay)
        sharp = whole[0]
    else:
        raw, aligned = (sum(p[1]["sums"][k] for p in parts) for k in (0, 1))
        kept = sum(p[2] for p in parts)
        sharp = (sharpness(raw / max(len(shifts), 1)),
                 sharpness(aligned / kept) if kept else float("nan"))
    worse, poor = _flags(rows[:, 0], rows[:, 1], rows[:, 2:4])
    report = QualityReport(rows[:, 0], rows[:, 1], rows[:, 2:4], worse, poor, *sharp, area)
    if patches is not None:
        grid = patches[1].shape[:2]
        prow = np.concatenate([p[3] for p in parts])  # (N, P, 4)
        pworse, ppoor = _flags(prow[..., 0], prow[..., 1], prow[..., 2:4])
        n = len(prow)
        report.patch_before, report.patch_after = (prow[..., k].reshape(n, *grid)
                                                   for k in (0, 1))
        report.patch_residual = prow[..., 2:4].reshape(n, *grid, 2)
        report.patch_worse, report.patch_poor = (f.reshape(n, *grid) for f in (pworse, ppoor))
    return report


def quality_of_frames(opts, frames, shifts, xp):
    """The :class:`QualityReport` of ``frames`` in memory (NumPy, read as a file's are) against
    the first, measured on ``xp``'s device in one range (what a helper process runs to build
    the report's kernels: :mod:`._prebuild`)."""
    from ..io import open_source

    with open_source(frames, None) as src:
        return measure_quality(opts, shifts, _OneRange(src, xp, len(frames)), src.frame_shape,
                               xp.asarray(frames[0]))


class _OneRange:
    """What the report asks of an executor: every frame in one range on ``xp``'s device."""

    def __init__(self, src, xp, chunk):
        self.src, self.xp, self.chunk = src, xp, chunk

    def map(self, fn, progress):
        return [fn(self.src, self.xp, 0, self.src.n_frames, progress)]

    def portable(self, a):
        return a


# NumPy's median and percentile import numpy.ma at their first call, a cost of its own in a
# one-shot GPU run, which imports nothing else that needs it; these are theirs, sorted
def _nanmedian(a):
    """``np.nanmedian(a, axis=0)`` of a (N, ...) float array with a number in every column."""
    s = np.sort(a, axis=0)  # (NaNs sort last, infinities where they belong)
    n = (~np.isnan(s)).sum(axis=0)
    lo = np.take_along_axis(s, ((n - 1) // 2)[None], axis=0)[0]
    hi = np.take_along_axis(s, (n // 2)[None], axis=0)[0]
    return (lo + hi) / 2


def _percentiles(a, qs) -> list:
    """``np.percentile(a, qs)`` (linear) of a 1-D finite float64 array, as floats."""
    s = np.sort(a)
    out = []
    for q in qs:
        at = q / 100.0 * (len(s) - 1)
        i = min(int(at), len(s) - 1)
        a, b, t = s[i], s[min(i + 1, len(s) - 1)], at - i
        out.append(float(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t))
    return out


def _flags(before, after, residual):
    """``(worse, poor)`` of rows (N,) or patch regions (N, P): worse where alignment lowered
    the correlation; poor where it is an outlier below the others' (of the same region), the
    residual is large, or nothing could be measured."""
    finite = np.isfinite(after)
    columns = after.reshape(len(after), -1)  # (a region a column; frames: one)
    med = np.full(columns.shape[1], np.nan)
    mad = np.full(columns.shape[1], np.nan)
    seen = np.isfinite(columns).any(axis=0)
    if seen.any():
        kept = columns[:, seen]
        med[seen] = _nanmedian(kept)
        mad[seen] = 1.4826 * _nanmedian(np.abs(kept - med[seen]))
    bound = (med - np.maximum(POOR_DEVIATIONS * mad, POOR_DROP)).reshape(after.shape[1:])
    with np.errstate(invalid="ignore"):
        low = after < bound
        off = (np.abs(residual) > RESIDUAL_LIMIT).any(axis=-1)
    poor = ~finite | ~np.isfinite(residual).all(axis=-1) | low | off
    worse = finite & np.isfinite(before) & (after < before - WORSE_BY)
    return worse, poor


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
    """The chunk's frames as they came and aligned, float32, cut to ``area`` (contiguous); on
    the GPU the shift reads the pixels as they are, and only the area is converted."""
    y0, y1, x0, x1 = area
    s = xp.asarray(np.where(np.isfinite(shifts), shifts, 0.0))
    if xp is not np:
        frames = xp.asarray(frames)
        return area_float(frames, area), shift_frames(frames, s, area=area)
    f = xp.asarray(frames).astype(xp.float32)
    return xp.ascontiguousarray(f[:, y0:y1, x0:x1]), shift_frames(f, s, area=area)


def _rows_part(src, xp, start, stop, progress, *, opts, shifts, area, template, chunk,
               patches=None):
    """Rows ``(before, after, residual dy, residual dx)`` of frames ``start:stop``; the
    sharpness of the mean of those frames as they came and aligned (those with a shift) where
    they are the whole stack (``{"sharpness": (before, after)}``), else those means' float64
    sums (``{"sums": (raw, aligned)}``, host arrays), with the count of the aligned ones; with
    ``patches``, also the rows per patch region (n, P, 4).  Frames are streamed as a pass
    streams them (on the GPU: pinned copies on two streams, overlapped with the work); nothing
    waits for the device before the last chunk is queued."""
    y0, y1, x0, x1 = area
    whole = xp.asarray(template)
    inside = xp.ascontiguousarray(whole[y0:y1, x0:x1].astype(xp.float32)) if xp is np \
        else area_float(whole[None], area)[0]
    prepare = opts._decided(window="none").preparer(xp, inside.shape)
    t = AreaFigures(inside, prepare(inside[None]).frames[0], xp)
    regions = None if patches is None else _PatchQuality(xp.asarray(whole, xp.float32),
                                                         patches, opts, xp, stop - start)
    sums = _Sums(xp, inside.shape)
    out = []
    # a GPU pass: each chunk's moments and masks, the area's figures made on the host at the end
    moments = None if xp is np else _AreaMoments(xp, stop - start, inside.shape[0])
    ok_of = (lambda a, b: np.isfinite(shifts[a:b]).all(axis=1)) if patches is None else \
        (lambda a, b: np.isfinite(shifts[a:b]).all(axis=1)
         & np.isfinite(patches[0][a:b]).all(axis=(1, 2, 3)))
    with DeviceChunks(FrameRange(src, start, stop), chunk, xp) as chunks:
        for first, frames in chunks:
            a = start + first
            b = a + len(frames)
            host_ok = ok_of(a, b)
            ok = xp.asarray(host_ok)
            if regions is None:
                f, g = _aligned(frames, shifts[a:b], xp, area)
            else:
                full, warped = regions.aligned(frames, a, b)
                f, g = (xp.ascontiguousarray(v[:, y0:y1, x0:x1]) for v in (full, warped))
                regions.add(first, full, warped, host_ok)
            sums.add(f, g, None if host_ok.all() else ok)
            p = prepare(g)
            if moments is not None:
                moments.add(first, t, f, g, p)
                continue
            out.append(_rows(t.zncc(f), t.zncc(g), t.residual(p.frames), p.finite, p.constant,
                             host_ok))
    if xp is not np:
        xp.cuda.Device().synchronize()  # (the chunks' streams)
    counted = int(ok_of(start, stop).sum())
    if moments is not None:
        out = [moments.rows(t, ok_of(start, stop))]
    rows = np.concatenate(out).astype(np.float64) if out else np.zeros((0, 4))
    if start == 0 and stop == src.n_frames:  # the whole stack: its means judged here
        n = max(stop - start, 1)
        means = {"sharpness": (sharpness(sums.raw, n),
                               sharpness(sums.aligned, counted) if counted else float("nan"))}
    else:
        means = {"sums": sums.result()}
    per_patch = None if regions is None else regions.finish()
    return rows, means, counted, per_patch


class _AreaMoments:
    """A GPU pass's moments of every frame's area (as it came, aligned, and aligned and
    prepared) and its prepared frames' masks, written chunk by chunk into buffers of the range
    (the chunks' streams write apart), copied to the host once at the end."""

    def __init__(self, xp, n, rows):
        blocks = area_blocks(rows)
        self.moments = [xp.empty((n, blocks, m), xp.float64) for m in (3, 3, 4)]
        self.finite, self.constant = xp.empty(n, bool), xp.empty(n, bool)

    def add(self, i, figures, f, g, p):
        """The chunk of frames ``i:i + len(f)``: ``f`` as they came, ``g`` aligned, ``p``
        its prepared copy (:func:`~.rigid.prepare`'s)."""
        at = slice(i, i + len(f))
        b, a, r = (m[at] for m in self.moments)
        figures.zncc_moments(f, out=b)
        figures.zncc_moments(g, out=a)
        figures.residual_moments(p.frames, out=r)
        self.finite[at], self.constant[at] = p.finite, p.constant

    def rows(self, figures, ok):
        """The range's rows (n, 4) NumPy (after the device finished)."""
        b, a, r = (moments_of(m) for m in self.moments)
        return _rows(figures.zncc_of(b), figures.zncc_of(a), figures.residual_of(r),
                     backend.to_numpy(self.finite), backend.to_numpy(self.constant), ok)


def _rows(before, after, residual, finite, constant, ok):
    """The rows (n, 4), NumPy, of the frames' figures: after alignment NaN where a frame has
    no shift (``ok``), the residual NaN where its prepared frame is unusable."""
    usable = finite & ~constant & ok
    return np.concatenate([before[:, None], np.where(ok, after, np.nan)[:, None],
                           np.where(usable[:, None], residual, np.nan)], axis=1)


class _PatchQuality:
    """The per-patch-region figures of a piecewise run: each frame warped by its motion field
    (``patches``: ``(field (N, gy, gx, 2), centres (gy, gx, 2), size (ph, pw))``, the warp of
    the run's output), then, on each patch of the grid, its correlation before and after with
    the template's same patch and its residual (:class:`~._quality_figures.RegionFigures`),
    the residual on the regions of the warped frame prepared whole (as the template: one
    prefilter a frame, no edge of its own a region).  On the CPU a few batched products a
    chunk; on the GPU one read of the chunk a figure for every region at once
    (:func:`~._quality_figures.region_moments`, the regions read in place), the figures made
    of their sums on the host at the end (:meth:`finish`)."""

    def __init__(self, template, patches, opts, xp, n):
        field, centres, size = patches
        self.xp, self.field, self.size = xp, field, size
        half = (np.asarray(size, np.float64) - 1) / 2.0
        self.starts = np.rint(np.asarray(centres).reshape(-1, 2) - half).astype(np.int64)
        self.weights = field_weights(centres, template.shape, xp)
        self.prepare = opts._decided(window="none").preparer(xp, template.shape)
        tp = self.cut(template[None])[0]  # (P, ph, pw)
        self.regions = RegionFigures(tp, self.cut(self.prepare(template[None]).frames)[0], xp)
        self.parts, self.ok = [], np.zeros(n, bool)
        if xp is not np:
            ph, pw = size
            count = len(self.starts)
            self.starts_dev = xp.asarray(self.starts, xp.int32)
            self.t_refs = self.regions.t.reshape(count, 1, ph, pw)
            self.g_refs = xp.ascontiguousarray(self.regions.g.reshape(count, 2, ph, pw))
            # (the range's sums, a chunk's written in place: one copy to the host at the end)
            self.moments = [xp.empty((n, count, 1, m), xp.float64) for m in (3, 3, 4)]

    def cut(self, frames):
        """``(n, P, ph, pw)``: every patch region of every frame."""
        ph, pw = self.size
        return self.xp.stack([frames[:, y:y + ph, x:x + pw] for y, x in self.starts], axis=1)

    def aligned(self, frames, a, b):
        """The chunk's frames (float32) as they came and warped by their fields (frames
        without a field: as they came)."""
        xp = self.xp
        full = xp.asarray(frames).astype(xp.float32)
        fld = self.field[a:b]
        fld = np.where(np.isfinite(fld), fld, 0.0)
        return full, warp_chunk(full, xp.asarray(fld), self.weights)

    def add(self, i, full, warped, ok):
        """The chunk of frames ``i:i + len(full)``: ``full`` as they came (float32) and
        ``warped``; ``ok`` (NumPy) which have a field.  On the CPU its rows (n, P, 4) now; on
        the GPU the regions' sums, into the range's buffers (nothing waits for the device)."""
        xp = self.xp
        n, count = len(full), len(self.starts)
        self.ok[i:i + n] = ok
        prepared = self.prepare(warped).frames
        if xp is not np:
            b, a, r = (m[i:i + n] for m in self.moments)
            region_moments(full, self.starts_dev, self.size, self.t_refs, out=b)
            region_moments(warped, self.starts_dev, self.size, self.t_refs, out=a)
            region_moments(prepared, self.starts_dev, self.size, self.g_refs, out=r)
            return
        before = self.regions.zncc(self.cut(full).reshape(n, count, -1))
        after = self.regions.zncc(self.cut(warped).reshape(n, count, -1))
        residual = self.regions.residual(self.cut(prepared).reshape(n, count, -1))
        self.parts.append(_region_rows(before, after, residual, self.ok[i:i + n]))

    def finish(self):
        """``(N, P, 4)`` NumPy of the range's chunks (after the device finished)."""
        count = len(self.starts)
        if self.xp is np:
            return np.concatenate(self.parts).astype(np.float64) if self.parts \
                else np.zeros((0, count, 4))
        r = self.regions
        b, a, p = (moments_of(m) for m in self.moments)
        return _region_rows(r.zncc_from(b), r.zncc_from(a), r.residual_from(p), self.ok)


def _region_rows(before, after, residual, ok):
    """``(n, P, 4)`` NumPy: after alignment NaN where a frame has no shift (``ok``), the residual
    NaN where its warped region cannot be measured (flat or not finite: its correlation NaN)."""
    before, after, residual = (np.asarray(backend.to_numpy(v), np.float64)
                               for v in (before, after, residual))
    ok = np.asarray(ok, bool)[:, None]
    after = np.where(ok, after, np.nan)
    residual = np.where(np.isfinite(after)[..., None], residual, np.nan)
    return np.concatenate([before[..., None], after[..., None], residual], axis=2)


class _Sums:
    """float64 sums of the frames as they came and aligned over the chunks (added in chunk
    order: on the GPU each chunk's sums wait for the previous chunk's, on its own stream)."""

    def __init__(self, xp, shape):
        self.xp = xp
        self.raw = xp.zeros(shape, xp.float64)
        self.aligned = xp.zeros(shape, xp.float64)
        self._done = None

    def add(self, f, g, ok=None):
        """Add a chunk: ``f`` as the frames came, ``g`` aligned, those of ``ok`` (None: all)."""
        xp = self.xp
        if self._done is not None:
            xp.cuda.get_current_stream().wait_event(self._done)
        if xp is np:
            self.raw += f.sum(axis=0, dtype=xp.float64)
            # (left out, not times 0: a frame without a shift may hold NaN, as the GPU's)
            kept = g if ok is None else np.where(ok[:, None, None], g, 0.0)
            self.aligned += kept.sum(axis=0, dtype=xp.float64)
            return
        frame_sums(self.raw, f)
        frame_sums(self.aligned, g, ok)
        self._done = xp.cuda.get_current_stream().record()

    def result(self):
        return backend.to_numpy(self.raw), backend.to_numpy(self.aligned)
