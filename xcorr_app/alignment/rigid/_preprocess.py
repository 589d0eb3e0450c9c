"""What happens to frames before they are correlated: float32, checks, prefilter, window.

:func:`prepare` works on a whole chunk at once and never waits for the GPU: the checks (NaN or
Inf pixels, constant frames) come back as per-frame flags that the caller reads with the
results.

Examples
--------
>>> import numpy as np
>>> frames = np.stack([np.arange(12.0).reshape(3, 4), np.ones((3, 4))])
>>> p = prepare(frames, np)
>>> p.frames.shape, p.constant.tolist(), p.finite.tolist()
((2, 3, 4), [False, True], [True, True])
>>> window("tukey:0.5", (4, 6), np).shape
(4, 6)
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ...backend import to_numpy
from ...errors import InputError

WINDOWS = ("none", "hann", "tukey")
#: ``prefilter="auto"``: the low-pass of ordinary stacks, the band-pass (difference of
#: gaussians) of stacks whose brightness changes, and the change of the frame means (relative
#: to the brightest sampled frame) from which the band-pass is chosen
AUTO_LOWPASS = "gaussian:1"
AUTO_BANDPASS = "dog:1,4"
AUTO_BRIGHTNESS_CHANGE = 0.10
#: frames sampled (evenly over the stack, the first and the last included) to decide
AUTO_SAMPLES = 8
#: Tukey window taper fraction when ``tukey`` is given without one
TUKEY_ALPHA = 0.25


@dataclasses.dataclass
class Prepared:
    """A chunk ready for correlation.

    Attributes
    ----------
    frames : (N, H, W) float32
        Mean subtracted, prefiltered and windowed: what the correlation sees.
    raw : (N, H, W) float32
        Mean subtracted only: what the FFT reference measurement sees.
    constant, finite : (N,) bool
        Frames whose pixels are all equal; frames without NaN or Inf.
    mask : (N, H, W) bool, optional
        ``mask="nan"``: each frame's pixels measured (its finite ones, out of the prefilter's
        reach of the others); None otherwise.
    """

    frames: object
    raw: object
    constant: object
    finite: object
    mask: object = None


def parse_prefilter(spec):
    """``None | "none" | "gaussian:S" | "dog:S1,S2" | "auto"`` -> a function of a float32 stack,
    or None.  ``auto`` is decided from the stack by :func:`choose_prefilter` before frames are
    prepared; where no stack decides (:func:`~xcorr_app.alignment.estimate_shifts`, the
    workers of a distributed run) it is :data:`AUTO_LOWPASS`."""
    if spec in (None, "none"):
        return None
    if spec == "auto":
        spec = AUTO_LOWPASS
    name = str(spec).partition(":")[0]
    if name not in ("gaussian", "dog"):
        raise InputError(f"unknown prefilter {spec!r}; use none, gaussian:SIGMA or dog:S1,S2")
    from ...filters import parse_kernel_spec

    fn = parse_kernel_spec(str(spec))  # (its arguments checked, its sigmas read)
    return Prefilter(fn, fn.sigmas)


class Prefilter:
    """A prefilter of :func:`parse_prefilter`: ``prefilter(frames)`` filters a float32 stack
    (mode ``reflect``); ``sigmas``: its gaussian's, or a dog's two (none: ``fn`` alone
    says what it is); ``taps``: the 1-D taps of both axes where it is one separable filter
    with the same taps along both (gaussian), else None (:func:`_prepare_gpu` then knows the
    filtered frames' means before filtering)."""

    def __init__(self, fn, sigmas=()):
        self.fn, self.sigmas = fn, tuple(sigmas or ())

    @functools.cached_property
    def taps(self):
        return None if len(self.sigmas) != 1 else self._gaussian_taps[0]

    @functools.cached_property
    def _gaussian_taps(self):
        # (made when used: the options are checked before the frame bounds the radius)
        from ...filters import gaussian_taps

        return [gaussian_taps(s) for s in self.sigmas]

    def __call__(self, frames):
        from ...filters import host_separable, host_separable_fits

        # (the filter's radius, its widest gaussian's, before any taps are made: a radius past
        # the frame goes to the filter, which refuses it)
        if not self.sigmas or not host_separable_fits(frames, self.fn.radius, self.fn.radius,
                                                      "reflect"):
            return self.fn(frames, "reflect", 0.0)
        # (NumPy float32 frames: the same filter summed in float32 a band of rows at a time,
        # 4.6x SciPy's on 1024x1024 frames: filters._host_separable; NaN or Inf pixels spread
        # as SciPy's do, quietly)
        taps = self._gaussian_taps
        with np.errstate(invalid="ignore", over="ignore"):
            low = host_separable(frames, taps[0], taps[0], "reflect", 0.0)
            if len(taps) == 2:
                low -= host_separable(frames, taps[1], taps[1], "reflect", 0.0)
        return low


def spread_frames(n_frames, count) -> list:
    """Indices of up to ``count`` frames spread evenly over ``n_frames`` (first and last
    included): the frames the ``auto`` choices read.

    >>> spread_frames(100, 4), spread_frames(3, 8)
    ([0, 33, 66, 99], [0, 1, 2])
    """
    return sorted({int(round(i)) for i in np.linspace(0, n_frames - 1, min(count, n_frames))})


def choose_prefilter(src, mask=None):
    """``prefilter="auto"``: ``(spec, reason)`` for the stack ``src`` (an open source); with a
    ``mask`` ((H, W) bool), the brightness of the pixels it uses (``"nan"``: each frame's
    finite pixels).

    A stack whose brightness changes (bleaching, a lamp drifting) by more than
    :data:`AUTO_BRIGHTNESS_CHANGE` between the means of :data:`AUTO_SAMPLES` frames spread over
    it gets the band-pass :data:`AUTO_BANDPASS`; others the low-pass :data:`AUTO_LOWPASS`.
    Why: a static background (uneven illumination, autofluorescence) does not move with the
    content, and while the brightness of the content changes it pulls the correlation peak
    towards zero shift; the band-pass removes it (on ``xcorr bench accuracy``'s bleaching
    stacks 0.40 -> 0.03 px RMS).  Its outer sigma is 4 px, not 8: what a band-pass leaves of
    the scene that does not move with it is static too and pulls the same way, and both parts
    shrink with the outer sigma: the background's residual (about ``sigma**2 / 2`` times its
    curvature) and the filter's response to the frame's edges (``reflect`` mode: a band about
    2 sigma wide along every edge).  On the low-contrast ``moon`` stacks (seeds 1, 4, 7) dog:1,8
    gave 0.086 / 0.133 / 0.083 px with a background and 0.068 / 0.072 / 0.034 even without one;
    dog:1,4 0.076 / 0.068 / 0.051 (bleaching stacks, seeds 0-8: mean 0.045 -> 0.030 px; plain
    0.024 -> 0.017, large drift 0.010 -> 0.008, non-square 0.011 -> 0.010).  The low-pass
    stays the choice of steady stacks (no background to remove; gaussian:1 measured the
    issue's baseline).  The decision reads those few frames only (cheap even for huge
    stacks); the sampled means of the accuracy stacks change by at most 0.05 without bleaching
    and at least 0.16 with it (seeds 0-5).

    >>> from xcorr_app.io import ArraySource
    >>> f = np.eye(8)[None] * np.linspace(1, 0.5, 10)[:, None, None]  # fading to half
    >>> choose_prefilter(ArraySource(f))[0], choose_prefilter(ArraySource(f[:1]))[0]
    ('dog:1,4', 'gaussian:1')
    """
    idx = spread_frames(src.n_frames, AUTO_SAMPLES)
    frames = [src.read(i, i + 1) for i in idx]
    if mask is not None:  # (a static artefact's brightness hides the frames' change)
        from ...backend import array_module_of
        from ._mask import fill_masked

        frames = [fill_masked(f, array_module_of(f).isfinite(f) if isinstance(mask, str)
                              else array_module_of(f).asarray(mask), array_module_of(f))
                  for f in frames]
    means = _means_on_device(frames)
    if means is None:
        means = []
        for f in frames:  # frames that cannot be measured (NaN, Inf, constant) do not count
            f = np.asarray(to_numpy(f))
            # on the pixels as read (a float64 copy of each 2048x2048 frame was 0.15 s of a
            # one-shot run's 0.2 s here); the mean is summed in float64 all the same
            usable = (f.dtype.kind != "f" or bool(np.isfinite(f).all())) and f.max() > f.min()
            means.append(float(f.mean(dtype=np.float64)) if usable else np.nan)
    change = brightness_change(means)
    if change > AUTO_BRIGHTNESS_CHANGE:
        return AUTO_BANDPASS, (f"prefilter auto: {AUTO_BANDPASS} (band-pass: the brightness "
                               f"changes by {100 * change:.0f}% over the stack)")
    return AUTO_LOWPASS, (f"prefilter auto: {AUTO_LOWPASS} (brightness steady: "
                          f"{100 * change:.0f}% change)")


def brightness_change(means) -> float:
    """How much the brightness changes over frames of these ``means`` (NaN ones do not count):
    their range over the largest, 0 for none, and 0 where a mean is zero or negative (frames
    less their mean or a background: no brightness to compare, and a range over a mean near
    zero is no measure of one).

    >>> brightness_change([100.0, 50.0, float("nan")]), brightness_change([])
    (0.5, 0.0)
    >>> brightness_change([-3.0, 2.0])
    0.0
    """
    means = np.asarray(means, np.float64)
    means = means[np.isfinite(means)]
    if not means.size or means.min() <= 0:
        return 0.0
    return float(means.max() - means.min()) / float(means.max())


def _means_on_device(frames):
    """:func:`choose_prefilter`'s frame means (NaN for a frame with NaN or Inf pixels or a
    constant one) of frames already on the GPU (CuPy, of a type float32 holds exactly: the
    same test), by the preparation's statistics kernels, fetched once; None for others (on
    the host, a copy and four NumPy passes a frame left the GPU idle)."""
    from ...backend import is_cupy_array

    if not frames or not all(is_cupy_array(f) and f.dtype in EXACT_IN_FLOAT32 for f in frames):
        return None
    import cupy as cp

    from ._frame_stats import frame_stats

    stats = [frame_stats(f) for f in frames]  # queued: nothing waits until all are
    cp.cuda.get_current_stream().synchronize()
    return [float(m.get()[0]) if bool(ok.get()[0]) and not bool(flat.get()[0]) else np.nan
            for m, ok, flat in stats]


#: pixel types whose values float32 holds exactly (their statistics are those of the pixels)
EXACT_IN_FLOAT32 = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.int16, np.float16,
                                              np.float32))


