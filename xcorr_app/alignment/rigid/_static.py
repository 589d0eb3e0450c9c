"""Patterns fixed on the sensor (``static``): found in a few frames, removed as the frames are
read for measuring.

What does not move with the drifting scene (stray light and hot pixels, dust shadows, an sCMOS
camera's column and pixel offsets) correlates perfectly with itself at zero shift: where it is
strong against the scene, every frame's peak is pulled to (or locked at) zero.  Each frame is
modelled as

    frame_t(x) = a_t * S(x + d_t) + c_t + P(x)

a scene ``S`` seen at the frame's shift ``d_t`` (the shift that aligns it with frame 0), a
brightness ``a_t`` and offset ``c_t`` of its own, and a pattern ``P`` fixed on the sensor.
:func:`fit_static` estimates ``S`` and ``P`` for given shifts by alternation: ``S`` is the mean
of the frames less ``P`` moved by their shifts (Fourier shifts on a padded canvas, the frames'
edges tapered), ``P`` the frames' mean residual, updated through the exact least-squares answer
of periodic frames (a Fourier multiplier ``1 / (1 - |phi|^2)``, ``phi`` the shifts'
characteristic function), so that a few rounds converge; where the shifts do not tell the
scene from the sensor (frequencies whose wavelength the drift does not span) ``P`` is held to
its start (a regularization weighted by ``|phi|^2``): what a scene that did not move left there
stays the scene's.

:func:`decide_static` reads a sample of frames (:data:`STATIC_SAMPLES` spread over the stack,
their middle :data:`DETECT_SIDE` px, read to the host; CuPy in: on its device), measures it
(one pass against its first frame, by the run's pipeline on the run's device), estimates the
pattern's share in one step (:func:`quick_share`, a process's first for a GPU run on the host:
:func:`_estimate_on`; ``auto`` stops there below :data:`QUICK_SHARE` unless frames lock at
zero), fits the model with those shifts (on the run's device), and judges whether a pattern is
there and matters: its band-pass energy (the band registration reads, less what noise puts
there) against the scene's (:func:`matters_from`), or frames locked at zero shift
(:data:`LOCK_SHARE` of them within :data:`LOCK_RADIUS` px).  Then the shifts are measured again
with the pattern removed, from the first shifts and from the frames less their temporal
median (which frees frames locked on the pattern), :data:`STATIC_ROUNDS` times each, and the
start whose model explains the frames best gives the shifts of the last fit, on the whole
frames; a start whose frames show no distinct peak (median confidence below
:data:`MIN_CONFIDENCE`) or lock at zero cannot tell the scene from the sensor and is not taken;
where none is left (``auto``), nothing is removed and the run flags every frame.  Every
pattern removed is first weighed by :func:`_unbiased` (the fit's own noise, removed whole,
would push the peaks away from zero shift).  :class:`StaticSource` reads the frames less the
pattern; a run whose frames still lock at zero shift flags every one (:func:`still_locked`).

``auto`` does not look at stacks of fewer than :data:`MIN_AUTO_FRAMES` frames, nor at stacks
whose brightness changes (bleaching: the background is not bleached and the scene is, which
the model cannot tell apart; the band-pass that ``prefilter="auto"`` chooses there removes the
background), nor where the sample's peaks lie on the border of the search.

On ``xcorr bench accuracy``'s stacks ``auto`` removes nothing but from the kinds with a
pattern (and from rotating ones: the kinds without a pattern stay at half the threshold or
below, 10-frame cuts of them at three quarters, a noisy 64x64 stack under
:data:`SMALL_FRAME_SHARE`; 6-frame stacks reached twice the threshold, hence
:data:`MIN_AUTO_FRAMES`); the figures are in docs/performance.md.

Examples
--------
>>> from scipy import ndimage as ndi
>>> rng = np.random.default_rng(0)
>>> scene = 10 * ndi.gaussian_filter(rng.normal(size=(80, 80)), 1.5)
>>> pattern = np.zeros((64, 64)); pattern[::7, ::5] = 8.0  # hot pixels
>>> d = np.trunc(rng.uniform(-6, 6, (12, 2))); d[0] = 0
>>> frames = np.stack([scene[8 + int(a):72 + int(a), 8 + int(b):72 + int(b)] for a, b in d])
>>> P, info = fit_static(frames + pattern, d, np)  # frame t shows the scene at x + d_t
>>> err = P - pattern
>>> sharp = err - ndi.gaussian_filter(err, 4)  # (what the drift cannot tell: the slow part)
>>> bool(np.abs(sharp[8:-8, 8:-8]).max() < 0.1), bool(abs(P[7, 5] - P[8, 5] - 8) < 0.1)
(True, True)
"""

from __future__ import annotations

import functools
import itertools
import math
import numbers

import numpy as np

from ... import backend
from ...correlate import next_smooth
from ...streaming import WrappedSource, host_copies
from ._columns import COLUMN
from ._preprocess import (AUTO_BRIGHTNESS_CHANGE, brightness_change, scaled_by,
                          spread_frames, stack_exponent)

__all__ = ["STATIC", "STATIC_PREFILTER", "decide_static", "fit_static", "quick_share",
           "StaticSource", "static_source", "static_possible", "parse_static", "refined_or_first",
           "remove_static", "still_locked"]

