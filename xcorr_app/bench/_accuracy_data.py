"""The stacks of ``xcorr bench accuracy``: drifting stacks with exact ground truth, made from
images shipped inside scikit-image (no network).

Every kind but ``circular`` crops its frames from a larger canvas shifted by the subpixel drift
(Fourier shift of the reflect-padded canvas, then crop: no wrap-around reaches the frame);
``circular`` shifts one image circularly in Fourier space, as scikit-image's own tests do. The
truth is in xcorr's convention: the ``(dy, dx)`` that :func:`xcorr_app.align` returns, the
shift to apply to each frame to align it with frame 0 (the negative of the content's drift).

Examples
--------
>>> s = make_stack("plain", seed=0, quick=True)
>>> s.frames.shape, s.frames.dtype.name, s.truth.shape, s.truth[0].tolist()
((6, 96, 96), 'float32', (6, 2), [0.0, 0.0])
>>> KINDS
('plain', 'low_light', 'bleaching_background', 'large_drift', 'non_square', 'circular')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

__all__ = ["KINDS", "SPECS", "AccuracyStack", "make_stack", "grey_image"]

#: the kinds of stack, in the order of the report
KINDS = ("plain", "low_light", "bleaching_background", "large_drift", "non_square", "circular")

#: per kind: frames, (height, width), largest drift (px per axis), random-walk step (px), the
#: scikit-image images it is cut from (one per seed, in turn), and the quick (CI) version's
#: frames and shape
SPECS = {
    "plain": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                  images=("camera", "moon", "coins"), quick=(6, (96, 96))),
    "low_light": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                      images=("retina",), quick=(6, (96, 96))),
    "bleaching_background": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                                 images=("camera", "moon", "coins"), quick=(6, (96, 96))),
    "large_drift": dict(frames=16, shape=(512, 512), drift=30.0, step=8.0,
                        images=("retina", "hubble_deep_field", "immunohistochemistry"),
                        quick=(4, (160, 160))),
    "non_square": dict(frames=20, shape=(200, 320), drift=8.0, step=1.5,
                       images=("coins", "camera", "astronaut"), quick=(6, (64, 112))),
    "circular": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                     images=("camera", "moon", "brick"), quick=(6, (96, 96))),
}
#: photons at the brightest pixel: low light, and the moderate noise of the other kinds
LOW_LIGHT_PEAK = 25.0
PLAIN_PEAK = 1000.0
#: bleaching: brightness of the last frame (linear fall from 1), and the static background's
#: peak relative to the image's peak and its smoothness (gaussian sigma, fraction of the side)
BLEACH_END = 0.6
BACKGROUND_PEAK = 1.0
BACKGROUND_SIGMA = 0.25


@dataclass
class AccuracyStack:
    """A stack and its ground truth: ``frames`` (N, H, W) float32, ``truth`` (N, 2) float64 in
    xcorr's convention (row 0 is ``(0, 0)``); the noise-free scene the frames were drawn from:
    ``clean`` (N, H, W) float64, each frame's expected value (the Poisson mean, in photons;
    the circular kind has no noise: its frames), of which ``static`` (H, W) float64 does not
    move (the bleaching kind's background; zeros for the others), and ``gradient`` (N, 2, H, W)
    float32, the exact derivative of the moving part along y and x (from its spectrum), the
    derivative of ``clean`` with respect to the shift: what :func:`~xcorr_app.bench._accuracy.
    oracle_shifts` fits with."""

    kind: str
    seed: int
    image: str
    frames: np.ndarray
    truth: np.ndarray
    info: dict = field(default_factory=dict)
    clean: np.ndarray = None
    static: np.ndarray = None
    gradient: np.ndarray = None


def grey_image(name: str) -> np.ndarray:
    """A scikit-image sample as float64 grey in [0, 1] (colour images by luminance)."""
    from skimage import data
    from skimage.color import rgb2gray

    img = getattr(data, name)()
    img = rgb2gray(img) if img.ndim == 3 else img.astype(np.float64) / 255.0
    return np.asarray(img, np.float64)


def _drift(n, max_drift, step, rng) -> np.ndarray:
    """The content's drift per frame: a random walk from (0, 0) reflected into +-max_drift."""
    out = np.zeros((n, 2))
    for i in range(1, n):
        o = out[i - 1] + rng.normal(0.0, step, 2)
        o = np.where(o > max_drift, 2 * max_drift - o, o)
        out[i] = np.clip(np.where(o < -max_drift, -2 * max_drift - o, o), -max_drift, max_drift)
    return out


def _fourier_shift(img, d, gradient=False):
    """``img`` with its content moved by ``d`` = (dy, dx) px, circularly (Fourier shift); with
    ``gradient``, also its exact derivatives along y and x (the spectrum times ``2 pi i k``),
    ``(moved, (gy, gx))``."""
    from scipy import ndimage as ndi

    spec = ndi.fourier_shift(np.fft.fft2(img), d)
    moved = np.fft.ifft2(spec).real
    if not gradient:
        return moved
    ky = 2j * np.pi * np.fft.fftfreq(img.shape[0])[:, None]
    kx = 2j * np.pi * np.fft.fftfreq(img.shape[1])[None, :]
    return moved, (np.fft.ifft2(spec * ky).real, np.fft.ifft2(spec * kx).real)


def _canvas(name, shape, margin, rng) -> np.ndarray:
    """A region of ``shape`` + 2 * ``margin`` of the image (resized up if it is too small, the
    retina shrunk by 2 to keep its fundus inside), at a seeded position."""
    from skimage.transform import rescale

    img = grey_image(name)
    if name == "retina":  # the dark surround out: the central square of the fundus, halved
        c = img.shape[0] // 2
        img = rescale(img[c - 450:c + 450, c - 450:c + 450], 0.5 if min(shape) <= 256 else 1.0,
                      anti_aliasing=True)
    need = (shape[0] + 2 * margin, shape[1] + 2 * margin)
    scale = max(need[0] / img.shape[0], need[1] / img.shape[1])
    if scale > 1:
        img = rescale(img, scale * 1.01, anti_aliasing=False, order=3)
    y0 = int(rng.integers(0, img.shape[0] - need[0] + 1))
    x0 = int(rng.integers(0, img.shape[1] - need[1] + 1))
    return img[y0:y0 + need[0], x0:x0 + need[1]]


def _cropped_frames(canvas, drift, shape, margin):
    """Frames of ``shape`` cut from the middle of ``canvas`` moved by each drift, and their
    exact gradients (N, 2, H, W): the canvas is reflect-padded before its Fourier shift so
    that its wrap-around stays outside the crop."""
    pad = np.pad(canvas, margin, mode="reflect")
    crop = (slice(2 * margin, 2 * margin + shape[0]), slice(2 * margin, 2 * margin + shape[1]))
    frames, grads = [], []
    for d in drift:
        moved, g = _fourier_shift(pad, d, gradient=True)
        frames.append(moved[crop])
        grads.append([g[0][crop], g[1][crop]])
    return np.stack(frames), np.asarray(grads)


def _background(shape, rng) -> np.ndarray:
    """A smooth static background in [0, 1]: a broad gaussian blob at a seeded place, plus a
    gentle ramp."""
    yy, xx = np.mgrid[:shape[0], :shape[1]] / np.array(shape, float)[:, None, None]
    cy, cx = rng.uniform(0.2, 0.8, 2)
    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * BACKGROUND_SIGMA ** 2))
    ramp = 0.5 + 0.5 * (yy * rng.uniform(-1, 1) + xx * rng.uniform(-1, 1)) / 2
    bg = 0.7 * blob + 0.3 * ramp
    return (bg - bg.min()) / max(bg.max() - bg.min(), 1e-12)


