"""One alignment run, stated once: which steps run, in which order, for every executor.

:func:`run_alignment` is the pipeline of :func:`xcorr_app.align`, ``xcorr align``, ``gpus``
and :func:`xcorr_app.dask.align`.  The steps and their decisions live here alone:

1. the options (:class:`~._options.AlignOptions`, checked when built) and the executor's
   limits (:meth:`~._options.AlignOptions.check_executor`);
2. the input opened and checked (frame size, the patch grid, ``out``); the line offset of a
   bidirectional scan decided (``bidi``: :func:`~.rigid.decide_bidi`), every later read
   corrected by it (:meth:`Executor.correct_bidi`); the device chosen;
3. ``prefilter="auto"`` decided from a few frames (:func:`~._options.resolve_auto`); after
   the device, bright specks of a frame alone (``despike``: :func:`~.rigid.decide_specks`,
   decided before it) and a pattern fixed on the sensor found in a few frames and removed
   from what the passes read (``static``: :func:`~.rigid.remove_static`);
4. ``lucas_kanade="auto"`` decided from a few frames (:func:`~.refine.decide_lucas_kanade`:
   the template's fit for noisy stacks, the reference's for steady ones);
5. the measuring passes (:func:`measure_passes`): the first pass against the reference; with
   ``boundary="auto"`` the wrap-around test (:func:`~.refine.periodic_frames`) and, for
   periodic stacks, a circular pass; the template passes of ``refined`` and Lucas-Kanade, the
   last one refining every shift against the template; where a pattern was removed, the
   refinement that ``auto`` turned on kept only where the static model fits its shifts better
   than the first pass's (:func:`~.rigid.refined_or_first`);
6. the result (:func:`~._result.result_from_table`), the patch pass (``patches``) and the
   aligned stack (``out``).

What differs between executors (:mod:`._executors`, :mod:`xcorr_app.distributed`) is only where
the ranges of frames are measured: :meth:`Executor.map` runs a function of ``(source, xp,
start, stop, progress)`` over the executor's ranges, in this process, on one thread per GPU,
or as Dask tasks.  Every step that reads a few frames, and every template, is made here, on
the executor's ``xp``.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from .. import backend
from .._cuda import own_stream
from ..io import plural, with_axes
from ..streaming import DEFAULT_CHUNK
from ._options import as_stack, auto_notes, resolve_auto
from .rigid import (check_frame_shape, decide_bidi, decide_specks, refined_or_first,
                    remove_static, search_range, still_locked)
from ._limits import check_limits, limit_devices
from .rigid import frames_per_chunk, measure_frames, prepared_reference
from ._quality import PatchReport, measure_quality
from .rigid import (check_float32_range, check_gpu_float32, check_reference, finite_sums,
                    mean_count, mean_of, reference_frame, scaled_by, stack_exponent)
from .rigid import COLUMN
from ._result import result_from_table
from .refine import (LucasKanadeFit, ReferenceFit, TemplateSums, decide_lucas_kanade,
                     fit_margin, kept_from_first, kept_rows, periodic_frames,
                     reference_coefficients, relative_to_first, template_of)

__all__ = ["run_alignment", "measure_passes"]


def run_alignment(opts, stack_or_path, executor, *, out=None, progress=None,
                  limits_checked=None):
    """The :class:`~._result.AlignResult` of ``stack_or_path`` aligned with ``opts`` on
    ``executor`` (an :class:`~._executors.Executor`).

    ``limits_checked``: the ``(frame_shape, itemsize, devices)`` that the caller already
    checked ``opts`` against with :func:`~._limits.check_limits`, having checked the executor
    too (:meth:`~._options.AlignOptions.check_executor`: ``xcorr align`` on Dask, before its
    cluster starts); the run checks them itself unless its input's are those."""
    from ._aligned_out import check_aligned_out, check_apart
    from .piecewise import check_grid
    from ._rotation import check_rigid_body, rigid_body_result

    if progress is not None and not callable(progress):
        from ..errors import InputError

        raise InputError(f"progress must be a callable(int), got {progress!r}")
    check_apart(out, stack_or_path)
    t0 = time.perf_counter()
    if limits_checked is None:  # (else checked with them, before a cluster started)
        opts.check_executor(executor.name)
    # (a path naming its axes: every reader of the run, and of its result, opens it alike)
    stack_or_path = with_axes(as_stack(stack_or_path), opts.axes)
    # (a run's work on its thread's own stream, the main thread's too: not the legacy one)
    with own_stream(), executor.open(stack_or_path, opts) as src:
        check_frame_shape(src.frame_shape)
        check_reference(opts.reference, src.n_frames)
        limits = (tuple(src.frame_shape), src.dtype.itemsize,
                  limit_devices(opts.device, executor.name))
        if limits != limits_checked:  # (before a frame is read; once a run)
            check_limits(opts, *limits)
        if opts.patches is not None:
            check_grid(opts, src.frame_shape)
        if opts.model != "translation":
            check_rigid_body(src.frame_shape)
        if src.dtype == np.float64 and (out is not None or opts.patches is not None):
            # (warped in float32: pixels it cannot hold refused before a frame is measured)
            check_float32_range(src.read(0, 1)[0], "the stack", "the aligned stack is computed"
                                if opts.patches is None else "the patches' warped frames are "
                                "computed")
        executor.check_out(out, (src.n_frames, *src.frame_shape))
        # the line offset of a bidirectional scan, from a few frames as they were scanned:
        # every later read (passes, templates, quality, the aligned stack) is corrected
        bidi, bidi_note = decide_bidi(opts.bidi, src)
        src = executor.correct_bidi(src, bidi)
        opts, why = resolve_auto(opts, src)  # prefilter "auto": a few frames decide
        # bright specks of a frame alone (cosmic rays), from a few frames
        opts, spike_note = decide_specks(opts, src, executor)
        decided = [note for note in (bidi_note, spike_note) if note]
        choices = decided + auto_notes(opts, why)
        executor.start(opts, src, out)  # the device, the chunk, the plan
        if executor.device == "gpu" and src.dtype == np.float32:
            check_gpu_float32(src.read(0, 1)[0], "the stack")
        check_aligned_out(out, (src.n_frames, *src.frame_shape), executor.device)
        if opts.despike == "on":  # (what the passes, the static model and the report read)
            src = executor.correct_despike(src)
        # a pattern fixed on the sensor, from a few frames: removed from what the passes read
        read = src  # (the frames the static model is fitted to)
        opts, src, static, static_note, why = remove_static(opts, src, executor, why)
        choices = decided + ([static_note] if static_note else []) + auto_notes(opts, why)
        measuring, patching, reporting = _phases(progress, src.n_frames, opts)
        table, opts, more, image, unrefined = measure_passes(
            opts, src, executor, measuring, reference_fit=not static.get("removed"))
        if unrefined is not None:  # (the model of a pattern removed judges the refinement)
            table, note = refined_or_first(static, read, table, unrefined, executor.xp)
            more += [note] if note else []
        settings = {"search_range": list(search_range(src.frame_shape, opts.max_shift)),
                    "notes": list(src.notes), "prefilter_auto": why, "bidi": bidi,
                    "static": static,
                    "lucas_kanade": opts.lucas_kanade, "options": opts.settings(),
                    **executor.settings()}
        # (a pattern that may hold any frame: none trusted, none to interpolate from)
        untrusted = bool(static.get("unresolved"))
        res = result_from_table(opts, table, src.source_names(), settings, executor.plan,
                                stack_or_path, untrusted)
        locked = still_locked(static, res.shifts)
        if locked:  # (made again, this time with every frame flagged)
            static["locked_after"] = True
            res = result_from_table(opts, table, src.source_names(), settings, executor.plan,
                                    stack_or_path, untrusted=True)
            res.notes.append(locked)
        res.notes[:0] = choices + more
        if opts.model != "translation":  # (the frames read again: their rotation and shift)
            image = rigid_body_result(res, opts, executor, src.frame_shape, image)
        filled = False
        report = None
        if opts.patches is not None:
            filled = executor.fills_out_in_field and out is not None
            report = PatchReport(opts, src.n_frames, src.frame_shape) if opts.quality else None
            passes = _Progress(patching, src.n_frames, opts.patch_template_passes + 1)
            res.set_field(executor.field(opts, res.shifts, out if filled else None, report,
                                         progress=passes))
            passes.finish()
            res.settings["patches"]["template_passes"] = opts.patch_template_passes
        # (a rigid report that reads the frames the output is made of fills it as it shifts
        # them: the frames read and shifted once)
        in_report = out is not None and not filled and opts.quality and opts.patches is None \
            and opts.model == "translation" and executor.out_in_report(out)
        if out is not None and not filled and not in_report:
            executor.fill_out(res, out)
        if report is not None:  # (on one device measured as the last patch pass warped)
            # (in the pass; on several devices a pass of its own, with no share of the bar)
            res.quality = report.report(res, executor)
        elif opts.quality:  # (the frames read again: the report trusts no shift it checks)
            if image is None:  # ("previous": shifts relative to the first frame)
                image = executor.xp.asarray(src.read(0, 1)[0])
            res.quality = measure_quality(
                opts, res.shifts, executor, src.frame_shape, image, rotation=res.rotation_deg,
                # (a rigid-body run's: against frame 0 itself where rigid_body_result made it
                # the template, else its template's own)
                relative_to=0 if opts.from_template and opts.model == "translation" else None,
                progress=reporting, out=out if in_report else None)
            reporting.finish()
    executor.finish()
    res.frame_shape = tuple(src.frame_shape)
    res.seconds = time.perf_counter() - t0
    return res


