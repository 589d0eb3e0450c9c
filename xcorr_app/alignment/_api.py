"""The entry points: :func:`align` (a stack, streamed) and :func:`estimate_shifts` (frames in
memory).

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

import dataclasses
from pathlib import Path

from .. import backend
from .._cuda.loader import shipped_kernels_usable
from ..correlate._shifts import normalize_max_shift
from ..errors import InputError
from ..io import open_source
from ..streaming import DEFAULT_CHUNK, StashedSource, auto_chunk_frames, keep_on_gpu, parse_memory
from ._aligned_out import check_aligned_out, fill_out
from ._options import (AlignOptions, as_stack, auto_notes, check_choices, check_frame_shape,
                       check_pixel_type, prefilter_for, resolve_auto, search_range)
from ._pipeline import (Measurer, measure_frames, prepared_reference, quiet_if_nonfinite,
                        shared_plan)
from ._device_choice import auto_device, small_job_note
from ._prebuild import EXIT_GRACE, RUN_STAGES, kernels_built, prebuild
from ._prepared import PreparedFrames
from ._preprocess import prepare
from ._preprocess import window as make_window
from ._result import result_from_table
from ._template import passes_table

#: ``reference=None`` (the default) on one device; the frames shared out (``gpus``) always
#: take ``first`` (``refined`` is not available there).  Issue 23 made ``refined`` the default
#: only if it met the accuracy targets; it does not on the low-light stacks (0.19 px RMS,
#: 0.15 with ``refined:2``, against 0.31 for ``first``), it is worse on bleaching stacks and
#: costs twice the time (docs/how-align-works.md), so the default stays the single pass; noisy
#: stacks get the template and a Lucas-Kanade fit from ``lucas_kanade="auto"`` (0.14 px there)
DEFAULT_REFERENCE = "first"

def estimate_shifts(reference, frames, *, max_shift=None, normalization="zncc",
                    subpixel="gaussian", upsample=20, prefilter=None, window="none",
                    device="auto"):
    """Shifts of a batch of frames already in memory against one reference (or one each).

    Parameters
    ----------
    reference : (H, W) or (N, H, W) ndarray
        One reference for all frames, or one per frame.  A reference that is constant or has
        NaN or Inf pixels is an :class:`~xcorr_app.errors.InputError` (nothing can be measured
        against it).
    frames : (N, H, W) ndarray
        Frames of at least 4x4 pixels
        (:func:`~xcorr_app.alignment._options.check_frame_shape` says why), of a pixel type
        the TIFF reader reads (uint8, uint16, int16, float16, float32, float64; others are an
        :class:`~xcorr_app.errors.InputError`, as for files).  A frame that is constant or has
        NaN or Inf pixels cannot be measured: its shift and peak are NaN and its confidence 0.
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
        A frame whose peak lies on the border of the searched window (``|shift| ==
        max_shift``, or half the frame: the drift may exceed it) gets confidence 0, the mark of
        no distinct peak, as in :func:`align`; its shift is the best inside the window.  :func:`align` reports such frames, and
        unmeasurable ones, in its result's ``low_confidence``, ``border`` and ``notes``.

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
    check_choices(normalization, subpixel)
    pre = prefilter_for(prefilter, normalization)
    mov = xp.asarray(frames)
    mov = mov[None] if mov.ndim == 2 else mov
    ref = xp.asarray(reference)
    if mov.ndim != 3 or ref.ndim not in (2, 3) or ref.shape[-2:] != mov.shape[1:] \
            or (ref.ndim == 3 and len(ref) != len(mov)):
        raise InputError(f"frames must be (N, H, W) and the reference (H, W) or (N, H, W) of the "
                         f"same frame size; got {mov.shape} and {ref.shape}")
    if 0 in mov.shape:
        raise InputError(f"no frames to measure: frames of shape {mov.shape}")
    check_pixel_type(mov.dtype, "frames")
    check_pixel_type(ref.dtype, "the reference")
    check_frame_shape(mov.shape[1:])
    win = make_window(window, mov.shape[1:], xp)
    p = prepare(mov, xp, pre, win)
    rp = prepare(ref if ref.ndim == 3 else ref[None], xp, pre, win)
    bad = backend.to_numpy(~rp.finite | rp.constant)
    if bad.any():
        which = "" if ref.ndim == 2 else f" {int(bad.argmax())}"
        what = "NaN or Inf pixels" if not bool(rp.finite[int(bad.argmax())]) else "no contrast"
        raise InputError(f"the reference{which} is constant or has NaN or Inf pixels "
                         f"({what}): nothing can be measured against it")
    r = rp.frames
    measure = Measurer(xp, mov.shape[1:], max_shift, normalization, subpixel, upsample)
    with quiet_if_nonfinite(xp, p.finite):
        shifts, peak, conf, border = measure(r if ref.ndim == 3 else r[0], p.frames)
    unusable = p.constant | ~p.finite
    shifts = xp.where(unusable[:, None], xp.nan, shifts)
    peak = xp.where(unusable, xp.nan, peak)
    conf = xp.where(unusable | border, 0.0, conf)
    return tuple(backend.like_input(a, reference, frames) for a in (shifts, peak, conf))

