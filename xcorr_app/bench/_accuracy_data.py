"""The stacks of ``xcorr bench accuracy``: drifting stacks with exact ground truth, made from
images shipped inside scikit-image (no network).

Every kind but ``circular`` and ``circular_noisy`` crops its frames from a larger canvas
shifted by the subpixel drift (Fourier shift of the reflect-padded canvas, then crop: no
wrap-around reaches the frame); ``circular`` shifts one image circularly in Fourier space, as
scikit-image's own tests do (no noise), ``circular_noisy`` too, by random shifts of up to 6 px
under Poisson noise of 800 photons at the brightest pixel, in frames down to 64x64 (what a user
makes of a small real image); ``piecewise`` deforms a canvas smoothly
(:func:`~xcorr_app.bench._align_data.nonrigid_stack`: rigid drift plus a deformation of up to 3
px across the frame), its truth a motion field.

The hard kinds (:data:`HARD_KINDS`) are what microscopes add, over a cropped drifting scene
(:mod:`~xcorr_app.bench._accuracy_sensor`: Poisson photons, an sCMOS camera's offset and read
noise): ``static_blobs`` (bright blobs and hot pixels fixed on the sensor), ``dust_vignette``
(dust shadows and a vignette fixed on the sensor, multiplicative), ``fixed_pattern`` (sCMOS
column and pixel offsets and pixel gain, at 40 photons), ``deep_bleaching`` (20x exponential
bleaching), ``rotation`` (a ramp to 1-2 degrees about the frame centre beside the drift) and
``rotation_jitter`` (random rotations up to 0.5 degrees), ``shutter`` (half the frames behind
a closed shutter: 1% of the light, the same camera noise), ``cosmic_rays`` (each frame's own
tracks of charged particles, 5-50 times the scene's peak).  A rotated frame's truth is the
translation of the frame centre; its angle is ``AccuracyStack.angle``.  The truth is in
xcorr's convention: the
``(dy, dx)`` that :func:`xcorr_app.align` returns, the shift to apply to each frame to align it
with frame 0 (the negative of the content's drift).

:data:`KINDS` are the kinds other tests draw (``make_stack(kind, seed)`` gives the same stack
as ever); :data:`ALL_KINDS` adds the bench's later ones.  Each kind is drawn from
:data:`SPECS`' ``bench_images`` (at least four) at each of its two ``shapes``
(:func:`cases`).

Examples
--------
>>> s = make_stack("plain", seed=0, quick=True)
>>> s.frames.shape, s.frames.dtype.name, s.truth.shape, s.truth[0].tolist()
((6, 96, 96), 'float32', (6, 2), [0.0, 0.0])
>>> KINDS
('plain', 'low_light', 'bleaching_background', 'large_drift', 'non_square', 'circular')
>>> ALL_KINDS[len(KINDS):len(KINDS) + 2], len(cases("plain", seeds=range(5)))
(('piecewise', 'circular_noisy'), 40)
>>> ALL_KINDS[len(KINDS) + 2:] == HARD_KINDS
True
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ._accuracy_sensor import (CAMERA_OFFSET, READ_NOISE, camera, cosmic_rays, dust_vignette,
                               fixed_pattern, rotate_about, static_glow)

__all__ = ["KINDS", "HARD_KINDS", "ALL_KINDS", "SPECS", "AccuracyStack", "make_stack",
           "grey_image", "cases"]

#: the kinds of stack other tests draw, in the order of the report
KINDS = ("plain", "low_light", "bleaching_background", "large_drift", "non_square", "circular")
#: what microscopes make hard: patterns fixed on the sensor, deep bleaching, rotation, a shutter
HARD_KINDS = ("static_blobs", "dust_vignette", "fixed_pattern", "deep_bleaching", "rotation",
              "rotation_jitter", "shutter", "cosmic_rays")
#: every kind of the bench: :data:`KINDS`, piecewise-rigid motion, noisy wrap-around frames and
#: :data:`HARD_KINDS`
ALL_KINDS = KINDS + ("piecewise", "circular_noisy") + HARD_KINDS

#: per kind: frames, (height, width), largest drift (px per axis), random-walk step (px), the
#: scikit-image images it is cut from (``make_stack(kind, seed)``: one per seed, in turn), and
#: the quick (CI) version's frames and shape; the bench's cases (:func:`cases`): every one of
#: ``bench_images`` at each of ``shapes`` (the first is ``shape``)
SPECS = {
    "plain": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                  images=("camera", "moon", "coins"), quick=(6, (96, 96)),
                  bench_images=("camera", "moon", "coins", "astronaut"),
                  shapes=((256, 256), (128, 128))),
    "low_light": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                      images=("retina",), quick=(6, (96, 96)),
                      bench_images=("retina", "camera", "coins", "astronaut"),
                      shapes=((256, 256), (128, 128))),
    "bleaching_background": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                                 images=("camera", "moon", "coins"), quick=(6, (96, 96)),
                                 bench_images=("camera", "moon", "coins", "retina"),
                                 shapes=((256, 256), (128, 128))),
    "large_drift": dict(frames=16, shape=(512, 512), drift=30.0, step=8.0,
                        images=("retina", "hubble_deep_field", "immunohistochemistry"),
                        quick=(4, (160, 160)),
                        bench_images=("retina", "hubble_deep_field", "immunohistochemistry",
                                      "astronaut"),
                        shapes=((512, 512), (256, 256))),
    "non_square": dict(frames=20, shape=(200, 320), drift=8.0, step=1.5,
                       images=("coins", "camera", "astronaut"), quick=(6, (64, 112)),
                       bench_images=("coins", "camera", "astronaut", "moon"),
                       shapes=((200, 320), (96, 160))),
    "circular": dict(frames=20, shape=(256, 256), drift=8.0, step=1.5,
                     images=("camera", "moon", "brick"), quick=(6, (96, 96)),
                     bench_images=("camera", "moon", "brick", "astronaut"),
                     shapes=((256, 256), (128, 128))),
    "piecewise": dict(frames=12, shape=(192, 192), drift=8.0, step=0.0, deform=3.0,
                      images=("camera", "coins", "moon", "brick"), quick=(4, (96, 96)),
                      bench_images=("camera", "coins", "moon", "brick"),
                      shapes=((192, 192), (128, 128))),
    "circular_noisy": dict(frames=16, shape=(128, 128), drift=6.0, step=0.0,
                           images=("microaneurysms", "retina", "camera", "moon", "coins"),
                           quick=(6, (64, 64)),
                           bench_images=("microaneurysms", "retina", "camera", "moon", "coins"),
                           shapes=((128, 128), (64, 64))),
}
#: the hard kinds: 20 frames like ``plain``'s, ``peak`` photons at the scene's brightest pixel
_HARD = dict(frames=20, shape=(256, 256), drift=8.0, step=1.5, quick=(6, (96, 96)),
             shapes=((256, 256), (128, 128)))
SPECS.update({
    "static_blobs": dict(_HARD, peak=400.0, images=("camera", "coins", "moon"),
                         bench_images=("camera", "coins", "moon", "astronaut")),
    "dust_vignette": dict(_HARD, peak=400.0, images=("retina", "camera", "coins"),
                          bench_images=("retina", "camera", "coins", "astronaut")),
    "fixed_pattern": dict(_HARD, peak=40.0, images=("camera", "coins", "moon"),
                          bench_images=("camera", "coins", "moon", "retina")),
    "deep_bleaching": dict(_HARD, peak=500.0, images=("camera", "moon", "coins"),
                           bench_images=("camera", "moon", "coins", "retina")),
    "rotation": dict(_HARD, peak=1000.0, images=("camera", "coins", "astronaut"),
                     bench_images=("camera", "coins", "astronaut", "moon")),
    "rotation_jitter": dict(_HARD, peak=1000.0, images=("camera", "coins", "astronaut"),
                            bench_images=("camera", "coins", "astronaut", "retina")),
    "shutter": dict(_HARD, peak=400.0, images=("camera", "coins", "moon"),
                    bench_images=("camera", "coins", "moon", "astronaut")),
    "cosmic_rays": dict(_HARD, peak=400.0, images=("camera", "coins", "moon"),
                        bench_images=("camera", "coins", "moon", "retina")),
})
#: ``deep_bleaching``: the first frame this many times brighter than the last (exponential)
DEEP_BLEACH = 20.0
#: ``rotation``: the last frame's angle (degrees, either sense); ``rotation_jitter``: every
#: frame's angle uniform within +-this (degrees)
ROTATION_RAMP = (1.0, 2.0)
ROTATION_JITTER = 0.5
#: ``shutter``: the share of frames (not frame 0) behind the closed shutter, and its light
SHUTTER_CLOSED = 0.5
SHUTTER_LIGHT = 0.01
#: photons at the brightest pixel: low light, and the moderate noise of the other kinds
LOW_LIGHT_PEAK = 25.0
PLAIN_PEAK = 1000.0
#: bleaching: brightness of the last frame (linear fall from 1), and the static background's
#: peak relative to the image's peak and its smoothness (gaussian sigma, fraction of the side)
BLEACH_END = 0.6
BACKGROUND_PEAK = 1.0
BACKGROUND_SIGMA = 0.25
#: photons at the brightest pixel of ``circular_noisy`` and ``piecewise``
CIRCULAR_PEAK = 800.0
PIECEWISE_PEAK = 400.0
#: ``piecewise``: the patch grid the bench measures the field on
PIECEWISE_GRID = (3, 3)


@dataclass
class AccuracyStack:
    """A stack and its ground truth: ``frames`` (N, H, W) float32, ``truth`` (N, 2) float64 in
    xcorr's convention (row 0 is ``(0, 0)``); the noise-free scene the frames were drawn from:
    ``clean`` (N, H, W) float64, each frame's expected value (the Poisson mean, in photons;
    the circular kind has no noise: its frames), of which ``static`` (H, W) float64 does not
    move (the bleaching kind's background; zeros for the others), and ``gradient`` (N, 2, H, W)
    float32, the exact derivative of the moving part along y and x (from its spectrum), the
    derivative of ``clean`` with respect to the shift: what :func:`~xcorr_app.bench._accuracy.
    oracle_shifts` fits with.

    The hard kinds (:data:`HARD_KINDS`) also keep ``offset`` (H, W), the part of ``clean``
    that is no light (the camera's electronic offset: ``clean - offset`` is the Poisson mean),
    ``read_noise`` (electrons RMS; 0 for the other kinds, whose ``offset`` is None), ``scene``
    (N, H, W) the specimen's light alone as it drifts (photons, bleaching and shutter
    included), before the sensor's patterns, and ``angle`` (N,) the rotation (degrees) of each
    frame's content about the frame centre
    (:func:`~xcorr_app.bench._accuracy_sensor.rotation_matrix`; zeros but for the rotation
    kinds)."""

    kind: str
    seed: int
    image: str
    frames: np.ndarray
    truth: np.ndarray
    info: dict = field(default_factory=dict)
    clean: np.ndarray = None
    static: np.ndarray = None
    gradient: np.ndarray = None
    offset: np.ndarray = None
    read_noise: float = 0.0
    scene: np.ndarray = None
    angle: np.ndarray = None


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


#: the bench's cases are cut where the image has content: a region whose standard deviation
#: is at least this fraction of the whole image's (a crop of the camera's sky left nothing to
#: register, for any method); tries before the region of the most contrast is taken
MIN_CONTRAST = 0.5
CONTRAST_TRIES = 20


def _canvas(name, shape, margin, rng, min_contrast=None) -> np.ndarray:
    """A region of ``shape`` + 2 * ``margin`` of the image (resized up if it is too small, the
    retina shrunk by 2 to keep its fundus inside), at a seeded position; with ``min_contrast``
    (:data:`MIN_CONTRAST`) the first of up to :data:`CONTRAST_TRIES` seeded positions with that
    much contrast, else the one with the most."""
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
    best = None
    for _ in range(1 if min_contrast is None else CONTRAST_TRIES):
        y0 = int(rng.integers(0, img.shape[0] - need[0] + 1))
        x0 = int(rng.integers(0, img.shape[1] - need[1] + 1))
        crop = img[y0:y0 + need[0], x0:x0 + need[1]]
        if min_contrast is None or crop.std() >= min_contrast * img.std():
            return crop
        best = crop if best is None or crop.std() > best.std() else best
    return best


def _cropped_frames(canvas, drift, shape, margin, angles=None):
    """Frames of ``shape`` cut from the middle of ``canvas`` moved by each drift, and their
    exact gradients (N, 2, H, W): the canvas is reflect-padded before its Fourier shift so
    that its wrap-around stays outside the crop.  With ``angles`` (degrees), each frame's
    canvas is first rotated about the centre of the crop
    (:func:`~xcorr_app.bench._accuracy_sensor.rotate_about`), so the drift is the translation
    of the frame centre."""
    pad = np.pad(canvas, margin, mode="reflect")
    crop = (slice(2 * margin, 2 * margin + shape[0]), slice(2 * margin, 2 * margin + shape[1]))
    centre = (2 * margin + (shape[0] - 1) / 2, 2 * margin + (shape[1] - 1) / 2)
    frames, grads = [], []
    for i, d in enumerate(drift):
        src = pad if angles is None else rotate_about(pad, centre, angles[i])
        moved, g = _fourier_shift(src, d, gradient=True)
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


def cases(kind: str, seeds=(0, 1, 2, 3, 4), quick: bool = False) -> list:
    """The bench's stacks of ``kind``: ``(image, shape, seed)`` for every one of its
    ``bench_images`` at each of its ``shapes`` and every seed (``quick``: the first image at
    the quick shape, the first seed).

    >>> cases("circular_noisy", seeds=[0])[:2]
    [('microaneurysms', (128, 128), 0), ('microaneurysms', (64, 64), 0)]
    """
    spec = SPECS[kind]
    seeds = [int(s) for s in seeds]
    if quick:
        return [(spec["bench_images"][0], tuple(spec["quick"][1]), seeds[0])]
    return [(image, tuple(shape), seed) for image in spec["bench_images"]
            for shape in spec["shapes"] for seed in seeds]


def make_stack(kind: str, seed: int = 0, quick: bool = False, image: str | None = None,
               shape=None) -> AccuracyStack:
    """The stack of one kind and seed (deterministic: a seeded :class:`numpy.random.Generator`).

    Parameters
    ----------
    kind : str
        One of :data:`ALL_KINDS`.
    seed : int
        Chooses the image (in turn from the kind's ``images``, unless ``image`` is given), its
        region, the drift and the noise.
    quick : bool
        The tiny version of the CI test (fewer, smaller frames).
    image : str, optional
        The scikit-image sample to draw from (:func:`cases`).
    shape : (int, int), optional
        The frame shape (default: the kind's ``shape``, or its quick one).

    Returns
    -------
    AccuracyStack

    Examples
    --------
    >>> s = make_stack("circular", seed=1, quick=True)
    >>> s.image, s.frames.shape, bool(abs(s.truth).max() <= 8.0)
    ('moon', (6, 96, 96), True)
    >>> make_stack("circular_noisy", 0, image="camera", shape=(64, 64)).frames.shape
    (16, 64, 64)
    """
    if kind not in SPECS:
        raise InputError(f"unknown stack kind {kind!r} (one of {', '.join(ALL_KINDS)})")
    spec = SPECS[kind]
    n, default_shape = spec["quick"] if quick else (spec["frames"], spec["shape"])
    shape = tuple(int(v) for v in (default_shape if shape is None else shape))
    chosen = image is not None or shape != tuple(default_shape)
    key = [seed, ALL_KINDS.index(kind)]
    if chosen:  # the bench's cases: each image and shape its own draws
        key += [zlib.crc32(str(image).encode()), *shape]
    rng = np.random.default_rng(key)
    image = spec["images"][seed % len(spec["images"])] if image is None else image
    if kind == "piecewise":
        return _piecewise(seed, image, n, shape, spec, rng)
    if kind in HARD_KINDS:
        return _hard(kind, seed, image, n, shape, spec, rng, chosen)
    if kind == "circular_noisy":
        drift = rng.uniform(-spec["drift"], spec["drift"], (n, 2))
        drift[0] = 0.0
    else:
        drift = _drift(n, spec["drift"], spec["step"], rng)
    info = {}
    static = np.zeros(shape)
    if kind in ("circular", "circular_noisy"):
        base = _canvas(image, shape, 0, rng, MIN_CONTRAST if chosen else None)
        moved = [_fourier_shift(base, d, gradient=True) for d in drift]
        clean = frames = np.stack([m for m, _ in moved])
        grad = np.asarray([g for _, g in moved])
        if kind == "circular_noisy":
            scale = CIRCULAR_PEAK / frames.max()
            grad = grad * (frames > 0)[:, None] * scale
            clean = np.clip(frames, 0.0, None) * scale
            frames = rng.poisson(clean).astype(np.float64)
            info["peak_photons"] = CIRCULAR_PEAK
    else:
        margin = int(np.ceil(spec["drift"])) + 8
        frames, grad = _cropped_frames(
            _canvas(image, shape, margin, rng, MIN_CONTRAST if chosen else None), drift, shape,
            margin)
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


def _piecewise(seed, image, n, shape, spec, rng) -> AccuracyStack:
    """A ``piecewise`` stack: :func:`~xcorr_app.bench._align_data.nonrigid_stack`'s frames; its
    truth the field at the frame's centre, the whole field's parameters in
    ``info["field_params"]`` (:func:`~xcorr_app.bench._align_data.truth_at`); no oracle."""
    from ._align_data import nonrigid_stack, truth_at

    frames, params = nonrigid_stack(rng, n=n, shape=shape, drift=spec["drift"],
                                    deform=spec["deform"], peak=PIECEWISE_PEAK, image=image)
    centre = np.array([(shape[0] - 1) / 2, (shape[1] - 1) / 2])
    return AccuracyStack("piecewise", seed, image, frames.astype(np.float32),
                         truth_at(params, centre), {"field_params": params})


def _hard_motion(kind, n, spec, rng) -> tuple:
    """``(drift, angle)`` of a hard kind: the random walk of the others, and the rotation
    (degrees; zeros but for the rotation kinds)."""
    drift = _drift(n, spec["drift"], spec["step"], rng)
    angle = np.zeros(n)
    if kind == "rotation":
        angle = np.linspace(0.0, 1.0, n) * rng.uniform(*ROTATION_RAMP) * rng.choice([-1.0, 1.0])
    elif kind == "rotation_jitter":
        angle = rng.uniform(-ROTATION_JITTER, ROTATION_JITTER, n)
        angle[0] = 0.0
    return drift, angle


def _hard(kind, seed, image, n, shape, spec, rng, chosen) -> AccuracyStack:
    """A stack of :data:`HARD_KINDS`: the drifting (and rotating) scene, in photons, seen
    through a camera (:mod:`~xcorr_app.bench._accuracy_sensor`'s model) with the kind's
    sensor patterns, bleaching or shutter."""
    drift, angle = _hard_motion(kind, n, spec, rng)
    # a rotation moves the crop's corners: the canvas reaches that much farther
    turn = np.deg2rad(np.abs(angle).max()) * np.hypot(*shape) / 2
    margin = int(np.ceil(spec["drift"] + turn)) + 8
    canvas = _canvas(image, shape, margin, rng, MIN_CONTRAST if chosen else None)
    scene, grad = _cropped_frames(canvas, drift, shape, margin, angle if angle.any() else None)
    grad = grad * (scene > 0)[:, None]  # the clip below is flat where it cuts
    scene = np.clip(scene, 0.0, None)
    brightness = np.ones(n)
    info = {"peak_photons": spec["peak"], "read_noise": READ_NOISE}
    if kind == "deep_bleaching":
        brightness = DEEP_BLEACH ** (-np.arange(n) / max(n - 1, 1))
        info["brightness"] = [1.0, 1.0 / DEEP_BLEACH]
    elif kind == "shutter":
        closed = np.sort(rng.choice(np.arange(1, n), int(SHUTTER_CLOSED * n), replace=False))
        brightness[closed] = SHUTTER_LIGHT
        info["closed"] = closed.tolist()
    gain, glow, offset = np.ones(shape), np.zeros(shape), np.full(shape, CAMERA_OFFSET)
    if kind == "static_blobs":
        glow = static_glow(shape, spec["peak"], rng)
    elif kind == "dust_vignette":
        gain = dust_vignette(shape, rng)
    elif kind == "fixed_pattern":
        offset, gain = fixed_pattern(shape, rng)
    scale = spec["peak"] / max(float(scene.max()), 1e-12) * brightness[:, None, None]
    scene = scene * scale
    lam = gain * scene + glow
    frames = camera(lam, offset, rng)
    if kind == "cosmic_rays":
        frames = frames + cosmic_rays(n, shape, spec["peak"], rng)
    grad = grad * (gain * scale)[:, None]
    return AccuracyStack(kind, seed, image, frames.astype(np.float32), 0.0 - drift, info,
                         lam + offset, glow + offset, grad.astype(np.float32), offset,
                         READ_NOISE, scene, angle)
