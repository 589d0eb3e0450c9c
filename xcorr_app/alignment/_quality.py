"""The quality report of a run: how much better the aligned stack is than the input, frame by
frame, without trusting the shifts that made it.

Measured on the area every rigidly shifted frame covers (:func:`~.warp.common_area`;
where the shifts leave none, that of the frames near the median shift: :func:`_shared`), in one
more streaming pass over the stack (on the run's executor, like the measuring passes),
against the template the run's last pass measured against (the first frame, the mean, or the
refined template): per frame, the zero-normalized correlation with the template before
alignment (the frame as it came) and after it (shifted by its shift, bilinear, as
:meth:`AlignResult.apply` does), and the residual shift: the aligned frame measured again
against the template by one Gauss-Newton step, with the run's prefilter (what is left: close to
0 for a frame the run aligned).

For the run: the sharpness of the mean image before and after alignment (gradient energy over
variance: a drift blurs the mean) and the correlation's distribution.  A frame is flagged
``worse`` where alignment lowered its correlation and the residual does not say it sits on
the template (:data:`ALIGNED_PX`), and ``poor`` where its correlation after
alignment is an outlier below the others', its residual exceeds :data:`RESIDUAL_LIMIT` px, or
it could not be measured at all; ``rotated`` where the aligned frame is still rotated against
the template (after template passes, whose template turns as the frames' mean, against frame
0's: :func:`~.piecewise.rotated_frames`) by enough that a corner may be more than 0.5 px off
(the rotation of every frame measured from a 3x3 grid of small patches of the aligned frames
the pass holds: :class:`~.piecewise._rotation.RotationProbe`; the translation model cannot
align such a frame, ``model="rigid-body"`` does).  A rigid-body run's frames are judged rotated
and shifted, as its aligned stack is made.

Piecewise-rigid runs (patches) are judged as their output is made: every frame warped by its
motion field (not its rigid shift), on the area the patch regions span; and the same figures
and flags per patch region (:class:`PatchQuality`: each patch of the grid, the frame's before
and after against the template's, its residual, flagged against the same patch in the other
frames), so that a region the field did not fix shows where the frame's whole does not.  On
one device the last patch pass measures them as it goes (:class:`PatchReport`: the chunks it
holds as they came, prepared and warped; the residual on the prepared frames warped, which the
prefilter, a convolution, allows), against the template that pass measured against; other
executors read the frames once more.

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

import contextlib
import dataclasses
import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import backend
from ..io import FrameRange, json_number
from ..streaming import (DEFAULT_CHUNK, DeviceChunks, HostCopy, cpu_threads, frame_slices,
                         host_copies, one_blas_thread)
from ._quality_figures import (AreaFigures, TemplateRegions, TileRegions, area_blocks,
                               block_sums, frame_sums, sharpness,
                               template_moments, template_refs)
from .piecewise import field_weights, patch_preparer, warp_chunk
from .rigid import (area_float, despiked, floating, quiet_if_nonfinite, scaled_by,
                    stack_exponent)
from .piecewise import RotationProbe, rigid_body_weights, rotated_frames
from .warp import common_area, rigid_body_field, shift_frames, shift_into

__all__ = ["QualityReport", "measure_quality", "PatchReport", "PatchQuality", "RESIDUAL_LIMIT"]

#: a residual larger than this (px, on either axis) flags the frame ``poor``
RESIDUAL_LIMIT = 0.5
#: a correlation after alignment this many robust deviations below the median flags it ``poor``
#: (and at least :data:`POOR_DROP` below it: on clean stacks the deviation is tiny)
POOR_DEVIATIONS = 5.0
POOR_DROP = 0.03
#: alignment "made it worse" when the correlation dropped by more than this...
WORSE_BY = 0.01
#: ... and the residual is larger than this (px, on either axis): a frame that sits on the
#: template within it is aligned on what moves, and what lowered its correlation does not move
#: with the scene (a background or shading fixed on the sensor: the accuracy bench's
#: ``bleaching_background`` flagged 46 of its 759 frames within 0.5 px worse; at 0.1 px none,
#: and no frame off by more than 0.5 px of any kind loses its flags up to 0.3 px)
ALIGNED_PX = 0.1
#: a correlation after alignment below this share of the stack's best frames' (its
#: :data:`BEST_QUANTILE`) flags the frame ``poor`` where the median cannot: half the frames or
#: more behind a closed shutter or bleached away (docs/performance.md, "Hard stacks")
BEST_SHARE = 0.5
BEST_QUANTILE = 0.9
#: the least common area (px per side) the report is measured on; else the whole frame (or
#: :func:`_shared`'s area)
MIN_SIDE = 8
#: where the frames' shifts leave no such area in common, it is the area of the frames within
#: this share of the frame of the median shift (each axis), and the others are not measured
#: (``poor``: their shift takes that area off the frame): frames behind a closed shutter got
#: shifts of 50-90 px on 128 px frames, the area became the whole frame, and their
#: correlation there passed
SHARED_REACH = 0.25


@dataclasses.dataclass
class QualityReport:
    """Per frame ``before``, ``after`` (correlation with the template), ``residual`` (N, 2) px,
    ``worse`` and ``poor`` flags; for the run the mean image's ``sharpness_before`` and
    ``sharpness_after`` and the ``area`` ``(y0, y1, x0, x1)`` measured on.  Piecewise runs
    also per patch region: ``patch_before``, ``patch_after``, ``patch_worse``, ``patch_poor``
    (N, gy, gx) and ``patch_residual`` (N, gy, gx, 2); None otherwise.  Rigid runs also
    ``residual_rotation_deg`` (N,), each aligned frame's rotation against the template (after
    template passes, against frame 0's: :func:`~.piecewise.rotated_frames`; degrees, in the
    sense of ``AlignResult.rotation_deg``: the rotation that would still align it; NaN where not
    measured) and the ``rotated`` flags; None for piecewise runs."""

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
    residual_rotation_deg: np.ndarray = None
    rotated: np.ndarray = None

    @property
    def flagged(self) -> np.ndarray:
        """(N,): frames flagged worse, poor or rotated."""
        flags = self.worse | self.poor
        return flags if self.rotated is None else flags | self.rotated

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
                **({} if self.rotated is None else
                   {"rotated_frames": np.flatnonzero(self.rotated).tolist(),
                    "max_abs_residual_rotation_deg":
                    float(np.nanmax(np.abs(self.residual_rotation_deg)))
                    if np.isfinite(self.residual_rotation_deg).any() else None}),
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
        n = len(self.after)
        rotated = np.zeros(n, bool) if self.rotated is None else self.rotated
        num = json_number  # (NaN: None, JSON-ready as the records are said to be)
        out = [{"correlation_before": num(b), "correlation_after": num(a),
                "residual_dy": num(r[0]), "residual_dx": num(r[1]),
                "quality_flag": "worse" if w else "rotated" if t else "poor" if p else ""}
               for b, a, r, w, p, t in zip(self.before, self.after, self.residual, self.worse,
                                           self.poor, rotated)]
        if self.residual_rotation_deg is not None:
            for rec, v in zip(out, self.residual_rotation_deg.tolist()):
                rec["residual_rotation_deg"] = num(v)
        if self.patch_after is not None:
            worse = self.patch_worse.reshape(len(out), -1)
            poor = self.patch_poor.reshape(len(out), -1)
            for rec, w, p in zip(out, worse.sum(axis=1), poor.sum(axis=1)):
                rec.update(patches_worse=int(w), patches_poor=int(p))
        return out


def measure_quality(opts, shifts, executor, frame_shape, template, patches=None,
                    rotation=None, relative_to=None, progress=None, out=None):
    """The :class:`QualityReport` of a run's ``shifts`` (N, 2) against ``template`` (the image
    the run's last pass measured against, as it came: the first frame, the mean, the refined
    template), its frames read once more through ``executor`` (its ranges, where it reads).
    ``patches``: a piecewise run's ``(motion_field, patch_centres, patch_size)``, by which its
    frames are warped, and the per-patch figures (:class:`PatchQuality`).  ``rotation``: a
    rigid-body run's angles (N,) degrees: its frames rotated and shifted
    (:func:`~.warp.rigid_body_field`).  ``relative_to``: the frame whose place the shifts
    are in, where ``template`` is a template of the frames (each frame's rotation is judged
    against that frame's: :func:`~.piecewise.rotated_frames`).  ``progress(k)``: called with
    each chunk's frames as it is read.  ``out``: a rigid run's aligned output (a C-contiguous
    float32 CuPy array of the stack's shape, where :meth:`~._executors.Executor.out_in_report`
    says the report reads the frames it is made of), filled by this pass as it reads them
    (the frames shifted once, for the output and the figures)."""
    shifts = run_shifts = np.asarray(shifts, np.float64)
    chunk = opts.chunk_frames or executor.chunk or DEFAULT_CHUNK  # (the run's reads)
    t = executor.portable(executor.xp.asarray(template))  # (as it came)
    if patches is None:
        if rotation is None:
            shifts = _shared(shifts, frame_shape)
        field = None if rotation is None else rigid_body_field(shifts, rotation, frame_shape)[0]
        # (a rotated frame's corners: the area every frame covers, rotated too; a pixel in, as
        # the field's warp fills a source past the edge pixel, where a shift blends)
        area = _area(shifts if field is None else field.reshape(-1, 2), frame_shape,
                     0 if field is None else 1)
        part = functools.partial(_rows_part, opts=opts, shifts=shifts, area=area, chunk=chunk,
                                 template=t, host=not executor.local, field=field,
                                 fill=None if out is None else (out, run_shifts))
        return report_of(executor.map(part, progress), shifts, area, xp=executor.xp,
                         rotation=(frame_shape, relative_to))
    field, centres, size = (np.asarray(patches[0], np.float64),
                            np.asarray(patches[1], np.float64), tuple(int(v) for v in patches[2]))
    part = functools.partial(_patch_part, opts=opts, field=field, ok=patch_ok(shifts, field),
                             chunk=chunk, template=t, centres=centres, size=size,
                             host=not executor.local)
    parts = executor.map(part, progress)
    return report_of([p[:5] for p in parts], shifts, parts[0][5], centres.shape[:2],
                     xp=executor.xp)


def patch_ok(shifts, field):
    """(N,) NumPy: the frames of a piecewise run with a shift and a whole field."""
    # (the field is a strided view of the pass's rows: (N, P, 2) stays one, and each component
    # checked apart is a quarter of the time a reshape to (N, 2P), a copy, took)
    f = field.reshape(len(field), -1, 2)
    return np.isfinite(shifts).all(axis=1) \
        & (np.isfinite(f[..., 0]) & np.isfinite(f[..., 1])).all(axis=1)


def report_of(parts, shifts, area, grid=None, xp=np, rotation=None):
    """The :class:`QualityReport` of the ranges' parts in frame order (each ``(rows, means,
    counted)``, a piecewise run's with its per-patch rows and their :class:`_RegionFlags`:
    :func:`_rows_part`, :meth:`PatchQuality.result`) of a run of
    ``shifts``, measured on ``area``; ``grid``: a piecewise run's ``(gy, gx)``; ``xp``: where
    the means' sharpness is measured (a Dask client's GPU: its workers' means come as NumPy
    arrays, whose adds and gradients on the host were slow); ``rotation``: a rigid run's
    ``(frame_shape, relative_to)``, by which its frames' rotations are judged
    (:func:`~.piecewise.rotated_frames`)."""
    rows = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
    whole = [p[1]["sharpness"] for p in parts if "sharpness" in p[1]]
    if whole:  # (a part of the whole stack measured its means' sharpness where they lay)
        sharp = whole[0]
    else:
        raw, aligned = (_total([xp.asarray(p[1]["sums"][k]) for p in parts]) for k in (0, 1))
        kept = sum(p[2] for p in parts)
        # (divided in the figures' kernel: a CuPy array / a number would go through NumPy's
        # ufunc protocol, whose first use imports cupyx and SciPy)
        sharp = (sharpness(raw, max(len(shifts), 1)),
                 sharpness(aligned, kept) if kept else float("nan"))
    worse, poor = _flags(rows[:, 0], rows[:, 1], rows[:, 2:4])
    report = QualityReport(rows[:, 0], rows[:, 1], rows[:, 2:4], worse, poor, *sharp, area)
    if rows.shape[1] > 4:  # (the rotation of rigid runs: RotationProbe.columns)
        report.residual_rotation_deg, report.rotated = rotated_frames(rows[:, 4], rows[:, 5],
                                                                      *rotation)
        report.poor |= rows[:, 6] > 0  # (off by pixels at the centre: the patches say so)
    if grid is not None:
        # (N, P, 4)
        prow = parts[0][3] if len(parts) == 1 else np.concatenate([p[3] for p in parts])
        pworse, ppoor = _RegionFlags.joined([p[4] for p in parts]).result()
        n = len(prow)
        report.patch_before, report.patch_after = (prow[..., k].reshape(n, *grid)
                                                   for k in (0, 1))
        report.patch_residual = prow[..., 2:4].reshape(n, *grid, 2)
        report.patch_worse, report.patch_poor = (f.reshape(n, *grid) for f in (pworse, ppoor))
    return report


class PatchReport:
    """The quality report of a piecewise run, against the template its last patch pass measured
    against: measured inside that pass where it runs on one device (the pass makes the
    :class:`PatchQuality` of its template and grid, a call, and adds every chunk to it), else
    in a pass of its own over the result's field (:func:`measure_quality`)."""

    def __init__(self, opts, n_frames, frame_shape):
        self.opts, self.n, self.frame_shape = opts, n_frames, frame_shape
        self.quality = self.template = None

    def __call__(self, xp, template, centres, size, in_pass):
        """The last patch pass's template and grid: its :class:`PatchQuality` (``in_pass``),
        else None."""
        self.template = template
        if in_pass:
            self.quality = PatchQuality(self.opts, xp, template, centres, size, 0, self.n,
                                        self.frame_shape, whole=True)
        return self.quality

    def report(self, res, executor):
        """The :class:`QualityReport` of the run's result ``res`` (its shifts and field)."""
        field = res.motion_field
        q = self.quality
        if q is not None:
            return report_of([q.result(patch_ok(res.shifts, field))], res.shifts, q.area,
                             field.shape[1:3])
        return measure_quality(self.opts, res.shifts, executor, self.frame_shape, self.template,
                               (field, res.patch_centres, res.settings["patches"]["size"]))