def measure_passes(opts, src, executor, progress=None, reference_fit=True):
    """The result table of every frame, the options the last pass measured with (``boundary``
    and ``lucas_kanade`` decided), the notes of those decisions, the image the last pass
    measured against (``None`` for ``previous``) and, where ``lucas_kanade="auto"`` turned the
    refinement on (no template passes asked for), the first pass's table: the run without it
    (else None).

    The first pass measures against the reference (``first`` where template passes follow).
    ``boundary="auto"`` is decided after it (:func:`~.refine.periodic_frames`): periodic
    frames are measured once more with the circular refinement against the same reference,
    then, with a first-frame reference, twice against templates of the frames moved circularly
    (:func:`circular_passes`; no Lucas-Kanade); other stacks go on with the template passes,
    if any.  A template pass accumulates every frame measured with a distinct peak, shifted by
    its shift, into sums added up over the ranges in frame order; the next pass measures
    against their template, the last one (``lucas_kanade`` on) refining each shift by a
    Lucas-Kanade fit against it (:class:`~.refine.LucasKanadeFit`); with ``lucas_kanade``
    ``reference`` (``auto`` where ``reference_fit``: no pattern was removed) the one pass refines
    each shift against the reference itself (:class:`~.refine.ReferenceFit`).  Shifts after
    template passes are relative to frame 0's.  ``progress`` sees every frame once, spread over
    the passes.
    """
    if opts.boundary == "circular" and opts.lucas_kanade == "auto":
        opts = opts._decided(lucas_kanade="off")  # (a circular template instead)
    asked_reference = opts.lucas_kanade == "reference"  # (not auto's choice)
    opts, lk_note = decide_lucas_kanade(opts, src, executor.xp, reference_fit)
    lk = opts.lucas_kanade == "on"
    auto_on = lk and lk_note is not None  # (turned on by auto, not asked for)
    passes = max(opts.refined or 0, 1 if lk else 0)
    notes = [lk_note] if lk_note else []
    if opts.boundary == "circular":  # (Lucas-Kanade asked for: its own template passes)
        more = passes if lk else circular_passes(opts, passes)
        if more > passes:
            notes.append("boundary circular: measured against the first frame, then against "
                         "a template of the frames moved circularly (twice)")
        passes = more
    image = reference_image("first" if passes else opts.reference, opts, src, executor)
    # templates are the frames' sums, unprepared: at one safe scale (the first frame's), and
    # so every image of the passes; the reference prepared from it is the same
    scale = 0 if image is None else stack_exponent(image)  # (None: reference previous)
    image = scaled_by(image, scale, executor.xp)
    boundary = opts.boundary
    linear_why = "boundary auto measured the frames linear (they do not wrap around)"
    if opts.previous and boundary == "auto":
        boundary, linear_why = "linear", "reference previous measures the frames linear"
    if opts.normalization == "phase" and opts.subpixel != "upsample":
        # (phase surfaces are circular already: only the refinement differs)
        boundary, linear_why = "linear", "phase correlation is refined on its own surface"
    report = _Progress(progress, src.n_frames, passes + 1)
    k, fit = 0, None
    if opts.lucas_kanade == "reference":  # (its spline made once, from the reference as read)
        fit = ReferenceFit(executor.portable(reference_coefficients(opts, image, executor.xp)),
                           fit_margin(opts))
    while True:
        linear = boundary != "circular"  # (auto measures linear first)
        # an upsample kept for a circular refinement that did not come is unused, not wrong
        run = opts._decided(boundary="linear" if linear else "circular",
                           upsample=None if linear and opts.subpixel != "upsample"
                           else opts.upsample).measuring()
        ref = None if run.previous else prepared_reference(run, src, executor.xp,
                                                           executor.chunk, image=image)
        # (circular sums, but linear ones where Lucas-Kanade fits against them: its
        # leave-one-out template takes each frame's own share back by a bilinear warp)
        hook = TemplateSums(opts.min_confidence, not linear and not lk, scale) \
            if k < passes else fit
        table, sums = measure_pass(run, ref, executor, hook, report)
        if k == 0 and boundary == "auto":
            measured = table  # (the wrap-around test reads the correlation's shifts)
            if isinstance(hook, ReferenceFit):
                measured = table.copy()
                measured[:, COLUMN["dy"]:COLUMN["dx"] + 1] = sums
            boundary = "circular" if periodic_frames(run, src, executor.xp, measured, ref) \
                else "linear"
            if boundary == "circular":
                passes = circular_passes(opts, passes)
                notes.append("boundary auto: circular (the frames wrap around: circular "
                             "shifts); measured again with the circular refinement"
                             + (", then against a template of the frames moved circularly"
                                f" ({'twice' if passes > 1 else 'once'})" if passes else ""))
                report.plan_more(passes + 1)
                lk, notes = False, [n for n in notes if n is not lk_note]
                if asked_reference:
                    notes.append("lucas_kanade reference: off (the frames wrap around: the fit "
                                 "against the reference takes linear frames)")
                opts, fit = opts._decided(lucas_kanade="off"), None
                continue
        if k == 0:
            first = table  # (against the first frame: kept_from_first's fallback)
        if k >= passes:
            break
        total, coverage = sums
        image = template_of(executor.xp, total, coverage, image)
        k += 1
        if lk and k == passes:
            built = np.where(kept_rows(table, np, opts.min_confidence)[:, None],
                             table[:, COLUMN["dy"]:COLUMN["dx"] + 1], np.nan)
            fit = LucasKanadeFit(*(executor.portable(a) for a in (total, coverage, image)),
                                 built, scale)
    report.finish()
    if boundary != "circular" and opts.upsample is not None and opts.subpixel != "upsample":
        notes.append(f"upsample {opts.upsample} unused: {linear_why}, where subpixel "
                     f"{opts.subpixel} does not upsample")
    run = run._decided(lucas_kanade=opts.lucas_kanade)
    if scale:  # (the image in the frames' own units again)
        image = scaled_by(executor.xp.asarray(image, executor.xp.float64), -scale, executor.xp)
    if passes:
        table, kept = kept_from_first(table, first)
        if kept:
            notes.append(f"{plural(kept, 'frame')} moved away from their shift against the "
                         "first frame by the template pass (a peak on the border or far off "
                         "and weaker): their first pass's shift kept")
    # (without template passes asked for, the first pass is the run without the refinement)
    alone = relative_to_first(first) if auto_on and lk and not opts.refined else None
    return table, run, notes, image, alone