def window(spec, shape, xp):
    """The 2-D apodization window ``none | hann | tukey[:ALPHA]`` of ``shape`` (None for none).

    ``hann`` is zero at the frame edges; ``tukey:ALPHA`` tapers only the outer ``ALPHA / 2`` of
    each side (``tukey:1`` is ``hann``), keeping more of the frame at full weight.
    """
    if spec in (None, "none"):
        return None
    name, _, arg = str(spec).partition(":")
    if name not in WINDOWS[1:] or (name == "hann" and arg):
        raise InputError(f"unknown window {spec!r}; use none, hann or tukey[:ALPHA]")
    alpha = 1.0
    if name == "tukey":
        try:
            alpha = float(arg) if arg else TUKEY_ALPHA
        except ValueError:
            alpha = -1.0
        if not 0.0 <= alpha <= 1.0:
            raise InputError(f"the Tukey window's ALPHA must be in [0, 1], got {arg!r}")
    from scipy.signal.windows import tukey

    h, w = shape
    win = np.outer(tukey(h, alpha), tukey(w, alpha))
    return xp.asarray(win, dtype=xp.float32)


def _frame_means(f, xp):
    """Mean of every frame, (N, 1, 1) float32; summed row by row first, so that the reduction
    has N x H outputs to spread over the GPU rather than one long reduction per frame."""
    sums = f.sum(axis=-1, dtype=xp.float64).sum(axis=-1)
    return (sums / (f.shape[-2] * f.shape[-1])).astype(xp.float32)[:, None, None]