def _patch_part(src, xp, start, stop, progress, *, opts, field, ok, chunk, template, centres,
                size, host=True):
    """:meth:`PatchQuality.result` of frames ``start:stop`` read in a pass of their own (an
    executor's unit of work; ``ok``: :func:`patch_ok` of the run), and the area it
    measured."""
    q = PatchQuality(opts, xp, template, centres, size, start, stop - start, src.frame_shape,
                     whole=start == 0 and stop == src.n_frames)
    if xp is not np:
        xp.cuda.Device().synchronize()  # (the chunks' streams read what was set up)
    with DeviceChunks(FrameRange(src, start, stop), chunk, xp) as chunks:
        for first, frames in chunks:
            a = start + first
            b = a + len(frames)
            q.add(a, frames, xp.asarray(np.where(ok[a:b, None, None, None], field[a:b], 0.0)),
                  ok=ok[a:b])
            if progress is not None:
                progress(len(frames))
    if xp is not np:
        q.settle()  # (the figures while the device finishes the chunks)
        xp.cuda.Device().synchronize()  # (the chunks' streams)
    return (*q.result(ok[start:stop], host), q.area)


def quality_of_frames(opts, frames, shifts, xp):
    """The :class:`QualityReport` of ``frames`` in memory (NumPy, read as a file's are) against
    the first, measured on ``xp``'s device in one range (what a helper process runs to build
    the report's kernels: :mod:`._prebuild`); with ``opts.patches``, warped by the field of
    their shifts on the run's grid."""
    from ..io import open_source
    from .piecewise import patch_grid

    patches = None
    with open_source(frames, None) as src:
        if opts.patches is not None:
            grid = patch_grid(src.frame_shape, [[0.0, 0.0]], opts.patches, opts.patch_overlap,
                              opts.max_deviation)
            field = np.broadcast_to(np.asarray(shifts, np.float64)[:, None, None],
                                    (len(shifts), *grid.grid, 2))
            patches = (field, grid.centres, grid.size)
        return measure_quality(opts, shifts, _OneRange(src, xp, len(frames)), src.frame_shape,
                               xp.asarray(frames[0]), patches)


