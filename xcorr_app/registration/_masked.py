"""Masked registration: the translation between two 2-D images that only some pixels of
(the masks' True ones) take part in, by masked normalized cross-correlation (Padfield).

For every translation the zero-normalized correlation (ZNCC) of the two images is computed over
the pixels valid in both at that translation: ``sum((f - mean_f) (g - mean_g)) / sqrt(var_f
var_g)`` with the means and the variances taken over that overlap only.  Each sum over the
overlap is a cross-correlation of a masked image (or its square, or a mask) with a mask or a
masked image, so the whole surface takes six forward and six inverse real FFTs of the full
linear-correlation size ``(Hr + Hm - 1, Wr + Wm - 1)`` (no wrap-around, so no ambiguity modulo
the shape).  Translations whose overlap is below ``overlap_ratio`` of the largest overlap are left
out (a handful of pixels can correlate perfectly by chance).  This is what
``skimage.registration.phase_cross_correlation(..., reference_mask=..., moving_mask=...)``
computes; :func:`masked_phase_cross_correlation` returns the same shifts (except where
translations tie to rounding, as over flat or periodic images: the FFTs round differently).

References
----------
.. [1] Dirk Padfield, "Masked object registration in the Fourier domain", IEEE Transactions on
       Image Processing 21(5), 2706-2718 (2012). DOI:10.1109/TIP.2011.2181402

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> rng = np.random.default_rng(0)
>>> reference = ndi.gaussian_filter(rng.random((60, 70)), 2)
>>> moving = np.roll(reference, (4, -6), axis=(0, 1))
>>> mask = np.ones(reference.shape, bool)
>>> mask[:, :8] = False                          # the wrapped-around columns: not valid
>>> masked_phase_cross_correlation(reference, moving, mask, mask).tolist()
[-4.0, 6.0]
"""

from __future__ import annotations

import warnings

import numpy as np

from ..backend import array_module_of, to_numpy, to_xp
from ..correlate import fft_of, next_smooth
from ..errors import InputError
from ._peaks import peak_index, subpixel_gaussian


def _as_mask(mask, shape, name, xp):
    """``mask`` as a boolean array of ``xp`` (0/1 values of another type accepted), or
    :class:`InputError` for another shape, other values, or no True pixel."""
    mask = to_xp(mask, xp)
    if mask.shape != tuple(shape):
        raise InputError(f"{name} has shape {mask.shape}, but its image has shape {tuple(shape)}; "
                         "a mask needs its image's shape")
    if mask.dtype != bool:
        if mask.dtype.kind not in "biuf" or not bool(xp.all((mask == 0) | (mask == 1))):
            raise InputError(f"{name} must be boolean (True = valid pixel) or hold only 0 and 1, "
                             f"got {mask.dtype} values other than 0 and 1")
        mask = mask != 0
    if not bool(mask.any()):
        raise InputError(f"{name} has no True (valid) pixel; nothing would be registered")
    return mask


def _float_dtype(*images):
    """scikit-image's working precision: float32 for single-precision images, else float64."""
    single = all(np.dtype(a.dtype) in (np.float16, np.float32) for a in images)
    return np.float32 if single else np.float64