#: ``static``: find and remove a pattern fixed on the sensor (``auto``), always (``on``), never
STATIC = ("auto", "on", "off")
#: frames read to find the pattern (spread over the stack); the fewest ``on`` fits it with,
#: and the fewest ``auto`` looks for it in (fewer frames leave more of the scene in the fit)
STATIC_SAMPLES = 32
MIN_STATIC_FRAMES = 3
MIN_AUTO_FRAMES = 10
#: the side (px) of the frames' middle that the pattern is found in and the shifts measured
#: on (the whole frames: only the last fit)
DETECT_SIDE = 256
#: the sample's memory (bytes, float64 frames) at most: fewer frames of large ones
STATIC_SAMPLE_BYTES = 512 * 2 ** 20
#: a pattern matters where its band-pass energy (less its noise) is this share of the scene's
#: (dust over a high-contrast scene pulls the peaks from a few per cent: docs/performance.md)
STATIC_SHARE = 0.03
#: ... and this share where the sample's frames have fewer pixels than this: the share's noise
#: grows as the sample shrinks (a noisy 64x64 stack without a pattern reached 0.044)
SMALL_FRAME_SHARE = 0.05
SMALL_FRAME_PIXELS = 128 * 128
#: ``auto`` fits the pattern only where :func:`quick_share` reaches this, a little below
#: :data:`STATIC_SHARE` (the one-step share is within a few per cent of the fit's but where
#: frames lock at zero shift, which is checked apart; stacks without a pattern stay far below)
QUICK_SHARE = 0.025
#: the sample's median confidence at which ``auto`` keeps its first shifts where the model's
#: own move the frames less (:func:`_shrunk`: it took the scene's motion for the pattern)
TRUSTED_CONFIDENCE = 3.0
#: the least span (px) of the first shifts on an axis that :func:`_shrunk` compares
SHRUNK_SPAN = 0.5
#: frames "locked" at zero shift: this share of them within this radius (px) of it
LOCK_SHARE = 1 / 3
LOCK_RADIUS = 0.25
#: ... or on one axis alone: this share of them within this radius (px) of zero on it while
#: they move along the other (:func:`_locked`)
AXIS_LOCK_SHARE = 2 / 3
AXIS_LOCK_RADIUS = 0.05
AXIS_MOVES = 1.0
#: a start of the refit whose frames' median confidence (peak over second peak) is below this
#: shows no scene that moves, only noise: it is not taken
MIN_CONFIDENCE = 1.2
#: measure-and-refit rounds per start, alternation steps per fit
STATIC_ROUNDS = 2
FIT_STEPS = 3
#: the pattern is fitted where at least this share of the frames see the scene
MIN_SEEN = 0.25
#: the regularization of frequencies the drift does not resolve, its largest gain, the taper
#: (px) of the frames' edges on the canvas, and the band-pass (DoG sigmas, px) of the share
EPSILON = 0.02
MAX_GAIN = 20.0
TAPER = 4
#: frames x canvas pixels a batch of the fit transforms at once (a few complex arrays of it)
FIT_BATCH_ELEMENTS = 2 ** 23
SHARE_BAND = (1.0, 4.0)
#: the side (frequency bins) of the box that smooths the fitted pattern's power before its
#: noise is weighed against it (:func:`_unbiased`)
POWER_BOX = 5
#: the prefilter of the passes that measure frames with the pattern removed: what the drift
#: left of it (the slow part) is static too
STATIC_PREFILTER = "dog:1,4"


def matters_from(frame_shape) -> float:
    """The static share from which ``auto`` removes a pattern found in sample frames of
    ``frame_shape``.

    >>> matters_from((256, 256)), matters_from((64, 64))
    (0.03, 0.05)
    """
    small = frame_shape[0] * frame_shape[1] < SMALL_FRAME_PIXELS
    return SMALL_FRAME_SHARE if small else STATIC_SHARE


def static_possible(opts) -> str | None:
    """Why ``static`` cannot act on a run with ``opts`` (a short phrase), or ``None``: the
    pattern is removed from the frames the rigid passes read, against a reference made of
    them."""
    from ._references import mean_count, reference_index, refined_passes

    ref = opts.reference
    internal = reference_index(ref) is not None or (
        isinstance(ref, str) and (ref in ("first", "previous") or refined_passes(ref) is not None
                                  or mean_count(ref, 1) is not None))
    for bad, what in ((opts.patches is not None, "patches (measured on the frames as read)"),
                      (opts.mask is not None, "a mask"),
                      (opts.model != "translation", f"model {opts.model}"),
                      (not internal, "a reference image of its own (it holds no pattern)")):
        if bad:
            return what
    return None


def _taper(shape, r, xp):
    """A window of ``shape``: 1 inside, a raised cosine over ``r`` px at every edge (kept on
    its device: :func:`_constant`)."""
    return _constant(xp, "taper", tuple(shape), r)


