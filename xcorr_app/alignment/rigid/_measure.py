"""Align a stack of frames to a reference: the measuring loop of :func:`xcorr_app.align`.

The stack is streamed through :class:`xcorr_app.streaming.DeviceChunks`: a reader thread
decodes chunks ahead into a ring of (pinned) host buffers; on the GPU each chunk is copied to
the device and processed on one of two CUDA streams, so the copy of one chunk, the kernels of
another and the reading of a third overlap; the per-frame results come back to the host in one
small copy per chunk, one chunk behind.  Memory held at once is bounded
(:func:`xcorr_app.streaming.chunk_frames_for`), so stacks larger than the GPU's and the host's
memory work, and the chunking never changes a result.

Per chunk: convert to float32, check, subtract each frame's mean, prefilter, window
(:mod:`xcorr_app.alignment.rigid._preprocess`); correlate every frame with the reference in one call (form
``one_to_many``, or ``n_to_mn`` for ``reference="previous"``) with the plan chosen once per run;
normalize (ZNCC from summed-area tables, or phase correlation by FFT); find the peak and refine
it to subpixel precision for the whole batch (:class:`Measurer`); and measure the same frames
with the FFT reference (:func:`xcorr_app.registration._fft_register.fft_shifts`) to report
agreement.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import threading

import numpy as np

from ... import backend
from ...correlate import (Plan, choose_method, correlate_checked, fft_geometry, fft_of, form_layout,
                         padded_spectra, shift_origin, xcorr_fft)
from ...errors import InputError
from ...io import FrameRange
from ...registration import (Bands, GpuSurfaces, band_plan, banded_surface, fft_shifts, find_shifts,
                            masked_zncc_surfaces, on_border, periodic_spectrum, phase_surface,
                            refine_upsampled, refined_shifts, surface_peaks, zncc, zncc_left)
from ...streaming import (DEFAULT_CHUNK, DeviceChunks, HostCopy, cpu_threads, frame_slices, keep_freed_memory,
                         one_blas_thread, plan_memory)
from ._methods import (CPU_REFERENCE_COARSE, FFT_REFERENCE_UPSAMPLE, fft_reference,
                       search_range)
from ._frame_stats import pack_rows
from ._mask import NAN_MASK, fill_masked, filter_reach, measured_mask, measured_masks
from ._prepared import pass_key
from ._preprocess import Prepared
from ._references import reference_frame
from ._columns import COLUMNS

class Measurer:
    """Correlation, normalization, peak and subpixel refinement of whole batches, with the plan
    chosen once (on the first batch) so that every chunk of a run is computed the same way.
    A :class:`~xcorr_app.registration._bands.Bands` plan measures frames too large to
    correlate at once band by band (:func:`~xcorr_app.registration._bands.banded_surface`).
    With a ``mask`` ((H, W) bool, the pixels used) every surface is the masked ZNCC
    (:func:`~xcorr_app.registration._masked.masked_zncc_surfaces`) instead.  ``subpixel`` comes
    decided (:func:`~xcorr_app.alignment.rigid.check_choices` at the entry point: never
    ``"auto"``)."""

    def __init__(self, xp, frame_shape, max_shift, normalization, subpixel, upsample, plan=None,
                 tune=False, boundary="linear", mask=None):
        self.xp, self.dev = xp, "cpu" if xp is np else "gpu"
        self.bound = search_range(frame_shape, max_shift)
        self.unbounded = max_shift is None
        self.normalization, self.subpixel, self.upsample = normalization, subpixel, upsample
        self.plan = "phase" if normalization == "phase" else plan
        self.mask = mask if mask is None or isinstance(mask, str) else xp.asarray(mask)
        if mask is not None:
            self.plan = MASKED_PLAN
        self.tune = tune  # GPU: measure the likeliest kernels instead of the model
        self._surfaces = None  # GPU: the run's GpuSurfaces
        self._kept = {}  # CPU: what a 2-D reference gives every frame (see _of_reference)
        self._lock = threading.Lock()
        self.circular = boundary == "circular"  # the upsampled refinement's images (below)

    def _of_reference(self, what, ref, make):
        """``make()``, computed once per reference array and kept: on the CPU the padded FFT of
        the reference and its ZNCC terms are the same for every frame of a run (the worker
        threads share them)."""
        with self._lock:
            kept = self._kept.get(what)
            if kept is None or kept[0] is not ref:
                kept = self._kept[what] = (ref, make())
            return kept[1]

    def choose_plan(self, ref, mov, form, calls=None):
        """The run's correlation plan, chosen on the first batch and kept (``calls``: the
        run's batches, where known: see :func:`~xcorr_app.correlate.choose_method`)."""
        if self.plan is None:
            if self.unbounded and self.dev != "gpu":
                self.plan = Plan("fft")  # without a bound: FFT
            elif self.dev == "gpu":  # (unbounded: the half frame, where a first run on small
                # frames takes a direct kernel over cuFFT's first plans; charge_once)
                self.plan = choose_method(form_layout(form, ref.shape, mov.shape), self.bound,
                                          "gpu", ref, mov, tune=self.tune, calls=calls)
            else:  # a per-frame rule: the same for any chunk size
                left = ref[:1] if form == "n_to_mn" else ref
                self.plan = choose_method(form_layout(form, left.shape, mov[:1].shape),
                                          self.bound, "cpu")
        return self.plan

    def __call__(self, ref, mov, ref_fft=None, raw=None, masks=None):
        """Shifts, peaks, confidences of ``mov`` (N, H, W) against ``ref`` ((H, W) or one per
        frame), and whether each integer peak lies on the border of the searched window
        (:func:`~xcorr_app.registration._peaks.on_border`: the drift may exceed the window);
        ``ref_fft`` (``fft2(ref)``) is needed for phase normalization.  ``raw``: ``(ref, mov)``
        only mean-subtracted, which the circular refinement correlates (a prefilter or window
        breaks the wrap-around).  ``masks``: ``(reference's, frames')`` with ``mask="nan"``."""
        xp = self.xp
        gpu = self.dev == "gpu"
        if self.mask is not None:
            # the peak refined by the run's fit on this surface: the upsampled DFT refines an
            # unmasked correlation, which the left-out pixels would pull again
            if isinstance(self.mask, str):  # (NAN_MASK: the frames' own)
                corr = masked_zncc_surfaces(ref, mov, masks[1], self.bound,
                                            reference_mask=masks[0])
            else:
                corr = masked_zncc_surfaces(ref, mov, self.mask, self.bound)
            origin = self.bound
            if gpu:
                corr, iy, ix, peak, conf = surface_peaks(
                    xp.ascontiguousarray(corr, dtype=xp.float32), normalize=False)
        elif self.normalization == "phase":
            if ref_fft is None:
                ref_fft = fft_of(xp).fft2(ref.astype(xp.float32))
            corr, origin = phase_surface(ref_fft, mov, self.bound)
            if gpu:
                corr, iy, ix, peak, conf = surface_peaks(corr, normalize=False)
        elif isinstance(self.plan, Bands):  # frames too large for one correlation
            if self.plan.plan is None:
                self.plan = Bands(self.plan.rows, band_plan(ref, mov, self.bound,
                                                            self.plan.rows, self.dev))
            corr = banded_surface(ref, mov, self.bound, self.normalization, self.plan.rows,
                                  self.dev, self.plan.plan)
            origin = shift_origin(ref.shape, mov.shape, self.bound)
            if gpu:
                corr, iy, ix, peak, conf = surface_peaks(corr, normalize=False)
        else:
            form = "n_to_mn" if ref.ndim == 3 else "one_to_many"
            right = mov[:, None] if form == "n_to_mn" else mov
            plan = self.choose_plan(ref, right, form)

            def correlate():
                c = correlate_checked(ref, right, form, self.bound, plan, self.dev)
                return c[:, 0] if form == "n_to_mn" else c

            origin = shift_origin(ref.shape, mov.shape, self.bound)
            if gpu:
                if self._surfaces is None:
                    self._surfaces = GpuSurfaces(mov.shape[1:], self.bound, self.normalization)
                corr, iy, ix, peak, conf = self._surfaces(ref, mov, plan, correlate)
            elif ref.ndim == 2 and plan.method == "fft":  # one reference: its spectrum kept
                lay = form_layout(form, ref.shape, right.shape)
                size = fft_geometry(lay.left_shape, lay.right_shape, self.bound).size
                spectrum = self._of_reference(
                    "spectrum", ref, lambda: padded_spectra(ref.astype(np.float32), size))
                corr = xcorr_fft(ref, right, form, self.bound, dtype="float32",
                                 left_spectrum=spectrum)
            else:
                corr = correlate()
            if not gpu and self.normalization == "zncc":
                part = None if ref.ndim == 3 else self._of_reference(
                    "zncc", ref, lambda: zncc_left(ref, mov.shape, self.bound))
                corr = zncc(corr, ref, mov, self.bound, left_part=part)
        upsampled = self.subpixel == "upsample"
        method = "none" if upsampled else self.subpixel
        if gpu:
            shifts = refined_shifts(corr, iy, ix, origin, method)
        else:
            shifts, peak, conf, iy, ix = find_shifts(corr, origin, method, return_index=True)
        border = on_border(iy, ix, origin, self.bound)
        if upsampled:  # (registration/_upsampled.py: which images, which correlation)
            r, m = raw if self.circular and raw is not None else (ref, mov)
            shifts = refine_upsampled(r, m, shifts, self.upsample,
                                      "phase" if self.normalization == "phase" else None,
                                      "circular" if self.circular else "linear")
        return shifts, peak, conf, border

    @staticmethod
    def memory_plan(opts, src, xp, chunk_frames, budget, device_free=None):
        """Frames per chunk, and the plan to start from (a :class:`Bands` plan for frames
        whose whole-frame correlation does not fit, else None), of a run of ``opts`` on
        ``xp``'s device: one frame of ``src`` checked up front against ``budget`` (bytes) and
        the free memory of the device (``device_free``, else asked now) and the host
        (:func:`xcorr_app.streaming.plan_memory`: an :class:`InputError` saying what helps when
        it does not fit)."""
        if device_free is None:
            device_free = backend.device_free_bytes(xp)
        mp = plan_memory(src.frame_shape, src.dtype.itemsize, max_shift=opts.max_shift,
                         normalization=opts.normalization, verify=opts.verify,
                         device="cpu" if xp is np else "gpu", budget=budget,
                         limit=chunk_frames, device_free=device_free,
                         host_free=backend.host_available_bytes())
        return mp.chunk_frames, None if mp.band_rows is None else Bands(mp.band_rows)

    @classmethod
    def of(cls, opts, xp, frame_shape, plan=None):
        """The measurer of a run's :class:`~xcorr_app.alignment._options.AlignOptions`."""
        mask = NAN_MASK if opts.masks_nan else opts.mask_image
        if opts.mask_image is not None:  # (the prefilter decided: its reach from the left-out
            # pixels)
            mask = measured_mask(mask, filter_reach(opts.prefilter, opts.features))
        return cls(xp, frame_shape, opts.max_shift, opts.normalization, opts.subpixel,
                   opts.upsample_factor, plan, opts.tune, opts.boundary, mask)


