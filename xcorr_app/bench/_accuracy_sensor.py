"""What a microscope's camera and optics add to the hard stacks of ``xcorr bench accuracy``
(:mod:`xcorr_app.bench._accuracy_data`): patterns fixed on the sensor that do not move with the
drifting specimen, the camera's noise, and the rotation of the specimen about the frame centre.

The camera model of those stacks, per frame ``i`` (photons; one electron a count)::

    lam_i   = gain * brightness_i * scene_i + glow      (the Poisson mean)
    frame_i = Poisson(lam_i) + offset + Normal(0, READ_NOISE) (+ rays_i)

``gain`` is a map fixed on the sensor (vignette, dust shadows, the pixels' own gain), ``glow``
light that does not move (bright blobs, hot pixels), ``offset`` the camera's electronic offset
(:data:`CAMERA_OFFSET` plus sCMOS column and pixel offsets), ``brightness_i`` bleaching or a
closed shutter; ``rays_i`` the tracks charged particles leave in frame ``i`` alone (cosmic
rays: :func:`cosmic_rays`).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> g = dust_vignette((64, 64), rng)
>>> bool(0.0 < g.min() < 0.8 and g.max() <= 1.0)
True
>>> rotation_matrix(90.0).round(6).tolist()
[[0.0, -1.0], [1.0, 0.0]]
"""

from __future__ import annotations

import numpy as np

__all__ = ["READ_NOISE", "CAMERA_OFFSET", "static_glow", "dust_vignette", "fixed_pattern",
           "rotation_matrix", "rotate_about", "camera", "cosmic_rays"]

#: read noise of an sCMOS camera (electrons RMS) and its offset (counts)
READ_NOISE = 1.6
CAMERA_OFFSET = 100.0
#: ``static_blobs``: bright blobs per 256x256 px (their sigma 1.5-5 px, peak 1-3 x the scene's)
#: and the share of hot pixels (each 0.5-20 x the scene's peak, log-uniform)
BLOBS_PER_AREA = 6
HOT_PIXELS = 0.002
#: ``dust_vignette``: dust shadows per 256x256 px (radius 3-20 px, 30-80% of the light taken),
#: and the vignette's light at the frame's corners
DUST_PER_AREA = 7
VIGNETTE_CORNER = 0.55
#: ``fixed_pattern``: sCMOS column offsets, pixel offsets (counts RMS) and pixel gain (RMS)
COLUMN_OFFSET = 2.0
PIXEL_OFFSET = 1.5
PIXEL_GAIN = 0.03
#: ``cosmic_rays``: hits a frame per 256x256 pixels (Poisson), the longest track (px) and the
#: deposit along it, times the scene's peak (a particle leaves thousands of electrons)
RAY_HITS = 3.0
RAY_LENGTH = 4
RAY_BRIGHTNESS = (5.0, 50.0)


def _per_area(count, shape, rng) -> int:
    """``count`` per 256x256 px scaled to ``shape``, at least 2, give or take one."""
    return max(2, int(round(count * shape[0] * shape[1] / 256 ** 2)) + int(rng.integers(-1, 2)))


def static_glow(shape, peak, rng) -> np.ndarray:
    """Light fixed on the sensor (photons): a few bright soft blobs (stray light, fluorescent
    debris on the window) and hot pixels, scaled to the scene's ``peak``."""
    yy, xx = np.mgrid[:shape[0], :shape[1]].astype(np.float64)
    glow = np.zeros(shape)
    for _ in range(_per_area(BLOBS_PER_AREA, shape, rng)):
        cy, cx = rng.uniform(0, shape[0]), rng.uniform(0, shape[1])
        sigma, amp = rng.uniform(1.5, 5.0), rng.uniform(1.0, 3.0) * peak
        glow += amp * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * sigma ** 2))
    hot = rng.random(shape) < HOT_PIXELS
    glow[hot] += peak * np.exp(rng.uniform(np.log(0.5), np.log(20.0), int(hot.sum())))
    return glow