class _OneRange:
    """What the report asks of an executor: every frame in one range on ``xp``'s device."""

    local = True

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
    columns = np.ascontiguousarray(np.moveaxis(a, 0, -1))  # (a column a row: sorted in place)
    n = (~np.isnan(columns)).sum(axis=-1)
    if (n == columns.shape[-1]).all():  # (no NaN: the middle two found, not every order)
        m = columns.shape[-1]
        # (one partition, the lower middle the largest below the upper: NumPy's partition at
        # two ranks took 7 times one's)
        part = np.partition(columns, m // 2, axis=-1)
        hi = part[..., m // 2]
        lo = part[..., :m // 2].max(axis=-1) if m % 2 == 0 else hi
        return (lo + hi) / 2
    columns.sort(axis=-1)  # (NaNs sort last, infinities where they belong)
    lo = np.take_along_axis(columns, ((n - 1) // 2)[..., None], axis=-1)[..., 0]
    hi = np.take_along_axis(columns, (n // 2)[..., None], axis=-1)[..., 0]
    return (lo + hi) / 2


class _SortedColumns:
    """Columns of values sorted once (``s`` (C, N), NaNs last, left out): their medians and
    their ``q`` quantiles (the lower of the nearest ranks; NaN for a column of NaNs) read off
    the same sort (:func:`_flags` wants both of every patch region's column)."""

    def __init__(self, columns):
        """``columns`` (C, N) float64, a column a row (sorted here, in place)."""
        columns.sort(axis=-1)
        self.s = columns
        self.n = (~np.isnan(columns)).sum(axis=-1)

    def kept(self, which):
        """The columns ``which`` (a bool mask) alone."""
        if which.all():  # (no copy of every column)
            return self
        out = _SortedColumns.__new__(_SortedColumns)
        out.s, out.n = self.s[which], self.n[which]
        return out

    def at(self, i):
        """Each column's value of rank ``i`` (an index a column)."""
        return np.take_along_axis(self.s, i[..., None], axis=-1)[..., 0]

    def median(self):
        """``np.nanmedian`` of each column (a number in every column)."""
        return (self.at((self.n - 1) // 2) + self.at(self.n // 2)) / 2

    def quantile(self, q):
        at = np.clip(np.floor(q * (self.n - 1)).astype(np.int64), 0, None)
        return np.where(self.n > 0, self.at(at), np.nan)

    def median_distance(self, med):
        """``np.nanmedian(np.abs(s - med))`` of each column (at least one number in each), read
        off the sort: the distances are two sorted runs (below ``med`` walking down, above it
        walking up), and each of the two middle ranks is found by a binary search over how
        many of it come from the lower run (a few vector steps, not a sort or a partition of
        the distances: those took most of a piecewise report's statistics)."""
        c, width = self.s.shape
        flat = self.s.reshape(-1)
        # both middle ranks of every column at once: (2C,) each
        n, med = np.tile(self.n, 2), np.tile(med, 2)
        base = np.tile(np.arange(c) * width, 2)
        below = np.tile((self.s <= med[:c, None]).sum(axis=-1), 2)  # (NaNs compare False)
        above = n - below
        want = np.concatenate([(self.n - 1) // 2, self.n // 2]) + 1  # (how many smallest)

        def lower(i):  # (the lower run's i-th, med - s[below - 1 - i]; i clipped into it)
            return med - flat[base + np.clip(below - 1 - i, 0, None)]

        def upper(j):  # (the upper run's j-th, s[below + j] - med)
            return flat[base + np.minimum(below + j, n - 1)] - med

        # i from the lower run among the wanted smallest: the least i whose next lower
        # distance is not below the last upper one taken
        lo, hi = np.maximum(want - above, 0), np.minimum(want, below)
        while (lo < hi).any():
            i = (lo + hi) // 2
            more = (i < below) & (want - i > 0)
            more &= upper(np.maximum(want - i - 1, 0)) > lower(np.minimum(i, below - 1))
            open_ = lo < hi
            lo, hi = np.where(open_ & more, i + 1, lo), np.where(open_ & ~more, i, hi)
        j = want - lo
        with np.errstate(invalid="ignore"):
            d = np.maximum(np.where(lo > 0, lower(np.maximum(lo - 1, 0)), -np.inf),
                           np.where(j > 0, upper(np.maximum(j - 1, 0)), -np.inf))
        return (d[:c] + d[c:]) / 2


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
    the correlation and the residual does not say the region sits on the template
    (:data:`ALIGNED_PX`); poor where it is an outlier below the others' (of the same region) or
    below :data:`BEST_SHARE` of their best's, the residual is large, or nothing could be
    measured.  What a frame's own figures say (:func:`_frame_flags`) apart from what wants
    every frame (:func:`_poor_below`): a piecewise report makes the first as its chunks come
    (:class:`_RegionFlags`)."""
    after = np.asarray(after, np.float64)  # (the bounds in float64 whatever the rows')
    worse, poor = _frame_flags(before, after, residual)
    columns = after.reshape(len(after), -1).T.copy()  # (a region a row; sorted in place)
    poor |= after < _poor_below(_SortedColumns(columns)).reshape(after.shape[1:])
    return worse, poor


def _frame_flags(before, after, residual):
    """``(worse, poor)`` of :func:`_flags` as far as each frame's own figures say them: poor
    here where nothing could be measured or the residual is large (the outliers of a region
    are :func:`_poor_below`'s)."""
    finite = np.isfinite(after)
    with np.errstate(invalid="ignore"):
        # (the two components apart: NumPy's any/all over an axis of 2 took 10x as long; a
        # NaN residual is not within the limit either)
        poor = ~(np.abs(residual[..., 0]) <= RESIDUAL_LIMIT)
        poor |= ~(np.abs(residual[..., 1]) <= RESIDUAL_LIMIT)
        poor |= ~finite
        aligned = (np.abs(residual[..., 0]) <= ALIGNED_PX) \
            & (np.abs(residual[..., 1]) <= ALIGNED_PX)
        worse = finite & np.isfinite(before) & (after < before - WORSE_BY) & ~aligned
    return worse, poor


def _poor_below(ranked):
    """(C,) the value of each column (``ranked``: :class:`_SortedColumns`) below which a
    frame is poor: the outliers' bound (the median less :data:`POOR_DEVIATIONS` robust
    deviations, at least :data:`POOR_DROP`) or :data:`BEST_SHARE` of the best's, the higher;
    -inf where neither is a number (a column never measured)."""
    c = len(ranked.n)
    bound, best = np.full(c, np.nan), np.full(c, np.nan)
    seen = np.isfinite(ranked.s).any(axis=-1)
    with np.errstate(invalid="ignore"):  # (an infinite median: its bound is not a number)
        if seen.any():
            kept = ranked if seen.all() else ranked.kept(seen)
            med = kept.median()
            best[seen] = kept.quantile(BEST_QUANTILE)
            bound[seen] = med - np.maximum(POOR_DEVIATIONS * _mad(med, kept), POOR_DROP)
        # (fmax: a bound that is not a number, an infinite median's, leaves the share's)
        return np.fmax(bound, np.where(best > 0, BEST_SHARE * best, -np.inf))


class _RegionFlags:
    """:func:`_flags` of a piecewise run's patch regions (N, P), built as the chunks' figures
    are made (:meth:`add`: the host's share of them overlaps the device's later chunks): each
    chunk's :func:`_frame_flags` and its figures after alignment, a region a row; what wants
    every frame (:func:`_poor_below`, a sort of each region's column) in :meth:`result`.
    The flags of several ranges (GPUs, Dask workers) join (:meth:`joined`)."""

    def __init__(self, n, p):
        self.worse, self.poor = np.empty((n, p), bool), np.empty((n, p), bool)
        # the figures after alignment as the frames lie, and a region a row (the sort's
        # layout, sorted in place: both written as the chunks come, no copy at the end)
        self.after, self.columns = np.empty((n, p)), np.empty((p, n))

    def add(self, i, before, after, residual):
        """The figures (k, P) of frames ``i:i + k`` of the range."""
        k = len(after)
        self.worse[i:i + k], self.poor[i:i + k] = _frame_flags(before, after, residual)
        self.after[i:i + k] = after
        self.columns[:, i:i + k] = after.T

    def without(self, ok):
        """The frames without a field (``ok`` False) poor, not worse, and left out of the
        regions' statistics (their figures after alignment NaN)."""
        if not ok.all():
            self.poor[~ok], self.worse[~ok] = True, False
            self.after[~ok] = self.columns[:, ~ok] = np.nan
        return self

    @staticmethod
    def joined(parts):
        """The flags of ranges in frame order, as one."""
        if len(parts) == 1:
            return parts[0]
        out = _RegionFlags.__new__(_RegionFlags)
        out.worse, out.poor = (np.concatenate([getattr(f, k) for f in parts])
                               for k in ("worse", "poor"))
        out.after = np.concatenate([f.after for f in parts])
        out.columns = np.concatenate([f.columns for f in parts], axis=1)
        return out

    def result(self):
        """``(worse, poor)`` (N, P): :func:`_flags` of every frame's figures added (the
        columns sorted in place: a second call gives the same)."""
        # (the comparison in the frames' layout, contiguous: against the transposed columns
        # it took several times the sort)
        below = _poor_below(_SortedColumns(self.columns))
        return self.worse, self.poor | (self.after < below)


def _mad(med, ranked):
    """The robust deviation (``1.4826`` times the median absolute deviation from ``med``) of
    each of the columns ``ranked`` (:class:`_SortedColumns`), where it can move the bound of
    :func:`_poor_below`: a column whose middle half of values (read off the sort) lies within
    ``t`` of its median has a deviation of at most ``1.4826 t``; where that is below
    :data:`POOR_DROP` over :data:`POOR_DEVIATIONS` (clean stacks: most regions), the bound is
    ``POOR_DROP`` below the median whatever it is, and that value stands in for it."""
    scale = 1.4826
    n = ranked.n
    half = n // 2 + 1  # (values within t of the median: at least the upper middle's rank)
    i = np.maximum((n - half) // 2, 0)
    t = np.maximum(med - ranked.at(i), ranked.at(np.minimum(i + half - 1, n - 1)) - med)
    out = scale * t
    need = ~(POOR_DEVIATIONS * out <= POOR_DROP)
    if need.any():
        out[need] = scale * ranked.kept(need).median_distance(med[need])
    return out


def _common(shifts, frame_shape):
    """:func:`~.warp.common_area` of the shifted frames (to the subpixel: a row a shift of 2.4
    px brings in from past the edge is blended with the fill, and was measured), empty where
    they share none."""
    try:
        return common_area(shifts, frame_shape)
    except ValueError:
        return 0, 0, 0, 0


def _area(shifts, frame_shape, inset=0):
    """The common area of the rigidly shifted frames (``inset`` px less on each side), or the
    whole frame where it is small."""
    y0, y1, x0, x1 = _common(shifts, frame_shape)
    y0, y1, x0, x1 = y0 + inset, y1 - inset, x0 + inset, x1 - inset
    if y1 - y0 < MIN_SIDE or x1 - x0 < MIN_SIDE:
        return (0, frame_shape[0], 0, frame_shape[1])
    return (y0, y1, x0, x1)


def _shared(shifts, frame_shape):
    """``shifts`` (N, 2) as the report measures them: where their common area is under
    :data:`MIN_SIDE` px a side, NaN (not measured) for the frames farther than
    :data:`SHARED_REACH` of the frame from the median shift on an axis, where the others are
    the most (frames under MIN_SIDE, or no such majority: as they are).

    >>> _shared(np.array([[0.0, 0.0], [1.0, -2.0], [60.0, 3.0]]), (128, 128))[:, 0].tolist()
    [0.0, 1.0, 60.0]
    >>> _shared(np.array([[0.0, 0.0], [1.0, -2.0], [2.0, 1.0], [-70.0, 64.0], [64.0, 0.0]]),
    ...         (128, 128))[:, 0].tolist()
    [0.0, 1.0, 2.0, nan, nan]
    """
    finite = np.isfinite(shifts).all(axis=1)
    if min(frame_shape) < MIN_SIDE or not finite.any():  # (the whole frame: no smaller area)
        return shifts
    y0, y1, x0, x1 = _common(shifts, frame_shape)
    if min(y1 - y0, x1 - x0) >= MIN_SIDE:
        return shifts
    centre = np.median(shifts[finite], axis=0)
    with np.errstate(invalid="ignore"):
        far = (np.abs(shifts - centre) > SHARED_REACH * np.asarray(frame_shape)).any(axis=1)
    if (finite & ~far).sum() * 2 < finite.sum():  # (no majority near the median: as before)
        return shifts
    return np.where(far[:, None], np.nan, shifts)


#: a rigid GPU report of the fused pass (:func:`_filtered`) over frames already on the device
#: takes chunks this many times the run's (where the options name none): each chunk costs the
#: host a fixed time of launches, more than the GPU's work on one of small frames, and a
#: frame's working set (two float32 areas, a float32 copy of frames scaled or of a type the
#: kernels do not read, a filter's intermediates: up to about 20 B a pixel) is under a third of
#: the measuring pass's (over 66 B a pixel: ``streaming.plan_memory``), which chose the run's
#: chunk
DEVICE_CHUNKS = 4


def _rows_part(src, xp, start, stop, progress, *, opts, shifts, area, template, chunk,
               host=True, field=None, fill=None):
    """Rows ``(before, after, residual dy, residual dx, rotation, its error, off)`` of frames
    ``start:stop`` of a rigid run (the rotation:
    :class:`~.piecewise._rotation.RotationProbe`'s, of the aligned frames; ``field``: a
    rigid-body run's :func:`~.warp.rigid_body_field`, by which they are aligned); the
    sharpness of the mean of those frames as they came and aligned
    (those with a shift) where they are the whole stack (``{"sharpness": (before,
    after)}``), else those means' float64 sums (``{"sums": (raw, aligned)}``: host arrays
    with ``host``, else on the range's device), with the count of the aligned ones.  Frames
    are streamed as a pass streams them (on the GPU: pinned copies on two streams, overlapped
    with the work); nothing waits for the device before the last chunk is queued.  ``fill``:
    ``(aligned, run_shifts)``, the run's aligned output (CuPy, the range's frames) filled with
    the frames shifted by the run's shifts: by the figures' own shift where those are the
    same (the frames as they are, the same shifts), else by a shift of its own."""
    y0, y1, x0, x1 = area
    filtered = None if field is not None else _filtered(opts, xp)
    if filtered is not None and xp is not np and not opts.chunk_frames \
            and backend.is_cupy_array(getattr(src, "stack", None)):
        chunk *= DEVICE_CHUNKS
    # frames and template at one safe scale (float32 figures of 1e-300 or 1e38 pixels: 0, inf)
    k = stack_exponent(template)
    whole = scaled_by(xp.asarray(template), k, xp)
    inside = xp.ascontiguousarray(whole[y0:y1, x0:x1].astype(xp.float32)) if xp is np \
        else area_float(whole[None], area)[0]
    prepare = opts._decided(window="none").preparer(xp, inside.shape)
    prepared = prepare(inside[None]).frames[0]
    t = AreaFigures(inside, prepared, xp)
    probe = RotationProbe(prepared, area, src.frame_shape, xp)
    aligned = _aligner(shifts, field, area, src.frame_shape, xp)
    sums = _Sums(xp, inside.shape)
    out = []
    # a GPU pass: each chunk's moments and masks, the area's figures made on the host at the end
    moments = None if xp is np else _AreaMoments(xp, stop - start, inside.shape[0])
    if filtered is not None:  # (uploaded once: a copy from the host a chunk may wait)
        moved = xp.asarray(np.where(np.isfinite(shifts[start:stop]).all(axis=1)[:, None],
                                    shifts[start:stop], 0.0))
    if fill is not None:
        aligned_out, run_shifts = fill
        # (the figures' shift is the output's where the frames are read at their own scale
        # and each shift is the run's, whole rows of NaN counting as 0 in both)
        run = run_shifts[start:stop]
        same = filtered is not None and k == 0 and np.array_equal(
            np.nan_to_num(run), np.nan_to_num(shifts[start:stop])) \
            and (np.isfinite(run).all(axis=1) | np.isnan(run).all(axis=1)).all()
        out_moved = moved if same else xp.asarray(np.nan_to_num(run))
    # (the CPU's prefilter a slice of frames a thread: one filter call each, whose NumPy
    # passes free the GIL; BLAS on one thread, as the measuring pass: its idle threads spin)
    threads = cpu_threads() if xp is np and filtered is not None else 1
    with (one_blas_thread() if threads > 1 else contextlib.nullcontext()), \
            (ThreadPoolExecutor(threads, "xcorr-cpu") if threads > 1
             else contextlib.nullcontext()) as pool, \
            DeviceChunks(FrameRange(src, start, stop), chunk, xp) as chunks:
        for first, frames in chunks:
            a = start + first
            b = a + len(frames)
            if progress is not None:
                progress(len(frames))
            whole = None
            if fill is not None:  # (the run's output: the frames as they are)
                whole = aligned_out[a:b]
                if not same:
                    shift_into(xp.asarray(frames), out_moved[first:first + len(frames)], whole)
                    whole = None
            frames = scaled_by(frames, k, xp)
            host_ok = np.isfinite(shifts[a:b]).all(axis=1)
            ok = None if host_ok.all() else xp.asarray(host_ok)
            if xp is np:
                f = frames[:, y0:y1, x0:x1].astype(np.float32)
                # (the shift on this thread: a slice of frames a thread was slower on many
                # cores, its small operations waiting for the GIL; docs/performance.md)
                g, p, finite, constant = _aligned_on_cpu(frames, a, host_ok, aligned, filtered,
                                                         prepare, pool, threads)
                sums.add(f, g, ok)
                with quiet_if_nonfinite(np, finite):  # (those frames' rows: NaN, poor)
                    out.append(_rows(t.zncc(f), t.zncc(g), t.residual(p), finite, constant,
                                     host_ok))
                    probe.add(p)
                continue
            frames = xp.asarray(frames)  # (read in place: only the shifted area converted)
            if filtered is not None:
                g, p = moments.add_shifted(first, t, frames, moved[first:first + len(frames)],
                                           area, filtered, whole)
                sums.add(frames, g, ok, f_area=area)
                probe.add(p)
                continue
            g = aligned(frames, a, host_ok)
            sums.add(frames, g, ok, f_area=area)
            p = prepare(g)
            moments.add(first, t, frames, g, p, area)
            probe.add(p.frames)
    ok = np.isfinite(shifts[start:stop]).all(axis=1)
    if xp is not np:
        xp.cuda.Device().synchronize()  # (the chunks' streams)
        out = [moments.rows(t, ok)]
    rows = np.concatenate(out).astype(np.float64) if out else np.zeros((0, 4))
    rows = np.concatenate([rows, probe.columns(ok)], axis=1)
    counted = int(ok.sum())
    return rows, sums.means(start == 0 and stop == src.n_frames, stop - start, counted, host), \
        counted, None


def _aligned_on_cpu(frames, a, ok, aligned, filtered, prepare, pool=None, threads=1):
    """``(g, p, finite, constant)`` of frames ``a:a + len(frames)`` on the CPU: their area
    aligned (``aligned``: :func:`_aligner`'s), it filtered as the figures need it
    (:func:`_filtered`: the area less its first pixel, as the GPU's fused pass, a slice of
    frames a thread of ``pool``; None: :func:`~.rigid.prepare` whole, a filter bank), and which
    frames are finite and which constant."""
    # (the frames as they came: the shift reads its area's pixels as float32, no copy of the
    # whole chunk first; frames of integers have no pixel that is not finite)
    g = aligned(frames, a, ok)
    if filtered is None:
        q = prepare(g)
        return g, q.frames, q.finite, q.constant
    first = g[:, :1, :1]

    def part(ab):
        with np.errstate(invalid="ignore", over="ignore"):
            return filtered(g[ab[0]:ab[1]] - first[ab[0]:ab[1]])

    slices = frame_slices(len(g), threads)
    parts = list(map(part, slices) if pool is None or len(slices) < 2
                 else pool.map(part, slices))
    p = parts[0] if len(parts) == 1 else np.concatenate(parts)
    finite = np.isfinite(g).all(axis=-1).all(axis=-1) if frames.dtype.kind == "f" \
        else np.ones(len(g), bool)
    return g, p, finite, (g == first).all(axis=-1).all(axis=-1)


def _aligner(shifts, field, area, frame_shape, xp):
    """``aligned(frames, a, ok)``: the ``area`` of frames ``a:a + len(frames)`` aligned as the
    run's result aligns them: shifted by ``shifts`` (bilinear), or with a rigid-body ``field``
    rotated and shifted in one warp (``ok``: the frames with a shift; the others as they
    are)."""
    if field is None:
        def shifted(frames, a, ok):
            s = xp.asarray(np.where(ok[:, None], shifts[a:a + len(frames)], 0.0))
            return shift_frames(frames, s, area=area)

        return shifted
    weights = rigid_body_weights(frame_shape, xp)

    def warped(frames, a, ok):
        f = np.where(ok[:, None, None, None], field[a:a + len(frames)], 0.0)
        if xp is np:  # (the CPU's warp takes float32 frames)
            frames = frames.astype(np.float32, copy=False)
        return warp_chunk(frames, xp.asarray(f), weights, box=area)

    return warped


def _filtered(opts, xp):
    """``filtered(g)``: a rigid report's aligned areas as its figures need them prepared, the
    run's prefilter alone (a linear filter, mode ``reflect``), or the areas themselves where
    there is none; None for a filter bank, which needs :func:`~.rigid.prepare` whole.
    The residual's step and the probe's correlations are the same for any ``a * frame + b``
    with ``a > 0`` (each centres and normalizes), so prepare's scaling and mean subtractions,
    three passes over the chunk, are left out, on either device."""
    from ..filters import SEPARABLE_SIZES, separable_correlate
    from .rigid import Prefilter

    pre = opts.prefilter_function()
    if pre is None:
        return lambda g: g
    if not isinstance(pre, Prefilter):
        return None
    taps = pre.taps
    if xp is not np and taps is not None and len(taps) in SEPARABLE_SIZES:
        return lambda g: separable_correlate(g, taps, taps, "reflect", 0.0)
    # (float32 and contiguous, as prepare leaves a filter's output)
    return lambda g: backend.array_module_of(g).ascontiguousarray(
        pre(g).astype(np.float32, copy=False))


class _AreaMoments:
    """A GPU pass's moments of every frame's area (as it came, aligned, and aligned and
    prepared or filtered) and its prepared frames' masks (the fused pass's are read from the
    aligned areas' moments), written chunk by chunk into buffers of the range (the chunks'
    streams write apart), summed on the device and copied to the host once at the end."""

    def __init__(self, xp, n, rows):
        blocks = area_blocks(rows)
        self.moments = [xp.empty((n, blocks, m), xp.float64) for m in (3, 3, 4)]
        self.finite, self.constant = xp.empty(n, bool), xp.empty(n, bool)
        self.masks = True  # (False: the masks are read from the aligned areas' moments)

    def add_shifted(self, i, figures, frames, shifts, area, filtered, whole=None):
        """The chunk of frames ``i:i + len(frames)`` (whole, as they came) shifted by
        ``shifts`` (CuPy) in the kernel that sums both correlations' moments
        (:meth:`~._quality_figures.AreaFigures.shifted_moments`; the whole frames shifted
        into ``whole`` too, where given), then ``filtered`` (:func:`_filtered`) and the
        residual's moments summed: ``(aligned, filtered)`` areas."""
        at = slice(i, i + len(frames))
        b, a, r = (m[at] for m in self.moments)
        g = figures.shifted_moments(frames, shifts, area, b, a, whole)
        p = filtered(g)
        figures.residual_moments(p, out=r)
        self.masks = False
        return g, p

    def add(self, i, figures, f, g, p, area):
        """The chunk of frames ``i:i + len(f)``: ``f`` as they came (whole: ``area`` read in
        place), ``g`` aligned (the area), ``p`` its prepared copy (:func:`~.rigid.prepare`'s)."""
        at = slice(i, i + len(f))
        b, a, r = (m[at] for m in self.moments)
        figures.zncc_moments(f, out=b, area=area)
        figures.zncc_moments(g, out=a)
        figures.residual_moments(p.frames, out=r)
        self.finite[at], self.constant[at] = p.finite, p.constant

    def rows(self, figures, ok):
        """The range's rows (n, 4) NumPy (after the device finished)."""
        # (summed on the device, queued together and waited for once: a pageable copy each
        # waited in turn)
        copied = host_copies([block_sums(m) for m in self.moments]
                             + ([self.finite, self.constant] if self.masks else []))
        b, a, r = copied[:3]
        if self.masks:
            finite, constant = copied[3:]
        else:  # (an area with a NaN or Inf pixel has sums that are not numbers; a flat one
            # has no spread about its first pixel)
            finite, constant = np.isfinite(a).all(axis=1), a[:, 1] == 0
        return _rows(figures.zncc_of(b), figures.zncc_of(a), figures.residual_of(r),
                     finite, constant, ok)


def _rows(before, after, residual, finite, constant, ok):
    """The rows (n, 4), NumPy, of the frames' figures: after alignment NaN where a frame has
    no shift (``ok``), the residual NaN where its prepared frame is unusable."""
    usable = finite & ~constant & ok
    return np.concatenate([before[:, None], np.where(ok, after, np.nan)[:, None],
                           np.where(usable[:, None], residual, np.nan)], axis=1)


#: :meth:`PatchQuality.add` on the GPU runs the range's last chunk in two halves where each
#: holds at least this many frames
LAST_HALF = 32


class PatchQuality:
    """The quality figures of a piecewise run's frames ``start:start + n``, chunk by chunk
    (:meth:`add`): the frames as they came, warped by their fields (the run's output) and
    their prepared copies warped the same way, each summed over the area the patch regions
    span and over every patch region at once (:class:`~._quality_figures.TileRegions`: on the
    GPU a kernel a figure, each pixel read once), the figures made of each chunk's sums
    (:class:`~._quality_figures.TemplateRegions`), against ``template`` (the image the pass
    measured against, as it came).

    The last patch pass adds each chunk while it holds it (its frames, prepared copies, fields
    and warped frames): the report then reads the stack no more.  Other executors' runs
    measure it in a pass of its own (:func:`measure_quality`).  The residual is measured on
    the prepared frames warped (the prefilter is a convolution: it commutes with a shift).

    Each chunk's figures are made of its sums once they have landed: on the GPU by the thread
    that queues the pass, at each later :meth:`add` for the chunks whose copies are back
    (never waiting for one), and in :meth:`settle` for the rest, which the pass calls once
    every chunk is queued: the host's arithmetic overlaps the device's later chunks instead
    of following the pass (a thread of its own fought the queuing thread for the GIL: each
    of its chunks took several times its work, and so did the queuing); each chunk's frames'
    own flags are made with its figures (:class:`_RegionFlags`), the regions' statistics,
    which want every frame, by :func:`report_of`."""

    def __init__(self, opts, xp, template, centres, size, start, n, frame_shape, whole):
        half = (np.asarray(size, np.float64) - 1) / 2.0
        starts = np.rint(np.asarray(centres, np.float64).reshape(-1, 2) - half).astype(np.int64)
        ph, pw = (int(v) for v in size)
        boxes = np.stack([starts[:, 0], starts[:, 0] + ph, starts[:, 1], starts[:, 1] + pw], 1)
        self.area = (int(boxes[:, 0].min()), int(boxes[:, 1].max()), int(boxes[:, 2].min()),
                     int(boxes[:, 3].max()))
        self.xp, self.start, self.n, self.whole = xp, start, n, whole
        self.despike = opts.despike == "on"
        self.tiles = TileRegions(self.area, np.concatenate([[self.area], boxes]), xp)
        self.weights = field_weights(centres, frame_shape, xp)
        self.prepare = patch_preparer(opts, xp)  # (as the patch pass prepares its frames)
        t = xp.asarray(template, xp.float32)[None]
        self.t_ref, self.g_ref, q = template_refs(t[0], self.prepare(t).frames[0], self.area, xp)
        self.template = template_moments(self.tiles, self.t_ref, self.g_ref, q)
        y0, y1, x0, x1 = self.area
        self.sums = _Sums(xp, (y1 - y0, x1 - x0))
        count = self.tiles.count
        self.finite, self.constant = xp.empty(n, bool), xp.empty(n, bool)
        # (the chunks' streams read what is set up here: set up before the pass); each
        # region's sums of the frames (0-2), of them warped (3-5), of the prepared warped (6-9)
        self.moments = xp.empty((n, count, 10), xp.float64)
        self.figures = np.empty((n, count, 4))  # (before, after, residual dy and dx)
        self.flags = _RegionFlags(n, count - 1)  # (the patch regions')
        self._regions = None  # (TemplateRegions: made by the first chunk's figures)
        self._pending = []  # (GPU: (frame, the sums' host copies) of chunks without figures)
        if xp is not np:  # (copied behind the template's kernels)
            self.template = [HostCopy(a) for a in self.template]

    def add(self, at, frames, field, prepared=None, ok=None, whole=False, out=None,
            measured=None):
        """Frames ``at:at + len(frames)`` of the stack as they came, with their fields
        ``(n, gy, gx, 2)`` (on the frames' device), warped by them (bilinear, fill 0:
        :func:`~.piecewise.warp_chunk`'s) and added; the warped frames returned: whole with
        ``whole`` (into ``out``, a C-contiguous float32 CuPy array, where given), else the
        report's area alone.  ``prepared``: their :func:`~.rigid.prepare` copies (made here
        where None); ``ok`` (NumPy): which have a field (None: all).  On the GPU one kernel
        warps and sums (:meth:`~._quality_figures.TileRegions.warp_moments`); nothing waits
        for the device.  ``measured``: the frames as the pass measured them (despiked), where
        they are not the frames: the figures are theirs, the whole frames warped as they came
        apart."""
        if measured is None and self.despike:
            measured = despiked(floating(self.xp.asarray(frames)), self.xp)
        if measured is None or measured is frames:
            return self._add(at, frames, field, prepared, ok, whole, out)
        mine = self._add(at, measured, field, prepared, ok)
        if not whole:
            return mine
        h, w = frames.shape[1:]
        return warp_chunk(frames, field, self.weights, box=(0, h, 0, w), out=out)

    def _add(self, at, frames, field, prepared=None, ok=None, whole=False, out=None):
        """:meth:`add` of frames whose figures are the frames' own."""
        xp = self.xp
        i = at - self.start
        n = len(frames)
        at_ = slice(i, i + n)
        if prepared is None:
            prepared = self.prepare(frames)
        self.finite[at_], self.constant[at_] = prepared.finite, prepared.constant
        sums = self.moments[at_]
        h, w = frames.shape[1:]
        box = (0, h, 0, w) if whole else self.area
        if xp is np:
            tiles = self.tiles
            warped = warp_chunk(frames, field, self.weights, box=box)
            moved = warp_chunk(prepared.frames, field, self.weights, box=self.area)
            sums[..., :3] = tiles.host_moments(frames, self.t_ref)
            sums[..., 3:6] = tiles.host_moments(warped, self.t_ref,
                                                self.area[0::2] if whole else (0, 0))
            sums[..., 6:] = tiles.host_moments(moved, self.g_ref, (0, 0))
        else:
            if out is None:
                out = xp.empty((n, box[1] - box[0], box[3] - box[2]), xp.float32)
            warped = out
            # (the range's last chunk in two launches: the first half's figures are made
            # while the device runs the second, the host's share after the pass halved)
            cut = n // 2 if i + n == self.n and n >= 2 * LAST_HALF else n
            for part in (slice(0, cut), slice(cut, n)):
                if part.start < part.stop:
                    self.tiles.warp_moments(frames[part], prepared.frames[part], field[part],
                                            self.weights, self.t_ref, self.g_ref, warped[part],
                                            box, sums[part])
                    # (queued on the chunk's stream behind its sums)
                    self._pending.append((i + part.start, [HostCopy(sums[part])]))
        ok_dev = None if ok is None or ok.all() else xp.asarray(ok)
        self.sums.add(frames, warped, ok_dev, self.area, self.area if whole else None)
        if xp is np:
            self._figure(i, sums)
        else:
            self._figure_landed(wait=False)
        return warped

    def settle(self):
        """The figures of every chunk added so far, each made as soon as its sums land (the
        device's later chunks run on meanwhile): the pass calls it once every chunk is
        queued, before it waits for the device (its queuing runs ahead of the device by
        most of the pass, so few sums have landed at an :meth:`add`)."""
        self._figure_landed(wait=True)

    def _figure_landed(self, wait):
        """The figures of the pending chunks, in the order they were added, up to the first
        whose sums (or the template's) have not landed (``wait``: of them all, waiting for
        their copies); a chunk leaves the list as its figures are made."""
        def landed(copies):
            return wait or all(not isinstance(c, HostCopy) or c.ready() for c in copies)

        if not self._pending or not landed(self.template):
            return
        self.template = [c.result() if isinstance(c, HostCopy) else c for c in self.template]
        while self._pending and landed(self._pending[0][1]):
            i, copies = self._pending[0]
            self._figure(i, copies[0].result())
            del self._pending[0]

    def _figure(self, i, sums):
        """The figures of frames ``i:`` of the range from their sums (n, R, 10) NumPy."""
        if self._regions is None:
            self._regions = TemplateRegions(self.tiles, self.template)
        f = self._regions
        b, a, r = sums[..., :3], sums[..., 3:6], sums[..., 6:]
        out = self.figures[i:i + len(b)]
        out[..., 0], out[..., 1], out[..., 2:] = f.zncc(b), f.zncc(a), f.residual(r)
        regions = out[:, 1:]
        self.flags.add(i, regions[..., 0], regions[..., 1], regions[..., 2:])

    def result(self, ok, host=True):
        """What :func:`measure_quality`'s parts are, of this range (after the device
        finished): the area's rows (n, 4), its means' sums (on the host with ``host``; or
        their sharpness where the range is the stack), the count of frames with a field
        (``ok`` (n,) NumPy), the patch regions' rows (n, P, 4) and their
        :class:`_RegionFlags`."""
        self._figure_landed(wait=True)
        finite, constant = host_copies([self.finite, self.constant])
        f = self.figures
        rows = _rows(f[:, 0, 0], f[:, 0, 1], f[:, 0, 2:], finite, constant, ok)
        # (the regions' rows as the figures lie, in place: after NaN without a field, the
        # residual NaN where after is; the collector ends here)
        per_patch = f[:, 1:]
        if not ok.all():  # (the masks' scans and scatters only where they change anything)
            per_patch[~ok, :, 1] = np.nan
        unmeasured = ~np.isfinite(per_patch[..., 1])
        if unmeasured.any():
            per_patch[..., 2:][unmeasured] = np.nan
        counted = int(ok.sum())
        return (rows, self.sums.means(self.whole, self.n, counted, host), counted, per_patch,
                self.flags.without(ok))


class _Sums:
    """float64 sums of the frames as they came and aligned over the chunks, over an area of
    ``shape`` (added in chunk order: on the GPU each chunk's sums wait for the previous
    chunk's, on its own stream).  A rigid GPU report's fused pass adds each aligned area less
    its first pixel (:func:`~._quality_figures.shifted_moments`): the aligned sum is then off
    by a constant, which the sharpness does not see; not the mean image itself."""

    def __init__(self, xp, shape):
        self.xp = xp
        self.raw = xp.zeros(shape, xp.float64)
        self.aligned = xp.zeros(shape, xp.float64)
        self._done = None

    def add(self, f, g, ok=None, f_area=None, g_area=None):
        """Add a chunk: the ``f_area`` of ``f`` as the frames came, the ``g_area`` of ``g``
        aligned (default: the whole frames), those of ``ok`` (None: all)."""
        xp = self.xp
        if self._done is not None:
            xp.cuda.get_current_stream().wait_event(self._done)
        if xp is np:  # (each pixel as float32, as the GPU's kernel reads it)
            f, g = ((v if a is None else v[:, a[0]:a[1], a[2]:a[3]])
                    .astype(np.float32, copy=False) for v, a in ((f, f_area), (g, g_area)))
            self.raw += f.sum(axis=0, dtype=xp.float64)
            # (left out, not times 0: a frame without a shift may hold NaN, as the GPU's)
            kept = g if ok is None else np.where(ok[:, None, None], g, 0.0)
            self.aligned += kept.sum(axis=0, dtype=xp.float64)
            return
        frame_sums(self.raw, f, area=f_area)
        frame_sums(self.aligned, g, ok, area=g_area)
        self._done = xp.cuda.get_current_stream().record()

    def means(self, whole, n, counted, host=True) -> dict:
        """The sharpness of the means (before, after) where the sums are of the whole stack
        (``n`` frames, ``counted`` of them aligned), else the sums themselves (host arrays
        with ``host``, else on their device)."""
        if whole:
            return {"sharpness": (sharpness(self.raw, max(n, 1)),
                                  sharpness(self.aligned, counted) if counted
                                  else float("nan"))}
        if not host:
            return {"sums": (self.raw, self.aligned)}
        return {"sums": (backend.to_numpy(self.raw), backend.to_numpy(self.aligned))}


def _total(sums):
    """The sum of the ranges' sums: NumPy arrays on the host, CuPy ones (several GPUs of this
    process) on the current device, where the sharpness is measured (on the host the adds and
    the gradients took a tenth of a one-shot four-GPU run)."""
    if isinstance(sums[0], np.ndarray):
        return sum(sums)
    import cupy

    total = cupy.zeros(sums[0].shape, sums[0].dtype)
    for s in sums:  # (a peer copy where it lies on another GPU: cupy.asarray would keep it there)
        here = s if s.device.id == total.device.id else cupy.empty_like(total)
        if here is not s:
            here.data.copy_from_device(s.data, s.nbytes)
        total += here
    return total
