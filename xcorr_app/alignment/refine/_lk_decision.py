"""Whether ``lucas_kanade="auto"`` turns the Lucas-Kanade fit on
(:mod:`xcorr_app.alignment.refine._refine_lk`): the shift precision that the noise of a few frames
allows.

:data:`NOISE_FRAMES` frames spread over the stack are judged (:func:`predicted_precision`:
Immerkaer's noise estimate against the gradient energy of the smoothed frame, the Cramer-Rao
bound of a white-noise model); the fit is on when their median is worse than
:data:`NOISY_PRECISION` px (the low-light stacks: 0.13-0.14 px; every other stack of the
benchmark: at most 0.026 px).

A CPU run judges the frames with NumPy (:func:`noisy_stack`).  A GPU run judges them on the
device (:func:`noisy_stack_on_gpu`): a few kernels that ship built, then a copy of the sums
to the host, before its first pass; NumPy on host threads beside the pass held the GIL often
enough to stall its launches (docs/how-align-works.md, measurements).  Both add the same sums;
the decisions agree but for float rounding at the threshold.

Examples
--------
>>> rng = np.random.default_rng(0)
>>> scene = np.kron(rng.random((8, 8)), np.ones((8, 8)))
>>> predicted_precision(scene + rng.normal(0, 0.01, scene.shape)) < NOISY_PRECISION
True
>>> predicted_precision(scene + rng.normal(0, 3.0, scene.shape)) > NOISY_PRECISION
True
"""

from __future__ import annotations

import concurrent.futures
import functools
import statistics

import numpy as np

from ...backend import is_cupy_array, to_numpy
from ...filters import gaussian_light
from ...streaming import copy_to_host_async, host_buffer
from ..rigid import brightness_change, converted_stats, frame_stats, precision_sums
from ..rigid import parse_prefilter, scale_free, spread_frames

__all__ = ["noisy_stack", "noisy_stack_later", "noisy_stack_on_gpu", "predicted_precision",
           "precision_from_sums", "NOISE_FRAMES", "NOISY_PRECISION"]

#: ``auto``: frames read to decide, and the predicted precision (px) above which it is on
NOISE_FRAMES = 8
NOISY_PRECISION = 0.05
#: smoothing (px) of the signal's gradient in :func:`predicted_precision`
PRECISION_SIGMA = 2.0
#: frames larger than this square are judged on their central PRECISION_CROP square (the bound
#: scales as one over the square root of the area: 8 whole 2048x2048 frames took 2.7 s on 2
#: cores, a first run's decision)
PRECISION_CROP = 512


def predicted_precision(frame) -> float:
    """The shift precision (px, Euclidean) that the noise of the 2-D ``frame`` (NumPy; CuPy is
    copied to the host) allows: ``sqrt(2) * noise / sqrt(gradient energy)``.

    The noise's standard deviation is Immerkaer's estimate (the mean absolute response to
    the 3x3 Laplacian difference kernel, which cancels smooth content); the gradient energy is
    that of the frame smoothed by :data:`PRECISION_SIGMA` px (``np.gradient``), less the part
    its noise brings.  Infinite for a frame with NaN or Inf pixels or no usable gradient.
    """
    f = np.asarray(to_numpy(frame), dtype=np.float64)
    if f.ndim != 2 or min(f.shape) < 3 or not bool(np.isfinite(f).all()):
        return float("inf")
    f = scale_free(f[None], np)[0]  # (the squares of frames of 1e300 overflow)
    lap = (f[:-2, :-2] - 2 * f[:-2, 1:-1] + f[:-2, 2:] - 2 * f[1:-1, :-2] + 4 * f[1:-1, 1:-1]
           - 2 * f[1:-1, 2:] + f[2:, :-2] - 2 * f[2:, 1:-1] + f[2:, 2:])
    # (without SciPy: importing it costs a GPU run's process about 0.9 s)
    gy, gx = np.gradient(gaussian_light(f.astype(np.float32), PRECISION_SIGMA))
    return precision_from_sums(float(np.abs(lap).sum()), float((gy * gy + gx * gx).sum()),
                               f.shape)


