"""The ``mask`` of a rigid run: the pixels of the sensor that the measurement uses.

A mask is one 2-D image for the whole stack (True, or nonzero in a file: the pixel is used);
the pixels it leaves out (a static artefact, a saturated bar, a fixed-pattern blob, dead
columns) take no part in any frame's shift, nor in the reference's.  :func:`read_mask` reads
and checks it once, where the run's options are built; the measuring pass fills the left-out
pixels of every frame with the mean of its used ones before the prefilter
(:func:`fill_masked`), so that a bright artefact does not leak into the used pixels through the
filter, and measures each frame by Padfield's masked ZNCC
(:func:`xcorr_app.registration._masked.masked_zncc_surfaces`) over the used pixels out of the
prefilter's reach of the left-out ones (:func:`measured_mask`).

Examples
--------
>>> import numpy as np
>>> mask = np.ones((4, 5), bool); mask[1, 1:4] = False
>>> int(read_mask(mask.astype(np.uint8))[1].sum())
17
>>> fill_masked(np.arange(40.0).reshape(2, 4, 5) * 17, mask, np)[1, 1].tolist()
[425.0, 509.0, 509.0, 509.0, 493.0]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...backend import to_numpy
from ...errors import InputError

__all__ = ["NAN_MASK", "read_mask", "check_mask_shape", "fill_masked", "measured_mask",
           "measured_masks", "filter_reach"]

#: ``mask="nan"``: each frame's NaN or infinite pixels left out (the reference's too), a mask
#: a frame
NAN_MASK = "nan"


def read_mask(mask):
    """``(as_given, image)``: ``mask`` as the run records it (a path as a string; ``"array"``
    for an array; :data:`NAN_MASK`) and as a 2-D NumPy bool image, True where a pixel is used
    (``None`` for :data:`NAN_MASK`: each frame's own, :func:`measured_masks`).

    ``mask`` is ``"nan"``, an image file (TIFF or any format of :func:`xcorr_app.io.read_image`;
    ``.npy`` by NumPy) or a 2-D NumPy or CuPy array: boolean, or numbers whose nonzero pixels
    are used. Anything else, a file that cannot be read, an image that is not 2-D, NaN values or
    no pixel used is an :class:`InputError` that names the option.
    """
    if isinstance(mask, str) and mask == NAN_MASK:
        return NAN_MASK, None
    if isinstance(mask, (str, Path)):
        name = str(mask)
        if not name.strip():
            raise InputError("mask is empty: give an image file (nonzero pixels: used)")
        image = _read_file(Path(name))
        what = f"mask {name}"
    elif hasattr(mask, "shape") and hasattr(mask, "dtype") and not isinstance(mask, np.generic):
        name, image, what = None, np.asarray(to_numpy(mask)), "mask"
    else:
        raise InputError(f"mask must be an image file or a 2-D array (True or nonzero: the "
                         f"pixels used), not {type(mask).__name__}")
    if image.ndim != 2:
        raise InputError(f"{what} has shape {tuple(image.shape)}; it must be one 2-D image "
                         "(True or nonzero: the pixels used)")
    if image.dtype.kind not in "biuf":
        raise InputError(f"{what} holds values of type {image.dtype}; give booleans or numbers "
                         "(nonzero: the pixel is used)")
    if image.dtype.kind == "f" and not bool(np.isfinite(image).all()):
        raise InputError(f"{what} has NaN or infinite values; give 0 (left out) or nonzero "
                         "(used) for every pixel")
    image = image != 0
    if not image.any():
        raise InputError(f"{what} leaves out every pixel (all zero): nothing would be measured")
    return (name if name is not None else "array"), image


def _read_file(path):
    if not path.exists():
        raise InputError(f"mask {path} does not exist; check the path")
    if path.suffix.lower() == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"mask {path} cannot be read as a NumPy .npy file ({exc})") \
                from None
    from ...io import open_stack

    try:
        with open_stack(path) as src:
            if src.n_frames != 1:
                raise InputError(f"mask {path} holds {src.n_frames} frames; a mask is one 2-D "
                                 "image")
            return np.asarray(to_numpy(src.read(0, 1)[0]))
    except InputError as exc:
        if str(exc).startswith(f"mask {path} "):
            raise
        raise InputError(f"mask {path}: {exc}") from None


def check_mask_shape(mask, image, frame_shape):
    """:class:`InputError` where the ``mask`` option's ``image`` is not the shape of a
    frame."""
    if tuple(image.shape) != tuple(frame_shape):
        what = f"mask {mask}" if isinstance(mask, (str, Path)) else "mask"
        (mh, mw), (fh, fw) = image.shape, frame_shape
        raise InputError(f"{what} is {mh}x{mw} but the frames are {fh}x{fw}; the mask needs "
                         "the frames' shape")


def fill_masked(frames, mask, xp):
    """``frames`` (N, H, W) with the pixels ``mask`` ((H, W), or (N, H, W): one a frame) leaves
    out set to each frame's mean over the used ones (a new float array: float64 frames stay
    float64, others float32); NaN or Inf there are so replaced too."""
    dtype = xp.float64 if frames.dtype == np.float64 else xp.float32
    f = xp.asarray(frames).astype(dtype)
    used = xp.where(mask, f, 0).sum(axis=(-2, -1), dtype=xp.float64, keepdims=True)
    # (counts on the device: nothing waits; a frame with no pixel used stays NaN: flagged)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = (used / mask.sum(axis=(-2, -1), keepdims=True)).astype(dtype)
    return xp.where(mask, f, means)


def filter_reach(prefilter, features=None) -> int:
    """Pixels within which the run's prefilter (``features``' bank where given) spreads a
    pixel's value enough to bias a shift: twice its largest sigma, rounded up (0 for none).

    >>> filter_reach("gaussian:1"), filter_reach("dog:1,4"), filter_reach("none", "gabor:2,6")
    (2, 8, 4)
    """
    spec = features or prefilter
    name, _, arg = str(spec).partition(":")
    if name not in ("gaussian", "dog", "gabor") or not arg:
        return 0
    sigmas = [float(v) for v in arg.split(",")]
    return int(np.ceil(2 * max(sigmas[:1] if name == "gabor" else sigmas)))


def measured_mask(mask, reach):
    """The pixels of ``mask`` the masked ZNCC measures on: those farther than ``reach`` pixels
    from every left-out one (the frame's edges do not count), or ``mask`` itself where none
    would be left.

    Why: the prefilter mixes the filled left-out pixels (:func:`fill_masked`) into the used ones
    near them, and that mixture does not move with the frames: it pulls the shifts towards zero
    as a frame's own edges do (on 61x83 frames with a 20x66 pixels hole, at gaussian:1, a shift
    error of 0.054 px RMS kept 2 px away: 0.029, unmasked 0.018).

    >>> m = np.ones((5, 9), bool); m[:, 4] = False
    >>> measured_mask(m, 2).astype(int)[0].tolist()
    [1, 1, 0, 0, 0, 0, 0, 1, 1]
    """
    if reach <= 0 or mask.all():
        return mask
    from scipy import ndimage as ndi

    kept = ndi.distance_transform_edt(mask) > reach
    return kept if kept.any() else mask


def measured_masks(used, reach, xp):
    """:func:`measured_mask` of each frame's mask ``used`` (N, H, W) bool on ``xp``'s device,
    by a square of ``reach`` pixels (box sums of the left-out pixels: no distance transform a
    frame), each frame's own mask where none would be left.

    >>> m = np.ones((1, 5, 9), bool); m[0, 2, 4] = False
    >>> measured_masks(m, 1, np).astype(int)[0, 1].tolist()
    [1, 1, 1, 0, 0, 0, 1, 1, 1]
    """
    if reach <= 0:
        return used
    near = _box_sums(_box_sums((~used).astype(xp.int32), reach, 1, xp), reach, 2, xp)
    kept = used & xp.equal(near, 0)
    return xp.where(kept.any(axis=(1, 2), keepdims=True), kept, used)


def _box_sums(a, r, axis, xp):
    """The sums of ``a`` over ``[i - r, i + r]`` along ``axis`` (zero beyond its ends)."""
    n = a.shape[axis]
    pad = list(a.shape)
    pad[axis] = r + 1
    c = xp.cumsum(xp.concatenate([xp.zeros(pad, a.dtype), a,
                                  xp.zeros(pad[:axis] + [r] + pad[axis + 1:], a.dtype)], axis),
                  axis=axis)
    return xp.take(c, xp.arange(2 * r + 1, 2 * r + 1 + n), axis=axis) \
        - xp.take(c, xp.arange(n), axis=axis)
