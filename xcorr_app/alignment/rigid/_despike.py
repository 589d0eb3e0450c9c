"""Bright specks of one frame (cosmic rays, a particle's track, a single hot or saturated
pixel) taken out of what the passes measure: ``despike``.

A speck a few pixels across, many times the scene's brightest, holds more of a frame's
variance than the whole scene: the correlation then matches the template's pattern to the
speck (the accuracy bench's ``cosmic_rays`` stacks: docs/performance.md, "Hard stacks").

A pixel is a spike where it stands above the frame's grey opening by a 2x2 square (the frame
with every feature narrower than 2 px cut down to its surroundings) by more than
:data:`SPIKE_SPREAD` times the opened frame's range above its mean and :data:`SPIKE_NOISE`
times the mean of what the opening cut (the frame's noise and finest texture); it is replaced
by the opening's value.  Features 2 px or more across (cells, a star sampled at Nyquist) are
left whole; so is every pixel of the realistic stacks of the bench (none found, at 25 photons
either).  The passes and the quality report measure the frames so cleaned; the aligned stack
is made of the frames as they came.  ``auto`` (the default) looks for spikes of one frame
alone (:func:`_speck_frames`: not a hot pixel, the static model's, nor a star that the next
frame shows where the scene moved it) in
:data:`AUTO_SPIKE_SAMPLES` frames spread over the stack (their middle
:data:`AUTO_SPIKE_SIDE` px a side: specks rarer than that may be missed, ``on`` takes them all)
and cleans every frame where one has any; ``on`` always, ``off`` never.

Examples
--------
>>> import numpy as np
>>> f = np.tile(np.hypot(*np.mgrid[-8:8, -8:8]).astype(np.float32), (2, 1, 1))
>>> f[1, 4, 5] = 500.0
>>> clean = despiked(f, np)
>>> bool(clean[1, 4, 5] < 20), bool((clean[0] == f[0]).all())
(True, True)
"""

from __future__ import annotations

import numpy as np

from ...backend import array_module_of, to_numpy
from ...streaming import WrappedSource
from ._preprocess import scale_free, spread_frames

__all__ = ["DESPIKE", "DespikedSource", "despiked", "floating", "opened", "decide_despike",
           "decide_specks"]

DESPIKE = ("auto", "on", "off")
#: a spike stands above the opened frame by more than this times the opened frame's range
#: above its mean (at 2 the sharpest pixels of noise-free scenes passed for spikes)...
SPIKE_SPREAD = 4.0
#: ... and by more than this times the mean of what the opening cut (at 8 the noise of dim
#: frames passed for spikes)
SPIKE_NOISE = 16.0
#: a pixel that stands out by this share of the limits in half the frames read is fixed on
#: the sensor (not a speck of one frame)
STATIC_SHARE = 0.25
#: a frame's pixels the opening cut the most (its sharpest features and specks) that
#: :func:`_carried` compares with another frame's
MATCH_POINTS = 256
#: ... among those the opening cut by more than this times its mean cut (above the noise)
MATCH_NOISE = 4.0
#: where more than this share of a frame's pixels stand out, none is a speck (noise)
MAX_SPECK_SHARE = 0.01
#: ``despike="auto"``: the frames read to decide (spread over the stack)
AUTO_SPIKE_SAMPLES = 16
#: ... each cut to its middle this many pixels a side at most, looked at on the host (no
#: CuPy kernel to compile at a first GPU run)
AUTO_SPIKE_SIDE = 256


def opened(frames, xp):
    """The grey opening of ``frames`` (N, H, W) by a 2x2 square: each pixel the largest of
    the smallest values of the 2x2 windows inside the frame that hold it (by slices: SciPy's
    grey_opening, a generic filter, was many times slower)."""
    n, h, w = frames.shape
    low = xp.full((n, h + 1, w + 1), -xp.inf, frames.dtype)
    low[:, 1:-1, 1:-1] = xp.minimum(xp.minimum(frames[:, :-1, :-1], frames[:, 1:, :-1]),
                                    xp.minimum(frames[:, :-1, 1:], frames[:, 1:, 1:]))
    return xp.maximum(xp.maximum(low[:, :-1, :-1], low[:, 1:, :-1]),
                      xp.maximum(low[:, :-1, 1:], low[:, 1:, 1:]))