#: template passes of frames that wrap around, at least (:func:`circular_passes`)
CIRCULAR_TEMPLATE_PASSES = 2


def circular_passes(opts, passes):
    """The template passes of a run whose frames wrap around: at least
    :data:`CIRCULAR_TEMPLATE_PASSES` where the frames are measured against the first frame
    (``first`` or ``refined``, not phase): a template of the frames moved circularly is exact
    there, and against it the noise of one frame no longer enters every shift; the second is
    made of the better shifts of the first (the accuracy bench's noisy wrap-around stacks: the
    median of the stacks' errors over scikit-image's 0.64 with two, 0.65 with one, 0.88 against
    frame 0 alone; the worst stack 0.111 px against frame 0, 0.058 with one, 0.056 with two)."""
    return max(passes, CIRCULAR_TEMPLATE_PASSES) if opts.lk_possible else passes


def measure_pass(run, reference, executor, hook=None, progress=None):
    """One measuring pass over every range of the executor: the table, and the hook's template
    sums ``(total, coverage)`` added up in frame order, or with the reference's fit the
    correlation's shifts before it ``(N, 2)`` (``None`` for other hooks)."""
    part = functools.partial(
        measure_part, run=run, plan=executor.plan, hook=hook, chunk=executor.fixed_chunk,
        budget=executor.budget_per_range, prepared=executor.prepared, host=executor.remote,
        reference=None if reference is None else tuple(executor.portable(a)
                                                       for a in reference))
    parts = executor.map(part, progress, before=run.previous)
    table = np.concatenate([t for t, _, _ in parts])
    if parts[0][1] is not None:  # (chosen by the first batch where no plan was given)
        executor.plan = parts[0][1]
    if isinstance(hook, ReferenceFit):
        return table, np.concatenate([backend.to_numpy(r[0]) for _, _, r in parts])
    if not isinstance(hook, TemplateSums):
        return table, None
    xp = executor.xp
    total, coverage = (xp.asarray(a) for a in parts[0][2])
    for _, _, (t, c) in parts[1:]:  # in frame order
        total = total + xp.asarray(t)
        coverage = coverage + xp.asarray(c)
    return table, (total, coverage)