def _demean(f, xp):
    return f - _frame_means(f, xp)


def prepare(frames, xp, prefilter=None, win=None) -> Prepared:
    """Convert a chunk to float32 on ``xp``'s device and make it ready for correlation.

    Parameters
    ----------
    frames : (N, H, W) array of any supported pixel type
    xp : numpy or cupy
    prefilter : callable, optional
        From :func:`parse_prefilter`.
    win : (H, W) float32 array, optional
        From :func:`window`.
    """
    if xp is not np:
        return _prepare_gpu(scale_free(xp.asarray(frames), xp), xp, prefilter, win)
    f = scale_free(xp.asarray(frames), xp).astype(xp.float32)
    finite = xp.isfinite(f).all(axis=-1).all(axis=-1)  # two stages, as in _frame_means
    constant = (f == f[:, :1, :1]).all(axis=-1).all(axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf frames: flagged, not warned
        raw = _demean(f, xp)
        g = raw
        if prefilter is not None:
            g = _demean(prefilter(raw).astype(xp.float32, copy=False), xp)
        if win is not None:
            g = _demean(g * win, xp)
    return Prepared(g, raw, constant, finite)


def scale_free(frames, xp):
    """float32 and float64 frames each multiplied by the power of two that brings its largest
    magnitude into ``[0.5, 1)``; other pixel types (integers, float16: at most 65504) as they
    are.

    The correlation's sums and spectra of float32 frames of magnitude 1e17 overflow (of 1e-25
    underflow), and phase correlation's whitening floors the cross-power at a fixed 100 eps; a
    power of two is exact, so every other number of a run is the same, only scaled (the peak of
    ``normalization="none"`` is that of the scaled frames).  Frames with NaN or Inf pixels, or
    all zero, stay as they are.

    >>> f = np.stack([np.full((2, 2), 3 * 2.0 ** 100), np.full((2, 2), -5 * 2.0 ** -100)])
    >>> scale_free(f.astype(np.float32), np)[:, 0, 0].tolist()
    [0.75, -0.625]
    >>> scale_free(np.full((1, 2, 2), 3 * 2.0 ** -142, np.float32), np)[:, 0, 0].tolist()
    [0.75]
    >>> scale_free(np.ones((1, 2, 2), np.uint16), np).dtype.name
    'uint16'
    """
    if frames.dtype.kind != "f" or frames.dtype.itemsize < 4 or frames.ndim != 3 \
            or 0 in frames.shape:
        return frames
    if xp is not np:  # one kernel of ours for the largest magnitudes (registration/_peak_math)
        from ...registration import surface_argmax
        from ._frame_stats import power_of_two_scaled

        # and one for the scaled copy (kernels/alignment/frame_stats.cu, shipped built): as
        # CuPy operations on the (n,) peaks and a multiply they were kernels compiled on a
        # first run (eight, 0.8 s; then two) and launched every chunk
        return power_of_two_scaled(frames, surface_argmax(frames, absolute=True)[2])
    with np.errstate(invalid="ignore"):
        peak = np.maximum(frames.max(axis=(-2, -1)), -frames.min(axis=(-2, -1)))
    peak = peak.astype(np.float64)
    usable = np.isfinite(peak) & (peak > 0)
    exponent = np.where(usable, np.frexp(np.where(usable, peak, 1.0))[1], 0)
    if not exponent.any():
        return frames  # (on the CPU the copy is saved; on the GPU nothing waits to know)
    k = -exponent.astype(np.int32)
    if k.max() < np.finfo(frames.dtype).maxexp:
        return frames * np.ldexp(np.ones(len(frames), frames.dtype), k)[:, None, None]
    # denormal frames: 2**k overflows their type, so two exact steps (scaling up rounds nothing)
    half = np.where(k < np.finfo(frames.dtype).maxexp, k, k // 2)
    one = np.ones(len(frames), frames.dtype)
    return frames * np.ldexp(one, half)[:, None, None] * np.ldexp(one, k - half)[:, None, None]


#: :func:`stack_exponent`: images whose largest magnitude lies in ``[2**-SAFE, 2**SAFE]``
#: keep their scale (their float32 sums, FFTs and products stay far from over- and underflow)
SAFE_EXPONENT = 64


def stack_exponent(image) -> int:
    """The power of two ``k`` by which every frame of a stack is multiplied (``2**k``) where
    frames are summed or fitted unprepared (the template passes, the Lucas-Kanade fit),
    decided once from ``image`` (the run's first frame): 0 where its largest finite magnitude
    lies in ``[2**-SAFE_EXPONENT, 2**SAFE_EXPONENT]`` (every ordinary stack: its numbers
    unchanged), else the one that brings it into ``[0.5, 1)`` (float64 frames of 1e-300 would
    be 0 as float32, of 1e300 infinite; float32 sums of 1e38 overflow).  One for the whole
    stack, not each frame's own (:func:`scale_free`), so that frames keep their weights in a
    template.

    >>> stack_exponent(np.full((2, 2), 3e-300)), stack_exponent(np.full((2, 2), 1000.0))
    (994, 0)
    """
    if np.dtype(image.dtype).kind != "f" or image.size == 0:
        return 0
    a = to_numpy(image)  # (one frame to the host: no CuPy kernel to compile on a first run)
    finite = a[np.isfinite(a)]
    peak = float(np.abs(finite).max()) if finite.size else 0.0
    if peak == 0.0 or 2.0 ** -SAFE_EXPONENT <= peak <= 2.0 ** SAFE_EXPONENT:
        return 0
    return -int(np.frexp(peak)[1])


def check_float32_range(frame, name, what="the aligned stack is computed",
                        advice="the shifts are measured at any scale; scale the stack "
                               "into that range to warp it", index=0):
    """InputError where ``frame`` (a stack's frame ``index``, its first by default) is float64
    with values float32 cannot
    hold (its largest finite magnitude above float32's largest, or not 0 and below its
    smallest normal number), in which ``what`` (the shifts are measured at any scale, not the
    float32 warps); ``advice``: what to do.

    >>> check_float32_range(np.full((2, 2), 1e-3), "s.tif")
    >>> check_float32_range(np.full((2, 2), 1e-300), "s.tif")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: s.tif's pixels reach at most 1e-300 (frame 0), outside ...
    """
    if frame.dtype != np.float64 or frame.size == 0:
        return
    a = to_numpy(frame)
    finite = np.abs(a[np.isfinite(a)])
    peak = float(finite.max()) if finite.size else 0.0
    info = np.finfo(np.float32)
    if peak == 0.0 or float(info.tiny) <= peak <= float(info.max):
        return
    raise InputError(f"{name}'s pixels reach at most {peak:.3g} (frame {index}), outside "
                     f"float32's range ({float(info.tiny):.3g} to {float(info.max):.3g}), in "
                     f"which {what}: {advice}")


def check_filtered_range(frames, name, start=0):
    """:func:`check_float32_range` of every frame of the chunk ``frames`` (its first is frame
    ``start`` of the stack ``name``) that is filtered into float32 (``xcorr filter``, in this
    process or on a Dask worker): each chunk is checked as it is read, not frame 0 alone."""
    if frames.dtype != np.float64:
        return
    for i, frame in enumerate(frames):
        check_float32_range(frame, name, "the filtered stack is computed and written",
                            "scale the stack into that range", index=start + i)


#: the float32 magnitudes a GPU run measures: CuPy compiles every kernel with -ftz=true (a
#: denormal pixel reads as 0: above the bottom, only pixels below float32's resolution of the
#: peak are), and float32 figures near the type's largest number overflow
GPU_FLOAT32_RANGE = (2.0 ** -100, 2.0 ** 120)


def check_gpu_float32(frame, name):
    """InputError where ``frame`` (a stack's first frame or volume) is float32 with its largest
    finite magnitude outside :data:`GPU_FLOAT32_RANGE`, which a GPU run cannot measure (the
    CPU measures any scale; float64 frames are brought into range in float64 first).

    >>> check_gpu_float32(np.full((2, 2), 1e-3, np.float32), "s.tif")
    >>> check_gpu_float32(np.full((2, 2), 1e-40, np.float32), "s.tif")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: s.tif's float32 pixels reach at most 1e-40 (frame 0): ...
    """
    if frame.dtype != np.float32 or frame.size == 0:
        return
    a = to_numpy(frame)
    finite = np.abs(a[np.isfinite(a)])
    peak = float(finite.max()) if finite.size else 0.0
    lo, hi = GPU_FLOAT32_RANGE
    if peak == 0.0 or lo <= peak <= hi:
        return
    raise InputError(f"{name}'s float32 pixels reach at most {peak:.3g} (frame 0): a GPU "
                     f"measures float32 frames of {lo:.3g} to {hi:.3g} (its float32 numbers "
                     "below 1.2e-38 read as 0, and figures near 3.4e38 overflow): scale the "
                     'stack into that range, give it as float64, or run on the CPU '
                     '(device="cpu"), which measures any scale')


def scaled_by(frames, k, xp):
    """``frames`` times ``2**k`` (:func:`stack_exponent`; exact), as they are for 0; float32
    where ``2**k`` is a float32 number, else float64."""
    if k == 0:
        return frames
    f = xp.asarray(frames)
    if f.dtype == np.float32 and -126 <= k < 127:
        return f * np.float32(2.0 ** k)
    return xp.ldexp(f.astype(xp.float64), k)


def _prepare_gpu(frames, xp, prefilter, win) -> Prepared:
    """:func:`prepare` on the GPU by the kernels of :mod:`xcorr_app.alignment.rigid._frame_stats`
    (the same numbers, a few kernels compiled once instead of a chain of CuPy operations)."""
    from ...filters import SEPARABLE_SIZES, separable_correlate
    from ._frame_stats import demeaned, filtered_mean_weights, frame_means, subtract_means

    taps = getattr(prefilter, "taps", None)
    if taps is not None and frames.ndim == 3 and len(taps) in SEPARABLE_SIZES:
        # a gaussian in the fused kernel: the mean of its output is known from the frames'
        # statistics (filtered_mean_weights) and subtracted as the output is stored: two
        # passes over the filtered frames fewer
        raw, _, finite, constant, fmean = demeaned(
            frames, filtered_mean_weights(taps, frames.shape[-2:]))
        g = separable_correlate(raw, taps, taps, "reflect", 0.0, subtract=fmean)
    else:
        raw, _, finite, constant, _ = demeaned(frames)  # a new array
        g = raw
        if prefilter is not None:  # a filter's output is a new array, demeaned in place
            g = xp.ascontiguousarray(prefilter(raw).astype(xp.float32, copy=False))
            g = subtract_means(g, frame_means(g))
    if win is not None:
        g = g * win
        g = subtract_means(g, frame_means(g))
    return Prepared(g, raw, constant, finite)
