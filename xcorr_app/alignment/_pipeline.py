"""Align a stack of frames to a reference: the main job of xcorr.

The stack is streamed: a reader thread decodes chunks ahead into a ring of (pinned) host
buffers (:mod:`xcorr_app.io._prefetch`); on the GPU each chunk is copied to the device and processed
on one of two CUDA streams, so the copy of one chunk, the kernels of another and the reading of
a third overlap; the per-frame results come back to the host in one small copy per chunk, one
chunk behind.  Memory held at once is bounded (:mod:`xcorr_app.alignment._memory_budget`), so stacks larger
than the GPU's and the host's memory work, and the chunking never changes a result.

Per chunk: convert to float32, check, subtract each frame's mean, prefilter, window
(:mod:`xcorr_app.alignment._preprocess`); correlate every frame with the reference in one call (form
``one_to_many``, or ``n_to_mn`` for ``reference="previous"``) with the plan chosen once per run;
normalize (ZNCC from summed-area tables, or phase correlation by FFT); find the peak and refine
it to subpixel precision for the whole batch; and measure the same frames with the FFT reference
(:func:`xcorr_app.registration._fft_register.fft_shifts`) to report agreement.

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> rng = np.random.default_rng(0)
>>> base = ndi.gaussian_filter(rng.random((64, 80)), 3)
>>> stack = np.stack([base, np.roll(base, (2, -3), axis=(0, 1))])
>>> res = align(stack, max_shift=8, device="cpu")
>>> np.round(res.shifts).tolist()
[[0.0, 0.0], [-2.0, 3.0]]
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
from pathlib import Path

import numpy as np

from .. import backend
from ._result import AlignResult, interpolate_flagged
from ..correlate._api import choose_method, cross_correlate
from ..errors import InputError, XcorrError
from ..registration._fft_register import fft_shifts, periodic_spectrum, phase_surface, refine_upsampled
from ..correlate._forms import form_layout
from ..registration._surfaces import GpuSurfaces
from ..registration._surfaces import surface_peaks
from ._memory_budget import READ_AHEAD, chunk_frames_for, parse_memory
from ..registration._normalize import zncc
from ..registration._peaks import find_shifts, refined_shifts
from ..correlate._plans import Plan
from ..io._prefetch import ChunkPrefetcher
from ._preprocess import parse_prefilter, prepare
from ._preprocess import window as make_window
from ._references import is_previous, reference_frame
from ..correlate._shifts import normalize_max_shift, output_shape, shift_origin
from ..io._reader import FrameRange, open_source

SUBPIXEL = ("gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none")
NORMALIZATIONS = ("zncc", "none", "phase")
#: upsampling of the FFT reference measurement (resolution 1/20 px)
FFT_REFERENCE_UPSAMPLE = 20


def fft_reference(normalization):
    """How the FFT reference measures the frames of a run of ``normalization``: keyword
    arguments of :func:`~xcorr_app.registration._fft_register.fft_shifts`, and a description.

    Phase runs are checked by phase correlation.  Others by plain cross-correlation of the
    frames' periodic components (Moisan's decomposition): phase correlation is fooled by photon
    noise over smooth content (the cell sample: up to 1.2 px off, 3 of 12 integer peaks wrong)
    and plain correlation of the raw frames by their FFT seams (pulled up to 0.96 px towards
    zero, 40 of 816 generated and sample frames off by a whole pixel); the periodic components'
    plain correlation found every one of those integer peaks (2026-11-22).
    """
    if normalization == "phase":
        return {"normalization": "phase", "periodic": False}, \
            f"phase correlation, upsample {FFT_REFERENCE_UPSAMPLE}"
    return {"normalization": None, "periodic": True}, \
        f"cross-correlation of the periodic components, upsample {FFT_REFERENCE_UPSAMPLE}"


#: columns of the per-frame result block copied back from the device once per chunk
_COLUMNS = ("dy", "dx", "peak", "confidence", "constant", "finite", "fft_dy", "fft_dx",
            "fft_iy", "fft_ix")
_COL = {name: i for i, name in enumerate(_COLUMNS)}


def search_range(frame_shape, max_shift):
    """The bound actually searched: ``max_shift``, or half the frame (what the FFT can tell
    apart) when there is none."""
    if max_shift is not None:
        return max_shift
    return (frame_shape[0] // 2, frame_shape[1] // 2)


def _check_choices(normalization, subpixel):
    if subpixel not in SUBPIXEL:
        raise XcorrError(f"unknown subpixel method {subpixel!r}; use one of {', '.join(SUBPIXEL)}")
    if normalization not in NORMALIZATIONS:
        raise XcorrError(f"unknown normalization {normalization!r}; use one of "
                         f"{', '.join(NORMALIZATIONS)}")


def _prefilter_for(prefilter, normalization, features=None):
    """The prefilter function; none for phase correlation, which whitens the spectrum (a
    linear filter cancels out, and smoothing only makes the whitening amplify the edges).
    ``features`` (a filter bank, :func:`xcorr_app.filters._banks.feature_prefilter`) replaces it: the
    frames are registered on the bank's local energy."""
    if features:
        from ..filters._banks import feature_prefilter

        return feature_prefilter(features)
    fn = parse_prefilter(prefilter)
    return None if normalization == "phase" else fn


