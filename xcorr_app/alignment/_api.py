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

from .. import backend
from ..correlate import normalize_max_shift
from ..errors import InputError
from ..streaming import check_bound
from ._executors import InProcess, OnGpus
from ._options import (DEFAULT_UPSAMPLE, AlignOptions, check_pixel_type, check_upsample,
                       in_native_order)
from .._run_options import options_signature
from .rigid import check_choices, check_frame_shape, prefilter_for
from .rigid import Measurer, quiet_if_nonfinite
from .rigid import prepare
from .rigid import window as make_window
from ._run import run_alignment

def estimate_shifts(reference, frames, *, max_shift=None, normalization="zncc",
                    subpixel="auto", upsample=DEFAULT_UPSAMPLE, prefilter=None,
                    window="none", device="auto"):
    """Shifts of a batch of frames already in memory against one reference (or one each).

    Parameters
    ----------
    reference : (H, W) or (N, H, W) ndarray
        One reference for all frames, or one per frame.  A reference that is constant or has
        NaN or Inf pixels is an :class:`~xcorr_app.errors.InputError` (nothing can be measured
        against it).
    frames : (N, H, W) ndarray
        Frames of at least 4x4 pixels
        (:func:`~xcorr_app.alignment.rigid.check_frame_shape` says why), of a pixel type
        the TIFF reader reads (uint8, uint16, int16, float16, float32, float64; others are an
        :class:`~xcorr_app.errors.InputError`, as for files).  A frame that is constant or has
        NaN or Inf pixels cannot be measured: its shift and peak are NaN and its confidence 0.
    max_shift : int or (int, int), optional
        Search only ``-max_shift..max_shift``; default: up to half the frame (FFT correlation).
    normalization : {"zncc", "none", "phase"}
        ``zncc``: zero-normalized per shift over the overlap; ``none``: mean-subtracted sums;
        ``phase``: phase correlation (circular, by FFT).
    subpixel : {"auto", "gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none"}
        As for :func:`align` (``auto``: ``upsample`` for phase correlation, else ``gaussian``).
    upsample : int
        Factor of the upsampled-DFT refinement (``subpixel="upsample"``).
    prefilter : {None, "gaussian:S", "dog:S1,S2"}
        Filter both images first (noise or background suppression).
    window : {"none", "hann", "tukey", "tukey:ALPHA"}
        Apodize both images first.
    device : {"auto", "gpu", "cpu"}
        Where the shifts are measured: ``auto`` the arrays' device (CuPy: its GPU; NumPy: a
        usable GPU, the results copied back, else the CPU).

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
    # (big-endian pixels, a FITS file's: in this machine's order before they go anywhere, the
    # device's choice too)
    if hasattr(frames, "dtype"):
        frames = in_native_order(frames, "frames")
    if hasattr(reference, "dtype"):
        reference = in_native_order(reference, "the reference")
    xp = backend.xp_for(backend.compute_device(reference, frames, device=device))
    max_shift = normalize_max_shift(max_shift)
    upsample = DEFAULT_UPSAMPLE if upsample is None else check_upsample(upsample)
    subpixel = check_choices(normalization, subpixel)
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
    check_bound(mov.shape[1:], max_shift)  # (before its surface is sized)
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

def align(stack_or_path, reference=None, *, out=None, progress=None, options=None, **keywords):
    """Measure the shift of every frame of a stack against a reference.

    Every option and its default lives in :class:`~xcorr_app.alignment._options.AlignOptions`
    (the signature shows them); the CLI, ``gpus`` and :func:`xcorr_app.dask.align` build the
    same object, and the run is the one pipeline of :func:`~._run.run_alignment`, so every path
    gives the same shifts.

    Parameters
    ----------
    stack_or_path : ndarray (N, H, W), sequence of (H, W) ndarrays, str or Path
        A stack in memory (NumPy or CuPy; a list or tuple of equal-shape 2-D arrays is stacked)
        or a file or folder streamed chunk by chunk: TIFF (a file or a folder; OME-TIFF and
        ImageJ axes), Zarr / OME-Zarr, HDF5 (``FILE.h5:/dataset``), NWB, CZI, with
        ``?z=K`` for one plane of a volume (docs/cli.md: the formats and their extras).
        Frames of at least 4x4 pixels, of the
        pixel types the TIFF reader reads (uint8, uint16, int16, float16, float32, float64;
        int64, uint32, bool and others are an :class:`~xcorr_app.errors.InputError`, as for
        files).  A frame that is constant or has NaN or Inf pixels gets NaN shifts and is
        flagged ``low_confidence`` (a note says so); a reference that is constant or has NaN or
        Inf pixels is an :class:`~xcorr_app.errors.InputError`.
    reference : {None, "refined", "refined:ITER", "first", "mean", "mean:N", "previous"}, int, \