def _taper_host(shape, r):
    def one(n):
        t = np.ones(n)
        k = min(r, n // 2)
        ramp = 0.5 - 0.5 * np.cos(np.pi * (np.arange(k) + 0.5) / max(k, 1))
        t[:k], t[n - k:] = ramp, ramp[::-1]
        return t
    return one(shape[0])[:, None] * one(shape[1])[None, :]


#: the most elements a kept constant holds (:func:`_constant`): the sample's middles and their
#: canvases; the whole frames' last fit, where a pattern was found, makes its own
CONSTANT_ELEMENTS = 2 ** 20


def _constant(xp, kind, shape, *args):
    """The host-made array ``kind`` (``"taper"``, ``"band"``: :func:`_band`; ``"columns"``:
    how often the rfft grid of a ``shape`` counts each column) of ``shape`` on ``xp``'s
    device, made once a shape and device up to :data:`CONSTANT_ELEMENTS`: the band-passes'
    exponentials took the host longer than the estimate's GPU work (it runs on every ``auto``
    run)."""
    if shape[0] * shape[1] > CONSTANT_ELEMENTS:  # (made for this call, on its stream)
        a = _constant_host(kind, shape, args)
        return a if xp is np else xp.asarray(a)
    return _constant_on(kind, shape, args, None if xp is np else xp.cuda.Device().id)


@functools.lru_cache(maxsize=16)
def _constant_on(kind, shape, args, device_id):
    a = _constant_host(kind, shape, args)
    if device_id is None:
        a.flags.writeable = False  # (shared by every call)
        return a
    import cupy

    from ..._cuda import upload_shared

    with cupy.cuda.Device(device_id):
        return upload_shared(a)


def _constant_host(kind, shape, args):
    if kind == "taper":
        return _taper_host(shape, *args)
    if kind == "band":
        return _band_host(shape)
    a = np.ones(shape[1] // 2 + 1)  # (the columns an rfft leaves out count twice, but for 0
    a[1:(shape[1] + 1) // 2] = 2.0  # and the Nyquist one)
    return a


class _Canvas:
    """Fourier shifts of frames padded to a canvas ``margin`` px larger on every side, a batch
    of them at once.  The phase ramps are made on the host from their separable factors (a
    few numbers a frame) and the operators with numbers are CuPy's ufuncs: ``array * number``
    goes through NumPy's ufunc protocol, whose first use imports cupyx (0.35 s of a one-shot
    run)."""

    def __init__(self, frame_shape, margin, xp, fast=False):
        self.xp, self.m = xp, margin
        self.h, self.w = frame_shape
        self.shape = (self.h + 2 * margin, self.w + 2 * margin)
        if fast:  # (a 5-smooth size: a side of a large prime factor transforms several x slower)
            self.shape = tuple(next_smooth(n) for n in self.shape)
        self.ky = np.fft.fftfreq(self.shape[0])
        self.kx = np.fft.rfftfreq(self.shape[1])
        #: frames a batch holds (a few complex canvases of that many frames at once)
        self.batch = max(1, FIT_BATCH_ELEMENTS // (self.shape[0] * self.shape[1]))

    @classmethod
    def for_shifts(cls, frame_shape, shifts, xp, fast=False):
        """The canvas of frames moved by ``shifts`` (K, 2): a margin of the largest shift, the
        taper and two pixels on every side (``fast``: more on the bottom and the right, to a
        size the transforms are fast at)."""
        return cls(frame_shape, int(math.ceil(float(np.abs(shifts).max(initial=0.0))))
                   + TAPER + 2, xp, fast)

    def batches(self, k):
        return [slice(i, min(i + self.batch, k)) for i in range(0, k, self.batch)]

    def pad(self, imgs):
        out = self.xp.zeros((len(imgs),) + self.shape, self.xp.float64)
        out[:, self.m:self.m + self.h, self.m:self.m + self.w] = imgs
        return out

    def crop(self, imgs):
        return imgs[..., self.m:self.m + self.h, self.m:self.m + self.w]

    def spectrum(self, imgs):
        return self.xp.fft.rfft2(imgs)

    def _factors(self, d, weights=None):
        ey = np.exp(np.outer(d[:, 0], -2j * math.pi * self.ky))
        ex = np.exp(np.outer(d[:, 1], -2j * math.pi * self.kx))
        return ey if weights is None else ey * np.asarray(weights)[:, None], ex

    def moved(self, spectra, d):
        """The images (K, H, W) of ``spectra`` ((K or 1, H, W // 2 + 1)) with their content
        moved by ``d`` ((K, 2): dy, dx px)."""
        ey, ex = (self.xp.asarray(f) for f in self._factors(np.asarray(d, np.float64)))
        return self.xp.fft.irfft2(spectra * ey[:, :, None] * ex[:, None, :], s=self.shape)

    def summed(self, spectra, d, weights):
        """The spectrum of ``sum_t weights_t * moved(spectra_t, d_t)`` (linear: the sum of the
        frames' spectra, one transform back instead of one a frame)."""
        ey, ex = (self.xp.asarray(f) for f in self._factors(np.asarray(d, np.float64), weights))
        return (spectra * ey[:, :, None] * ex[:, None, :]).sum(axis=0)

    def ramp_sum(self, d, weights):
        """``sum_t weights_t * ramp(d_t)`` on the canvas's rfft grid: a product of the ramps'
        separable factors, ``(H, K) @ (K, W // 2 + 1)``."""
        ey, ex = self._factors(np.asarray(d, np.float64), weights)
        return self.xp.asarray(np.ascontiguousarray(ey.T)) @ self.xp.asarray(ex)


def _phi2(shape, shifts, xp, mirror=True):
    """``|phi(k)|^2`` on the (mirrored) frame grid: ``phi`` the mean of the shifts' phase
    ramps, 1 where the shifts move nothing at that frequency, near 0 where they spread it."""
    h, w = (2 * shape[0], 2 * shape[1]) if mirror else shape
    d = np.asarray(shifts, np.float64)
    ey = np.exp(np.outer(d[:, 0], -2j * math.pi * np.fft.fftfreq(h))) / len(d)
    ex = np.exp(np.outer(d[:, 1], -2j * math.pi * np.fft.rfftfreq(w)))
    phi = xp.asarray(np.ascontiguousarray(ey.T)) @ xp.asarray(ex)
    return (phi * phi.conj()).real


def _regularized_gain(a2, xp):
    """``(reg, gain)`` of ``|phi|^2`` ``a2``: the regularization of the frequencies the drift
    does not resolve, and the least-squares gain ``1 / (1 - |phi|^2 + reg)`` (at most
    :data:`MAX_GAIN`)."""
    reg = xp.multiply(a2, EPSILON)
    return reg, xp.minimum(xp.reciprocal(xp.add(xp.subtract(1.0, a2), reg)), MAX_GAIN)


def _median(x, xp, axis=None):
    """``numpy.median(x, axis)`` (no NaN; ``axis`` None or 0), by a sort on CuPy (whose median
    divides arrays by numbers: NumPy's ufunc protocol, which imports cupyx)."""
    if xp is np:
        return np.median(x, axis=axis)
    s = xp.sort(x.ravel() if axis is None else x, axis=0)
    n = s.shape[0]
    return s[n // 2] if n % 2 else xp.multiply(xp.add(s[n // 2 - 1], s[n // 2]), 0.5)


def _band(shape, xp):
    """The DoG band-pass :data:`SHARE_BAND` as a Fourier multiplier on the rfft grid (kept on
    its device: :func:`_constant`)."""
    return _constant(xp, "band", tuple(shape))


def _band_host(shape):
    ky = np.fft.fftfreq(shape[0])[:, None]
    kx = np.fft.rfftfreq(shape[1])[None, :]
    k2 = (2 * np.pi) ** 2 * (ky ** 2 + kx ** 2)
    s1, s2 = SHARE_BAND
    return np.exp(-k2 * s1 ** 2 / 2) - np.exp(-k2 * s2 ** 2 / 2)


def _column(values, xp):
    """Host numbers a frame as a ``(K, 1, 1)`` array on ``xp``'s device."""
    return xp.asarray(np.asarray(values, np.float64)[:, None, None])


def fit_static(frames, shifts, xp, steps=FIT_STEPS):
    """The pattern fixed on the sensor of ``frames`` at ``shifts``, and the fit's figures.

    Parameters
    ----------
    frames : (K, H, W) array on ``xp``'s device
        The frames (any real type; computed in float64).
    shifts : (K, 2) array-like
        Each frame's shift ``(dy, dx)`` that aligns it with frame 0 (xcorr's convention).
    xp : module
        NumPy or CuPy.
    steps : int
        Alternation steps.

    Returns
    -------
    pattern : (H, W) float64 on ``xp``'s device
        ``P`` of the model (see the module's docstring), its mean that of the frames' offset.
    info : dict
        ``residual`` (RMS of the frames less the model where the scene is seen by at least
        half of them), ``covered`` (the share of those pixels), ``share`` (the pattern's
        band-pass energy, less that of its noise, over the scene's) and ``brightness`` (K,).
    """
    f = xp.asarray(frames, xp.float64)
    d = np.asarray(shifts, np.float64)
    k, h, w = f.shape
    cv = _Canvas.for_shifts((h, w), d, xp)
    batches = cv.batches(k)
    taper = _taper((h, w), TAPER, xp)
    weight = cv.spectrum(cv.pad(taper[None]))[0]
    a2 = _phi2((h, w), d, xp)
    reg, gain = _regularized_gain(a2, xp)
    p0 = float(_median(f, xp))
    f_mean = float(xp.mean(f))
    pattern = xp.full((h, w), p0)
    a, c = np.ones(k), np.zeros(k)

    def scene(pattern, a, c):
        base = f_mean - float(xp.mean(pattern))
        num = xp.zeros(cv.shape[:1] + (cv.shape[1] // 2 + 1,), xp.complex128)
        for b in batches:
            x = xp.subtract(f[b] - pattern, base) - _column(c[b], xp)
            num += cv.summed(cv.spectrum(cv.pad(x * taper)), d[b], a[b])
        num = xp.fft.irfft2(num, s=cv.shape)
        den = xp.fft.irfft2(weight * cv.ramp_sum(d, a ** 2), s=cv.shape)
        seen = xp.greater_equal(den, 0.5 * float(np.max(a ** 2)))
        return xp.where(seen, num / xp.where(seen, den, 1.0), 0.0), seen, den, base

    def mirrored(img):  # (numpy.pad's "symmetric" by a whole side: the image flipped)
        img = xp.concatenate([img, img[::-1]], axis=0)
        return xp.concatenate([img, img[:, ::-1]], axis=1)

    for step in range(steps + 1):
        s, seen, den, base = scene(pattern, a, c)
        sf, seen_f = cv.spectrum(s[None]), cv.spectrum(seen.astype(xp.float64)[None])
        total, count = xp.zeros((h, w)), xp.zeros((h, w))
        last = step == steps
        if last:
            den_f = cv.spectrum(den[None])
            good_least = 0.5 * k * float(np.mean(a ** 2))
            sq, good_n = xp.zeros(()), xp.zeros((), xp.int64)
        for b in batches:
            u = cv.crop(cv.moved(sf, -d[b]))
            v = xp.greater(cv.crop(cv.moved(seen_f, -d[b])), 0.99)
            y = xp.subtract(f[b] - pattern, base)
            if step >= 1 and not last:  # the frames' brightness and offset, by least squares
                vf = v.astype(xp.float64)
                uv, yv = u * vf, y * vf
                sums = xp.stack([x.sum(axis=(1, 2)) for x in (vf, uv, yv, u * uv, u * yv)])
                n, su, sy, suu, suy = backend.to_numpy(sums)
                with np.errstate(divide="ignore", invalid="ignore"):
                    um, ym = su / n, sy / n
                    var, cov = suu - n * um * um, suy - n * um * ym
                    # (one pass: a brightness flat over the frame leaves rounding, not 0)
                    fit = (n > 2) & (var > 1e-12 * np.abs(suu)) & (var > 0)
                    a[b] = np.where(fit, cov / var, a[b])
                    c[b] = np.where(fit, ym - a[b] * um, c[b])
            r = xp.where(v, y - _column(c[b], xp) - _column(a[b], xp) * u, 0.0)
            if last:
                good = v & xp.greater_equal(cv.crop(cv.moved(den_f, -d[b])), good_least)
                sq += xp.square(xp.where(good, r, 0.0)).sum()
                good_n += good.sum()
            total += r.sum(axis=0)
            count += v.sum(axis=0)
        if last:
            break
        if step >= 1:
            a = np.where(np.isfinite(a) & (a > 0), a, 1.0)
            a, c = a / math.sqrt(float(np.mean(a ** 2))), c - c.mean()
        enough = xp.greater_equal(count, max(2.0, MIN_SEEN * k))  # (a few frames' mean: noise)
        update = xp.fft.rfft2(mirrored(xp.where(enough, total / xp.maximum(count, 1.0), 0.0))) \
            - reg * xp.fft.rfft2(mirrored(xp.subtract(pattern, p0)))
        pattern = pattern + xp.fft.irfft2(update * gain, s=(2 * h, 2 * w))[:h, :w]
    noise = float(_noise_variance(f, xp))
    # where the scene is not seen, only what stands out of the temporal median (hot pixels):
    # the median itself would leave a flat strip, an edge that does not move
    enough = xp.greater_equal(count, max(2.0, MIN_SEEN * k))
    pattern = pattern + xp.where(enough, 0.0, _outliers(_median(f, xp, axis=0), noise, xp))
    good_n = int(good_n)
    residual = math.sqrt(float(sq) / max(good_n, 1))
    return pattern, {"residual": residual, "covered": good_n / f.size,
                     "share": float(_share(pattern, cv.crop(s), a2, gain, noise / k, xp)),
                     "brightness": a}


def _outliers(img, noise, xp):
    """``img`` less the median of its 3x3 neighbourhood where they differ by more than 5
    noise sigmas (``noise``: a variance), else 0."""
    h, w = img.shape
    p = xp.pad(img, 1, mode="edge")
    local = _median(xp.stack([p[i:i + h, j:j + w] for i in range(3) for j in range(3)]), xp,
                    axis=0)
    out = img - local
    return xp.where(xp.greater(xp.abs(out), 5 * math.sqrt(noise)), out, 0.0)


def _noise_variance(frames, xp):
    """The frames' mean noise variance per pixel, from their finest diagonal detail (Haar:
    ``(a - b - c + d) / 2`` of each 2x2 block, which column and row offsets and smooth
    structure leave out), its squares clipped at 20 times their median (edges, hot pixels): a
    0-d array on ``xp``'s device (read by the caller: no wait for the device here)."""
    f = frames[:, :frames.shape[1] // 2 * 2, :frames.shape[2] // 2 * 2]
    hh = xp.multiply(f[:, 0::2, 0::2] - f[:, 1::2, 0::2] - f[:, 0::2, 1::2] + f[:, 1::2, 1::2],
                     0.5)
    sq = hh * hh
    return xp.mean(xp.minimum(sq, xp.multiply(_median(sq, xp), 20.0)))


def _box_mean(img, r, xp):
    """``img``'s mean over a ``(2r+1)``-wide square around each element, wrapping around (a
    spectrum's neighbourhood)."""
    for axis in (0, 1):
        total = img
        for s in range(1, r + 1):
            total = total + xp.roll(img, s, axis=axis) + xp.roll(img, -s, axis=axis)
        img = xp.multiply(total, 1.0 / (2 * r + 1))
    return img


def _unbiased(pattern, info, k, xp):
    """``pattern`` (H, W) of :func:`fit_static` (and its ``info``) fitted to ``k`` frames,
    weighed per frequency so that the frames it is removed from are not correlated at zero
    shift on the sensor.

    The fit's pattern ``P + e`` holds each fitted frame's noise over their number (``e``, of
    power ``N``): removed from every frame, it leaves their noises anti-correlated where the
    sensor's pixels meet (``-N``, a dip that pushes peaks away from zero shift), while a
    pattern left in them correlates (a pull to zero).  With a gain ``g`` the two balance where
    ``(1 - g)^2 (V + N) = N``, ``V + N`` the fitted pattern's power there (smoothed over
    :data:`POWER_BOX` bins): ``g = 1 - sqrt(N / (V + N))``, which weighs the pattern less than
    a Wiener filter (``1 - N / (V + N)``) would.  Strong patterns (hot pixels, blobs, dust)
    pass nearly whole, a faint pixel pattern of the order of the noise is mostly left in.  The
    column offsets (each column's mean, of noise ``N / H``) are kept whole, and the smoothing
    leaves out their row of the spectrum (zero once they are taken out).  ``N``: the fit's
    residual (the frames less the model: their noise, not a pattern on the sensor) squared,
    over ``k``, taken as white.

    The balance holds between frames of the fit (at most :data:`STATIC_SAMPLES`); a frame
    outside it keeps more of its own noise's match with the weighed pattern, yet on 128-frame
    stacks this weight still measured better than the whole pattern or a Wiener weight."""
    h, w = pattern.shape
    noise = info["residual"] ** 2 / k
    col = xp.mean(pattern, axis=0, keepdims=True)
    spec = xp.fft.fft2(pattern - col)
    rows = xp.ones((h, 1))
    rows[0] = 0.0  # (ky = 0: the column offsets' row, zero here)
    r = POWER_BOX // 2
    power = xp.divide(_box_mean(xp.multiply((spec * spec.conj()).real, 1.0 / (h * w)) * rows,
                                r, xp),
                      xp.maximum(_box_mean(xp.broadcast_to(rows, (h, w)), r, xp), 1e-300))
    gain = xp.maximum(xp.subtract(1.0, xp.sqrt(xp.divide(noise, xp.maximum(power, 1e-300)))),
                      0.0)
    return col + xp.fft.ifft2(spec * gain).real


def _share(pattern, scene, a2, gain, noise, xp, grid=None):
    """The pattern's band-pass energy less what ``noise`` (the variance of its pixels' noise
    before the fit's gain) puts there, over the scene's, inside the frame; ``a2`` and
    ``gain`` on the rfft grid of ``grid`` (default: the mirrored frame, ``2H x 2W``).  A 0-d
    array on ``xp``'s device: its figures are queued, not each waited for."""
    h, w = pattern.shape
    band = _band((h, w), xp)
    by, bx = min(4 * TAPER, h // 4), min(4 * TAPER, w // 4)  # (the filter's wrap-around)
    inner = (slice(by, h - by), slice(bx, w - bx))

    def energy(img):
        out = xp.fft.irfft2(xp.fft.rfft2(img - xp.mean(img)) * band, s=(h, w))
        return xp.mean(xp.square(out[inner]))

    gh, gw = grid or (2 * h, 2 * w)
    big = _band((gh, gw), xp)
    # the noise's gain through the fit
    spread = xp.subtract(1.0, a2) * xp.square(gain)
    ratio = xp.divide(xp.sum(xp.square(big) * xp.minimum(spread, MAX_GAIN ** 2)
                             * _constant(xp, "columns", (gh, gw))), gh * gw)
    return xp.divide(xp.subtract(energy(pattern), xp.multiply(ratio, noise)),
                     xp.maximum(energy(scene), 1e-300))


def quick_share(frames, shifts, xp):
    """The static share of :func:`fit_static`'s ``info`` estimated in one step, for ``auto``
    to pass over the fit where nothing is there: the pattern and the scene solved per
    frequency from the frames' mean and their aligned mean on the padded canvas
    (``M = phi* S + P``, ``A = S + phi P``, the fit's first step without the brightness, the
    offsets and the edges' weights), one batch of transforms instead of the fit's dozens.

    >>> from scipy import ndimage as ndi
    >>> rng = np.random.default_rng(0)
    >>> scene = 10 * ndi.gaussian_filter(rng.normal(size=(80, 80)), 1.5)
    >>> d = np.trunc(rng.uniform(-6, 6, (12, 2))); d[0] = 0
    >>> frames = np.stack([scene[8 + int(a):72 + int(a), 8 + int(b):72 + int(b)] for a, b in d])
    >>> pattern = np.zeros((64, 64)); pattern[::7, ::5] = 8.0
    >>> quick_share(frames, d, np) < 0.01 < 0.05 < quick_share(frames + pattern, d, np)
    True
    """
    f = xp.asarray(frames, xp.float64)
    d = np.asarray(shifts, np.float64)
    k, h, w = f.shape
    cv = _Canvas.for_shifts((h, w), d, xp, fast=True)
    taper = _taper((h, w), TAPER, xp)
    base = xp.mean(f)  # (on the device: nothing waits for it)
    mean, aligned = 0, 0
    for b in cv.batches(k):
        x = cv.spectrum(cv.pad(xp.subtract(f[b], base) * taper))
        mean = mean + x.sum(axis=0)
        aligned = aligned + cv.summed(x, d[b], np.ones(len(x)))
    phi = cv.ramp_sum(d, np.full(k, 1.0 / k))
    mean, aligned = xp.multiply(mean, 1.0 / k), xp.multiply(aligned, 1.0 / k)
    a2 = (phi * phi.conj()).real
    gain = _regularized_gain(a2, xp)[1]
    p = (mean - phi.conj() * aligned) * gain
    pattern = cv.crop(xp.fft.irfft2(p, s=cv.shape)[None])[0]
    scene = cv.crop(xp.fft.irfft2(aligned - phi * p, s=cv.shape)[None])[0]
    noise = xp.divide(_noise_variance(f, xp), k)
    return float(_share(pattern, scene, a2, gain, noise, xp, grid=cv.shape))  # (one wait)


def _measure(frames, opts, xp, prefilter):
    """``(shifts, confidence, bad)`` of ``frames`` (K, H, W) measured against the first of
    them in one pass with the run's options (linear, no Lucas-Kanade) and ``prefilter``: the
    shifts, their median confidence, and the frames with no distinct peak in the search."""
    from ...io import ArraySource
    from ._measure import measure_frames, prepared_reference

    run = opts._decided(prefilter=prefilter, reference="first", boundary="linear",
                        lucas_kanade="off", upsample=None if opts.subpixel != "upsample"
                        else opts.upsample).measuring()
    src = ArraySource(frames.astype(xp.float32))
    ref = prepared_reference(run, src, xp, len(frames))
    table, _ = measure_frames(run, src, xp, len(frames), ref)
    shifts = table[:, COLUMN["dy"]:COLUMN["dx"] + 1].astype(np.float64)
    conf = table[:, COLUMN["confidence"]]
    # (a peak on the border of the search, or none: no shift to fit the model with)
    bad = (table[:, COLUMN["border"]] > 0) | ~np.isfinite(shifts).all(axis=1)
    return shifts, float(np.median(conf[1:])) if len(conf) > 1 else 0.0, bad


def _middle(frames):
    """``frames`` (K, H, W) cut to their middle :data:`DETECT_SIDE` px (a view), where larger:
    what finds the pattern and measures the shifts (the fit's cost grows with the area)."""
    h, w = frames.shape[1:]
    y0, x0 = max(0, (h - DETECT_SIDE) // 2), max(0, (w - DETECT_SIDE) // 2)
    return frames[:, y0:y0 + DETECT_SIDE, x0:x0 + DETECT_SIDE]


def _locked(shifts) -> bool:
    """Whether the frames are locked at zero shift (:data:`LOCK_SHARE` of them within
    :data:`LOCK_RADIUS` px), or on one axis while they move along the other (a hot or dead
    column or row holds that axis: :data:`AXIS_LOCK_SHARE` within :data:`AXIS_LOCK_RADIUS`
    px of zero on it, a tenth of them :data:`AXIS_MOVES` px or more off on the other)."""
    d = np.asarray(shifts)[1:]
    d = d[np.isfinite(d).all(axis=1)]  # (frames not measured count neither way)
    if not len(d):
        return False
    if np.mean(np.hypot(d[:, 0], d[:, 1]) < LOCK_RADIUS) >= LOCK_SHARE:
        return True
    held = np.mean(np.abs(d) < AXIS_LOCK_RADIUS, axis=0) >= AXIS_LOCK_SHARE  # (y, x)
    moves = np.mean(np.abs(d) >= AXIS_MOVES, axis=0) >= 0.1
    return bool((held & moves[::-1]).any())


def _shrunk(first, model) -> bool:
    """Whether the ``model``'s shifts span less than half of the ``first`` shifts' on an axis
    where those span :data:`SHRUNK_SPAN` px or more (a pattern pulls frames toward zero shift:
    removed, the frames move as much or more); a span from the 10th to the 90th percentile
    (one frame measured wrong moves no span)."""
    def span(d):
        d = np.asarray(d)[1:]
        d = d[np.isfinite(d).all(axis=1)]
        return np.subtract(*np.percentile(d, [90, 10], axis=0)) if len(d) else np.zeros(2)

    a, b = span(first), span(model)
    return bool(np.any((a >= SHRUNK_SPAN) & (b < 0.5 * a)))


def _removed(frames, pattern, xp):
    return frames - (pattern - xp.mean(pattern))


def _read_sample(src, xp, whole=False, index=None):
    """``(frames, index)``: the sample's frames (K, h, w) float64 on ``xp``'s device, cut to
    their middle (:func:`_middle`; ``whole``: as they are), the unusable (NaN, Inf, constant)
    left out, and the indices of those read (``index``: these frames)."""
    if index is None:
        frame_bytes = 8 * src.frame_shape[0] * src.frame_shape[1]
        count = max(MIN_AUTO_FRAMES, min(STATIC_SAMPLES, STATIC_SAMPLE_BYTES // frame_bytes))
        index = spread_frames(src.n_frames, count)
    # (stacked as read, then converted once: a conversion a frame launched a kernel each)
    frames = xp.stack([(lambda f: f if whole else _middle(f[None])[0])(
        xp.asarray(src.read(i, i + 1)[0])) for i in index]).astype(xp.float64)
    # (one reduction a figure for the whole sample, copied together: a wait each cost more)
    flat = frames.reshape(len(index), -1)
    finite, top, low = host_copies([xp.isfinite(flat).all(axis=1), flat.max(axis=1),
                                    flat.min(axis=1)])
    keep = np.flatnonzero(finite & (top > low))
    if not keep.size:
        return None, []
    frames = frames if keep.size == len(index) else frames[xp.asarray(keep)]
    return frames, [index[k] for k in keep]


def _sample_exponent(src, frames) -> int:
    """:func:`stack_exponent` of a sample ``frames`` of ``src`` (float64 frames beyond float32's
    range): 0 for a source of integers, whose frame is then not copied to the host."""
    return stack_exponent(frames[0]) if np.dtype(src.dtype).kind == "f" else 0


#: counts the one-step estimates this process makes for GPU runs (:func:`_estimate_on`;
#: ``next`` of it is atomic: runs in threads take a number each)
_GPU_ESTIMATES = itertools.count(1)


def _estimate_on(frames, xp):
    """``(frames, xp)`` for :func:`quick_share`: a process's first estimate for a GPU run on
    the host (on the GPU each of its routines is compiled or loaded at a first use: seconds on
    a fresh machine, more than the host's transforms take), later ones on the GPU (where the
    host's transforms would take 10x longer)."""
    if xp is np:
        return frames, np
    if next(_GPU_ESTIMATES) == 1:
        return backend.to_numpy(frames), np
    return xp.asarray(frames), xp


def _sample_on(src, xp):
    """Where the sample is read to: ``xp``'s device where ``src``'s frames lie there (CuPy in),
    else the host."""
    return xp if xp is not np and backend.is_cupy_array(src.read(0, 1)) else np


def decide_static(spec, src, opts, xp):
    """``(pattern, note, settings)`` of ``static=spec`` for the open source ``src``: the
    pattern to remove from every frame read (``(H, W)`` zero-mean float64 on ``xp``'s device)
    or ``None``, the note of what was decided (``None`` where nothing was found), and the
    figures for :attr:`AlignResult.settings` ``["static"]``.

    ``opts``: the run's options, ``prefilter`` decided (the sample's first measure reads
    with it)."""
    settings = {"mode": spec, "removed": False}
    if spec == "off":
        return None, None, settings
    why_not = static_possible(opts)
    if why_not is not None:
        settings["not_checked"] = why_not
        return None, None, settings
    least = MIN_AUTO_FRAMES if spec == "auto" else MIN_STATIC_FRAMES
    # (a file's or NumPy's sample on the host, where its figures use no CuPy routine a first
    # GPU run would compile, seconds; CuPy's on its device; its shifts by the run's pipeline)
    frames, index = None, []
    if src.n_frames >= least:
        on = _sample_on(src, xp)
        frames, index = _read_sample(src, on)
    if frames is None or len(frames) < least:
        settings["not_checked"] = f"fewer than {least} frames that can be measured"
        return None, (f"static on: fewer than {least} frames that can be measured: too few to "
                      "tell a pattern fixed on the sensor from the scene; the frames are "
                      "measured as they are" if spec == "on" else None), settings
    scale = _sample_exponent(src, frames)
    frames = scaled_by(frames, scale, on)
    change = brightness_change(backend.to_numpy(frames.mean(axis=(1, 2))))
    if spec == "auto" and change > AUTO_BRIGHTNESS_CHANGE:
        # (a background that is not bleached and a scene that is: the model cannot tell
        # them apart; the band-pass that prefilter auto chose there removes the background)
        settings["not_checked"] = f"the brightness changes by {100 * change:.0f}%"
        return None, None, settings
    # (found, and its shifts measured, on the frames' middle; the whole frames fitted last)
    shifts, conf, bad = _measure(frames, opts, xp, opts.prefilter)
    if bad.any():  # (those frames' shifts would fit the model wrong: left out)
        keep = np.flatnonzero(~bad)
        if len(keep) < least or keep[0] != 0:
            settings["not_checked"] = "the frames' peaks lie on the border of the search"
            return None, None, settings
        frames, shifts, index = frames[on.asarray(keep)], shifts[keep], [index[k] for k in keep]
    locked = _locked(shifts)
    if spec == "auto" and not locked:
        estimate = _estimate_on(frames, xp)
        quick = quick_share(estimate[0], shifts, estimate[1])
        if estimate[1] is xp:  # (uploaded for the estimate: the fit's frames)
            frames = estimate[0]
        if quick < QUICK_SHARE:  # (nothing there: the fit would say so at 10-20x the cost)
            settings.update(frames=len(frames), share=round(quick, 4), locked=False,
                            fitted=False)
            return None, None, settings
    frames = xp.asarray(frames)  # (the fit, where a pattern is suspected: on the device)
    pattern, info = fit_static(frames, shifts, xp)
    settings.update(frames=len(frames), share=round(info["share"], 4), locked=locked,
                    fitted=True)
    matters = matters_from(frames.shape[1:])
    if spec == "auto" and not locked and info["share"] < matters:
        return None, None, settings
    starts = [] if locked else [(shifts, conf)]
    starts.append(_measure(_removed(frames, _median(frames, xp, axis=0), xp), opts, xp,
                           STATIC_PREFILTER)[:2])
    if spec == "auto" and locked and info["share"] < matters and (
            starts[-1][1] < MIN_CONFIDENCE or _locked(starts[-1][0])):
        # (locked at zero, and the frames less their median show no motion either: a scene
        # that does not move, with no pattern's share, not frames a pattern holds)
        settings["still"] = True
        return None, None, settings
    best = None
    for d, c in starts:
        if c < MIN_CONFIDENCE or _locked(d):
            continue
        for _ in range(STATIC_ROUNDS):
            p = _unbiased(*fit_static(frames, d, xp), len(frames), xp)
            d, c, bad = _measure(_removed(frames, p, xp), opts, xp, STATIC_PREFILTER)
        p, fit = fit_static(frames, d, xp)
        better = best is None or fit["residual"] < best[1]["residual"]
        if not bad.any() and fit["covered"] > 0.25 and better:
            best = (d, fit)
    if best is not None and spec == "auto" and not locked and _shrunk(shifts, best[0]):
        # (the model took the scene's motion for the pattern: docs/performance.md, "Hard
        # stacks"; confident first shifts are kept as measured, else no frame is trusted)
        settings["shrunk"] = True
        if conf >= TRUSTED_CONFIDENCE:
            return None, None, settings
        best = None
    if best is None and spec == "auto":
        settings["unresolved"] = True
        return None, (f"static auto: a pattern fixed on the sensor is suspected (static share "
                      f"{info['share']:.2f}{', frames locked at zero shift' if locked else ''})"
                      " but the scene's motion could not be told from it: the frames are "
                      "measured as they are, every one flagged low_confidence"), settings
    d, fit = best if best is not None else (shifts, info)
    if tuple(frames.shape[1:]) != tuple(src.frame_shape):
        whole, kept = _read_sample(src, xp, whole=True, index=index)
        if whole is None or len(kept) < least:  # (finite in the middle, not at the edges)
            settings["not_checked"] = "the sample's whole frames hold NaN or Inf pixels"
            return None, None, settings
        d = d[[index.index(i) for i in kept]]
        frames, index = scaled_by(whole, scale, xp), kept
    pattern = _unbiased(*fit_static(frames, d, xp), len(frames), xp)
    settings.update(removed=True, share_after=round(fit["share"], 4),
                    sample=[int(i) for i in index])
    note = (f"static {spec}: a pattern fixed on the sensor removed before measuring (its "
            f"band-pass energy {info['share']:.2f} of the scene's"
            f"{'; frames locked at zero shift' if locked else ''}; estimated from "
            f"{len(frames)} frames)")
    return scaled_by(pattern - xp.mean(pattern), -scale, xp), note, settings


def remove_static(opts, src, executor, why):
    """The run's step ``static`` (after ``prefilter="auto"`` and the device are decided):
    ``(opts, src, settings, note, why)``, the source every later read takes (the pattern
    removed: :meth:`Executor.correct_static`, the aligned output excepted), the options with
    ``static`` what ran (``on`` where a pattern was removed, else ``off``) and
    ``prefilter="auto"`` now :data:`STATIC_PREFILTER` where a pattern was removed, and ``why``
    of that prefilter (``why``: :func:`~xcorr_app.alignment._options.resolve_auto`'s, None where
    the prefilter was given).  Runs shared out (GPUs, Dask) are not checked with ``auto``."""
    if executor.name != "process":
        return opts._decided(static="off"), src, {
            "mode": opts.static, "removed": False,
            **({} if opts.static == "off" else {"not_checked": "runs shared out"})}, None, why
    pattern, note, settings = decide_static(opts.static, src, opts, executor.xp)
    # (auto resolved, as the options recorded say what ran: on where a pattern was removed)
    opts = opts._decided(static="off" if pattern is None else "on")
    if pattern is None:
        return opts, src, settings, note, why
    src = executor.correct_static(src, pattern)
    if why is not None:
        opts = opts._decided(prefilter=STATIC_PREFILTER)
        why = (f"prefilter auto: {STATIC_PREFILTER} (band-pass: what the drift could not tell "
               "of the pattern fixed on the sensor from the scene is static too)")
    return opts, src, settings, note, why


def refined_or_first(settings, src, table, first, xp):
    """``(table, note)``: of a run that removed a pattern fixed on the sensor (``settings``:
    its ``static`` figures, the frames of its sample among them) and refined its shifts by the
    Lucas-Kanade fit that ``lucas_kanade="auto"`` turned on, the result ``table`` whose shifts
    the model explains better: the refinement's (``table``) or the first pass's against the
    first frame (``first``), by :func:`fit_static`'s residual on the sample's frames as they
    came (``src``: read before the pattern's removal; their middle, as the removal itself
    chooses between its starts); the note where the first pass's are kept, and
    ``settings["refinement"]`` which (``"refined"`` or ``"first"``) where it judged.  The
    pattern removed is an estimate, and what is left of it (a dust shadow's or a bright blob's
    rim) is fixed on the sensor: the refinement's fit against the frames' template can read it
    as motion, where the correlation's peak is pulled less; in dim frames the refinement is
    what makes the shifts good (the figures: docs/performance.md, "Hard stacks")."""
    index = settings.get("sample") or []
    if not settings.get("removed") or len(index) < MIN_STATIC_FRAMES:
        return table, None
    c = COLUMN
    shifts = [t[index, c["dy"]:c["dx"] + 1] for t in (table, first)]
    ok = np.isfinite(shifts[0]).all(axis=1) & np.isfinite(shifts[1]).all(axis=1)
    if ok.sum() < MIN_STATIC_FRAMES:
        return table, None
    # (their middle, as the removal measures and chooses: the fit's cost grows with the area)
    frames, kept = _read_sample(src, xp, index=[i for i, k in zip(index, ok) if k])
    if frames is None or len(kept) < MIN_STATIC_FRAMES:
        return table, None
    frames = scaled_by(frames, _sample_exponent(src, frames), xp)
    residual = []
    for t in (table, first):
        d = t[kept, c["dy"]:c["dx"] + 1]
        residual.append(fit_static(frames, d - d[0], xp)[1]["residual"])
    first_fits = residual[1] < residual[0]
    settings["refinement"] = "first" if first_fits else "refined"
    if not first_fits:
        return table, None
    return first, ("lucas_kanade auto: its refinement left out (a pattern fixed on the sensor "
                   "was removed, and the model of the frames fits the first pass's shifts "
                   f"better: residual {residual[1]:.4g} against {residual[0]:.4g}): the "
                   "shifts of the pass against the first frame")


def still_locked(settings, shifts) -> str | None:
    """Where a run removed a pattern (``settings``: its ``static`` figures) and still measured
    its frames locked at zero shift (:data:`LOCK_SHARE` of them within :data:`LOCK_RADIUS` px),
    the note that says so: what was left of the pattern holds them, so no frame's shift is
    trusted (the run flags every one); else ``None``."""
    if not settings.get("removed") or not _locked(shifts):
        return None
    return ("static: frames still locked at zero shift after the pattern fixed on the sensor "
            "was removed: what is left of it may hold any frame; every frame flagged "
            "low_confidence")


class StaticSource(WrappedSource):
    """A frame source whose frames are ``src``'s less ``pattern`` (float32; float64 frames
    stay float64), as the measuring passes, their templates and the quality report read them;
    the aligned output reads the frames as they are.  Read through :meth:`read` (no stack kept
    on a device, no file pages read directly).

    A frame constant as read (a blank one, a closed shutter's) stays as it is: less the
    pattern it is the pattern, which a pass would measure a shift for, and not flag.

    >>> from xcorr_app.io import ArraySource
    >>> frames = np.stack([np.arange(6, dtype=np.uint16).reshape(2, 3), np.ones((2, 3))])
    >>> src = StaticSource(ArraySource(frames.astype(np.uint16)), np.eye(2, 3))
    >>> src.read(0, 2).tolist(), src.dtype
    ([[[-1.0, 1.0, 2.0], [3.0, 3.0, 5.0]], [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]], dtype('float32'))
    """

    stack = None  # (the chunks are read through read(): corrected)
    stash = None
    stored = None
    own = ("_on_device", "pattern")

    def __init__(self, src, pattern):
        super().__init__(src)
        self.dtype = np.dtype(np.float64 if src.dtype == np.float64 else np.float32)
        self.pattern = np.asarray(backend.to_numpy(pattern), self.dtype)
        self._on_device = {}

    def _pattern_for(self, frames):
        xp = backend.array_module_of(frames)
        if xp is np:
            return self.pattern
        key = id(xp)
        if key not in self._on_device:
            self._on_device[key] = xp.asarray(self.pattern)
        return self._on_device[key]

    def read(self, start, stop, out=None):
        frames = self.src.read(start, stop)
        xp = backend.array_module_of(frames)
        fixed = frames.astype(self.dtype, copy=True) if xp is np else \
            frames.astype(self.dtype)
        fixed -= self._pattern_for(fixed)
        if xp is np:
            constant = (frames == frames[:, :1, :1]).reshape(len(frames), -1).all(axis=1)
        else:  # (the shipped kernel's flags: CuPy's reductions compile at a first run)
            from ._frame_stats import frame_stats

            constant = backend.to_numpy(frame_stats(frames)[2])
        if constant.any():
            at = np.flatnonzero(constant)
            fixed[at] = frames[at].astype(self.dtype)
        if out is None:
            return fixed
        out[...] = backend.to_numpy(fixed) if isinstance(out, np.ndarray) else fixed
        return out


def static_source(src, pattern):
    """``src`` read less ``pattern`` (:class:`StaticSource`), or ``src`` itself for ``None``."""
    return src if pattern is None else StaticSource(src, pattern)


def parse_static(value) -> str:
    """``static`` checked: one of :data:`STATIC` (an :class:`~xcorr_app.errors.InputError`
    otherwise)."""
    from ...errors import InputError

    if isinstance(value, bool) or not isinstance(value, str) or value not in STATIC:
        shown = value if isinstance(value, (str, numbers.Number)) else type(value).__name__
        raise InputError(f"unknown static {shown!r}; use one of {', '.join(STATIC)}")
    return value