@functools.lru_cache(maxsize=None)
def _noise_gain() -> float:
    """The squared gradient that unit white noise adds per pixel once smoothed as
    :func:`predicted_precision` smooths (the sum of the squared taps of its derivative)."""
    delta = np.zeros((31, 31), np.float32)
    delta[15, 15] = 1.0
    ky = np.gradient(gaussian_light(delta, PRECISION_SIGMA))[0]
    return float((ky ** 2).sum())


def precision_from_sums(lap_sum, energy_sum, shape) -> float:
    """:func:`predicted_precision` from a frame's sums: of the absolute Laplacian (over the
    ``(H - 2) x (W - 2)`` inside) and of the squared gradient of the smoothed frame; ``shape``
    ``(H, W)``.

    >>> precision_from_sums(0.0, 1.0, (3, 3)), precision_from_sums(9.0, 0.0, (3, 3))
    (0.0, inf)
    """
    h, w = shape
    noise = float(np.sqrt(np.pi / 2) / 6 * (lap_sum / ((h - 2) * (w - 2))))
    energy = energy_sum - h * w * noise ** 2 * 2 * _noise_gain()
    if energy <= 0:
        return float("inf")
    return float(np.sqrt(2.0) * noise / np.sqrt(energy))


def crop_box(shape) -> tuple:
    """``(y0, x0, ch, cw)``: the central :data:`PRECISION_CROP` square (at most) of a frame
    of ``shape`` that is judged.

    >>> crop_box((600, 100))
    (44, 0, 512, 100)
    """
    h, w = shape
    ch, cw = min(h, PRECISION_CROP), min(w, PRECISION_CROP)
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def _scale(shape, crop) -> float:
    """The precision of a whole frame of ``shape`` from that of its ``crop`` ``(ch, cw)``."""
    return float(np.sqrt(crop[0] * crop[1] / (shape[0] * shape[1])))


def _precision_of(frame) -> float:
    """:func:`predicted_precision` of a frame, from its :func:`crop_box`."""
    y0, x0, ch, cw = crop_box(frame.shape)
    p = predicted_precision(frame[y0:y0 + ch, x0:x0 + cw])
    return p * _scale(frame.shape, (ch, cw))


def verdict(values) -> tuple:
    """``(noisy, precision)`` of the frames' predicted precisions (non-finite ones do not
    count).

    >>> verdict([0.01, float("inf"), 0.2, 0.3])
    (True, 0.2)
    """
    values = [v for v in values if np.isfinite(v)]
    if not values:
        return False, float("inf")
    p = float(statistics.median(values))  # (np.median imports numpy.ma: 30-60 ms)
    return p > NOISY_PRECISION, p


def noisy_stack(src) -> tuple:
    """``(noisy, precision, change)``: the median :func:`predicted_precision` (px) of up to
    :data:`NOISE_FRAMES` frames spread over the open source ``src``, whether it is worse
    than :data:`NOISY_PRECISION` (frames with NaN, Inf or no contrast do not count), and how
    much their brightness changes (:func:`~xcorr_app.alignment.rigid.brightness_change` of
    their crops' means), judged on the CPU one frame at a time.  GPU runs:
    :func:`noisy_stack_on_gpu`."""
    return _judged(_noise_frames(src))


def _noise_frames(src):
    """The frames :func:`noisy_stack` judges, read one by one as host arrays (a generator)."""
    return (to_numpy(src.read(i, i + 1))[0] for i in spread_frames(src.n_frames, NOISE_FRAMES))


def _judged(frames) -> tuple:
    """:func:`noisy_stack` of the host ``frames`` (an iterable, read as they are judged)."""
    precisions, means = [], []
    for frame in frames:
        precisions.append(_precision_of(frame))
        means.append(_mean_of(frame))
    return (*verdict(precisions), brightness_change(means))


def _mean_of(frame) -> float:
    """The mean of a frame's :func:`crop_box` (float64 sums), NaN where it has NaN or Inf
    pixels or no contrast (as :func:`~xcorr_app.alignment.rigid.choose_prefilter` counts)."""
    y0, x0, ch, cw = crop_box(frame.shape)
    f = frame[y0:y0 + ch, x0:x0 + cw]
    usable = (f.dtype.kind != "f" or bool(np.isfinite(f).all())) and f.max() > f.min()
    return float(f.mean(dtype=np.float64)) if usable else float("nan")