class _Measurer:
    """Correlation, normalization, peak and subpixel refinement of whole batches, with the plan
    chosen once (on the first batch) so that every chunk of a run is computed the same way."""

    def __init__(self, xp, frame_shape, max_shift, normalization, subpixel, upsample, plan=None):
        _check_choices(normalization, subpixel)
        self.xp, self.dev = xp, "cpu" if xp is np else "gpu"
        self.bound = search_range(frame_shape, max_shift)
        self.unbounded = max_shift is None
        self.normalization, self.subpixel, self.upsample = normalization, subpixel, upsample
        self.plan = "phase" if normalization == "phase" else plan
        self._surfaces = None  # GPU: the run's GpuSurfaces

    def _plan(self, ref, mov, form):
        if self.plan is None:
            if self.unbounded:
                self.plan = Plan("fft")  # without a bound: FFT
            elif self.dev == "gpu":
                self.plan = choose_method(form_layout(form, ref.shape, mov.shape), self.bound,
                                          "gpu", ref, mov)
            else:  # a per-frame rule: the same for any chunk size
                left = ref[:1] if form == "n_to_mn" else ref
                self.plan = choose_method(form_layout(form, left.shape, mov[:1].shape),
                                          self.bound, "cpu")
        return self.plan

    def __call__(self, ref, mov, ref_fft=None):
        """Shifts, peaks, confidences of ``mov`` (N, H, W) against ``ref`` ((H, W) or one per
        frame); ``ref_fft`` (``fft2(ref)``) is needed for phase normalization."""
        xp = self.xp
        gpu = self.dev == "gpu"
        if self.normalization == "phase":
            if ref_fft is None:
                ref_fft = xp.fft.fft2(ref.astype(xp.float32))
            corr, origin = phase_surface(ref_fft, mov, self.bound)
            if gpu:
                corr, iy, ix, peak, conf = surface_peaks(corr, normalize=False)
        else:
            form = "n_to_mn" if ref.ndim == 3 else "one_to_many"
            right = mov[:, None] if form == "n_to_mn" else mov
            plan = self._plan(ref, right, form)

            def correlate():
                c = cross_correlate(ref, right, form, self.bound, method=plan, device=self.dev)
                return c[:, 0] if form == "n_to_mn" else c

            origin = shift_origin(ref.shape, mov.shape, self.bound)
            if gpu:
                if self._surfaces is None:
                    self._surfaces = GpuSurfaces(mov.shape[1:], self.bound, self.normalization)
                corr, iy, ix, peak, conf = self._surfaces(ref, mov, plan, correlate)
            else:
                corr = correlate()
                if self.normalization == "zncc":
                    corr = zncc(corr, ref, mov, self.bound)
        upsampled = self.subpixel == "upsample"
        method = "none" if upsampled else self.subpixel
        if gpu:
            shifts = refined_shifts(corr, iy, ix, origin, method)
        else:
            shifts, peak, conf = find_shifts(corr, origin, method)
        if upsampled:
            shifts = refine_upsampled(ref, mov, shifts, self.upsample)
        return shifts, peak, conf