def _checked(reference_image, moving_image, reference_mask, moving_mask, overlap_ratio):
    """The images (float, 0 where masked out) and the boolean masks, on one array module;
    :class:`InputError` for any input :func:`masked_phase_cross_correlation` refuses."""
    try:
        ratio = float(overlap_ratio)
    except (TypeError, ValueError):
        ratio = float("nan")
    if not 0 < ratio <= 1:
        raise InputError(f"overlap_ratio must be in (0, 1], got {overlap_ratio!r}")
    xp = array_module_of(reference_image, moving_image, reference_mask, moving_mask)
    reference, moving = to_xp(reference_image, xp), to_xp(moving_image, xp)
    if reference.ndim != 2 or moving.ndim != 2:
        raise InputError(f"masked registration needs two 2-D images, got shapes {reference.shape} "
                         f"and {moving.shape}")
    if moving_mask is None and reference.shape != moving.shape:
        raise InputError(f"the images differ in shape ({reference.shape} and {moving.shape}): "
                         "pass moving_mask too (moving_mask=None means reference_mask)")
    if any(a.dtype.kind not in "biuf" for a in (reference, moving)):
        raise InputError(f"masked registration needs real images, got {reference.dtype} and "
                         f"{moving.dtype}")
    dtype = _float_dtype(reference, moving)
    reference_mask = _as_mask(reference_mask, reference.shape, "reference_mask", xp)
    moving_mask = reference_mask if moving_mask is None else \
        _as_mask(moving_mask, moving.shape, "moving_mask", xp)
    images = []
    for image, mask, name in ((reference, reference_mask, "reference_image"),
                              (moving, moving_mask, "moving_image")):
        image = image.astype(dtype, copy=False)
        if not bool(xp.isfinite(image[mask]).all()):
            raise InputError(f"NaN or infinite values in {name} where its mask is True; set the "
                             "mask False there (xp.isfinite(image))")
        # the mean of the valid pixels taken out: the ZNCC does not change, the sums lose less
        valid = xp.where(mask, image, 0)
        images.append(xp.where(mask, image - valid.sum() / mask.sum(), 0).astype(dtype))
    return images[0], images[1], reference_mask, moving_mask, ratio, xp


def masked_ncc(reference, moving, reference_mask, moving_mask, overlap_ratio=0.3):
    """The masked ZNCC of ``moving`` against ``reference`` at every translation.

    Parameters
    ----------
    reference, moving : (Hr, Wr) and (Hm, Wm) float ndarrays
        The images (NumPy or CuPy, float32 or float64), 0 where their masks are False (the
        values there are not read otherwise).
    reference_mask, moving_mask : bool ndarrays of the images' shapes
        True where a pixel is valid; at least one each.
    overlap_ratio : float, optional
        Translations whose overlap of valid pixels is below this fraction of the largest
        overlap get 0.

    Returns
    -------
    ncc : (Hr + Hm - 1, Wr + Wm - 1) ndarray
        ``ncc[k]`` is the ZNCC, in ``[-1, 1]``, of ``moving[n]`` with ``reference[n - t]`` over
        the pixels ``n`` valid in both, ``t = k - (Hr - 1, Wr - 1)``: ``moving`` is ``reference``
        moved by ``t`` where ``ncc`` peaks.  0 where the overlap is too small or one image is
        flat over it.  The images' precision, the module of the inputs.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> ref = rng.random((20, 24)); mov = np.roll(ref, (2, 3), axis=(0, 1))
    >>> mask = np.ones(ref.shape, bool)
    >>> ncc = masked_ncc(ref, mov, mask, mask)
    >>> ncc.shape, [int(i) - 19 for i in np.unravel_index(ncc.argmax(), ncc.shape)][:1]
    ((39, 47), [2])
    """
    xp = array_module_of(reference, moving)
    fft = fft_of(xp)
    dtype = reference.dtype
    (hr, wr), (hm, wm) = reference.shape, moving.shape
    full = (hr + hm - 1, wr + wm - 1)
    size = tuple(next_smooth(n) for n in full)
    # the spectra of the masks, the masked images and their squares: one batched transform each
    ref = fft.rfft2(xp.stack([reference_mask.astype(dtype), reference, reference * reference]),
                    s=size)
    mov = fft.rfft2(xp.stack([moving_mask.astype(dtype), moving, moving * moving]), s=size)
    ref = ref.conj()
    # circ[j][t] = sum_n a[n] b[n - t]: the overlap count, the sums of each image and of its
    # square over the overlap, and the sum of the products
    circ = fft.irfft2(xp.stack([mov[0] * ref[0], mov[1] * ref[0], mov[0] * ref[1],
                                mov[2] * ref[0], mov[0] * ref[2], mov[1] * ref[1]]), s=size)
    del ref, mov
    # translations t = -(Hr - 1) .. Hm - 1 first to last, as in the linear correlation
    circ = xp.roll(circ, (hr - 1, wr - 1), axis=(1, 2))[:, :full[0], :full[1]]
    count, s_mov, s_ref, s_mov2, s_ref2, s_prod = circ
    eps = np.finfo(dtype).eps
    count = xp.maximum(xp.round(count), eps)  # the FFT's rounding off a whole count
    numerator = s_prod - s_mov * s_ref / count
    var_mov = xp.maximum(s_mov2 - s_mov * s_mov / count, 0)
    var_ref = xp.maximum(s_ref2 - s_ref * s_ref / count, 0)
    denominator = xp.sqrt(var_mov * var_ref)
    # where an image is flat over the overlap the ratio is rounding noise
    flat = denominator <= 1e3 * eps * denominator.max()
    ncc = xp.clip(numerator / xp.where(flat, 1, denominator), -1, 1)
    small = count < overlap_ratio * count.max()
    return xp.where(flat | small, 0, ncc).astype(dtype, copy=False)