def _spikes(frames, xp):
    """``(opened, cut, limit)``: the frames' :func:`opened`, what the opening cut and each
    frame's limit (N, 1, 1) above which a cut pixel is a spike."""
    low = opened(frames, xp)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        cut = frames - low
        # (over the pixels whose cut is a number: a frame with NaN fill, mask="nan", is
        # despiked around it; a NaN pixel is never a spike)
        ok = xp.isfinite(cut)
        n = ok.sum(axis=(1, 2))
        top = xp.where(ok, low, -xp.inf).max(axis=(1, 2))
        mean = xp.where(ok, low, 0).sum(axis=(1, 2)) / n
        limit = xp.maximum(SPIKE_SPREAD * (top - mean),
                           SPIKE_NOISE * xp.where(ok, cut, 0).sum(axis=(1, 2)) / n)
        # (an Inf pixel is no spike: its frame is flagged as it is, not cleaned of it)
        cut = xp.where(ok, cut, xp.nan)
    return low, cut, limit[:, None, None]


def floating(frames):
    """``frames`` as they are where their pixels are floating point, else as float32 (which
    holds every integer pixel type's values exactly)."""
    return frames if frames.dtype.kind == "f" and frames.itemsize >= 4 \
        else frames.astype(np.float32)


def despiked(frames, xp):
    """float32 ``frames`` (N, H, W) with their spikes replaced by the grey opening's values (a
    new array)."""
    low, cut, limit = _spikes(frames, xp)
    with np.errstate(invalid="ignore"):
        return xp.where(cut > limit, low, frames)


def decide_despike(despike, src):
    """``(despike, note)``: ``auto`` decided for the open source ``src`` (``on`` where one of
    the frames :func:`_speck_frames` reads holds a speck of its own, the note says how many),
    others as given (no note)."""
    if despike != "auto":
        return despike, None
    hit, read = _speck_frames(src)
    if not hit:
        return "off", None
    return "on", (f"despike auto: on ({hit} of {read} frames read hold bright specks of a "
                  f"frame alone, cosmic rays or single hot pixels: measured without them)")