def estimate_shifts(reference, frames, *, max_shift=None, normalization="zncc",
                    subpixel="gaussian", upsample=20, prefilter=None, window="none",
                    device="auto"):
    """Shifts of a batch of frames already in memory against one reference (or one each).

    Parameters
    ----------
    reference : (H, W) or (N, H, W) ndarray
        One reference for all frames, or one per frame.
    frames : (N, H, W) ndarray
    max_shift : int or (int, int), optional
        Search only ``-max_shift..max_shift``; default: up to half the frame (FFT correlation).
    normalization : {"zncc", "none", "phase"}
        ``zncc``: zero-normalized per shift over the overlap; ``none``: mean-subtracted sums;
        ``phase``: phase correlation (circular, by FFT).
    subpixel : {"gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none"}
    upsample : int
        Factor of the upsampled-DFT refinement (``subpixel="upsample"``).
    prefilter : {None, "gaussian:S", "dog:S1,S2"}
        Filter both images first (noise or background suppression).
    window : {"none", "hann", "tukey", "tukey:ALPHA"}
        Apodize both images first.

    Returns
    -------
    shifts (N, 2), peak (N,), confidence (N,) : arrays of the input's module

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import ndimage as ndi
    >>> ref = ndi.gaussian_filter(np.random.default_rng(2).random((40, 48)), 2)
    >>> moved = np.roll(ref, (1, 2), axis=(0, 1))[None]
    >>> shifts, peak, conf = estimate_shifts(ref, moved, max_shift=4, device="cpu")
    >>> np.round(shifts).tolist()
    [[-1.0, -2.0]]
    """
    xp = backend.xp_for(backend.compute_device(reference, frames, device=device))
    max_shift = normalize_max_shift(max_shift)
    _check_choices(normalization, subpixel)
    pre = _prefilter_for(prefilter, normalization)
    mov = xp.asarray(frames)
    mov = mov[None] if mov.ndim == 2 else mov
    ref = xp.asarray(reference)
    if mov.ndim != 3 or ref.ndim not in (2, 3) or ref.shape[-2:] != mov.shape[1:] \
            or (ref.ndim == 3 and len(ref) != len(mov)):
        raise InputError(f"frames must be (N, H, W) and the reference (H, W) or (N, H, W) of the "
                         f"same frame size; got {mov.shape} and {ref.shape}")
    win = make_window(window, mov.shape[1:], xp)
    p = prepare(mov, xp, pre, win)
    r = prepare(ref if ref.ndim == 3 else ref[None], xp, pre, win).frames
    measure = _Measurer(xp, mov.shape[1:], max_shift, normalization, subpixel, upsample)
    shifts, peak, conf = measure(r if ref.ndim == 3 else r[0], p.frames)
    return tuple(backend.like_input(a, reference, frames) for a in (shifts, peak, conf))


def _agree(shifts, fft_shifts_, fft_int, max_shift):
    """Integer peaks match (up to a half-pixel tie), or the FFT peak lies outside the bound.

    A tie: the true shift lies near ``x.5`` so the two integer peaks differ by one while the
    subpixel estimates are within half a pixel of each other.
    """
    main_int = np.round(shifts)
    diff = np.abs(main_int - fft_int)
    same = (diff == 0).all(axis=1)
    same |= (diff <= 1).all(axis=1) & (np.abs(shifts - fft_shifts_) < 0.5).all(axis=1)
    if max_shift is not None:
        same |= (np.abs(fft_int) > np.asarray(max_shift)).any(axis=1)
    return same


#: threads copying one chunk out of a memory-mapped file into its pinned buffer
COPY_THREADS = 2


