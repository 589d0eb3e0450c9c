"""The ``volumes`` kind of ``xcorr bench accuracy``: stacks of (T, Z, Y, X) volumes with exact
ground truth that are not periodic, measured by :func:`xcorr_app.alignment.align_volumes`
beside scikit-image's 3-D ``phase_cross_correlation``.

The scene (:func:`scene`) lives on a fine grid whose voxels are cubes of the camera's pixel:
layers of scikit-image's sample images, each brightest at its own depth, dimmer and more
blurred the deeper it lies, and round blobs (nuclei) scattered through the depth; a
point-spread function wider along z.  Each volume is the scene moved by its drift (a Fourier
shift of the whole canvas, whose outer voxels are tapered to its mean so that the shift
wraps nothing into the crop) and cropped from its middle: content enters and leaves at every
face, as it does under a microscope.  The planes are sampled every ``z_step`` fine voxels
(the anisotropy: 2-4x the xy pixel), the inverse transform evaluated at those planes only
(:func:`_planes`); the drift along z is a focus drift (a ramp to 1-2.5 planes) with jitter,
the drift in y and x a random walk.  The camera: Poisson photons over a background, an sCMOS
offset and read noise (:func:`~xcorr_app.bench._accuracy_sensor.camera`).  The truth is in
voxels of the volumes (z in planes), xcorr's convention (the shift that aligns each volume
with volume 0).  The exact derivative of each clean volume with respect to its shift (from
the spectrum) gives the oracle and the Cramer-Rao bound, in 3-D.

Examples
--------
>>> s = make_volume_stack(0, quick=True)
>>> s.frames.shape, s.truth.shape, s.truth[0].tolist(), s.info["z_step"]
((6, 12, 40, 48), (6, 3), [0.0, 0.0, 0.0], 2)
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from ._accuracy_data import CONTRAST_TRIES, MIN_CONTRAST, AccuracyStack, grey_image
from ._accuracy_sensor import CAMERA_OFFSET, READ_NOISE, camera

__all__ = ["VOLUME_KINDS", "VOLUME_SPEC", "VOLUME_METHODS", "CIRCULAR", "TARGET_VOLUMES",
           "TARGET_VS_SKIMAGE", "layer_image", "scene", "make_volume_stack", "volume_cases", "volume_shifts",
           "volume_oracle", "volume_bound", "volume_errors", "measure_volumes",
           "volume_target_lines"]

#: the bench's kinds of volumes (``--kinds volumes``: not among the 2-D kinds it runs unasked)
VOLUME_KINDS = ("volumes",)
#: volumes, (Z, Y, X), the largest drift in planes (z) and pixels (y, x), the random walk's
#: step in y and x, the images the layers are cut from (the case's image first), the quick
#: version and the bench's shapes; photons at the brightest voxel, the background's
VOLUME_SPEC = dict(frames=12, shape=(32, 128, 128), drift=(3.0, 6.0, 6.0), step=1.0,
                   bench_images=("camera", "coins", "moon", "astronaut"),
                   quick=(6, (12, 40, 48)), shapes=((32, 128, 128), (16, 96, 96)),
                   peak=300.0, background=10.0)
#: the row of the 3-D path before issue 76 (the circular correlation, its upsampled DFT),
#: measured beside the default on every volume stack
CIRCULAR = "xcorr boundary=circular (before)"
#: method -> keyword arguments of :func:`~xcorr_app.alignment.align_volumes` (CPU), or
#: ("skimage", normalization): the bench's names (:data:`~xcorr_app.bench._accuracy.DEFAULT`,
#: :data:`~xcorr_app.bench._accuracy.SKIMAGE`)
VOLUME_METHODS = {"xcorr default": {}, "skimage pcc none": ("skimage", None),
                  "skimage pcc phase": ("skimage", "phase"), CIRCULAR: {"boundary": "circular"}}
#: issue 76's targets for the default on the volumes: the median RMS error (voxels), and how
#: many times scikit-image's better normalization's error it must stay under
TARGET_VOLUMES = 0.05
TARGET_VS_SKIMAGE = 1.5
#: layers of the scene; blobs per 64**3 fine voxels, their sigma (fine voxels)
LAYERS = 5
BLOBS = 8
BLOB_SIGMA = (1.5, 2.5, 3.5)
#: the point-spread function's sigma: y and x (pixels), z (planes: times ``z_step`` fine)
PSF_XY = 1.0
PSF_Z = 0.9
#: fine voxels at the canvas's faces tapered to its mean (never inside a crop)
TAPER = 6


def volume_cases(seeds=(0, 1, 2, 3, 4), quick=False) -> list:
    """``(image, shape, seed)`` of the bench's volume stacks (:func:`~xcorr_app.bench.
    _accuracy_data.cases`' rule: every image at each shape and seed).

    >>> len(volume_cases()), volume_cases(quick=True)
    (40, [('camera', (12, 40, 48), 0)])
    """
    spec = VOLUME_SPEC
    seeds = [int(s) for s in seeds]
    if quick:
        return [(spec["bench_images"][0], tuple(spec["quick"][1]), seeds[0])]
    return [(image, tuple(shape), seed) for image in spec["bench_images"]
            for shape in spec["shapes"] for seed in seeds]


def _taper(n, width) -> np.ndarray:
    """1 inside, a raised cosine to 0 over the outer ``width`` samples at both ends."""
    w = np.ones(n)
    ramp = 0.5 - 0.5 * np.cos(np.pi * (np.arange(width) + 0.5) / width)
    w[:width], w[n - width:] = ramp, ramp[::-1]
    return w


def layer_image(name, shape, rng) -> np.ndarray:
    """A region of ``shape`` of scikit-image's ``name`` (grey, resized up if too small) at a
    seeded position with content: the first of up to :data:`~xcorr_app.bench._accuracy_data.
    CONTRAST_TRIES` positions whose standard deviation is :data:`~xcorr_app.bench.
    _accuracy_data.MIN_CONTRAST` of the image's, else the one with the most (the 2-D stacks'
    rule)."""
    from skimage.transform import rescale

    img = grey_image(name)
    scale = max(shape[0] / img.shape[0], shape[1] / img.shape[1])
    if scale > 1:
        img = rescale(img, scale * 1.01, anti_aliasing=False, order=3)
    best = None
    for _ in range(CONTRAST_TRIES):
        y0 = int(rng.integers(0, img.shape[0] - shape[0] + 1))
        x0 = int(rng.integers(0, img.shape[1] - shape[1] + 1))
        crop = img[y0:y0 + shape[0], x0:x0 + shape[1]]
        if crop.std() >= MIN_CONTRAST * img.std():
            return crop
        best = crop if best is None or crop.std() > best.std() else best
    return best


def scene(shape, z_step, margin, image, rng) -> np.ndarray:
    """The fine canvas (float64, >= 0): ``shape`` (Z, Y, X) of the volumes with z times
    ``z_step``, plus ``margin`` (z in fine voxels, y, x) and :data:`TAPER` on every side;
    :data:`LAYERS` layers of images (``image`` first, then the bench's others), each a
    gaussian profile along z at its own depth, attenuated and blurred more with depth, plus
    :data:`BLOBS` blobs per 64**3 voxels; the outer :data:`TAPER` voxels tapered to the mean."""
    from scipy import ndimage as ndi

    dims = (shape[0] * z_step + 2 * (margin[0] + TAPER),
            shape[1] + 2 * (margin[1] + TAPER), shape[2] + 2 * (margin[2] + TAPER))
    names = [image] + [n for n in VOLUME_SPEC["bench_images"] if n != image]
    names = (names * LAYERS)[:LAYERS]
    zz = np.arange(dims[0], dtype=np.float64)[:, None, None]
    vol = np.zeros(dims)
    width = dims[0] / LAYERS / 2.0
    for k, name in enumerate(names):
        depth = (k + 0.5 + rng.uniform(-0.2, 0.2)) / LAYERS
        img = layer_image(name, dims[1:], rng)
        img = ndi.gaussian_filter(img, 0.6 + 0.9 * depth, mode="reflect")
        img = img / max(img.max(), 1e-12)
        vol += np.exp(-0.8 * depth) * np.exp(-0.5 * ((zz - depth * dims[0]) / width) ** 2) * img
    count = max(2, int(round(BLOBS * np.prod(dims) / 64 ** 3)))
    for sigma in BLOB_SIGMA:
        dots = np.zeros(dims)
        k = count // len(BLOB_SIGMA)
        at = tuple(rng.integers(0, d, k) for d in dims)
        np.add.at(dots, at, rng.uniform(0.4, 1.0, k) * np.exp(-0.8 * at[0] / dims[0]))
        vol += ndi.gaussian_filter(dots, sigma) * (2 * np.pi * sigma ** 2) ** 1.5 * 0.8
    mean = vol.mean()
    w = _taper(dims[0], TAPER)[:, None, None] * _taper(dims[1], TAPER)[:, None] \
        * _taper(dims[2], TAPER)
    return mean + (vol - mean) * w


def _planes(spec, dims, planes, shift, crop, deriv=None) -> np.ndarray:
    """The inverse of the half spectrum ``spec`` (of a canvas of ``dims``) moved by ``shift``
    (fine voxels, content moving by +shift) at the fine ``planes`` only, cropped to ``crop``
    (two slices, y and x); with ``deriv`` (0, 1, 2), its derivative along that axis (per
    fine voxel)."""
    kz = np.fft.fftfreq(dims[0])
    ky = np.fft.fftfreq(dims[1])
    kx = np.fft.rfftfreq(dims[2])
    ramp = (np.exp(-2j * np.pi * ky * shift[1])[:, None]
            * np.exp(-2j * np.pi * kx * shift[2])[None, :])
    mz = np.exp(2j * np.pi * np.outer(np.asarray(planes, np.float64) - shift[0], kz)) / dims[0]
    if deriv == 0:
        mz = mz * (2j * np.pi * kz)
    a = np.tensordot(mz, spec, axes=(1, 0)) * ramp  # (planes, Y, X//2+1)
    if deriv == 1:
        a = a * (2j * np.pi * ky)[:, None]
    elif deriv == 2:
        a = a * (2j * np.pi * kx)[None, :]
    out = np.fft.irfft(np.fft.ifft(a, axis=1), n=dims[2], axis=2)
    return out[:, crop[0], crop[1]]


def _drift(n, spec, rng) -> np.ndarray:
    """(n, 3) the content's drift (planes, pixels, pixels): a focus drift along z (a ramp
    to 1-2.5 planes, either way, with jitter), a random walk in y and x; volume 0 at 0."""
    bound = np.asarray(spec["drift"], np.float64)
    out = np.zeros((n, 3))
    t = np.linspace(0.0, 1.0, n)
    out[:, 0] = t * rng.uniform(1.0, 2.5) * rng.choice([-1.0, 1.0]) \
        + np.concatenate([[0.0], rng.normal(0.0, 0.2, n - 1)])
    for i in range(1, n):
        out[i, 1:] = out[i - 1, 1:] + rng.normal(0.0, spec["step"], 2)
    return np.clip(out, -bound, bound)


def make_volume_stack(seed=0, quick=False, image=None, shape=None) -> AccuracyStack:
    """A ``volumes`` stack (deterministic for its seed, image and shape): ``frames`` (T, Z,
    Y, X) float32 camera counts, ``truth`` (T, 3) planes and pixels; ``clean`` the Poisson
    means plus the offset, ``gradient`` (T, 3, Z, Y, X) float32 the derivative of the clean
    volumes along z (per plane), y and x; ``info``: ``z_step`` (the planes' spacing in
    pixels: 2, 3 or 4, by the seed), the photons.

    >>> a = make_volume_stack(1, quick=True)
    >>> a.info["z_step"], bool(np.abs(a.truth).max() > 0.5)
    (3, True)
    """
    spec = VOLUME_SPEC
    n, default_shape = spec["quick"] if quick else (spec["frames"], spec["shape"])
    shape = tuple(int(v) for v in (default_shape if shape is None else shape))
    image = spec["bench_images"][0] if image is None else image
    rng = np.random.default_rng([int(seed), 76, zlib.crc32(image.encode()), *shape])
    z_step = 2 + int(seed) % 3
    drift = _drift(n, spec, rng)
    fine = drift * [z_step, 1.0, 1.0]
    margin = tuple(int(math.ceil(b)) + 4 for b in np.asarray(spec["drift"]) * [z_step, 1, 1])
    canvas = scene(shape, z_step, margin, image, rng)
    dims = canvas.shape
    spec_c = np.fft.rfftn(canvas)
    kz, ky, kx = (np.fft.fftfreq(dims[0])[:, None, None], np.fft.fftfreq(dims[1])[:, None],
                  np.fft.rfftfreq(dims[2]))
    sz, sy = PSF_Z * z_step, PSF_XY  # the point-spread function, in fine voxels
    spec_c *= np.exp(-2 * np.pi ** 2 * (sz ** 2 * kz ** 2 + sy ** 2 * (ky ** 2 + kx ** 2)))
    z0 = margin[0] + TAPER
    planes = z0 + z_step * np.arange(shape[0])
    crop = (slice(margin[1] + TAPER, margin[1] + TAPER + shape[1]),
            slice(margin[2] + TAPER, margin[2] + TAPER + shape[2]))
    clean = np.stack([_planes(spec_c, dims, planes, d, crop) for d in fine])
    scale = spec["peak"] / clean.max()
    grad = np.stack([[_planes(spec_c, dims, planes, d, crop, a) * (z_step if a == 0 else 1.0)
                      for a in range(3)] for d in fine]) * scale
    lam = np.clip(clean * scale, 0.0, None) + spec["background"]
    grad = grad * (clean > 0)[:, None]
    offset = np.full(shape, CAMERA_OFFSET)
    frames = camera(lam, offset, rng)
    info = {"z_step": z_step, "peak_photons": spec["peak"],
            "background_photons": spec["background"], "read_noise": READ_NOISE}
    return AccuracyStack("volumes", int(seed), image, frames.astype(np.float32), 0.0 - drift,
                         info, lam + offset, np.full(shape, spec["background"] + CAMERA_OFFSET),
                         grad.astype(np.float32), offset, READ_NOISE)


def volume_shifts(method, stack) -> np.ndarray:
    """(T, 3) shifts of ``stack`` by ``method``, a :data:`VOLUME_METHODS` value: keyword
    arguments of :func:`~xcorr_app.alignment.align_volumes` (on the CPU) or ``("skimage",
    normalization)`` (``phase_cross_correlation`` of each volume against volume 0, upsample
    100)."""
    frames = stack.frames
    if isinstance(method, tuple):
        from skimage.registration import phase_cross_correlation

        return np.array([phase_cross_correlation(frames[0], v, upsample_factor=100,
                                                 normalization=method[1])[0] for v in frames])
    from ..alignment import align_volumes

    return np.asarray(align_volumes(frames, device="cpu", **method).shifts, np.float64)


def volume_errors(got, truth) -> tuple:
    """``(rms, max, shared, per_frame)`` voxels (Euclidean, volumes 1..), rounded to 1e-4:
    :func:`~xcorr_app.bench._accuracy.stack_errors` and ``error_split`` in 3-D.

    >>> volume_errors([[0, 0, 0], [1, 1, 1.5]], [[0, 0, 0], [1, 1, 1]])
    (0.5, 0.5, 0.5, 0.0)
    """
    d = np.asarray(got, np.float64)[1:] - np.asarray(truth, np.float64)[1:]
    if not np.isfinite(d).all():
        return (math.inf,) * 4
    e = np.sqrt((d ** 2).sum(axis=1))
    mean = d.mean(axis=0)
    rest = np.sqrt(np.mean(((d - mean) ** 2).sum(axis=1)))
    return tuple(round(float(v), 4) for v in (np.sqrt(np.mean(e ** 2)), e.max(),
                                              np.linalg.norm(mean), rest))


def measure_volumes(seed, quick=False, methods=None, image=None, shape=None, off_by=0.5) -> list:
    """The rows of one volume stack (:func:`make_volume_stack`) for ``xcorr bench accuracy``
    (:func:`~xcorr_app.bench._accuracy.measure`'s keys): every method of ``methods`` (names
    of :data:`VOLUME_METHODS`; default all) with its errors, the oracle's and the Cramer-Rao
    bound; ``off``: volumes more than ``off_by`` voxels off (``off_flagged`` None)."""
    from ._common import reason

    stack = make_volume_stack(seed, quick=quick, image=image, shape=shape)
    best = volume_oracle(stack)
    oracle, _, o_shared, o_frame = volume_errors(best, stack.truth)
    crb = volume_bound(stack)
    rows = []
    for m in methods or list(VOLUME_METHODS):
        row = {"kind": "volumes", "seed": int(seed), "image": stack.image,
               "shape": list(stack.frames.shape), "method": m, "error": "", "oracle": oracle,
               "oracle_shared": o_shared, "oracle_per_frame": o_frame, "crb": crb,
               "off": None, "off_flagged": None, "z_step": stack.info["z_step"]}
        try:
            got = volume_shifts(VOLUME_METHODS[m], stack)
            row["rms"], row["max"], row["shared"], row["per_frame"] = volume_errors(
                got, stack.truth)
            e = np.sqrt(((got - stack.truth)[1:] ** 2).sum(axis=1))
            row["off"] = int((~(e <= off_by)).sum())
        except Exception as exc:  # noqa: BLE001 -- reported in the table
            row["rms"] = row["max"] = row["shared"] = row["per_frame"] = math.nan
            row["error"] = reason(exc)
        rows.append(row)
    return rows


def volume_target_lines(comp) -> list:
    """The issue's target lines for the volume stacks of ``comp``
    (:func:`~xcorr_app.bench._accuracy.comparisons`): the default's median at most
    :data:`TARGET_VOLUMES` voxel, and at most scikit-image's better normalization's over
    :data:`TARGET_VS_SKIMAGE` (medians, and on how many stacks)."""
    vc = [c for c in comp if c["kind"] == "volumes"]
    if not vc:
        return []
    d = float(np.median([c["default"] for c in vc]))
    b = float(np.median([c["best"] for c in vc]))
    under = sum(c["default"] * TARGET_VS_SKIMAGE <= c["best"] for c in vc)
    yes = lambda ok: "yes" if ok else "no"  # noqa: E731
    return [f"- volumes: default median <= {TARGET_VOLUMES} voxel: {yes(d <= TARGET_VOLUMES)} "
            f"({d:.3f}); <= scikit-image's better / {TARGET_VS_SKIMAGE:g}: "
            f"{yes(d * TARGET_VS_SKIMAGE <= b)} (median {b:.3f}; {under} of {len(vc)} stacks)"]


def volume_oracle(stack) -> np.ndarray:
    """The floor (as :func:`~xcorr_app.bench._accuracy.oracle_shifts`, in 3-D): every volume's
    shift fitted against its noise-free volume (one Gauss-Newton step from the truth, a gain
    and an offset free, weighted by the Poisson and read noise's variance), relative to
    volume 0's."""
    out = np.array(stack.truth, np.float64)
    for i in range(len(stack.frames)):
        lam = np.asarray(stack.clean[i], np.float64)
        cols = [stack.gradient[i, a] for a in range(3)] + [lam - stack.static,
                                                           np.ones_like(lam)]
        jac = np.stack([np.asarray(c, np.float64).ravel() for c in cols], axis=1)
        var = np.maximum(lam - stack.offset + stack.read_noise ** 2, 1e-3).ravel()
        w = jac / var[:, None]
        step = np.linalg.lstsq(w.T @ jac, w.T @ (stack.frames[i] - lam).ravel(), rcond=None)[0]
        out[i] += step[:3]
    return out - out[0]


def volume_bound(stack) -> float:
    """The Cramer-Rao bound of the stack's RMS error (voxels, Euclidean, volumes 1..), as
    :func:`~xcorr_app.bench._accuracy.stack_bound` in 3-D: per volume ``sqrt(var_i +
    var_0)``, ``var`` the trace of the inverse Fisher information of the shift."""
    var = []
    for i in range(len(stack.frames)):
        g = np.asarray(stack.gradient[i], np.float64).reshape(3, -1)
        mean = np.asarray(stack.clean[i], np.float64).ravel() - stack.offset.ravel()
        info = (g / (mean + stack.read_noise ** 2)) @ g.T
        var.append(float(np.trace(np.linalg.inv(info))))
    var = np.asarray(var)
    return round(float(np.sqrt(np.mean(var[1:] + var[0]))), 4)
