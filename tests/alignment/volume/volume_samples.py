"""Volumes built from real 2-D images (scikit-image's samples): two images blended along z by
smooth profiles, a point-spread blur (wider in z), known subvoxel 3-D Fourier shifts, and
Poisson noise."""

import numpy as np
from scipy import ndimage as ndi
from skimage import data

IMAGES = {"camera": data.camera, "moon": data.moon, "coins": data.coins,
          "astronaut": lambda: data.astronaut()[..., 1], "brick": data.brick}


def plane_images(names, size):
    """The named images block-averaged to about ``size`` pixels and cropped to (size, size)."""
    out = []
    for name in names:
        img = np.asarray(IMAGES[name](), np.float64)
        k = max(1, min(img.shape) // size)
        h, w = (img.shape[0] // k) * k, (img.shape[1] // k) * k
        img = img[:h, :w].reshape(h // k, k, w // k, k).mean(axis=(1, 3))
        out.append(img[:size, :size] / img.max())
    return out


def volume(names=("camera", "coins"), depth=24, size=64, psf=(1.5, 0.8, 0.8)):
    """A (depth, size, size) volume: the first image fading in and out along z, the second
    the other way, blurred by a Gaussian point-spread function (sigma z, y, x)."""
    a, b = plane_images(names, size)
    z = np.arange(depth)[:, None, None]
    pa = 0.5 + 0.5 * np.cos(2 * np.pi * z / depth)  # smooth and periodic along z
    pb = 0.5 + 0.5 * np.sin(2 * np.pi * z / depth)
    return ndi.gaussian_filter(pa * a + pb * b, psf, mode="wrap")


def shifted_stack(vol, shifts, photons=300.0, seed=0):
    """``vol`` moved by each of ``shifts`` (T, 3) (a Fourier shift: content moves by +shift),
    scaled to ``photons`` at its brightest voxel and Poisson-sampled."""
    rng = np.random.default_rng(seed)
    spec = np.fft.fftn(vol)
    out = []
    for s in shifts:
        moved = np.fft.ifftn(ndi.fourier_shift(spec, s)).real
        out.append(rng.poisson(np.clip(moved, 0, None) * photons / vol.max()))
    return np.stack(out).astype(np.float32)


def random_shifts(n, seed=1, bound=(2.5, 4.5, 4.5)):
    """``n`` subvoxel shifts, the first zero (the reference)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1, 1, (n, 3)) * np.asarray(bound)
    s[0] = 0
    return s


def layered_volume(names=("camera", "coins", "moon", "astronaut"), depth=24, size=64,
                   psf=(1.0, 0.8, 0.8)):
    """A (depth, size, size) volume of layers: each image brightest at its own depth (a
    Gaussian profile along z, the layers spread over the depth), so that every plane has
    its own mixture; blurred by a Gaussian point-spread function."""
    images = plane_images(names, size)
    z = np.arange(depth)[:, None, None]
    centres = (np.arange(len(images)) + 0.5) * depth / len(images)
    width = depth / len(images) / 1.5
    vol = sum(np.exp(-0.5 * ((z - c) / width) ** 2) * img for c, img in zip(centres, images))
    return ndi.gaussian_filter(vol, psf, mode="nearest")


MARGIN = 6


def depth_movie(names, depths, offsets, photons, seed=0, depth=24, size=64):
    """A z-stack (the centre of a larger volume) and frames of that volume at ``depths``
    (planes interpolated linearly between neighbours), cut ``offsets`` (dy, dx) px from the
    z-stack's field (content entering at one edge, leaving at the other), Poisson noise."""
    big = layered_volume(names, depth=depth, size=size + 2 * MARGIN)
    m = MARGIN
    zstack = big[:, m:m + size, m:m + size]
    rng = np.random.default_rng(seed)
    frames = []
    for d, (dy, dx) in zip(depths, offsets):
        k = int(np.floor(d))
        f = d - k
        plane = (1 - f) * big[k] + f * big[min(k + 1, depth - 1)]
        crop = plane[m + dy:m + dy + size, m + dx:m + dx + size]
        frames.append(rng.poisson(crop * photons / big.max()))
    return np.stack(frames).astype(np.float32), zstack * photons / big.max()


def deformed_volumes(n=6, shape=(20, 48, 56), gradient=2.0, drift=(0.8, -1.2, 1.0), noise=0.05,
                     seed=0, grain=1.5):
    """``(stack (n, Z, Y, X) float32, moves)``: a smooth random texture (unit variance, Gaussian
    grain of ``grain`` voxels) of which
    volume ``t`` samples ``R(p + a_t + B_t p)`` (cubic spline): a rigid drift ``a_t = drift *
    sin(t)`` and a shear whose dz grows along x and whose dx grows along z, up to ``gradient``
    voxels across the volume in the last one (``B_t`` grows with t); Gaussian noise of
    ``noise``.  ``moves``: the ``(a_t, B_t)`` for :func:`field_truth`; volume 0 is the texture
    itself."""
    rng = np.random.default_rng(seed)
    m = 8
    texture = ndi.gaussian_filter(rng.standard_normal(tuple(s + 2 * m for s in shape)), grain)
    texture /= texture.std()
    p = np.stack(np.meshgrid(*(np.arange(s) for s in shape), indexing="ij")).astype(float)
    vols, moves = [], []
    for t in range(n):
        a = np.asarray(drift, float) * np.sin(t)
        b = np.zeros((3, 3))
        b[0, 2] = gradient * t / (n - 1) / shape[2]  # dz along x
        b[2, 0] = gradient * t / (n - 1) / shape[0]  # dx along z
        u = a[:, None, None, None] + np.einsum("ij,jzyx->izyx", b, p)
        vols.append(ndi.map_coordinates(texture, p + u + m, order=3, mode="nearest"))
        moves.append((a, b))
    stack = np.stack(vols)
    stack += noise * rng.standard_normal(stack.shape)
    return stack.astype(np.float32), moves


def field_truth(moves, centres):
    """``(n, ..., 3)``: the shift (dz, dy, dx) that aligns each volume of
    :func:`deformed_volumes` at ``centres`` (..., 3) (voxels of the reference): ``s(q)`` with
    ``s = a + B (q - s)``, so ``s = (I + B)^-1 (a + B q)``."""
    q = np.asarray(centres, float).reshape(-1, 3)
    out = [(np.linalg.solve(np.eye(3) + b, (a[:, None] + b @ q.T))).T for a, b in moves]
    return np.stack(out).reshape(len(moves), *np.shape(centres))
