"""The patch pass of piecewise-rigid registration (:func:`measure_field`): after the rigid
pass of :func:`xcorr_app.align`, every frame is streamed again, its patches measured within
``max_deviation`` of its rigid shift and refined through the smooth field (the rules:
:mod:`xcorr_app.alignment.piecewise._patches`; the field and the warp:
:mod:`xcorr_app.alignment.piecewise._motion_field`).
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np

from ... import backend
from ...errors import InputError
from ...io import FrameRange, as_dtype, open_source
from ...streaming import HostCopy, cpu_threads, map_chunks
from ._field_resample import add_fields
from ._motion_field import warp_chunk, warped_sum
from ..rigid import prefilter_for
from ._low_patches import fill_low, fill_low_fits, fill_low_gpu, low_patches
from ._patch_rows import KeptRows, field_from_rows
from ._patches import (REFINE_PASSES, PatchGrid, check_deviation, common_area, integer_parts,
                       patch_left, patch_margin, patch_shifts, refine_shifts, refine_taper,
                       refine_template, template_patches)
from ..rigid import frames_per_chunk, prepared_reference
from ..rigid import patch_key
from ..rigid import DespikedSource, despiked, floating, prepare
from ._spline import field_weights
from ..rigid import reference_frame
from ..refine import TemplateAccumulator
from ..warp import frames_type, shift_frames


class PatchSetup:
    """What every range of frames of one patch pass shares (global to the run): the grid, the
    prepared template's patches (on the run's device, or NumPy for a Dask task to send), the
    template as prepared (for the picture: on the run's device until the field is made, so
    that making the setup waits for nothing; the last pass's copy to the host is queued
    before that pass, :meth:`queue_host_copy`) and as read (``image``: where no warped frame
    covers, the next template keeps it)."""

    def __init__(self, grid, tpatches, template, image):
        self.grid, self.tpatches, self.template, self.image = grid, tpatches, template, image
        self._host = None  # (a HostCopy of the template, once queued)

    @classmethod
    def make(cls, opts, src, xp, chunk, grid, image):
        """The setup of a pass against the template ``image`` (on ``xp``'s device)."""
        frame, raw = prepared_reference(opts, src, xp, chunk, image=image)
        return cls(grid, template_patches(frame, grid), raw, image)

    def queue_host_copy(self):
        """Queue the template's copy to the host now (CuPy; NumPy needs none): fetched at the
        run's end it waited for a pageable copy, the GPU idle."""
        if self._host is None and backend.is_cupy_array(self.template):
            self._host = HostCopy(self.template)

    def template_on_host(self):
        """The prepared template as NumPy (the queued copy where there is one)."""
        return backend.to_numpy(self.template) if self._host is None else self._host.result()

    def on_host(self):
        """The same setup with NumPy arrays (a Dask task's result)."""
        return PatchSetup(self.grid, backend.to_numpy(self.tpatches),
                          backend.to_numpy(self.template), backend.to_numpy(self.image))


def patch_grid(frame_shape, rigid, patches, patch_overlap, max_deviation):
    """The run's :class:`PatchGrid`: over the area every frame covers after its rigid shift
    (``rigid`` of ALL frames; ``[[0, 0]]`` checks a grid before the rigid pass).

    >>> patch_grid((64, 64), [[0.0, 0.0], [2.0, -1.0]], (2, 3), None, 4).grid
    (2, 3)
    """
    area = common_area(rigid, frame_shape, patch_margin(check_deviation(max_deviation)))
    return PatchGrid.make(patches, patch_overlap, max_deviation, frame_shape, area)


def aligned_sums(src, xp, chunk, rigid, start=0, stop=None):
    """``reference="refined"``: per chunk of frames ``start:stop`` (in frame order, host
    float64), the sum of its rigidly aligned frames and their count (one vector); added up in
    frame order by :func:`refined_image`."""

    def aligned_sum(first, frames):  # the sum of the chunk's aligned frames, and a count
        a = start + first
        s = rigid[a:a + len(frames)]
        ok = ~np.isnan(s).any(axis=1)
        f = shift_frames(frames[xp.asarray(ok)].astype(xp.float32), xp.asarray(s[ok]))
        return xp.concatenate([f.sum(axis=0, dtype=xp.float64).ravel(),
                               xp.full(1, float(ok.sum()))])

    part = FrameRange(src, start, src.n_frames if stop is None else stop)
    return [p for _, p in map_chunks(lambda: contextlib.nullcontext(part), chunk, aligned_sum,
                                     xp=xp)]


def refined_image(total, frame_shape):
    """The mean of the rigidly aligned frames from the sum of :func:`aligned_sums`."""
    return (total[:-1] / max(total[-1], 1.0)).reshape(frame_shape).astype(np.float32)


def _template_image(opts, src, xp, chunk, rigid):
    """The template as read: the rigid reference, or for ``reference="refined"`` the mean of
    the rigidly aligned frames (shifts relative to it); with ``despike`` on, of the frames
    without their specks (averaged, a speck is too faint to find, not to pull)."""
    if opts.despike == "on":
        src = DespikedSource(src)
    if opts.refined:
        return refined_image(sum(aligned_sums(src, xp, chunk, rigid)), src.frame_shape)
    return reference_frame(opts.reference, src, xp, chunk, opts.channel)


def measure_field(opts, stack_or_path, rigid, xp, chunk, *, executor=None, out=None,
                  prepared=None, quality=None, progress=None):
    """The patch pass of :func:`xcorr_app.align` (the rules: :mod:`._patches`): a
    :class:`MotionField` from the rigid shifts ``rigid`` ``(N, 2)`` of the run of ``opts``.

    ``opts.patch_template_passes`` (0, 1 or 2): after a patch pass, the frames (those with a
    rigid shift) warped by their fields are averaged into a new template, accumulated chunk by
    chunk while that pass streams (:func:`~._motion_field.warped_sum` into a
    :class:`~._template.TemplateAccumulator`: pixels no frame covers keep the previous
    template's), and the patches are measured again against it: the stack is read once per
    patch pass, never once more for the template.

    ``executor``: an executor whose ranges run apart (several GPUs, Dask:
    :mod:`._executors`): every pass is :func:`field_part` mapped over its ranges, each with
    its own reader on its own device; the grid and the template are made here, on ``xp``,
    handed out on the host, and the ranges' template sums are added up in frame order.
    Without one the pass runs here, on ``stack_or_path`` (the stack kept on the GPU, say).

    ``out`` (one device only): the aligned frames (as :meth:`AlignResult.apply` with its
    defaults gives them) of the last pass, each chunk warped by its field while it is on the
    device, as :func:`measure_range` says.  ``prepared`` (one device only, a
    :class:`~._prepared.PreparedFrames`): the rigid pass's prepared chunks, taken where they
    were prepared as the patch pass prepares.  ``quality``: a callable ``(xp, template, centres,
    size, in_pass)`` told the last pass's template and grid (the quality report's), which on one
    device (``in_pass``) gives the collector that pass adds every chunk to
    (:class:`~xcorr_app.alignment._quality.PatchQuality`).  ``progress(k)``: called with the
    frames of every chunk of every pass as it is measured."""
    check_patch_reference(opts)
    passes = opts.patch_template_passes
    rigid = np.asarray(rigid, np.float64)
    shared = executor is not None
    with open_source(stack_or_path, opts.channel) as src:
        grid = patch_grid(src.frame_shape, rigid, opts.patches, opts.patch_overlap,
                          opts.max_deviation)
        setup = PatchSetup.make(opts, src, xp, chunk, grid,
                                _template_image(opts, src, xp, chunk, rigid))
        for k in range(passes + 1):
            last = k == passes
            collect = None
            if last:  # (the last pass's template: the result's picture)
                setup.queue_host_copy()
                if quality is not None:  # (in the pass on one device)
                    collect = quality(xp, setup.image, grid.centres, grid.size, not shared)
            part = functools.partial(
                field_part, opts=opts, chunk=executor.fixed_chunk if shared else chunk,
                budget=executor.budget_per_range if shared else None,
                setup=setup.on_host() if shared else setup, rigid=rigid, accumulate=not last,
                host=shared, out=None if shared or not last else out,
                prepared=None if shared else prepared, quality=collect)
            parts = executor.map(part, progress) if shared \
                else [part(src, xp, 0, src.n_frames, progress)]
            if last:
                break
            image = next_image(xp, src.frame_shape, [s for _, _, s in parts], setup.image)
            setup = PatchSetup.make(opts, src, xp, chunk, grid, image)
    if len(parts) == 1:
        rows, low = parts[0][:2]
    else:  # (the low flags kept apart by every range, or by none)
        rows = np.concatenate([rows for rows, _, _ in parts])
        lows = [low for _, low, _ in parts]
        low = None if any(a is None for a in lows) else np.concatenate(lows)
    return field_from_rows(rows, setup, low)


def field_part(src, xp, start, stop, progress, *, opts, chunk, budget, setup, rigid,
               accumulate, host, out=None, prepared=None, quality=None):
    """Rows of frames ``start:stop`` of a patch pass on ``xp``'s device (an executor's unit of
    work; ``chunk`` None: this device's own, checked against ``budget``)."""
    if chunk is None:
        chunk = frames_per_chunk(opts, src, xp, budget)
    return _measure_part(opts, src, xp, chunk, setup, rigid, (start, stop), accumulate, host,
                         out, prepared, quality, progress)


def _measure_part(opts, src, xp, chunk, setup, rigid, bounds, accumulate, host, out=None,
                  prepared=None, quality=None, progress=None):
    """Rows of frames ``bounds``, their low flags where kept apart (:func:`measure_range`'s
    ``flags``, else None) and, with ``accumulate``, their warped sums ``(total, coverage)``
    for the next template (NumPy with ``host``, else on ``xp``'s device)."""
    acc = TemplateAccumulator(xp, src.frame_shape) if accumulate else None
    flags = {}
    rows = measure_range(opts, src, xp, chunk, setup, rigid, *bounds,
                         None if acc is None else acc.add_sums, out=out, prepared=prepared,
                         flags=flags, quality=quality, progress=progress)
    if acc is None:
        return rows, flags.get("low"), None
    sums = acc.sums()
    return rows, flags.get("low"), tuple(backend.to_numpy(a) for a in sums) if host else sums


def next_image(xp, frame_shape, sums, fallback):
    """The next template (on ``xp``'s device): the mean of the warped frames from their
    ``(total, coverage)`` sums, added up in the order given (frame order), and ``fallback``
    (the last template as read) where no frame covers."""
    acc = TemplateAccumulator(xp, frame_shape)
    for total, coverage in sums:
        acc.total += xp.asarray(total)
        acc.coverage += xp.asarray(coverage)
    return acc.template(fallback)


def fold_parts(acc, parts):
    """``acc`` (``None``: zeros) plus each of ``parts`` in turn: sums added up in frame order,
    as one run adds its chunks' (the same numbers where the chunks are the run's).

    >>> fold_parts(None, [np.ones(2), np.full(2, 2.0)]).tolist()
    [3.0, 3.0]
    """
    for p in parts:
        acc = (np.zeros_like(p) if acc is None else acc) + p
    return acc


def patch_preparer(opts, xp):
    """``prepare`` of the patch pass's frames on ``xp``'s device: the run's prefilter as
    zero-normalized correlation takes it (phase normalization's too: the patches are
    measured by zncc), no window (the patches have their own taper)."""
    prefilter = prefilter_for(opts.prefilter, "zncc", opts.features)
    return lambda frames: prepare(frames, xp, prefilter, None)


def check_patch_reference(opts):
    """InputError for a reference the patches cannot be measured against."""
    if opts.previous:
        raise InputError("patches are measured against one reference: reference 'previous' "
                         "is not available with patches")


def measure_range(opts, src, xp, chunk, setup, rigid, start, stop, add_sums=None, out=None,
                  prepared=None, flags=None, quality=None, progress=None):
    """Rows ``start:stop`` ``(n, P, 5)`` (host) of one patch pass against ``setup``, chunk by
    chunk; each frame's rows depend only on the frame, ``setup`` and its rigid shift, so ranges
    measured apart give the rows of one run.  ``add_sums(total, count)``, if given, sees each
    chunk's warped frames (:func:`~._motion_field.warped_sum`, on ``xp``'s device, in frame
    order) for the next template.

    ``out``: every frame warped by its field (bilinear, fill 0, the whole frame: the defaults
    of :meth:`AlignResult.apply`, :func:`~._motion_field.warp_chunk`) while the chunk is on the
    device, into ``out`` (float32 ``(stop - start, H, W)``: NumPy, from the device as
    :func:`~xcorr_app.streaming.map_chunks` writes its ``out``, or CuPy on the GPU) or handed to
    ``out(start, chunk)`` (a callable: NumPy chunks in frame order, frames numbered from
    ``start``, float32 or rounded on the device to the callable's ``dtype`` as ``align(out=)``
    says): the aligned stack without reading the stack once more.  ``prepared``: the
    chunks' prepared frames where an earlier pass kept them (:class:`~._prepared.PreparedFrames`).
    ``flags`` (a dict): given ``"low"``, the rows' low flags ``(n, P)`` bool, where the GPU
    pass kept them apart (:meth:`~._patch_rows.KeptRows.low_flags`).  ``quality``: the
    quality report's collector (:func:`measure_field`), given each chunk as it came, its
    prepared copy and its fields: it warps the chunk (into ``out`` where one is wanted) as it
    sums it.  ``progress(k)``:
    called with each chunk's frames once its result is in (on the GPU: once it is queued).
    """
    grid = setup.grid
    dev = "cpu" if xp is np else "gpu"
    weights = field_weights(grid.centres, src.frame_shape, xp)
    warp = None if out is None else _Warper(out, weights)
    shape = (stop - start, grid.n_patches, 5)
    kept = None if xp is np else KeptRows.for_range(xp, shape)
    table = np.empty(shape) if kept is None else kept.table  # GPU: the rows left on the device
    work = _measurer(opts, xp, dev, patch_preparer(opts, xp), grid, rigid,
                     xp.asarray(setup.tpatches),
                     refine_taper(grid.size), weights, add_sums, start, warp, kept,
                     prepared, quality)
    if xp is not np:  # the chunks' streams read what was set up on this one
        xp.cuda.Device().synchronize()
    part = FrameRange(src, start, stop)

    def keep(first, block, n):  # (a chunk's rows: written in place, no concatenation)
        if block.shape[-1]:  # (an empty placeholder: the rows stay on the device)
            table[first:first + len(block)] = block
        if progress is not None:
            progress(n)

    if warp is None or not warp.returns:
        for first, block in map_chunks(lambda: contextlib.nullcontext(part), chunk, work, xp=xp):
            keep(first, block, min(chunk, part.n_frames - first))
    else:  # the chunk's warped frames are map_chunks' result; its rows are kept aside
        host_out = out if isinstance(out, np.ndarray) else None
        for first, frames in map_chunks(lambda: contextlib.nullcontext(part), chunk, work,
                                        xp=xp, out=host_out):
            if host_out is None:
                out(start + first, frames)
            keep(first, warp.rows.pop(first), len(frames))
    if quality is not None:  # (its figures made while the device finishes the pass)
        quality.settle()
    if kept is not None:
        kept.fetch()  # the rest, once the pass is done
        if flags is not None and kept.low_flags() is not None:
            flags["low"] = kept.low_flags()
    return table


class _Warper:
    """Where :func:`measure_range`'s aligned frames go: ``returns`` (the measurer returns the
    warped chunk, its rows kept in ``rows`` by the chunk's first frame) or written into a
    CuPy ``out`` by the measurer itself."""

    def __init__(self, out, weights):
        self.out, self.weights, self.rows = out, weights, {}
        self.returns = not backend.is_cupy_array(out)
        self.dtype = frames_type(getattr(out, "dtype", None) if callable(out) else None)

    def target(self, first, n):
        """Where the chunk's frames are warped to: a slice of C-contiguous frames (the
        kernel writes there), or None (a new array)."""
        return None if self.returns else self.out[first:first + n]

    def result(self, first, warped, rows):
        """The chunk's result from its warped frames (float32): its rows, or its warped
        frames (rows kept)."""
        if not self.returns:
            return rows
        self.rows[first] = rows
        if self.dtype == np.float32:
            return warped
        # (on the chunk's device: fewer bytes copied back)
        return as_dtype(warped, self.dtype)

    def __call__(self, first, frames, field, rows):
        """The chunk's result, its frames warped by their fields here."""
        return self.result(first, warp_chunk(frames, field, self.weights,
                                             out=self.target(first, len(frames))), rows)


def _measurer(opts, xp, dev, preparer, grid, rigid, tpatches, taper, weights, add_sums,
              offset=0, warp=None, kept=None, prepared=None, quality=None):
    """The work of one patch pass on a chunk: ``(N, P, 5)`` deviation, peak, confidence, low
    (host); with ``add_sums`` the chunk's frames warped by their fields are handed to it (in
    the chunk's stream order).  ``offset``: the chunks' frame 0 in the stack.  ``warp`` (a
    :class:`_Warper`): the chunk's frames warped by their fields, its result.

    On the GPU (grids up to :data:`~._low_patches.FILL_MAX_PATCHES` patches) nothing waits
    for the device: the low patches are decided and filled by a kernel of ours
    (:func:`~._low_patches.fill_low_gpu`, the rule of :func:`~._low_patches.low_patches` and
    :func:`~._low_patches.fill_low`), which also writes the chunk's rows; they stay on the
    device in ``kept`` (by the chunk's first frame) and the chunk's result is an empty
    placeholder.  Otherwise (the CPU, larger grids) the small per-patch rules run on the host
    with NumPy: the chunk's correlations are waited for, and the low patches' deviations go to
    the host once more per refinement pass, in chunks that have any (on a fresh machine CuPy's
    operations for them would each compile: docs/how-align-works.md, measurements)."""
    left = patch_left(tpatches, grid.max_deviation)  # (GPU: the patches' summed-area tables)
    # the refinement's template patches (weighted) and their sums: on the GPU by a kernel of
    # ours (CuPy's mean was a CUB reduction, 2.8 s of NVRTC on a fresh machine)
    tnear, near = refine_template(tpatches, taper)
    # the rigid shifts on the device once (a copy from host memory per chunk may wait for the
    # queued work)
    on_device = (xp.asarray(rigid), *(xp.asarray(a) for a in integer_parts(rigid)))

    key = patch_key(opts)  # (the rigid pass's prepared chunks, where prepared alike)
    despike = opts.despike == "on"

    def measure(first, frames):
        start = offset + first
        stop = start + len(frames)
        s = rigid[start:stop]
        s_on, whole, off = (a[start:stop] for a in on_device)
        # (the pass reads the frames as they are, the output's: what it measures despiked)
        clean = despiked(floating(xp.asarray(frames)), xp) if despike else frames
        p = None if prepared is None else prepared.take(key, start, len(frames))
        if p is None:
            p = preparer(clean)

        def field_of(d):  # rigid + deviation, float64: as the result's motion_field holds it
            return add_fields(s_on[:, None, :], d).reshape(len(s), *grid.grid, 2)

        def refined(d, last=None):  # through the field: what remains, measured, and it
            rest = refine_shifts(tnear, p.frames, grid, field_of(d), weights, opts.subpixel,
                                 dev, near, taper, last)
            return add_fields(d, rest), rest

        d, pk, cf, border = patch_shifts(tpatches, p.frames, s, grid, opts.subpixel, dev, left,
                                         uploaded=None if xp is np else (whole, off))
        scores = (pk.T, cf.T, border.T)  # (P, N): as laid out
        low = None if xp is np else xp.empty(d.shape[:2], xp.bool_)
        if low is not None and kept is not None and fill_low_fits(d, grid.grid, low, scores):
            rule = dict(grid_shape=grid.grid, low=low, scores=scores,
                        min_confidence=opts.min_confidence)
            slot = kept.slot(first, len(frames))  # (the chunk's rows stay on the device)
            # (the rows hold the field: the rigid shift added as the kernel writes them)
            d = fill_low_gpu(d, decide=True, rows=not REFINE_PASSES and slot, base=s_on,
                             **rule)[0]
            rest = None  # (the last pass leaves the windows the one before converged)
            for k in range(REFINE_PASSES):
                d, rest = refined(d, rest if k == REFINE_PASSES - 1 else None)
                d = fill_low_gpu(d, rows=k == REFINE_PASSES - 1 and slot, base=s_on,
                                 **rule)[0]
            kept.sent(first, len(frames), low)
            rows = np.empty((len(frames), 0))
        else:
            d, rows = _measured_on_host(opts, xp, grid, d, scores, refined, s)
        if add_sums is not None:
            keep = np.flatnonzero(~np.isnan(s).any(axis=1))  # host: the measured frames
            if len(keep):
                idx = xp.asarray(keep)
                add_sums(*warped_sum(clean[idx], field_of(d)[idx], weights))
        if warp is None and quality is None:
            return rows
        fld = field_of(d)
        if quality is None:
            return warp(first, frames, fld, rows)
        # (the report warps the chunk as it sums it: one pass over its pixels)
        warped = quality.add(start, frames, fld, p, ok=~np.isnan(s).any(axis=1),
                             whole=warp is not None,
                             out=None if warp is None else warp.target(first, len(frames)),
                             measured=clean)
        return rows if warp is None else warp.result(first, warped, rows)

    if xp is not np:
        return measure

    def on_all_cores(first, frames):
        # the CPU's patch pass runs a chunk at a time: SciPy's transforms of its searches and
        # refinements on every core (the rigid pass runs a frame per thread instead)
        import scipy.fft

        with scipy.fft.set_workers(cpu_threads()):
            return measure(first, frames)

    return on_all_cores


def _measured_on_host(opts, xp, grid, d, scores, refined, rigid):
    """``(d, rows)`` of a chunk whose low patches are decided and filled on the host
    (:func:`_measurer`): ``d`` after the refinement passes ``refined`` on ``xp``'s device, the
    rows ``(N, P, 5)`` on the host (:mod:`._patch_rows`: the field, ``d`` plus the chunk's
    ``rigid`` shifts ``(N, 2)``)."""
    # (N, P) views of (P, N) arrays: fetched as laid out and transposed on the host
    # (CuPy makes a strided array contiguous first: two copy kernels to compile)
    pk, cf, border = (backend.to_numpy(a).T for a in scores)
    low = low_patches(backend.to_numpy(d), pk, cf, border, opts.min_confidence)
    some_low = bool(low.any())
    if some_low:
        d = xp.asarray(fill_low(backend.to_numpy(d), low, grid.grid))
    rest = None  # (the last pass leaves the windows the one before converged)
    for k in range(REFINE_PASSES):
        d, rest = refined(d, rest if k == REFINE_PASSES - 1 else None)
        if some_low:
            d = xp.asarray(fill_low(backend.to_numpy(d), low, grid.grid))
    cf = np.where(border, 0.0, cf)  # no distinct peak inside the window
    rows = np.concatenate([backend.to_numpy(d) + rigid[:, None, :],
                           pk[..., None].astype(np.float64), cf[..., None].astype(np.float64),
                           low[..., None].astype(np.float64)], axis=-1)
    return d, rows


def check_grid(opts, frame_shape):
    """A grid of ``opts.patches`` that cannot fit frames of ``frame_shape``: an
    :class:`InputError` before any pass."""
    patch_grid(frame_shape, [[0.0, 0.0]], opts.patches, opts.patch_overlap, opts.max_deviation)