#: the plan a run with a ``mask`` records: every surface the masked ZNCC (by FFT)
MASKED_PLAN = "masked zncc (fft)"


def pass_preparer(opts, xp, frame_shape):
    """``opts.preparer``, and with a ``mask`` the left-out pixels of every frame first set to
    its mean over the used ones (:func:`~._mask.fill_masked`): what the prefilter would spread
    of a bright artefact into the used pixels is gone (the reference is prepared so too)."""
    prepare = opts.preparer(xp, frame_shape)
    if opts.masks_nan:  # (each frame's own mask: its finite pixels, kept with the chunk)
        reach = filter_reach(opts.prefilter, opts.features)

        def prepare_finite(frames):
            used = xp.isfinite(xp.asarray(frames))
            p = prepare(fill_masked(frames, used, xp))
            p.mask = measured_masks(used, reach, xp)
            return p
        return prepare_finite
    if opts.mask_image is None:
        return prepare
    mask = xp.asarray(opts.mask_image)
    return lambda frames: prepare(fill_masked(frames, mask, xp))


def frames_per_chunk(run, src, xp, budget):
    """Frames per chunk of a range measured apart (another GPU, a Dask worker): one frame of
    ``src`` checked against ``budget`` and the device's free memory; frames whose correlation
    needs bands of rows are measured in one process only."""
    chunk, bands = Measurer.memory_plan(run, src, xp, run.chunk_frames or DEFAULT_CHUNK,
                                        budget)
    if bands is not None:
        h, w = src.frame_shape
        raise InputError(f"frames of {h}x{w} need a search in bands of rows (their whole-frame "
                         "correlation does not fit the memory of a worker), which runs shared "
                         "out do not do; run on one device, or give the workers more memory")
    return chunk