def masked_phase_cross_correlation(reference_image, moving_image, reference_mask,
                                   moving_mask=None, overlap_ratio=0.3, upsample_factor=1):
    """Translation between two 2-D images over the valid pixels of their masks.

    The shift of ``skimage.registration.phase_cross_correlation(reference_image, moving_image,
    reference_mask=..., moving_mask=..., overlap_ratio=...)``; with ``upsample_factor > 1`` the
    peak of the masked ZNCC is refined to a fraction of a pixel (scikit-image gives integer
    shifts whatever the factor).

    Parameters
    ----------
    reference_image : (Hr, Wr) ndarray
        Reference image (NumPy or CuPy, real).
    moving_image : (Hm, Wm) ndarray
        Image to register; another shape than ``reference_image`` only with ``moving_mask``.
    reference_mask : (Hr, Wr) ndarray
        True (or 1) where ``reference_image`` is valid, False (or 0) where it is not.
    moving_mask : (Hm, Wm) ndarray, optional
        The same for ``moving_image``; None: ``reference_mask``.
    overlap_ratio : float, optional
        In (0, 1]: translations whose overlap of valid pixels is below this fraction of the
        largest overlap are not considered (lower: larger shifts found; higher: fewer chance
        matches of small overlaps).
    upsample_factor : float, optional
        1: integer shifts (scikit-image's).  Above 1: the integer peak refined by a Gaussian fit
        of its 3x3 neighbourhood on the ZNCC surface, rounded to ``1 / upsample_factor`` pixel.

    Returns
    -------
    shift : (2,) float64 ndarray
        ``(dy, dx)`` to apply to ``moving_image`` to register it with ``reference_image`` (NumPy,
        also for CuPy inputs).  Where several translations tie for the best correlation, their
        mean (as scikit-image); with images of different shapes, relative to their centres.

    Raises
    ------
    InputError
        For a mask of another shape than its image, with values other than 0 and 1, or with no
        True pixel; ``overlap_ratio`` outside (0, 1]; images that are not 2-D, not real, or of
        different shapes without ``moving_mask``; NaN or infinite values where a mask is True
        (they are ignored where it is False).

    Warns
    -----
    UserWarning
        Where the images are flat over every allowed overlap (all correlations 0): the shift is
        then the mean of all translations, meaningless.

    Notes
    -----
    The subpixel fit assumes a smooth correlation peak (images without much content at the
    highest frequencies); a peak on the border of the allowed translations stays integer.
    Single-precision images are registered in single precision, as in scikit-image.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import ndimage as ndi
    >>> rng = np.random.default_rng(0)
    >>> reference = ndi.gaussian_filter(rng.random((64, 64)), 3)
    >>> moving = ndi.shift(reference, (2.3, -1.6), order=3, mode="nearest")
    >>> mask = np.zeros(reference.shape, bool); mask[8:-8, 8:-8] = True
    >>> masked_phase_cross_correlation(reference, moving, mask).tolist()
    [-2.0, 2.0]
    >>> masked_phase_cross_correlation(reference, moving, mask, upsample_factor=20).tolist()
    [-2.3, 1.6]
    """
    reference, moving, reference_mask, moving_mask, ratio, xp = _checked(
        reference_image, moving_image, reference_mask, moving_mask, overlap_ratio)
    ncc = masked_ncc(reference, moving, reference_mask, moving_mask, ratio)
    best = ncc.max()
    maxima = xp.argwhere(ncc == best)
    if not bool(best != 0):
        warnings.warn("masked registration: the images are flat over every allowed overlap of "
                      "their masks; the shift is meaningless", UserWarning, stacklevel=3)
    lag = to_numpy(maxima).mean(axis=0) - (np.asarray(reference.shape) - 1)
    if upsample_factor > 1 and len(maxima) == 1:
        fraction = to_numpy(xp.stack(subpixel_gaussian(ncc, *peak_index(ncc))))
        # added last: whole pixels plus k / upsample_factor, as the unmasked shifts
        lag = lag + np.round(fraction * upsample_factor) / upsample_factor
    return -lag + (np.asarray(moving.shape) - np.asarray(reference.shape)) / 2