path or ndarray
        ``None`` (default): ``first``, one pass against the
        first frame.  ``refined`` aligns to the first frame, averages the aligned frames (those
        with a distinct peak) into a template and measures every frame again against it
        (``refined:2``: two template passes); shifts stay relative to frame 0
        (:mod:`xcorr_app.alignment.refine._template`): best on noisy (low-light) stacks, at one
        measuring pass more per template pass.  ``mean`` averages
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
    subpixel : {"auto", "gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none"}
        ``auto`` (default): ``upsample`` for phase correlation (whose peak is too sharp for a
        3x3 fit), else ``gaussian``; ``gaussian`` and ``parabolic`` fit the 3x3 neighbourhood
        of the peak in 2-D, the ``...3`` variants intersect 3-point fits along the rows and
        columns, ``upsample`` refines by the upsampled DFT (Guizar-Sicairos) to ``1 /
        upsample`` px.
    upsample : int, optional
        Upsampling factor (1 to 100) of the upsampled DFT: ``subpixel="upsample"`` and the
        circular refinement (``boundary``); default 20.
    prefilter : {"auto", "gaussian:S", "dog:S1,S2", "none"}
        Filter applied to every frame and the reference before correlation (on the GPU: the
        reuse convolution kernels); not used by phase correlation.  ``auto`` (default):
        ``dog:1,4`` (band-pass) for stacks whose brightness changes by more than 10% (bleaching
        over a static background), else ``gaussian:1``
        (:func:`~xcorr_app.alignment.rigid._preprocess.choose_prefilter`); the result's
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
    axes : str, optional
        The file's axes, one letter each in its order, from ``T Z C S Y X`` (``"TYX"``,
        ``"TZYX"``, ``"TCYX"``, ``"TZCYX"``), instead of those its reader infers (ImageJ and
        OME metadata, Zarr ``dimension_names``, HDF5 labels, NWB's order): an NWB series stored
        as (frames, rows, cols) is ``"TYX"``, a Zarr or HDF5 array without axes ``"TZYX"`` or
        ``"TCYX"``; read as ``PATH?axes=...``, which a path may also say.  A file whose axes
        hold T and Z (both longer than 1) is volumes: :class:`~xcorr_app.io.HoldsVolumes`
        (``align_volumes``, or one plane with ``?z=K``).  A path only.
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
        (:class:`~xcorr_app.alignment._executors.OnGpus`); the shifts are those of a run on one
        GPU.
    progress : callable(int), optional
        Called with the number of frames finished after each chunk.
    options : AlignOptions, optional
        The run's options built before (``AlignOptions(max_shift=8, patches=(4, 4))``, reused
        over many stacks), instead of the keywords: checked once, when built.
    tune : bool, optional
        On the GPU, measure the likeliest kernels for this problem (at most about 2 s, the
        choice cached for later runs) instead of choosing from the planner's cost model
        (``XCORR_TUNE=1`` does the same; ``xcorr tune`` ahead of time).
    boundary : {"auto", "linear", "circular"}
        ``linear``: frames are views of a larger scene (correlation over the overlap);
        ``circular``: frames wrap around (circular shifts, periodic test data), the peak is
        refined on the circular correlation (upsampled DFT); ``auto`` (default): decided after
        the first pass (:func:`~xcorr_app.alignment.refine._template.periodic_frames` reads a few
        frames again); periodic stacks are then measured once more, circularly, and with
        ``reference`` ``first`` or ``refined`` twice more against a template of the frames moved
        circularly (``circular`` makes the same passes).  ``auto`` is ``linear`` with
        ``reference="previous"``.
    lucas_kanade : {"auto", "on", "off", "reference"}
        ``on``: after a template pass (as ``reference="refined"``), every frame's shift is
        refined by a Lucas-Kanade (Gauss-Newton) fit against the template without the frame
        itself, smoothed (:mod:`xcorr_app.alignment.refine._refine_lk`): best at low light; needs
        ``reference`` ``first`` or ``refined``.  ``auto`` (default): on where
        a few frames spread over the stack are noisy (their noise allows a precision worse
        than 0.05 px), else ``reference``; ``settings["lucas_kanade"]`` says which (a note where
        ``on`` was chosen); off for frames that wrap around (``boundary`` circular, or detected
        so), where the sampled frames' brightness changes by more than 30%, and after a pattern
        fixed on the sensor was removed; ``reference`` not chosen with ``patches`` (the patch
        pass measures each patch again).  ``reference``: each frame's shift refined in the pass
        itself by one Gauss-Newton step of ``frame = a * R(x + s) + b`` against the reference's
        cubic B-spline ``R``, the frames and the reference prefiltered as the run prefilters
        (:mod:`xcorr_app.alignment.refine._refine_reference`): the steady stacks of the
        accuracy bench about 40% nearer the truth, at about 5% more time on the GPU and 15% on
        the CPU; needs
        one reference image (not ``previous`` or ``refined``), no ``window`` nor ``features``,
        not phase or ``boundary="circular"``.
    quality : bool
        The quality report (default True): each frame's correlation with the template before
        and after alignment, its residual shift and flags (``AlignResult.quality``,
        ``quality.png``); False: none, a little faster.
    static : {"auto", "on", "off"}
        Patterns fixed on the sensor (hot pixels, stray light, dust, column offsets) that pull
        shifts to zero: ``auto`` (default) looks for one in a few frames and removes it from
        the frames it measures (the aligned stack: as read); ``on`` always, ``off`` never;
        ``settings["static"]`` says what was found (:mod:`xcorr_app.alignment.rigid._static`).
    despike : {"auto", "on", "off"}
        Bright specks of one frame alone (cosmic rays, a particle's track, a single hot or
        saturated pixel) that pull shifts, taken out of the frames measured: ``auto``
        (default) looks for them in a few frames, ``on`` always, ``off`` never (the aligned
        stack: as read; :mod:`xcorr_app.alignment.rigid._despike`).  In one process (not
        with ``gpus`` or Dask).
    bidi : {"off", "auto"} or float
        A bidirectional (resonant) scan's x offset of every other line, removed before
        measuring and in the aligned stack: ``auto`` estimated from a few frames (removed
        where at least 0.1 px), a number that offset in pixels; default ``off``.
    model : {"translation", "rigid-body"}
        ``translation`` (default): a shift per frame.  ``rigid-body``: a rotation about the
        frame's centre and a shift per frame, for stacks that rotate: after the translation
        passes every frame is read once more, a 3x3 grid of its patches measured against the
        template and the rotation and shift fitted and refined
        (:mod:`xcorr_app.alignment._rotation`); the result's ``shifts`` are the shifts applied
        before the rotation and its ``rotation_deg`` the angles (degrees, counter-clockwise as
        shown), which ``apply``, ``out`` and ``save`` apply in one warp
        (:func:`~xcorr_app.alignment.warp.rigid_body_field`).  Not with ``patches``,
        ``reference="previous"``, ``bidi``, ``mask``, ``gpus`` or Dask.  Either model's quality
        report flags ``rotated`` the frames it leaves rotated by enough that a corner may be
        over 0.5 px off (their rotation moves it over 0.3 px, as estimated).
    patches : int, (int, int) or "GYxGX", optional
        Piecewise-rigid registration after the rigid pass: the frame's area common to all
        rigidly shifted frames cut into ``gy x gx`` overlapping patches, each measured against
        the same patch of the reference within ``max_deviation`` px of the frame's rigid shift
        (ZNCC, the same subpixel fit and confidence; low-confidence patches take the median of
        their neighbours), the result's ``motion_field`` ``(N, gy, gx, 2)`` (rules:
        :mod:`xcorr_app.alignment.piecewise._patches`, :mod:`xcorr_app.alignment.piecewise._patch_pass`; the field at
        every pixel and the warp:
        :mod:`xcorr_app.alignment.piecewise._motion_field`).  With ``gpus`` the patch pass shares out the
        rigid pass's ranges of frames.  Not
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
        :func:`~xcorr_app.alignment.piecewise._patch_pass.measure_field`).  Default 0: on the benchmark
        stack the field's error is not the template's noise (docs/how-align-works.md).
    mask : (H, W) ndarray, str or Path, optional
        The pixels the measurement uses, one image for the whole stack: True (or nonzero) is
        used, False (0) left out of every frame and of the reference (a static artefact, a
        saturated bar, dead columns); an image file (TIFF, ``.npy``) is read once.  ``"nan"``:
        each frame's own NaN or infinite pixels are left out (and the reference's), a mask a
        frame whose reach from the left-out pixels is a square (not with
        ``reference="previous"``).  Every
        frame's shift is then the peak of Padfield's masked ZNCC over the used pixels
        (:func:`~xcorr_app.registration._masked.masked_zncc_surfaces`, on the GPU too), zero-
        normalized over the overlap of used pixels at each shift, within ``max_shift``,
        refined by ``subpixel``'s fit; the left-out pixels are set to each frame's mean over
        the used ones before the prefilter, and the pixels within the prefilter's reach of
        them (twice its largest sigma) are not measured
        (:func:`~xcorr_app.alignment.rigid._mask.measured_mask`).  ``boundary`` is linear and
        ``lucas_kanade`` off; no FFT check (``verify``) nor quality report is made (a note
        says so).  Not available with another ``normalization``, ``subpixel="upsample"``,
        ``upsample``, ``reference="refined"``, ``patches``, ``gpus`` or Dask.  The aligned
        stack is every frame shifted as usual.  ``settings["options"]["mask"]``: the path,
        ``"array"`` or ``"nan"``.
    out : ndarray or callable(start, chunk), optional
        The aligned stack, made by the run: a C-contiguous float32 ``(N, H, W)`` array (NumPy,
        or CuPy on a GPU run) filled with the frames :meth:`AlignResult.apply` gives with its
        defaults (bilinear, fill 0, not cropped), or a callable given every float32 NumPy
        chunk ``(start, frames)`` in frame order (in the callable's ``dtype`` where it has that
        attribute and it is an integer type: the frames rounded to nearest and clipped as
        :func:`xcorr_app.io.as_dtype`, on the GPU before they are copied back; one with a true
        ``takes_device`` attribute is given a GPU run's chunks as CuPy arrays, complete on the
        device, to copy back itself).  With
        ``patches`` the last patch pass warps each chunk while it is on the device; on a GPU
        the stack is kept there between the passes where it takes at most a quarter of the
        free memory (without ``max_memory``), so it is read and uploaded once
        (:mod:`xcorr_app.alignment._aligned_out`).

    Returns
    -------
    AlignResult
        Frames whose peak lies on the border of the searched window (``--max-shift``, or half
        the frame) are flagged ``low_confidence`` and ``border``; the result's ``notes`` and
        ``summary()["notes"]`` say how many.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import ndimage as ndi
    >>> scene = ndi.gaussian_filter(np.random.default_rng(0).random((80, 80)), 2)
    >>> stack = np.stack([scene[10:60, 10:60], scene[13:63, 8:58]]).astype(np.float32)
    >>> res = align(stack, max_shift=8, device="cpu")
    >>> res.shifts.round(2).tolist()  # (the shift that aligns each frame with frame 0)
    [[0.0, 0.0], [3.0, -2.0]]
    """
    opts = AlignOptions.from_arguments(reference, options, **keywords)
    executor = InProcess() if opts.gpus is None else OnGpus(opts.gpus)
    return run_alignment(opts, stack_or_path, executor, out=out, progress=progress)


align.__signature__ = options_signature(align, AlignOptions, ("stack_or_path", "reference"),
                                        ("out", "progress", "options"))