class _DeviceChunks:
    """Iterate over ``(start, frames on xp's device)``; a reader thread starts reading at once
    (while the caller prepares), and :meth:`close` stops it.

    On the GPU the chunks alternate between two CUDA streams: each is copied from a pinned
    buffer and yielded inside its stream's context, so the consumer's kernels for it queue on
    that stream while the next chunk is read and copied.
    """

    def __init__(self, src, chunk_frames, xp):
        self.src, self.chunk_frames, self.xp = src, chunk_frames, xp
        stack = getattr(src, "stack", None)
        self._direct = stack is not None and (xp is np or backend.is_cupy_array(stack))
        self._prefetch = None
        if not self._direct:
            gpu = xp is not np
            self._prefetch = ChunkPrefetcher(src, chunk_frames, READ_AHEAD, pinned=gpu,
                                             copy_threads=COPY_THREADS if gpu else 1).start()
        self._gen = self._chunks()

    def _chunks(self):
        xp, n, step = self.xp, self.src.n_frames, self.chunk_frames
        if self._direct:
            for start in range(0, n, step):
                chunk = self.src.stack[start:start + step]
                yield start, (np.asarray(chunk) if xp is np else chunk)
            return
        chunks = self._prefetch
        if xp is np:
            for start, host, slot in chunks:
                yield start, host  # the consumer converts it before asking for the next
                chunks.release(slot)
            return
        streams = [xp.cuda.Stream(non_blocking=True) for _ in range(2)]
        for k, (start, host, slot) in enumerate(chunks):
            stream = streams[k % 2]
            with stream:
                frames = xp.empty(host.shape, host.dtype)
                frames.set(host, stream=stream)
                chunks.release(slot, stream.record())
                yield start, frames

    def __iter__(self):
        return self._gen

    def close(self):
        self._gen.close()
        if self._prefetch is not None:
            self._prefetch.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()



def _device_free_bytes(xp):
    if xp is np:
        return None
    free, _ = xp.cuda.runtime.memGetInfo()
    pool = xp.get_default_memory_pool()
    return free + pool.free_bytes()


@dataclasses.dataclass(frozen=True)
class AlignOptions:
    """The settings of one alignment run, checked; what every worker of a run shares (plain
    values, so they travel to other processes)."""

    reference: object = "first"
    max_shift: tuple | None = None
    normalization: str = "zncc"
    subpixel: str = "gaussian"
    upsample: int = 20
    prefilter: str | None = "gaussian:1"
    window: str | None = "none"
    verify: bool = True
    min_confidence: float | None = None
    interpolate_low: bool = False
    channel: int | None = None
    features: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "max_shift", normalize_max_shift(self.max_shift))
        _check_choices(self.normalization, self.subpixel)
        parse_prefilter(self.prefilter)  # a bad spec fails before anything is read
        if self.features:
            from ..filters._banks import bank_weights

            bank_weights(self.features, 1)
        if self.min_confidence is not None and not self.min_confidence >= 0:
            raise XcorrError(f"min_confidence must be >= 0, got {self.min_confidence}")

    @property
    def previous(self) -> bool:
        return is_previous(self.reference)

    def measurer(self, xp, frame_shape, plan=None):
        return _Measurer(xp, frame_shape, self.max_shift, self.normalization, self.subpixel,
                         self.upsample, plan)

    def surface_shape(self, frame_shape):
        return output_shape(frame_shape, frame_shape, search_range(frame_shape, self.max_shift))

    def preparer(self, xp, frame_shape):
        """``prepare`` with this run's prefilter and window, for frames on ``xp``'s device."""
        pre = _prefilter_for(self.prefilter, self.normalization, self.features)
        win = make_window(self.window, frame_shape, xp)
        return lambda frames: prepare(frames, xp, pre, win)


def check_frame_shape(frame_shape):
    h, w = frame_shape
    if h * w < 2:
        raise InputError(f"frames of {h}x{w} pixel cannot be registered: at least 2 pixels are "
                         "needed")