def measure_part(src, xp, start, stop, progress, *, run, reference, plan, hook, chunk, budget,
                 prepared=None, host=False):
    """Rows ``start:stop`` of a pass on ``xp``'s device (an executor's unit of work): the
    table, the plan it measured with, and the hook's result (NumPy arrays with ``host``: the
    range runs apart from the pipeline's device)."""
    if chunk is None:  # this device's own chunk: one frame checked against its memory first
        chunk = frames_per_chunk(run, src, xp, budget)
    on_chunk = None if hook is None else hook.make(xp, src.frame_shape, start)
    table, plan = measure_frames(run, src, xp, chunk, reference, plan=plan, start=start,
                                 stop=stop, progress=progress, on_chunk=on_chunk,
                                 prepared=prepared)
    result = None if hook is None else hook.result(on_chunk)
    if host and result is not None:
        result = tuple(backend.to_numpy(a) for a in result)
    return table, plan, result


def reference_image(spec, opts, src, executor):
    """The reference image on the executor's ``xp`` (``None`` for ``previous``); a mean is
    summed range by range where the executor reads (Dask: by its workers), in frame order."""
    if opts.previous:
        return None
    count = mean_count(spec, src.n_frames)
    if count is None:
        return reference_frame(spec, src, executor.xp, executor.chunk or DEFAULT_CHUNK,
                               opts.channel)
    part = functools.partial(_finite_part, count=count, chunk=executor.chunk or DEFAULT_CHUNK)
    return mean_of(executor.map(part, None, upto=count), executor.xp)