#: :func:`masked_zncc_surfaces`: the most float elements its transforms of one batch of frames
#: hold at once (about 256 MiB of float32); a chunk is measured in batches of this size
MASKED_BATCH_ELEMENTS = 1 << 26


def masked_zncc_surfaces(reference, frames, mask, bound, overlap_ratio=0.3,
                         reference_mask=None):
    """The masked ZNCC surfaces of a stack's frames against a reference, within a search bound,
    in the layout of the other surfaces of the run (:func:`~._peaks.find_shifts`).

    Padfield's masked normalized cross-correlation (:func:`masked_ncc`) for a batch.  Where all
    frames and the reference share one mask (the sensor's pixels to use), its spectrum, the
    reference's sums and the overlap counts are transformed once per call, and each frame costs
    two forward and three inverse real FFTs of ``(H + by, W + bx)`` (5-smooth): the size at
    which the translations within the bound do not wrap around.  A mask a frame (their NaN
    pixels, say) costs each frame three forward and six inverse.

    Parameters
    ----------
    reference : (H, W) or (N, H, W) float ndarray
        The reference (NumPy or CuPy), or one per frame (``reference="previous"``).
    frames : (N, H, W) float ndarray
        The frames (float32 or float64; the surfaces in that precision).
    mask : (H, W) or (N, H, W) bool ndarray
        True where a pixel takes part: in every frame (and the reference, unless
        ``reference_mask`` is given), or in each frame.
    bound : (int, int)
        The largest shift ``(by, bx)`` searched, each below the frame's side.
    overlap_ratio : float, optional
        Shifts whose overlap of used pixels is below this fraction of the largest overlap within
        the bound get 0 (a few pixels can correlate perfectly by chance).
    reference_mask : (H, W) or (N, H, W) bool ndarray, optional
        The reference's pixels that take part (one per reference where there are several);
        default ``mask``, which must then be 2-D.

    Returns
    -------
    (N, 2 by + 1, 2 bx + 1) ndarray
        ``out[i, by + ky, bx + kx]``: the ZNCC of ``reference[n + k]`` with ``frames[i][n]``
        over the pixels ``n`` with ``reference_mask[n + k]`` and ``mask[n]``; the frame is
        aligned by the shift ``k`` where it peaks.  0 where the overlap is too small or an image
        is flat over it; NaN for a frame with NaN or Inf among its used pixels.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import ndimage as ndi
    >>> rng = np.random.default_rng(2)
    >>> scene = ndi.gaussian_filter(rng.random((50, 60)), 2)
    >>> frames = np.stack([scene[5:35, 6:46], scene[7:37, 3:43]])
    >>> frames[:, 10:14, :] = 50.0                  # a static bright bar
    >>> mask = np.ones((30, 40), bool); mask[9:15] = False
    >>> s = masked_zncc_surfaces(frames[0], frames, mask, (4, 4))
    >>> [[int(v) - 4 for v in np.unravel_index(a.argmax(), a.shape)] for a in s]
    [[0, 0], [2, -3]]
    """
    xp = array_module_of(reference, frames, mask)
    fft = fft_of(xp)
    dtype = np.float64 if frames.dtype == np.float64 else np.float32
    h, w = frames.shape[-2:]
    by, bx = (int(b) for b in bound)
    size = (next_smooth(h + by), next_smooth(w + bx))
    rows = xp.arange(-by, by + 1) % size[0]  # the shifts within the bound, wrapped
    cols = xp.arange(-bx, bx + 1) % size[1]
    if reference_mask is None:
        if mask.ndim != 2:
            raise ValueError("masked_zncc_surfaces: a mask a frame needs the reference's own "
                             "(reference_mask)")
        reference_mask = mask
    if reference.ndim == 2 and reference_mask.ndim != 2:
        raise ValueError("masked_zncc_surfaces: one reference takes one reference_mask (H, W)")
    shared = mask.ndim == 2 and reference_mask is mask

    def spectra(images, used):
        """The spectra of the images less their mean over ``used`` (their masks: the ZNCC
        does not change; the sums lose less), 0 outside it, and of their squares."""
        count = used.sum(axis=(-2, -1), keepdims=True)  # (on the device: nothing waits)
        images = xp.where(used, images.astype(dtype, copy=False), 0)
        means = images.sum(axis=(-2, -1), keepdims=True) / xp.maximum(count, 1).astype(dtype)
        images = xp.where(used, images - means, 0).astype(dtype, copy=False)
        return fft.rfft2(images, s=size), fft.rfft2(images * images, s=size)

    def sums(left, right):
        """``sum_n a[n + k] b[n]`` at the shifts within the bound, from the spectra."""
        c = fft.irfft2(left * right.conj(), s=size)
        return c.take(rows, axis=-2).take(cols, axis=-1)

    def counts(left, right):
        """The overlaps of used pixels (the FFT's rounding off whole counts), and where they
        are too small."""
        count = xp.maximum(xp.round(sums(left, right)), 1)
        return count, count < overlap_ratio * count.max(axis=(-2, -1), keepdims=True)

    def masks(m):
        return fft.rfft2(m.astype(dtype), s=size)

    one_reference = reference.ndim == 2
    one_reference_mask = reference_mask.ndim == 2
    if one_reference_mask:
        m_ref = masks(reference_mask)
    if shared:
        m_mov = m_ref
        count, small = counts(m_ref, m_ref)
    if one_reference:
        r, r2 = spectra(reference, reference_mask)
        if shared:
            s_ref, s_ref2 = sums(r, m_ref), sums(r2, m_ref)
    n = len(frames)
    per_frame = 6 * size[0] * (size[1] // 2 + 1) * (1 if one_reference else 2) \
        * (1 if shared else 2)
    batch = max(1, MASKED_BATCH_ELEMENTS // per_frame)
    out = xp.empty((n, 2 * by + 1, 2 * bx + 1), dtype)
    eps = np.finfo(dtype).eps
    for a in range(0, n, batch):
        at = slice(a, min(a + batch, n))
        used = mask if mask.ndim == 2 else mask[at]
        g, g2 = spectra(frames[at], used)
        if not one_reference_mask:
            m_ref = masks(reference_mask[at])
        if not one_reference:
            r, r2 = spectra(reference[at], reference_mask if one_reference_mask
                            else reference_mask[at])
        if not shared:
            m_mov = masks(used)
            count, small = counts(m_ref, m_mov)
        if not (shared and one_reference):
            s_ref, s_ref2 = sums(r, m_mov), sums(r2, m_mov)
        s_mov, s_mov2, s_prod = sums(m_ref, g), sums(m_ref, g2), sums(r, g)
        del g, g2
        numerator = s_prod - s_ref * s_mov / count
        var_ref = xp.maximum(s_ref2 - s_ref * s_ref / count, 0)
        var_mov = xp.maximum(s_mov2 - s_mov * s_mov / count, 0)
        denominator = xp.sqrt(var_ref * var_mov)
        # where an image is flat over the overlap the ratio is rounding noise
        flat = denominator <= 1e3 * eps * denominator.max(axis=(-2, -1), keepdims=True)
        ncc = xp.clip(numerator / xp.where(flat, 1, denominator), -1, 1)
        out[at] = xp.where(flat | small, 0, ncc)
    return out