def prepared_reference(opts, src, xp, chunk_frames, image=None):
    """The run's reference as prepared for correlation: ``(frame, raw)`` float32 arrays on
    ``xp``'s device (``None`` for ``reference="previous"``).  ``image``: the reference image
    when already computed (the mean of a distributed run)."""
    if opts.previous:
        return None
    if image is None:
        image = reference_frame(opts.reference, src, xp, chunk_frames, opts.channel)
    p = opts.preparer(xp, src.frame_shape)(xp.asarray(image)[None])
    if not bool(p.finite[0]):
        raise InputError("the reference image has NaN or Inf pixels; replace them first")
    if bool(p.constant[0]):
        raise InputError("the reference image is constant; choose another --reference")
    return p.frames[0], p.raw[0]


def shared_plan(opts, xp, frame_shape, chunk_frames, reference):
    """The correlation plan of a run whose chunks are shared out (GPUs, Dask workers), chosen
    once so that every worker computes the same way; ``None`` where :class:`_Measurer` decides
    by a fixed rule anyway (CPU, FFT, phase)."""
    measure = opts.measurer(xp, frame_shape)
    if xp is np or measure.unbounded or opts.normalization == "phase":
        return None
    n = max(1, int(chunk_frames))
    if opts.previous:  # n_to_mn: one reference per frame
        ref = xp.zeros((n, *frame_shape), xp.float32)
        return measure._plan(ref, xp.zeros((n, 1, *frame_shape), xp.float32), "n_to_mn")
    return measure._plan(reference[0], xp.zeros((n, *frame_shape), xp.float32), "one_to_many")


def measure_frames(opts, src, xp, chunk_frames, reference, *, plan=None, start=0, stop=None,
                   progress=None):
    """The per-frame result table (rows ``start:stop``, columns :data:`_COLUMNS`) and the plan.

    The chunk loop of :func:`align`: frames are streamed from ``src`` in chunks of
    ``chunk_frames``, prepared, measured against ``reference`` (from
    :func:`prepared_reference`, or a future of ``(reference, plan)`` awaited once reading has
    started; with ``reference="previous"`` frame ``start - 1`` is read as the first frame's
    reference), and checked against the FFT reference.  Each frame's row depends
    only on the frame, its reference and ``plan``, so ranges measured apart (other GPUs, Dask
    workers) give the rows one run gives.
    """
    stop = src.n_frames if stop is None else stop
    part = FrameRange(src, start, stop)
    # "previous": the frame before the range, read before the reader thread shares the source
    before = np.array(backend.to_numpy(src.read(start - 1, start))) \
        if opts.previous and start > 0 else None
    with _DeviceChunks(part, chunk_frames, xp) as chunks:  # reading starts now
        if isinstance(reference, concurrent.futures.Future):  # being prepared elsewhere
            reference, plan = reference.result()
        return _measure_chunks(opts, src, part, chunks, xp, reference, plan, start, progress,
                               before)