def align(stack_or_path, reference=None, *, max_shift=None, normalization="zncc",
          subpixel="gaussian", upsample=20, prefilter="auto", window="none", verify=True,
          min_confidence=None, interpolate_low=False, channel=None, chunk_frames=None,
          max_memory=None, device="auto", gpus=None, features=None, progress=None, tune=False,
          boundary="auto", lucas_kanade="auto", patches=None, patch_overlap=None,
          max_deviation=4, patch_template_passes=0, out=None):
    """Measure the shift of every frame of a stack against a reference.

    Parameters
    ----------
    stack_or_path : ndarray (N, H, W), sequence of (H, W) ndarrays, str or Path
        A stack in memory (NumPy or CuPy; a list or tuple of equal-shape 2-D arrays is stacked)
        or a TIFF file / folder of TIFFs (streamed).  Frames of at least 4x4 pixels, of the
        pixel types the TIFF reader reads (uint8, uint16, int16, float16, float32, float64;
        int64, uint32, bool and others are an :class:`~xcorr_app.errors.InputError`, as for
        files).  A frame that is constant or has NaN or Inf pixels gets NaN shifts and is
        flagged ``low_confidence`` (a note says so); a reference that is constant or has NaN or
        Inf pixels is an :class:`~xcorr_app.errors.InputError`.
    reference : {None, "refined", "refined:ITER", "first", "mean", "mean:N", "previous"}, int, \
path or ndarray
        ``None``: :data:`DEFAULT_REFERENCE` (``first``).  ``first``: one pass against the
        first frame.  ``refined`` aligns to the first frame, averages the aligned frames (those
        with a distinct peak) into a template and measures every frame again against it
        (``refined:2``: two template passes); shifts stay relative to frame 0
        (:mod:`xcorr_app.alignment._template`): best on noisy (low-light) stacks, at one
        measuring pass more per template pass; not available with ``gpus``.  ``mean`` averages
        all frames (``mean:N`` the first N) in one streaming pass first; ``previous``
        correlates each frame with the one before and accumulates the shifts; an int is a
        frame index; a path is an image file.
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
    prefilter : {"auto", "gaussian:S", "dog:S1,S2", "none"}
        Filter applied to every frame and the reference before correlation (on the GPU: the
        reuse convolution kernels); not used by phase correlation.  ``auto`` (default):
        ``dog:1,4`` (band-pass) for stacks whose brightness changes by more than 10% (bleaching
        over a static background), else ``gaussian:1``
        (:func:`~xcorr_app.alignment._preprocess.choose_prefilter`); the result's
        ``settings["prefilter"]`` and ``notes`` say what was chosen.
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
    chunk_frames : int, optional
        Most frames processed per step; default
        (:func:`~xcorr_app.streaming.auto_chunk_frames`) 64, and on the GPU as many small
        frames as 256 MiB of float32 pixels hold (256 frames of 512x512), at most 1024.
    max_memory : int or str, optional
        Cap on the memory held at once (host read-ahead buffers plus the working set), e.g.
        ``"2G"``; without it the chunk is capped at half the free GPU memory (on the CPU: half
        the available memory, and :data:`~xcorr_app.streaming._memory_budget.CPU_AUTO_BUDGET`).
        One frame is checked against it and the free memory of the device before anything is
        read (:func:`xcorr_app.streaming.plan_memory`): a frame that does not fit is an
        :class:`~xcorr_app.errors.InputError` saying what it needs and what helps, and a
        bounded search (``max_shift``) whose whole frame does not fit is measured in bands of
        rows (:func:`xcorr_app.registration._bands.banded_surface`).  The result does not
        depend on it (bands: up to float32 rounding).
    device : {"auto", "gpu", "cpu"}
    features : str, optional
        Register on the local energy of a filter bank (``"dog:1,2,4"``, ``"gabor:2,6"``,
        :mod:`xcorr_app.filters._banks`) instead of the prefiltered frames.
    gpus : sequence of int or str, optional
        Share the frames out over these GPUs of this host (``"0,1"``, ``"all"``): one reader
        and one contiguous range of frames per GPU
        (:func:`xcorr_app.alignment._gpus.align_on_gpus`); the shifts are those of a run on one
        GPU.
    progress : callable(int), optional
        Called with the number of frames finished after each chunk.
    tune : bool, optional
        On the GPU, measure the likeliest kernels for this problem (at most about 2 s, the
        choice cached for later runs) instead of choosing from the planner's cost model
        (``XCORR_TUNE=1`` does the same; ``xcorr tune`` ahead of time).
    boundary : {"auto", "linear", "circular"}
        ``linear``: frames are views of a larger scene (correlation over the overlap);
        ``circular``: frames wrap around (circular shifts, periodic test data), the peak is
        refined on the circular correlation (upsampled DFT); ``auto`` (default): decided after
        the first pass (:func:`~xcorr_app.alignment._template.periodic_frames` reads a few
        frames again); periodic stacks are then measured once more, circularly.  ``auto`` is
        ``linear`` with ``reference="previous"`` and with ``gpus``.
    lucas_kanade : {"auto", "on", "off"}
        ``on``: after a template pass (as ``reference="refined"``), every frame's shift is
        refined by a Lucas-Kanade (Gauss-Newton) fit against the template without the frame
        itself, smoothed (:mod:`xcorr_app.alignment._refine_lk`): best at low light; needs
        ``reference`` ``first`` or ``refined``; not with ``gpus``.  ``auto`` (default): on where
        a few frames spread over the stack are noisy (their noise allows a precision worse
        than 0.05 px), else off; ``settings["lucas_kanade"]`` and a note say so.
    patches : int, (int, int) or "GYxGX", optional
        Piecewise-rigid registration after the rigid pass: the frame's area common to all
        rigidly shifted frames cut into ``gy x gx`` overlapping patches, each measured against
        the same patch of the reference within ``max_deviation`` px of the frame's rigid shift
        (ZNCC, the same subpixel fit and confidence; low-confidence patches take the median of
        their neighbours), the result's ``motion_field`` ``(N, gy, gx, 2)`` (rules:
        :mod:`xcorr_app.alignment._patches`, :mod:`xcorr_app.alignment._patch_pass`; the field at
        every pixel and the warp:
        :mod:`xcorr_app.alignment._motion_field`).  With ``gpus`` the patch pass shares out the
        rigid pass's ranges of frames (:func:`~xcorr_app.alignment._gpus.field_on_gpus`).  Not
        available with ``reference="previous"``.  ``shifts`` stay the rigid shifts.
    patch_overlap : int or (int, int), optional
        Pixels of overlap between neighbouring patches; default a quarter of the grid's
        stride (NoRMCorre's ratio).
    max_deviation : int
        The largest shift of a patch from its frame's rigid shift, in pixels (default 4).
    patch_template_passes : {0, 1, 2}
        With ``patches``: after a patch pass, the frames warped by their motion fields are
        averaged into a new template (accumulated as the pass streams) and the patches are
        measured again against it, this many times (as NoRMCorre refines its template;
        :func:`~xcorr_app.alignment._patch_pass.measure_field`).  Default 0: on the benchmark
        stack the field's error is not the template's noise (docs/how-align-works.md).
    out : ndarray or callable(start, chunk), optional
        The aligned stack, made by the run: a C-contiguous float32 ``(N, H, W)`` array (NumPy,
        or CuPy on a GPU run) filled with the frames :meth:`AlignResult.apply` gives with its
        defaults (bilinear, fill 0, not cropped), or a callable given every float32 NumPy
        chunk ``(start, frames)`` in frame order.  With ``patches`` the last patch pass warps
        each chunk while it is on the device; on a GPU the stack is kept there between the
        passes where it takes at most a quarter of the free memory (without ``max_memory``),
        so it is read and uploaded once (:mod:`xcorr_app.alignment._aligned_out`).

    Returns
    -------
    AlignResult
        Frames whose peak lies on the border of the searched window (``--max-shift``, or half
        the frame) are flagged ``low_confidence`` and ``border``; the result's ``notes`` and
        ``summary()["notes"]`` say how many.
    """
    stack_or_path = as_stack(stack_or_path)
    if hasattr(reference, "dtype") and hasattr(reference, "shape"):
        check_pixel_type(reference.dtype, "the reference")
    if reference is None:
        reference = DEFAULT_REFERENCE if gpus is None else "first"
    opts = AlignOptions(reference, max_shift, normalization, subpixel, upsample, prefilter,
                        window, verify, min_confidence, interpolate_low, channel, features, tune,
                        boundary, lucas_kanade)
    budget = None if max_memory is None else parse_memory(max_memory)
    if chunk_frames is not None and chunk_frames < 1:
        raise InputError(f"chunk_frames must be >= 1, got {chunk_frames}")
    if patches is not None and opts.previous:
        raise InputError("patches are measured against one reference: reference 'previous' "
                         "is not available with patches")
    if gpus is not None:
        from ._gpus import align_on_gpus

        if opts.refined:
            raise InputError(f"reference {reference!r} is not available with several GPUs "
                             "(gpus / --gpus): use reference first (or mean)")
        if opts.lucas_kanade == "on":
            raise InputError("lucas_kanade on is not available with several GPUs (gpus / "
                             "--gpus)")
        opts = dataclasses.replace(opts, lucas_kanade="off")  # prefilter auto: align_on_gpus
        with open_source(stack_or_path, channel) as src:
            check_aligned_out(out, (src.n_frames, *src.frame_shape), "gpu")
            if patches is not None:
                _check_grid(src.frame_shape, patches, patch_overlap, max_deviation,
                            patch_template_passes)
        res = align_on_gpus(opts.measuring(), stack_or_path, gpus,
                            chunk_frames=chunk_frames or DEFAULT_CHUNK, budget=budget,
                            progress=progress)
        if patches is not None:
            from ._gpus import field_on_gpus

            res.set_field(field_on_gpus(opts, stack_or_path, res.shifts, gpus,
                                        res.settings["chunk_frames"], patches, patch_overlap,
                                        max_deviation, patch_template_passes))
            res.settings["patches"]["template_passes"] = int(patch_template_passes)
        if out is not None:
            fill_out(res, out, stack_or_path, "gpu", gpus)
        return res
    on_gpu = backend.is_cupy_array(stack_or_path)
    with open_source(stack_or_path, channel) as src:
        check_frame_shape(src.frame_shape)
        # device auto and a small job: the CPU, without importing CuPy to look at the GPU
        choice_note = small_job_note(src.n_frames, src.frame_shape) \
            if device == "auto" and not on_gpu else None
        dev = "cpu" if choice_note is not None else backend.compute_device(
            *([stack_or_path] if not isinstance(stack_or_path, (str, Path)) else []),
            device=device)
        if patches is not None:
            _check_grid(src.frame_shape, patches, patch_overlap, max_deviation,
                        patch_template_passes)
        opts, why = resolve_auto(opts, src)  # prefilter "auto": a few frames decide
        choices = auto_notes(opts, why)
        if device == "auto" and dev == "gpu" and not on_gpu:
            dev, choice_note = auto_device(src.n_frames, src.frame_shape,
                                           kernels_built(opts, src.frame_shape, src.dtype))
        xp = backend.xp_for(dev)
        if chunk_frames is None:
            chunk_frames = auto_chunk_frames(src.frame_shape, dev)
        chunk, plan = Measurer.memory_plan(opts, src, xp, chunk_frames, budget)  # before reading
        check_aligned_out(out, (src.n_frames, *src.frame_shape), dev)
        # the passes certain to read the stack again (patches, out, templates) read it from
        # the GPU where it fits (streaming/_stash.py); the ones "auto" may add (boundary,
        # lucas_kanade) read it as before: most runs need no second pass, and the device
        # array would stay in CuPy's pool after the run
        again = patches is not None or out is not None or opts.refined \
            or opts.lucas_kanade == "on"
        src = StashedSource(src, keep_on_gpu(src, xp) if again and budget is None
                            and dev == "gpu" and not on_gpu else None)
        # the prepared chunks kept for the later passes (_prepared.py), where they are certain
        prepared = PreparedFrames.for_run(opts, src, xp) \
            if budget is None and (patches is not None or opts.refined
                                   or opts.lucas_kanade == "on") else None
        if dev == "gpu" and plan is None:  # the plan from the shapes (the cost model), and the
            # later stages' kernels built by helper processes while this one starts
            passes = 1 + (opts.refined or 0)
            plan = shared_plan(opts, xp, src.frame_shape, chunk,
                               (xp.zeros(src.frame_shape, xp.float32),),
                               n_frames=passes * src.n_frames)
            cc = xp.cuda.Device().compute_capability
            # with xcorr's kernels shipped built, only the aligned stack's warp (CuPy
            # operations) is left to build ahead, for this run: a run that ends before
            # (--no-aligned) does not wait for it (it waited 2.6-2.9 s at exit, H100)
            shipped = shipped_kernels_usable((int(cc[:-1]), int(cc[-1])))
            prebuild(opts, src.frame_shape, src.dtype, plan,
                     stages=("apply",) if shipped else RUN_STAGES,
                     device=xp.cuda.Device().id, exit_grace=0.0 if shipped else EXIT_GRACE)
        if opts.refined or (opts.boundary == "auto" and not opts.previous) \
                or (opts.lucas_kanade != "off" and opts.lk_possible):  # (_template)
            table, plan, opts, more = passes_table(opts, src, xp, chunk, plan=plan,
                                                   progress=progress, prepared=prepared)
            choices += more
        else:  # lucas_kanade auto where it cannot run: off
            opts = dataclasses.replace(opts.measuring(), lucas_kanade="off")
            ref = prepared_reference(opts, src, xp, chunk)
            table, plan = measure_frames(opts, src, xp, chunk, ref, plan=plan,
                                         progress=progress, prepared=prepared)
        sources = src.source_names()
        notes = list(src.notes)
        kept = src.stack if src.stash is not None and src.stash.complete else stack_or_path
    settings = {"search_range": list(search_range(src.frame_shape, opts.max_shift)),
                "device": dev, "chunk_frames": chunk, "max_memory": budget, "notes": notes,
                "prefilter_auto": why, "device_note": choice_note,
                "lucas_kanade": opts.lucas_kanade}
    res = result_from_table(opts, table, sources, settings, plan, stack_or_path)
    res.notes[:0] = choices  # what "auto" chose
    if patches is not None:
        from ._patch_pass import measure_field

        # on the run's device: the same numbers as the CPU's (tests/alignment/test_patches.py)
        res.set_field(measure_field(opts, kept, res.shifts, xp, chunk, patches,
                                    patch_overlap, max_deviation, patch_template_passes,
                                    out=out, prepared=prepared))
        res.settings["patches"]["template_passes"] = int(patch_template_passes)
    elif out is not None:
        fill_out(res, out, kept, dev)
    if prepared is not None:  # (their memory back to CuPy's pool)
        prepared.release()
    return res


def _check_grid(frame_shape, patches, patch_overlap, max_deviation, template_passes):
    """The patch options, and a grid that cannot fit the frame, fail before any pass."""
    from ._patch_pass import check_template_passes, patch_grid

    check_template_passes(template_passes)
    patch_grid(frame_shape, [[0.0, 0.0]], patches, patch_overlap, max_deviation)