def _constant(image) -> str:
    """Why a reference that prepared to a constant cannot be measured against: it is constant,
    or (float64 pixels) it varies by less than float32, in which frames are measured, tells
    apart at its values."""
    a = backend.to_numpy(image)
    finite = a[np.isfinite(a)]
    if a.dtype == np.float64 and finite.size and finite.min() != finite.max():
        return (f"the reference image varies by only {finite.max() - finite.min():.3g} about "
                f"{float(np.mean(finite)):.6g}: below the resolution of float32, in which "
                "frames are measured; subtract the offset first (for example "
                "stack - stack.mean())")
    return "the reference image is constant; choose another reference"


def prepared_reference(opts, src, xp, chunk_frames, image=None):
    """The run's reference as prepared for correlation: ``(frame, raw)`` float32 arrays on
    ``xp``'s device (``None`` for ``reference="previous"``).  ``image``: the reference image
    when already computed (the mean of a distributed run)."""
    if opts.previous:
        return None
    if image is None:
        image = reference_frame(opts.reference, src, xp, chunk_frames, opts.channel)
    p = pass_preparer(opts, xp, src.frame_shape)(xp.asarray(image)[None])
    if not bool(p.finite[0]):
        raise InputError("the reference image has NaN or Inf pixels; replace them first"
                         + (" (with mask nan: it has no finite pixel)" if opts.masks_nan
                            else ", or give mask='nan'"))
    if bool(p.constant[0]):
        raise InputError(_constant(image))
    return (p.frames[0], p.raw[0]) + ((p.mask[0],) if opts.masks_nan else ())