def _finite_part(src, xp, start, stop, progress, *, count, chunk):
    """:func:`~.rigid.finite_sums` of frames ``start:min(stop, count)`` (a part of a mean
    reference; its sum on the host where the range ran elsewhere than ``xp``'s device)."""
    acc, kept = finite_sums(src, xp, start, min(stop, count), chunk)
    return (acc if xp is np else backend.to_numpy(acc)), kept


#: the share of a run's progress bar the measuring passes fill where a patch pass follows (it
#: takes most of such a run: three refinements of every patch), or a rigid run's quality report
#: (a pass of its own over the stack)
MEASURING_SHARE = {"patches": 0.3, "quality": 0.75}


class _Phase:
    """``progress`` of one phase of a run (its frames counted to ``n``) as the share ``[lo,
    hi)`` of the stack's ``n`` frames: one bar over the measuring passes, the patch pass and
    the quality report's pass.

    >>> seen = []
    >>> phase = _Phase(seen.append, 10, 0.3, 1.0)
    >>> for k in (4, 4, 2):
    ...     phase(k)
    >>> seen, sum(seen)
    ([2, 3, 2], 7)
    """

    def __init__(self, progress, n, lo, hi):
        self.progress, self.n = progress, max(int(n), 1)
        self.first, self.last = round(lo * n), round(hi * n)
        self.done, self.at = 0, self.first  # (its frames counted; where the bar stands)

    def __call__(self, k):
        self.done += k
        at = self.first + min(self.done, self.n) * (self.last - self.first) // self.n
        if at > self.at and self.progress is not None:
            self.progress(at - self.at)
            self.at = at

    def finish(self):
        """The phase's share filled, whatever its pass reported (an executor may report
        none)."""
        self(self.n - min(self.done, self.n))


def _phases(progress, n, opts):
    """``progress`` for the measuring passes, the patch pass and the rigid quality report's
    pass (:class:`_Phase`: the first fills the bar alone where no other follows)."""
    if opts.patches is not None:
        cut = MEASURING_SHARE["patches"]
        return _Phase(progress, n, 0.0, cut), _Phase(progress, n, cut, 1.0), None
    if opts.quality:
        cut = MEASURING_SHARE["quality"]
        return _Phase(progress, n, 0.0, cut), None, _Phase(progress, n, cut, 1.0)
    return _Phase(progress, n, 0.0, 1.0), None, None


class _Progress:
    """``progress`` of the stack's frames from the frames measured over all passes."""

    def __init__(self, progress, n, passes):
        self.progress, self.n = progress, n
        self.planned, self.measured, self.reported = passes * n, 0, 0

    def __call__(self, k):
        self.measured += k
        step = min(self.measured * self.n // self.planned, self.n) - self.reported
        if step > 0 and self.progress is not None:
            self.progress(step)
        self.reported += max(step, 0)

    def plan_more(self, passes):
        """``passes`` measuring passes are left (a decision after the first added some)."""
        self.planned = self.measured + passes * self.n

    def finish(self):
        if self.reported < self.n and self.progress is not None:
            self.progress(self.n - self.reported)

