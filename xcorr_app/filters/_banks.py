"""Filter banks and channel mixes for multi-channel stacks (``xcorr filter --bank/--mix``,
``xcorr align --features``), run by :func:`xcorr_app.conv2d` and :func:`xcorr_app.pointwise`.

* ``dog:S1,S2,...``: differences of gaussians of consecutive sigmas (``S1-S2``, ``S2-S3``, ...),
  a multi-scale band-pass bank;
* ``gabor:SIGMA,N[,WAVELENGTH]``: N orientations of a zero-mean cosine Gabor filter
  (wavelength 4 SIGMA by default);
* ``FILE.npy``: an (F, C, K, K) bank, or (F, K, K) applied to the channels' mean; odd K.

A bank over a C-channel stack applies each filter to the mean of the channels (the named
banks) or as given (a file).  Mixes: ``luma`` (ITU-R BT.601 weights of 3 channels) or an (F, C)
/ (C,) ``FILE.npy``.

Examples
--------
>>> bank_weights("dog:1,1.5,2", channels=1).shape
(2, 1, 17, 17)
>>> bank_weights("gabor:2,4", channels=3).shape
(4, 3, 17, 17)
>>> [round(float(v), 3) for v in mix_weights("luma", channels=3)[0]]
[0.299, 0.587, 0.114]
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._validation import check_radius, dog_sigmas, load_npy, positive

MAX_SIZE = 31
#: ``xcorr filter``'s banks refuse a gaussian that :data:`MAX_SIZE` cuts within this many
#: sigmas (its weights then miss over half a percent of theirs)
CUT_SIGMAS = 3
#: the most orientations of a gabor bank (a 31x31 filter tells about 50 apart; each costs a
#: filter pass of every frame)
MAX_ANGLES = 64
#: filters of a feature bank applied at once (the responses held are this many frames)
FEATURE_GROUP = 2
LUMA = (0.299, 0.587, 0.114)


def _grid(radius):
    r = np.arange(-radius, radius + 1, dtype=np.float64)
    return np.meshgrid(r, r, indexing="ij")


def _gauss2d(sigma, radius):
    y, x = _grid(radius)
    g = np.exp(-(x * x + y * y) / (2 * sigma * sigma))
    return g / g.sum()


def _numbers(spec, arg, count=None):
    try:
        vals = [float(v) for v in arg.split(",") if v.strip()]
    except ValueError:
        vals = []
    if not vals or (count is not None and len(vals) not in count):
        raise InputError(f"cannot parse bank {spec!r}: expected dog:S1,S2[,...], "
                         "gabor:SIGMA,N[,WAVELENGTH] or a FILE.npy")
    return vals


def _per_channel(filters, channels):
    """(F, K, K) -> (F, C, K, K): each filter applied to the mean of the channels."""
    f = np.asarray(filters, dtype=np.float32)
    return np.repeat(f[:, None] / channels, channels, axis=1).astype(np.float32)


def bank_weights(spec: str, channels: int, frame_shape=None) -> np.ndarray:
    """The (F, C, K, K) float32 weights of a bank spec for ``channels`` input channels; with
    ``frame_shape``, a sigma whose gaussian reaches far past the frame is refused
    (:func:`check_radius`: the filters are cut at :data:`MAX_SIZE` taps, so it would filter
    nothing it names)."""
    name, _, arg = str(spec).partition(":")
    if name in ("dog", "gabor") and frame_shape is not None:
        sigmas = _numbers(spec, arg)
        for sigma in sigmas[:1] if name == "gabor" else sigmas:
            check_radius(4 * sigma + 0.5, frame_shape, f"bank {spec}")
            if MAX_SIZE // 2 < CUT_SIGMAS * sigma:  # (cut inside 3 sigmas: another filter)
                raise InputError(
                    f"bank {spec}: sigma {sigma:g} needs a filter about {2 * int(4 * sigma) + 1}"
                    f" px wide, and a bank's filters are at most {MAX_SIZE}x{MAX_SIZE} (sigma up"
                    f" to {MAX_SIZE // 2 / CUT_SIGMAS:g}); for wider scales filter with --kernel"
                    f" (gaussian:S, dog:S1,S2: any width), or bin the frames first")
    if name == "dog":
        sig = _numbers(spec, arg)
        if len(sig) < 2:
            raise InputError(f"bank {spec!r}: dog needs at least two sigmas")
        try:  # the rule of --kernel dog:S1,S2 for every consecutive pair
            for lo, hi in zip(sig[:-1], sig[1:]):
                dog_sigmas(lo, hi)
        except InputError as exc:
            raise InputError(f"bank {spec!r}: {exc}") from None
        radius = min(MAX_SIZE // 2, int(4 * max(sig) + 0.5))
        gs = [_gauss2d(s, radius) for s in sig]
        return _per_channel([a - b for a, b in zip(gs[:-1], gs[1:])], channels)
    if name == "gabor":
        vals = _numbers(spec, arg, count=(2, 3))
        try:
            sigma = positive(vals[0], "gabor sigma")
            if len(vals) == 3:
                positive(vals[2], "gabor wavelength")
        except InputError as exc:
            raise InputError(f"bank {spec!r}: {exc}") from None
        if not np.isfinite(vals[1]) or int(vals[1]) != vals[1] or not 1 <= vals[1] <= MAX_ANGLES:
            raise InputError(f"bank {spec!r}: the number of orientations must be a whole number "
                             f"from 1 to {MAX_ANGLES}")
        n = int(vals[1])
        wavelength = vals[2] if len(vals) == 3 else 4 * sigma
        radius = min(MAX_SIZE // 2, int(4 * sigma + 0.5))
        y, x = _grid(radius)
        out = []
        for k in range(n):
            t = np.pi * k / n
            u = x * np.cos(t) + y * np.sin(t)
            g = np.exp(-(x * x + y * y) / (2 * sigma * sigma)) * np.cos(2 * np.pi * u / wavelength)
            g -= g.mean()
            out.append(g / np.abs(g).sum())
        return _per_channel(out, channels)
    if str(spec).endswith(".npy"):
        w = _load(spec)
        if w.ndim == 3:
            w = _per_channel(w, channels)
        if w.ndim != 4 or w.shape[1] != channels:
            raise InputError(f"bank {spec}: expected (F, {channels}, K, K) or (F, K, K) for "
                             f"{channels}-channel frames, got shape {w.shape}")
        if w.shape[2] != w.shape[3] or w.shape[2] % 2 == 0 or w.shape[2] > MAX_SIZE:
            raise InputError(f"bank {spec}: filters must be square with an odd size up to "
                             f"{MAX_SIZE}, got {w.shape[2]}x{w.shape[3]}")
        return w.astype(np.float32)
    raise InputError(f"unknown bank {spec!r}: use dog:S1,S2[,...], gabor:SIGMA,N[,WAVELENGTH] "
                     "or a FILE.npy")


def mix_weights(spec: str, channels: int) -> np.ndarray:
    """The (F, C) float32 weights of a mix spec."""
    if spec == "luma":
        if channels != 3:
            raise InputError(f"mix=luma needs 3 channels (RGB); these frames have {channels}")
        return np.asarray([LUMA], np.float32)
    if str(spec).endswith(".npy"):
        w = _load(spec)
        w = w[None] if w.ndim == 1 else w
        if w.ndim != 2 or w.shape[1] != channels:
            raise InputError(f"mix {spec}: expected (F, {channels}) or ({channels},) weights, "
                             f"got shape {w.shape}")
        return w.astype(np.float32)
    raise InputError(f"unknown mix {spec!r}: use luma or a FILE.npy of (F, C) weights")


def _load(path):
    return load_npy(path, "weights file")


def apply_bank(frames, weights):
    """(n, C, H, W) frames (NumPy or CuPy) through an (F, C, K, K) bank: (n, F, H, W), the
    same size (zero padding K // 2)."""
    from ..backend import array_module_of
    from ..conv import conv2d

    xp = array_module_of(frames)
    return conv2d(frames, xp.asarray(weights), padding=weights.shape[2] // 2)


def feature_prefilter(spec):
    """``xcorr align --features SPEC``: a function of a float32 (n, H, W) stack giving one
    feature image per frame, the local energy sqrt(sum_f (bank_f * frame)^2) of the bank."""
    weights = bank_weights(spec, channels=1)

    def features(frames):
        from ..backend import array_module_of

        xp = array_module_of(frames)
        x = frames[:, None].astype(xp.float32)
        energy = xp.zeros(frames.shape, xp.float32)
        for f in range(0, len(weights), FEATURE_GROUP):  # a few filters at a time: the
            resp = apply_bank(x, weights[f:f + FEATURE_GROUP])  # memory stays ~ 5 frames
            energy += (resp * resp).sum(axis=1)
        return xp.sqrt(energy)

    return features


def channel_filter(bank=None, mix=None, channels=1, frame_shape=None):
    """``(F, fn)`` for ``xcorr filter --bank/--mix``: ``fn`` maps float32 (n, C, H, W) frames
    (NumPy or CuPy) to (n, F, H, W); ``frame_shape``: the bank checked against the frames
    (:func:`bank_weights`)."""
    from ..backend import array_module_of
    from ..conv import pointwise

    if (bank is None) == (mix is None):
        raise InputError("give exactly one of a bank and a mix")
    if bank is not None:
        weights = bank_weights(bank, channels, frame_shape)
        return weights.shape[0], lambda x: apply_bank(x, weights)
    weights = mix_weights(mix, channels)
    return weights.shape[0], lambda x: pointwise(x, array_module_of(x).asarray(weights))