def quiet_if_nonfinite(xp, finite):
    """On the CPU, a context that silences NumPy's floating-point warnings while a chunk with
    NaN or Inf frames is measured (those frames' results are replaced by NaN); a no-op
    otherwise, so that warnings on normal frames still show."""
    if xp is np and not bool(np.all(finite)):
        return np.errstate(invalid="ignore", over="ignore", divide="ignore")
    return contextlib.nullcontext()


def shared_plan(opts, xp, frame_shape, chunk_frames, reference, n_frames=None):
    """The correlation plan of a run whose chunks are shared out (GPUs, Dask workers), chosen
    once so that every worker computes the same way; ``None`` where :class:`Measurer` decides
    by a fixed rule anyway (CPU, phase).  ``n_frames``: the frames the run measures (its
    calls then let the planner weigh a cold FFT's first plans: unbounded too, over the half
    frame, so that a short first run on small frames takes a direct kernel)."""
    measure = Measurer.of(opts, xp, frame_shape)
    if xp is np or opts.normalization == "phase" or opts.mask is not None:
        return None
    n = max(1, int(chunk_frames))
    calls = None if n_frames is None else -(-int(n_frames) // n)
    if opts.previous:  # n_to_mn: one reference per frame
        ref = xp.zeros((n, *frame_shape), xp.float32)
        return measure.choose_plan(ref, xp.zeros((n, 1, *frame_shape), xp.float32), "n_to_mn",
                                   calls)
    return measure.choose_plan(reference[0], xp.zeros((n, *frame_shape), xp.float32),
                               "one_to_many", calls)


#: ``reference="previous"`` in a range of frames (other GPUs, Dask workers): how many frames
#: before the range are read to find the last measurable one
LOOK_BACK = 16


def previous_references(p, carry, xp):
    """The references of ``reference="previous"``: for each prepared frame of ``p``, the last
    measurable frame before it (not constant, no NaN or Inf), so that the drift across an
    unmeasurable frame is measured, not lost.

    ``carry``: ``(frame, raw)`` of the last measurable frame before ``p`` (``None`` at the
    start of the stack: frames with no measurable frame before them are their own reference,
    the start of the chain).  Computed on the device without waiting for it (the count of
    measurable frames, then ``searchsorted`` for the last one).  Returns ``(refs, refs_raw,
    carry)`` with the carry for the next chunk.

    >>> from xcorr_app.alignment.rigid._preprocess import prepare
    >>> f = np.stack([np.eye(4) * k for k in (1, 2, 0, 4)]).astype(np.uint16)  # 2: constant
    >>> refs, _, carry = previous_references(prepare(f, np), None, np)
    >>> [int(r.max() - r.min() > 0) and int(round(float(r[0, 0] - r[0, 1]))) for r in refs]
    [1, 1, 2, 2]
    """
    usable = p.finite & ~p.constant
    count = xp.cumsum(usable.astype(xp.int32))  # measurable frames up to each one
    before = xp.concatenate([xp.zeros(1, count.dtype), count[:-1]])
    last = xp.minimum(xp.searchsorted(count, xp.maximum(before, 1), side="left"), len(count) - 1)
    have = (before > 0)[:, None, None]
    fallback = (p.frames, p.raw) if carry is None else \
        tuple(xp.broadcast_to(c, p.frames.shape) for c in carry)
    refs = xp.where(have, p.frames[last], fallback[0])
    refs_raw = xp.where(have, p.raw[last], fallback[1])
    total = count[-1]
    k = xp.minimum(xp.searchsorted(count, xp.maximum(total, 1), side="left"), len(count) - 1)
    old = (p.frames[-1], p.raw[-1]) if carry is None else carry
    new = tuple(xp.where(total > 0, a[k], b) for a, b in zip((p.frames, p.raw), old))
    return refs, refs_raw, new


def measure_frames(opts, src, xp, chunk_frames, reference, *, plan=None, start=0, stop=None,
                   progress=None, on_chunk=None, prepared=None):
    """The per-frame result table (rows ``start:stop``, columns :data:`COLUMNS`) and the plan.

    The chunk loop of a measuring pass (:class:`ChunkPass`): frames are streamed from ``src``
    in chunks of ``chunk_frames``, prepared, measured against ``reference`` (from
    :func:`prepared_reference`; with ``reference="previous"`` each frame against the last
    measurable frame before it (not constant, no NaN or Inf: :func:`previous_references`),
    looked for up to :data:`LOOK_BACK` frames before ``start``), and checked against the FFT
    reference.  Each frame's row depends only on the frame, its reference and ``plan``, so
    ranges measured apart (other GPUs, Dask workers) give the rows one run gives.

    ``on_chunk(first, frames, block, filtered)``, if given, sees every chunk as read (on
    ``xp``'s device) with its result block (columns :data:`COLUMNS`, on the device, not waited
    for) and the frames as the correlation saw them (prefiltered, less their means, windowed;
    on the CPU only for a hook whose ``takes_filtered`` is true, else None): the template of a
    template pass is accumulated there
    (:class:`xcorr_app.alignment.refine._template.TemplateAccumulator`).

    ``prepared`` (a :class:`~._prepared.PreparedFrames`, GPU): each chunk's prepared frames
    are taken from there where an earlier pass kept them, else prepared and kept there.
    """
    stop = src.n_frames if stop is None else stop
    part = FrameRange(src, start, stop)
    # "previous": the frames before the range, read before the reader thread shares the source
    first = max(0, start - LOOK_BACK, getattr(src, "first_frame", 0))  # a block: what it holds
    before = np.array(backend.to_numpy(src.read(first, start))) \
        if opts.previous and start > first else None
    run = ChunkPass(opts, src.frame_shape, xp, reference, plan, before, on_chunk, progress,
                    part.n_frames)
    with DeviceChunks(part, chunk_frames, xp) as chunks:  # reading starts now
        if xp is np:
            run.on_cpu(chunks)
        else:
            run.on_gpu(chunks, prepared, pass_key(opts), start)
    return run.table, run.measure.plan


class ChunkPass:
    """One measuring pass over a range's chunks, step by step: each chunk's frames prepared
    (:meth:`prepare`), their references (:meth:`references`), their rows measured and
    checked (:meth:`rows`), handed to ``on_chunk``, and written into :attr:`table` as they
    come back (:meth:`finish`).  The CPU cuts every chunk into one slice per thread
    (:meth:`on_cpu`); the GPU queues each chunk on its stream and fetches its rows one chunk
    behind (:meth:`on_gpu`)."""

    def __init__(self, opts, frame_shape, xp, reference, plan, before, on_chunk, progress,
                 n_frames):
        self.opts, self.xp = opts, xp
        self.prepare = pass_preparer(opts, xp, frame_shape)
        self.measure = Measurer.of(opts, xp, frame_shape, plan)
        self.fft_kwargs = fft_reference(opts.normalization)[0]
        self.coarse = CPU_REFERENCE_COARSE if xp is np else None
        self.on_chunk, self.progress = on_chunk, progress
        self.table = np.full((n_frames, len(COLUMNS)), np.nan)
        self.ref = self.ref_fft = self.ref_raw = self.ref_mask = None
        self.spectrum = self.spectrum_made = None  # the FFT check's, made at first use
        self.last = None  # previous mode: (frame, raw frame, done event) before the chunk
        if reference is not None:
            self.ref, self.ref_raw = xp.asarray(reference[0]), xp.asarray(reference[1])
            # (mask "nan": the reference's own mask)
            self.ref_mask = xp.asarray(reference[2]) if len(reference) > 2 else None
            if opts.normalization == "phase":
                self.ref_fft = fft_of(xp).fft2(self.ref)
        elif before is not None:  # the last measurable of the frames before the range, if any
            p = self.prepare(xp.asarray(before))
            usable = backend.to_numpy(p.finite & ~p.constant)
            if usable.any():
                k = int(np.flatnonzero(usable)[-1])
                self.last = (p.frames[k], p.raw[k], None)
        if xp is not np:
            xp.cuda.Device().synchronize()  # the streams read these

    def reference_spectrum(self):
        """The half spectrum of the raw reference (``fft_shifts`` reads no more of a real
        reference's), made at the first chunk's check (after that chunk's correlation is
        queued: on a fresh machine its cuFFT plans take a while to make)."""
        xp = self.xp
        if self.spectrum is None:
            spectrum = fft_of(xp).rfft2(self.ref_raw)
            if self.fft_kwargs["periodic"]:
                spectrum = periodic_spectrum(self.ref_raw, spectrum)
            self.spectrum = spectrum
            if xp is not np:  # made on this chunk's stream; the other waits for it
                self.spectrum_made = xp.cuda.get_current_stream().record()
        elif xp is not np:
            xp.cuda.get_current_stream().wait_event(self.spectrum_made)
        return self.spectrum

    def rows(self, p, refs=None, refs_raw=None):
        """The result block of the prepared frames ``p`` against their references (``None``:
        the run's reference)."""
        xp, opts = self.xp, self.opts
        with quiet_if_nonfinite(xp, p.finite):
            if opts.previous:
                s, pk, cf, border = self.measure(refs, p.frames, raw=(refs_raw, p.raw))
            else:
                s, pk, cf, border = self.measure(self.ref, p.frames, self.ref_fft,
                                                 raw=(self.ref_raw, p.raw),
                                                 masks=(self.ref_mask, p.mask))
            fs = fi = None
            if opts.verify:
                fr = refs_raw if opts.previous else self.reference_spectrum()
                fs, _, fi = fft_shifts(fr, p.raw, upsample_factor=FFT_REFERENCE_UPSAMPLE,
                                       **self.fft_kwargs, coarse=self.coarse,
                                       reference_is_fft=not opts.previous, return_integer=True)
        pieces = (s, pk, cf, p.constant, p.finite, fs, fi, border)
        if xp is not np:  # one kernel of ours (CuPy's copies compiled on a first run)
            block = pack_rows(pieces, len(p.raw))
            if block is not None:
                return block
        fs, fi = (xp.full((len(p.raw), 2), xp.nan) if a is None else a for a in (fs, fi))
        return xp.concatenate([s, pk[:, None], cf[:, None], p.constant[:, None],
                               p.finite[:, None], fs, fi, border[:, None]],
                              axis=1).astype(xp.float64)

    def finish(self, first, block, event=None):
        """A chunk's rows into the table (a :class:`HostCopy` waits for that copy alone)."""
        if isinstance(block, HostCopy):
            block = block.result()
        else:
            if event is not None:
                event.synchronize()
            block = backend.to_numpy(block)
        self.table[first:first + len(block)] = block
        if self.progress is not None:
            self.progress(len(block))

    def on_cpu(self, chunks):
        """Every chunk cut into one slice per thread (``previous``: its references found over
        the whole chunk, then cut like the frames)."""
        if self.opts.verify and self.ref_raw is not None:
            self.reference_spectrum()  # once, before the threads share it
        keep_freed_memory()
        threads = cpu_threads()
        with one_blas_thread(), \
                concurrent.futures.ThreadPoolExecutor(threads, "xcorr-cpu") as pool:
            for first, frames in chunks:
                slices = frame_slices(len(frames), threads)
                preps = list(pool.map(lambda ab: self.prepare(frames[ab[0]:ab[1]]), slices))
                refs = [(None, None)] * len(preps)
                if self.opts.previous:
                    whole = Prepared(*(np.concatenate([getattr(q, f) for q in preps])
                                       for f in ("frames", "raw", "constant", "finite")))
                    r, rr, carry = previous_references(whole, self.last and self.last[:2], np)
                    refs = [(r[a:b], rr[a:b]) for a, b in slices]
                    self.last = (*carry, None)
                blocks = pool.map(lambda k: self.rows(preps[k], *refs[k]), range(len(preps)))
                block = np.concatenate(list(blocks))
                if self.on_chunk is not None:
                    filtered = None  # (the threads' slices joined only for a hook that asks)
                    if getattr(self.on_chunk, "takes_filtered", False):
                        filtered = preps[0].frames if len(preps) == 1 else \
                            np.concatenate([q.frames for q in preps])
                    self.on_chunk(first, frames, block, filtered)
                self.finish(first, block)

    def on_gpu(self, chunks, prepared, key, start):
        """Each chunk queued on its stream; its rows copied to the host behind its work and
        fetched one chunk behind (a copy on the stream would wait for the next chunk's work
        too, and the GPU would idle while the host queues the one after)."""
        xp = self.xp
        inflight = collections.deque()  # (start, rows on their way, done event)
        for first, frames in chunks:
            p = None if prepared is None else prepared.take(key, start + first, len(frames))
            if p is None:
                p = self.prepare(frames)  # NaN or Inf pixels: flagged, shifts NaN (_result)
                if prepared is not None:
                    prepared.keep(key, start + first, p)
            refs = refs_raw = None
            kept = ()
            if self.opts.previous:
                last = self.last
                if last is not None:
                    if last[2] is not None:
                        xp.cuda.get_current_stream().wait_event(last[2])
                    kept = last  # (alive until this chunk's rows are back)
                refs, refs_raw, carry = previous_references(
                    p, None if last is None else last[:2], xp)
            block = self.rows(p, refs, refs_raw)
            if self.on_chunk is not None:  # on this stream, before the event that frees it
                self.on_chunk(first, frames, block, p.frames)
            event = xp.cuda.get_current_stream().record()
            if self.opts.previous:
                self.last = (*carry, event)
            inflight.append((first, HostCopy(block), event, kept))
            while len(inflight) > 1:
                self.finish(*inflight.popleft()[:3])
        while inflight:
            self.finish(*inflight.popleft()[:3])