def _measure_chunks(opts, src, part, chunks, xp, reference, plan, start, progress, before):
    prep = opts.preparer(xp, src.frame_shape)
    measure = opts.measurer(xp, src.frame_shape, plan)
    fft_kwargs = fft_reference(opts.normalization)[0]
    ref = ref_fft = ref_raw_fft = None
    last = None  # previous mode: (frame, raw frame, done event) before the chunk
    if reference is not None:
        ref, ref_raw = xp.asarray(reference[0]), xp.asarray(reference[1])
        ref_fft = xp.fft.fft2(ref) if opts.normalization == "phase" else None
        ref_raw_fft = None
        if opts.verify:
            ref_raw_fft = xp.fft.fft2(ref_raw)
            if fft_kwargs["periodic"]:
                ref_raw_fft = periodic_spectrum(ref_raw, ref_raw_fft)
    elif before is not None:
        p = prep(xp.asarray(before))
        last = (p.frames[0], p.raw[0], None)
    if xp is not np:
        xp.cuda.Device().synchronize()  # the streams below read these
    table = np.full((part.n_frames, len(_COLUMNS)), np.nan)
    inflight = collections.deque()  # (start, device block, done event, arrays to keep)

    def check_finite(first, finite):
        bad = np.flatnonzero(finite == 0)
        if len(bad):
            i = first + int(bad[0])
            raise InputError(f"frame {start + i} ({part.source_name(i)}) has NaN or Inf pixels; "
                             "replace them (for example with the frame median) before aligning")

    def finish(first, block, event, keep):
        if event is not None:
            event.synchronize()
        block = backend.to_numpy(block)
        check_finite(first, block[:, _COL["finite"]])
        table[first:first + len(block)] = block
        if progress is not None:
            progress(len(block))

    for first, frames in chunks:
        p = prep(frames)
        if xp is np:  # on the GPU the flags come back with the results
            check_finite(first, p.finite)
        keep = ()
        if opts.previous:
            if last is None:
                refs, refs_raw = p.frames[:1], p.raw[:1]
            else:
                if last[2] is not None:
                    xp.cuda.get_current_stream().wait_event(last[2])
                refs, refs_raw = last[0][None], last[1][None]
                keep = last
            refs = xp.concatenate([refs, p.frames[:-1]])
            refs_raw = xp.concatenate([refs_raw, p.raw[:-1]])
            s, pk, cf = measure(refs, p.frames)
        else:
            s, pk, cf = measure(ref, p.frames, ref_fft)
        if opts.verify:
            fr = refs_raw if opts.previous else ref_raw_fft
            fs, _, fi = fft_shifts(fr, p.raw, upsample_factor=FFT_REFERENCE_UPSAMPLE,
                                   **fft_kwargs,
                                   reference_is_fft=not opts.previous, return_integer=True)
        else:
            fs = fi = xp.full((len(p.raw), 2), xp.nan)
        block = xp.concatenate([s, pk[:, None], cf[:, None], p.constant[:, None],
                                p.finite[:, None], fs, fi], axis=1).astype(xp.float64)
        event = None if xp is np else xp.cuda.get_current_stream().record()
        if opts.previous:
            last = (p.frames[-1], p.raw[-1], event)
        inflight.append((first, block, event, keep))
        while len(inflight) > 1:  # results come back one chunk behind
            finish(*inflight.popleft())
    while inflight:
        finish(*inflight.popleft())
    return table, measure.plan


def result_from_table(opts, table, sources, settings, plan, source=None):
    """The :class:`AlignResult` of a run's full table: agreement, accumulation of ``previous``
    steps, constant frames, low-confidence flags and interpolation."""
    c = _COL
    n = len(table)
    shifts = table[:, c["dy"]:c["dx"] + 1]
    peak, conf = table[:, c["peak"]], table[:, c["confidence"]]
    const = table[:, c["constant"]] == 1
    fft_sh, fft_int = table[:, c["fft_dy"]:c["fft_dx"] + 1], table[:, c["fft_iy"]:c["fft_ix"] + 1]
    agree = _agree(shifts, fft_sh, fft_int, opts.max_shift) if opts.verify else np.zeros(n, bool)
    if opts.previous:
        shifts, fft_sh = _accumulate(shifts, const), _accumulate(fft_sh, const)
    shifts[const] = np.nan
    conf[const] = 0.0
    agree[const] = False
    low = np.zeros(n, bool) if opts.min_confidence is None else \
        (conf < opts.min_confidence) & ~const
    if opts.interpolate_low:
        shifts = interpolate_flagged(shifts, low)
    ref = opts.reference
    settings = {"reference": str(ref) if not hasattr(ref, "shape") else "array",
                "max_shift": list(opts.max_shift) if opts.max_shift else None,
                "normalization": opts.normalization, "prefilter": opts.prefilter or "none",
                "window": opts.window or "none", "subpixel": opts.subpixel,
                "upsample": opts.upsample, "verify": opts.verify,
                "fft_reference": fft_reference(opts.normalization)[1] if opts.verify else None,
                "min_confidence": opts.min_confidence, "interpolate_low": opts.interpolate_low,
                "channel": opts.channel, "features": opts.features, **settings}
    return AlignResult(shifts, peak, conf, fft_sh, agree, sources, settings, low,
                       str(plan) if plan is not None else "", source)