def _speck_frames(src) -> tuple:
    """``(hit, read)``: how many of the :data:`AUTO_SPIKE_SAMPLES` frames read from ``src``
    (spread over it; their middle :data:`AUTO_SPIKE_SIDE` px) hold a speck of that frame
    alone, of how many.  Not a speck of one frame: a pixel that stands out at the same place
    in half the frames read (a hot pixel: the static model's, which despiking undid), one
    that stands out in a neighbouring frame read where the frames' sharpest pixels say the
    scene moved it (the brightest stars of an undersampled star field, whose shifts
    despiking spoilt), and the specks of frames where they are over :data:`MAX_SPECK_SHARE`
    of the pixels (sparse photon counts: every count stands out)."""
    idx = spread_frames(src.n_frames, AUTO_SPIKE_SAMPLES)
    h, w = src.frame_shape
    y, x = max(0, h // 2 - AUTO_SPIKE_SIDE // 2), max(0, w // 2 - AUTO_SPIKE_SIDE // 2)
    read = [to_numpy(src.read(i, i + 1)[0, y:y + AUTO_SPIKE_SIDE, x:x + AUTO_SPIKE_SIDE])
            for i in idx]
    # (each at a safe scale: float64 frames past float32's range; the limits are relative)
    frames = scale_free(np.stack(read), np).astype(np.float32)
    count = np.zeros(frames.shape[1:], np.int64)
    tops, spikes = [], []
    with np.errstate(invalid="ignore"):
        for f in frames[:, None]:  # (a frame at a time: its temporaries in the CPU's cache)
            _, cut, limit = _spikes(f, np)
            count += cut[0] > STATIC_SHARE * limit[0]
            # (the scene's sharpest features and the specks: above the frame's noise)
            tops.append(_brightest(cut[0], cut[0] > MATCH_NOISE * cut[0].mean()))
            spikes.append(cut[0] > limit[0])
    fixed = count >= max(2, -(-len(idx) // 2))
    hit = 0
    for k, speck in enumerate(spikes):
        speck &= ~fixed
        if not speck.any() or speck.mean() > MAX_SPECK_SHARE:
            continue
        points = np.argwhere(speck)
        moved = np.zeros(len(points), bool)
        for j in (k - 1, k + 1):  # (the neighbouring frames read)
            if 0 <= j < len(idx):
                moved |= _carried(points, tops[k], tops[j])
        hit += not moved.all()
    return hit, len(idx)


def _brightest(cut, mask):
    """(k, 2) the pixels of ``mask``, at most :data:`MATCH_POINTS` of them, those the opening
    ``cut`` the most."""
    points = np.argwhere(mask)
    if len(points) > MATCH_POINTS:
        order = np.argsort(cut[mask])[::-1][:MATCH_POINTS]
        points = points[np.sort(order)]
    return points


def _carried(points, here, there):
    """(k,) bool: which ``points`` of a frame are found (within a pixel) in another frame's
    bright pixels ``there`` once moved by the shift that carries most of this frame's bright
    pixels ``here`` onto those (a shift that carries at least 6 of them and a tenth of the
    fewer, well over what chance gives any shift; none: False)."""
    if len(here) < 6 or len(there) < 6:
        return np.zeros(len(points), bool)
    d = (there[None] - here[:, None]).reshape(-1, 2)
    shifts, counts = np.unique(d, axis=0, return_counts=True)
    best = counts.argmax()
    if counts[best] < max(6, min(len(here), len(there)) / 10):
        return np.zeros(len(points), bool)
    off = (there[None] - (points + shifts[best])[:, None])
    return (np.abs(off).max(axis=-1) <= 1).any(axis=1)


def decide_specks(opts, src, executor):
    """The run's step ``despike`` (before the device starts: the stack is not kept on it for
    the passes where it is despiked): ``(opts, note)``, the options with ``despike`` what
    runs (``on`` or ``off``; on: :meth:`~.._executors.Executor.correct_despike` once the
    device has started) and the note of ``auto`` turned on.  Runs shared out (GPUs, Dask)
    read the frames as they are: where ``auto`` finds specks, its note says so."""
    if executor.name != "process":
        hit, read = _speck_frames(src) if opts.despike == "auto" else (0, 0)
        return opts._decided(despike="off"), None if not hit else (
            f"despike auto: {hit} of {read} frames read hold bright specks of a frame alone "
            "(cosmic rays, single hot pixels), measured with them: runs shared out over GPUs "
            "or Dask read the frames as they are; run in one process to measure without them")
    despike, note = decide_despike(opts.despike, src)
    return opts._decided(despike=despike), note


class DespikedSource(WrappedSource):
    """A frame source whose frames are ``src``'s :func:`despiked` (float32; float64 frames
    stay float64), as the measuring passes, their templates and the quality report read them;
    the aligned output reads the frames as they are.  Read through :meth:`read` (no stack kept
    on a device, no file pages read directly).

    >>> from xcorr_app.io import ArraySource
    >>> frames = np.zeros((2, 6, 7), np.uint16)
    >>> frames[1, 2, 3] = 1000
    >>> DespikedSource(ArraySource(frames)).read(0, 2).max().item()
    0.0
    """

    stack = None  # (the chunks are read through read(): despiked)
    stash = None
    stored = None

    def __init__(self, src):
        super().__init__(src)
        self.dtype = np.dtype(np.float64 if src.dtype == np.float64 else np.float32)

    def read(self, start, stop, out=None):
        frames = self.src.read(start, stop)
        xp = array_module_of(frames)
        fixed = despiked(floating(frames), xp)  # (of self.dtype)
        if out is None:
            return fixed
        out[...] = to_numpy(fixed) if isinstance(out, np.ndarray) else fixed
        return out