def dust_vignette(shape, rng) -> np.ndarray:
    """The light that reaches each pixel, in (0, 1]: a vignette (:data:`VIGNETTE_CORNER` at
    the corners, its centre a little off the frame's) times dark soft discs of dust."""
    yy, xx = np.mgrid[:shape[0], :shape[1]].astype(np.float64)
    cy, cx = (np.array(shape) - 1) / 2 + rng.uniform(-0.05, 0.05, 2) * np.array(shape)
    r2 = ((yy - cy) / shape[0]) ** 2 + ((xx - cx) / shape[1]) ** 2
    gain = 1.0 - (1.0 - VIGNETTE_CORNER) * r2 / r2.max()
    for _ in range(_per_area(DUST_PER_AREA, shape, rng)):
        py, px = rng.uniform(0, shape[0]), rng.uniform(0, shape[1])
        radius = rng.uniform(3.0, max(4.0, 20.0 * min(shape) / 256))
        edge = rng.uniform(0.5, 2.0)  # an out-of-focus speck has a soft rim
        disc = 0.5 * (1 - np.tanh((np.hypot(yy - py, xx - px) - radius) / edge))
        gain *= 1.0 - rng.uniform(0.3, 0.8) * disc
    return gain


def fixed_pattern(shape, rng) -> tuple:
    """``(offset, gain)`` of an sCMOS sensor, fixed over time: :data:`CAMERA_OFFSET` plus
    column offsets and pixel offsets (counts), and each pixel's gain around 1."""
    offset = CAMERA_OFFSET + rng.normal(0.0, COLUMN_OFFSET, (1, shape[1])) \
        + rng.normal(0.0, PIXEL_OFFSET, shape)
    return offset, np.clip(1.0 + rng.normal(0.0, PIXEL_GAIN, shape), 0.5, 1.5)


def rotation_matrix(angle) -> np.ndarray:
    """The 2x2 rotation by ``angle`` degrees acting on ``(y, x)`` vectors: counter-clockwise
    as an image is shown (y down)."""
    t = np.deg2rad(angle)
    return np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])


def rotate_about(img, centre, angle) -> np.ndarray:
    """``img``'s content rotated by ``angle`` degrees (:func:`rotation_matrix`) about
    ``centre`` ``(y, x)``: the result at ``centre + R u`` is ``img`` at ``centre + u`` (cubic
    splines; an angle of 0 returns the samples themselves)."""
    from scipy import ndimage as ndi

    inverse = rotation_matrix(-angle)
    centre = np.asarray(centre, np.float64)
    return ndi.affine_transform(img, inverse, offset=centre - inverse @ centre, order=3,
                                mode="mirror")


def cosmic_rays(n, shape, peak, rng) -> np.ndarray:
    """(n, H, W) photons that charged particles deposit in ``n`` frames: each frame's own hits
    (none fixed on the sensor), :data:`RAY_HITS` of them on average per 256x256, each a
    straight track of 1 to :data:`RAY_LENGTH` pixels from a random pixel in a random
    direction, :data:`RAY_BRIGHTNESS` times ``peak`` along it."""
    out = np.zeros((n, *shape))
    h, w = shape
    for i in range(n):
        for _ in range(rng.poisson(RAY_HITS * h * w / 256 ** 2)):
            y, x = rng.uniform(0, h), rng.uniform(0, w)
            turn, length = rng.uniform(0, np.pi), rng.integers(1, RAY_LENGTH + 1)
            value = rng.uniform(*RAY_BRIGHTNESS) * peak
            for t in range(length):
                yy, xx = int(y + t * np.sin(turn)), int(x + t * np.cos(turn))
                if 0 <= yy < h and 0 <= xx < w:
                    out[i, yy, xx] += value
    return out


def camera(lam, offset, rng, read_noise=READ_NOISE) -> np.ndarray:
    """Frames a camera records of the Poisson means ``lam`` (photons): the photon counts, the
    electronic ``offset`` and gaussian read noise."""
    return rng.poisson(lam) + offset + rng.normal(0.0, read_noise, np.shape(lam))