def noisy_stack_later(src):
    """A future of :func:`noisy_stack` on the CPU, judged by a thread of its own while the
    caller goes on, or ``None`` where ``src`` cannot be read by two threads at once (a folder
    keeps one file open at a time, a compressed TIFF one file position): decide first, with
    :func:`noisy_stack`.  The caller must wait for the future before it closes ``src``."""
    if is_cupy_array(getattr(src, "stack", None)):
        frames = list(_noise_frames(src))
    elif getattr(src, "concurrent_reads", False):
        frames = _noise_frames(src)
    else:
        return None
    runner = concurrent.futures.ThreadPoolExecutor(1, "xcorr-noise-decision")
    try:
        return runner.submit(_judged, frames)
    finally:
        runner.shutdown(wait=False)  # its thread ends with the one task


def noisy_stack_on_gpu(src):
    """:func:`noisy_stack` of the open source ``src`` judged on the current GPU: the frames
    are read (and uploaded) now, their sums (:func:`~._frame_stats.precision_sums` of each
    frame's :func:`crop_box` and its gaussian) queued on the current stream and copied to
    page-locked host memory behind them.  Returns a future-like :class:`DeviceJudgement`
    (its ``result()`` waits for the copy only): the caller's next kernels go on meanwhile."""
    import cupy as cp

    shape = tuple(src.frame_shape)
    if len(shape) != 2 or min(shape) < 3:  # nothing to judge: as the CPU's inf
        done = concurrent.futures.Future()
        done.set_result((*verdict([]), 0.0))
        return done
    y0, x0, ch, cw = crop_box(shape)
    smooth = parse_prefilter(f"gaussian:{PRECISION_SIGMA:g}")
    index = spread_frames(src.n_frames, NOISE_FRAMES)
    crops = [src.read(i, i + 1)[0, y0:y0 + ch, x0:x0 + cw] for i in index]
    # the crops in one array, then each step once for all of them (a frame at a time, the GPU
    # idled between the small launches)
    if all(isinstance(c, np.ndarray) for c in crops):
        stack = cp.asarray(np.stack(crops))  # one upload
    else:
        stack = cp.empty((len(crops), ch, cw), crops[0].dtype)
        for j, c in enumerate(crops):
            stack[j] = cp.asarray(c)
    brightness = frame_stats(stack)  # (the crops' means as read: scale_free scales each)
    f = converted_stats(scale_free(stack, cp))[0]  # float32 (a copy of the crops), scale-free
    sums = precision_sums(f, cp.ascontiguousarray(smooth(f), cp.float32))
    host = host_buffer(sums.shape, np.float64, pinned=True)
    stream = cp.cuda.get_current_stream()
    copy_to_host_async(host, sums, stream)
    return DeviceJudgement(host, stream.record(), shape, sums, brightness)


class DeviceJudgement:
    """The result of :func:`noisy_stack_on_gpu`, with the ``done``, ``exception`` and
    ``result`` of a :class:`concurrent.futures.Future`: ``result()`` waits for the sums'
    copy (an event) and judges them on the host: ``(noisy, precision, change)``."""

    def __init__(self, host_sums, event, frame_shape, device_sums, brightness):
        self.host, self.event, self.frame_shape = host_sums, event, frame_shape
        self._device = device_sums  # kept until the copy from it is done
        self._brightness = brightness  # (the crops' mean, finite, constant: (K,) each)
        self._value = None

    def done(self) -> bool:
        return self._value is not None or self.event.done

    def exception(self, timeout=None):
        return None

    def result(self, timeout=None) -> tuple:
        if self._value is None:
            self.event.synchronize()
            mean, finite, constant = (a.get() for a in self._brightness)
            change = brightness_change(np.where(finite & ~constant, mean, np.nan))
            self._value = (*judged_sums(self.host, self.frame_shape), change)
            self._device = self._brightness = None
        return self._value


def judged_sums(sums, frame_shape) -> tuple:
    """``(noisy, precision)`` from the row sums ``(K, ch, 3)`` of
    :func:`~._frame_stats.precision_sums` of K frames' crops (frames of ``frame_shape``)."""
    ch, cw = crop_box(frame_shape)[2:]
    values = []
    for rows in np.asarray(sums):
        total = rows.sum(axis=0)
        p = float("inf") if total[2] > 0 else precision_from_sums(total[0], total[1], (ch, cw))
        values.append(p * _scale(frame_shape, (ch, cw)))
    return verdict(values)