def align(stack_or_path, reference="first", *, max_shift=None, normalization="zncc",
          subpixel="gaussian", upsample=20, prefilter="gaussian:1", window="none", verify=True,
          min_confidence=None, interpolate_low=False, channel=None, chunk_frames=64,
          max_memory=None, device="auto", gpus=None, features=None, progress=None):
    """Measure the shift of every frame of a stack against a reference.

    Parameters
    ----------
    stack_or_path : ndarray (N, H, W), str or Path
        A stack in memory (NumPy or CuPy) or a TIFF file / folder of TIFFs (streamed).
    reference : {"first", "mean", "mean:N", "previous"}, int, path or ndarray
        ``mean`` averages all frames (``mean:N`` the first N) in one streaming pass first;
        ``previous`` correlates each frame with the one before and accumulates the shifts; an
        int is a frame index; a path is an image file.
    max_shift : int or (int, int), optional
        Bound of the search (the planner picks the warp-shuffle kernels or the FFT); default:
        up to half the frame, by FFT.
    normalization : {"zncc", "none", "phase"}
        ``zncc`` (default): zero-normalized cross-correlation per shift over the overlap, from
        summed-area tables; ``none``: mean-subtracted correlation sums; ``phase``: phase
        correlation (circular, by FFT).
    subpixel : {"gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none"}
        ``gaussian`` (default) and ``parabolic`` fit the 3x3 neighbourhood of the peak in 2-D,
        the ``...3`` variants fit 3 points along each axis, ``upsample`` refines by the
        upsampled DFT (Guizar-Sicairos) to ``1 / upsample`` px.
    upsample : int
        Upsampling factor for ``subpixel="upsample"``.
    prefilter : {"gaussian:1", "gaussian:S", "dog:S1,S2", "none"}
        Filter applied to every frame and the reference before correlation (on the GPU: the
        reuse convolution kernels); not used by phase correlation.
    window : {"none", "hann", "tukey", "tukey:ALPHA"}
        Apodization of every frame and the reference before correlation.
    verify : bool
        Also measure every frame with the FFT reference and report agreement: circular
        cross-correlation of the frames' periodic components (no prefilter), refined to
        1/20 px by the upsampled DFT; phase correlation when ``normalization="phase"``
        (:func:`fft_reference`).
    min_confidence : float, optional
        Frames whose confidence (peak over second peak) is below it are flagged.
    interpolate_low : bool
        Replace the shifts of flagged frames by interpolation between their neighbours.
    channel : int, optional
        Channel of multi-channel files.
    chunk_frames : int
        Most frames processed per step.
    max_memory : int or str, optional
        Cap on the memory held at once (host read-ahead buffers plus device working set), e.g.
        ``"2G"``; without it the chunk is capped at half the free GPU memory.  The result does
        not depend on it.
    device : {"auto", "gpu", "cpu"}
    features : str, optional
        Register on the local energy of a filter bank (``"dog:1,2,4"``, ``"gabor:2,6"``,
        :mod:`xcorr_app.filters._banks`) instead of the prefiltered frames.
    gpus : sequence of int or str, optional
        Share the frames out over these GPUs of this host (``"0,1"``, ``"all"``): one reader
        and one contiguous range of frames per GPU (:mod:`xcorr_app.distributed._multi_gpu`); the shifts
        are those of a run on one GPU.
    progress : callable(int), optional
        Called with the number of frames finished after each chunk.

    Returns
    -------
    AlignResult
    """
    opts = AlignOptions(reference, max_shift, normalization, subpixel, upsample, prefilter,
                        window, verify, min_confidence, interpolate_low, channel, features)
    budget = None if max_memory is None else parse_memory(max_memory)
    if chunk_frames < 1:
        raise XcorrError(f"chunk_frames must be >= 1, got {chunk_frames}")
    if gpus is not None:
        from ..distributed._multi_gpu import align_on_gpus

        return align_on_gpus(opts, stack_or_path, gpus, chunk_frames=chunk_frames,
                             budget=budget, progress=progress)
    dev = backend.compute_device(*([stack_or_path] if not isinstance(stack_or_path, (str, Path))
                                   else []), device=device)
    xp = backend.xp_for(dev)
    with open_source(stack_or_path, channel) as src:
        check_frame_shape(src.frame_shape)
        chunk = chunk_frames_for(src.frame_shape, src.dtype.itemsize,
                                 opts.surface_shape(src.frame_shape), budget=budget,
                                 limit=chunk_frames, device_free=_device_free_bytes(xp))
        ref = prepared_reference(opts, src, xp, chunk)
        table, plan = measure_frames(opts, src, xp, chunk, ref, progress=progress)
        sources = [src.source_name(i) for i in range(src.n_frames)]
        notes = list(src.notes)
    settings = {"search_range": list(search_range(src.frame_shape, opts.max_shift)),
                "device": dev, "chunk_frames": chunk, "max_memory": budget, "notes": notes}
    return result_from_table(opts, table, sources, settings, plan, stack_or_path)