def make_stack(kind: str, seed: int = 0, quick: bool = False) -> AccuracyStack:
    """The stack of one kind and seed (deterministic: a seeded :class:`numpy.random.Generator`).

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    seed : int
        Chooses the image (in turn from the kind's list), its region, the drift and the noise.
    quick : bool
        The tiny version of the CI test (fewer, smaller frames).

    Returns
    -------
    AccuracyStack

    Examples
    --------
    >>> s = make_stack("circular", seed=1, quick=True)
    >>> s.image, s.frames.shape, bool(abs(s.truth).max() <= 8.0)
    ('moon', (6, 96, 96), True)
    """
    if kind not in SPECS:
        raise InputError(f"unknown stack kind {kind!r} (one of {', '.join(KINDS)})")
    spec = SPECS[kind]
    n, shape = spec["quick"] if quick else (spec["frames"], spec["shape"])
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    image = spec["images"][seed % len(spec["images"])]
    drift = _drift(n, spec["drift"], spec["step"], rng)
    info = {}
    static = np.zeros(shape)
    if kind == "circular":
        base = _canvas(image, shape, 0, rng)
        moved = [_fourier_shift(base, d, gradient=True) for d in drift]
        clean = frames = np.stack([m for m, _ in moved])
        grad = np.asarray([g for _, g in moved])
    else:
        margin = int(np.ceil(spec["drift"])) + 8
        frames, grad = _cropped_frames(_canvas(image, shape, margin, rng), drift, shape, margin)
        grad = grad * (frames > 0)[:, None]  # the clip below is flat where it cuts
        frames = np.clip(frames, 0.0, None)
        gain = np.ones((n, 1, 1))
        if kind == "low_light":
            scale = LOW_LIGHT_PEAK / frames.max()
            clean = frames * scale
            info["peak_photons"] = LOW_LIGHT_PEAK
        elif kind == "bleaching_background":
            gain = np.linspace(1.0, BLEACH_END, n)[:, None, None]
            bg = BACKGROUND_PEAK * frames.max() * _background(shape, rng)
            scale = PLAIN_PEAK / (frames.max() + bg.max())
            clean = (frames * gain + bg) * scale
            static = bg * scale
            info["brightness"] = [1.0, BLEACH_END]
        else:
            scale = PLAIN_PEAK / frames.max()
            clean = frames * scale
        grad = grad * (gain * scale)[:, None]
        frames = rng.poisson(clean).astype(np.float64)
    return AccuracyStack(kind, seed, image, frames.astype(np.float32), 0.0 - drift, info,
                         clean, static, grad.astype(np.float32))