def _accumulate(steps, const):
    """Frame-to-frame steps -> shifts against the first frame; a constant frame (or one after
    a constant frame) contributes no step."""
    const_step = const | np.roll(const, 1)
    const_step[0] = const[0]
    steps = np.where(const_step[:, None] | np.isnan(steps), 0.0, steps)
    steps[0] = 0.0
    return np.cumsum(steps, axis=0)


def common_area(shifts, frame_shape):
    """``(y0, y1, x0, x1)``: the region every shifted frame covers (NaN shifts ignored)."""
    h, w = frame_shape
    s = np.asarray(shifts, dtype=np.float64)
    s = s[~np.isnan(s).any(axis=1)]
    if not len(s):
        return 0, h, 0, w
    y0 = max(0, int(np.ceil(s[:, 0].max() - 1e-9)))
    y1 = min(h, int(np.floor(h - 1 + s[:, 0].min() + 1e-9)) + 1)
    x0 = max(0, int(np.ceil(s[:, 1].max() - 1e-9)))
    x1 = min(w, int(np.floor(w - 1 + s[:, 1].min() + 1e-9)) + 1)
    if y1 <= y0 or x1 <= x0:
        raise XcorrError("the shifted frames have no area in common; pad with --fill instead "
                         "of --crop")
    return y0, y1, x0, x1


def apply_shifts(stack_or_path, shifts, *, channel=None, fill=0.0, resample="bilinear",
                 crop=False, chunk_frames=64, device="auto", gpus=None):
    """Yield ``(start, aligned_chunk)`` (float32 NumPy) for every chunk of the stack.

    Parameters
    ----------
    stack_or_path : ndarray, str or Path
    shifts : (N, 2) array
        ``(dy, dx)`` per frame (NaN: left unshifted).
    fill : float
        Value of pixels shifted in from outside the frame.
    resample : {"bilinear", "fourier"}
        Bilinear interpolation, or a Fourier phase ramp (exact for band-limited frames).
    crop : bool
        Keep only the area every shifted frame covers (:func:`common_area`).
    gpus : sequence of int or str, optional
        Share the chunks out over these GPUs (:func:`xcorr_app.distributed._multi_gpu.map_chunks`).
    """
    from ._warp import shift_frames

    with open_source(stack_or_path, channel) as src:
        shifts = np.asarray(shifts, dtype=np.float64)
        if shifts.shape != (src.n_frames, 2):
            raise XcorrError(f"shifts of shape {shifts.shape} do not match {src.n_frames} frames")
        y0, y1, x0, x1 = common_area(shifts, src.frame_shape) if crop else (0, None, 0, None)

        def shifted(start, chunk):
            xp = backend.array_module_of(chunk)
            frames = chunk.astype(xp.float32)
            out = shift_frames(frames, xp.asarray(shifts[start:start + len(frames)]), fill=fill,
                               method=resample)
            return backend.to_numpy(out[:, y0:y1, x0:x1])

        if gpus is not None:
            from ..distributed._multi_gpu import map_chunks

            yield from map_chunks(lambda: open_source(stack_or_path, channel), gpus,
                                  chunk_frames, shifted)
            return
        xp = backend.xp_for(backend.resolve_device(device))
        with _DeviceChunks(src, chunk_frames, xp) as chunks:
            for start, chunk in chunks:
                yield start, shifted(start, xp.asarray(chunk))
