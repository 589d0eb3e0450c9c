"""Drop-in :func:`phase_cross_correlation` of scikit-image, for 2-D NumPy or CuPy images.

:func:`phase_cross_correlation` takes the arguments of
``skimage.registration.phase_cross_correlation`` and returns what it returns (same values, same
types) for 2-D images, so code written for scikit-image can import it from xcorr instead.  CuPy
inputs are registered on the GPU; the results always come back on the host, as scikit-image's do.
The subpixel refinement is the matrix-multiply DFT of Guizar-Sicairos et al. shared with
:mod:`xcorr_app.registration._fft_register` (reference there).  With ``reference_mask`` or
``moving_mask`` it registers by masked normalized cross-correlation (Padfield), in
:mod:`xcorr_app.registration._masked`.

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> rng = np.random.default_rng(0)
>>> reference = ndi.gaussian_filter(rng.random((48, 64)), 2)
>>> moving = np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(reference), (2.4, -3.7))).real
>>> shift, error, phasediff = phase_cross_correlation(reference, moving, upsample_factor=10)
>>> shift.round(6).tolist()                 # moves ``moving`` back onto ``reference``
[-2.4, 3.7]
>>> type(shift).__name__, shift.dtype, type(error).__name__, type(phasediff).__name__
('ndarray', dtype('float64'), 'float64', 'float64')

With a mask (True: valid pixel), here leaving out what ``np.roll`` wrapped around:

>>> moving = np.roll(reference, (3, 5), axis=(0, 1))
>>> mask = np.ones(reference.shape, bool); mask[:3] = False; mask[:, :5] = False
>>> phase_cross_correlation(reference, moving, reference_mask=mask)
(array([-3., -5.]), nan, nan)
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np

from ..backend import array_module_of, to_numpy, to_xp
from ..errors import InputError
from ..streaming import host_free_bytes, human
from ._fft_register import NORMALIZATIONS, refine_peak, signed_shifts, upsampled_dft, whiten
from ._masked import masked_phase_cross_correlation
from ._peaks import peak_index

_SINGLE = (np.float16, np.float32, np.complex64)  # scipy.fft transforms these in single precision


def _fft_module(xp):
    """scipy.fft on the CPU (scikit-image's FFT, so that near-zero bins that phase normalization
    blows up come out the same), cupy.fft on the GPU."""
    if xp is np:
        import scipy.fft

        return scipy.fft
    return xp.fft


def _spectrum(image, space, xp):
    """``fft2(image)`` (space "real") or ``image`` itself ("fourier"), as complex64 when
    ``image`` is single precision and complex128 otherwise -- the precision scipy.fft (and so
    scikit-image) works in."""
    dtype = xp.complex64 if image.dtype in _SINGLE else xp.complex128
    return (_fft_module(xp).fft2(image) if space == "real" else image).astype(dtype, copy=False)


def _disambiguate_shift(reference, moving, shift, xp):
    """Of the four shifts equal to ``shift`` modulo the image shape, the one whose overlap of
    ``reference`` and the shifted ``moving`` correlates best (scikit-image's rule, 2-D)."""
    if xp is np:
        from scipy import ndimage as ndi
    else:
        from cupyx.scipy import ndimage as ndi
    positive = [s % n for s, n in zip(shift, reference.shape)]
    order = 3 if np.any(shift % 1 != 0) else 0
    shifted = ndi.shift(moving, [float(s) for s in shift], mode="grid-wrap", order=order)
    splits = [(slice(0, i), slice(i, None)) for i in np.round(positive).astype(int)]
    best, best_corr = None, -1.0
    for tile in itertools.product(*splits):
        ref_tile, mov_tile = reference[tile].ravel(), shifted[tile].ravel()
        corr = -1.0
        if ref_tile.size > 2:
            with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)  # zero std: NaN, never chosen
                corr = float(xp.real(xp.corrcoef(ref_tile, mov_tile)[0, 1]))
        if corr > best_corr:
            best, best_corr = tile, corr
    if best is None:
        warnings.warn(f"Could not determine real-space shift for periodic shift {shift!r} as "
                      "requested by `disambiguate=True` (disambiguation is degenerate).",
                      stacklevel=3)
        return shift
    return np.array([p if sl.stop is None else p - n
                     for sl, p, n in zip(best, positive, reference.shape)])


def _check_region(u, shape):
    """:class:`InputError` where the upsampled region of ``upsample_factor`` ``u`` (its DFT
    matrices and the region, complex128, with a temporary each) does not fit the memory left
    (``10**6`` asked for terabytes until the process was killed)."""
    side = int(np.ceil(1.5 * u))
    need = 32 * (side * side + side * sum(shape))
    free = host_free_bytes()
    if u > 1 and free is not None and need > free:
        raise InputError(f"upsample_factor {u:g} needs an upsampled region of {side}x{side} "
                         f"({human(need)} with its DFT matrices), and {human(free)} is "
                         "available; use a smaller upsample_factor")


def _masked(reference_image, moving_image, reference_mask, moving_mask, overlap_ratio, u, space):
    """scikit-image's masked result ``(shift, nan, nan)``: :class:`InputError` for a spectrum
    or a moving mask alone (scikit-image fails on these without a message)."""
    if space == "fourier":
        raise InputError("masked registration needs real-space images (space='real'): a mask "
                         "selects pixels, not frequencies")
    if reference_mask is None:
        raise InputError("moving_mask needs reference_mask too (np.ones(shape, bool) for a "
                         "reference valid everywhere)")
    shift = masked_phase_cross_correlation(reference_image, moving_image, reference_mask,
                                           moving_mask, overlap_ratio, upsample_factor=u)
    return shift, np.nan, np.nan


def phase_cross_correlation(reference_image, moving_image, *, upsample_factor=1, space="real",
                            disambiguate=False, reference_mask=None, moving_mask=None,
                            overlap_ratio=0.3, normalization="phase"):
    """Subpixel translation between two 2-D images by (phase) cross-correlation.

    Same signature, results and return types as
    ``skimage.registration.phase_cross_correlation`` for 2-D images, with or without masks.

    Parameters
    ----------
    reference_image : (H, W) ndarray
        Reference image (NumPy or CuPy).
    moving_image : (H, W) ndarray
        Image to register, same shape as ``reference_image``.
    upsample_factor : float, optional
        Register to within ``1 / upsample_factor`` pixel (1: integer shifts only).  With masks
        scikit-image ignores it (integer shifts); here a factor above 1 refines the masked
        correlation's peak by a Gaussian fit of its 3x3 neighbourhood, rounded to
        ``1 / upsample_factor`` pixel.
    space : {"real", "fourier"}, optional
        "fourier": the inputs are already ``fft2`` of the images.  Case insensitive.  Masks
        need "real" (pixels are masked, not frequencies).
    disambiguate : bool, optional
        Choose among the shifts equal modulo the image shape the one whose real-space overlap
        correlates best (the FFT only knows the shift modulo the shape).  Not needed with
        masks (their correlation is linear, not circular): ignored there, as in scikit-image.
    reference_mask : (H, W) ndarray, optional
        Register by masked normalized cross-correlation (Padfield): True (or 1) where
        ``reference_image`` is valid, False (or 0) where it is not (NaN or infinite values
        allowed there).
    moving_mask : ndarray, optional
        The same for ``moving_image``; None with ``reference_mask``: ``reference_mask``.  With
        both masks the images may differ in shape (the shift is then relative to their
        centres, as in scikit-image).
    overlap_ratio : float, optional
        With masks, in (0, 1]: translations whose overlap of valid pixels is below this fraction
        of the largest overlap are not considered.  Ignored without masks.
    normalization : {"phase", None}, optional
        "phase" normalizes the cross-power spectrum to unit magnitude (phase correlation);
        None keeps the plain cross-correlation.  Ignored with masks.

    Returns
    -------
    shift : (2,) ndarray
        ``(dy, dx)`` to apply to ``moving_image`` to register it with ``reference_image``;
        a NumPy array (also for CuPy inputs), float32 when the inputs are single precision
        and float64 otherwise, as in scikit-image (float64 always with masks).
    error : numpy.float64 or numpy.float32
        Translation invariant normalized RMS error between the images; ``nan`` (a float)
        with masks, as in scikit-image.
    phasediff : numpy.float64 or numpy.float32
        Global phase difference between the images (zero for non-negative images); ``nan``
        (a float) with masks.

    Raises
    ------
    InputError
        (:class:`~xcorr_app.errors.InputError`, a ``ValueError`` as scikit-image raises) for
        an unknown ``space`` or ``normalization``, ``upsample_factor < 1``, images that are not
        2-D or differ in shape, or NaN or infinite values in the inputs; with masks: a mask of
        another shape than its image, with values other than 0 and 1 or no True pixel,
        ``moving_mask`` without ``reference_mask``, ``overlap_ratio`` outside (0, 1],
        ``space="fourier"``, complex images, NaN or infinite values where a mask is True (see
        :func:`~xcorr_app.registration._masked.masked_phase_cross_correlation`).

    Notes
    -----
    As in scikit-image: the computation runs in the precision of the inputs' FFTs (float32 /
    complex64 inputs in single precision); a peak index above half the size becomes a negative
    shift; the shift along an axis of length 1 is 0; the refinement searches a region of
    ``ceil(1.5 * upsample_factor)`` upsampled pixels around the integer peak.  Where
    scikit-image raises ValueError this raises :class:`InputError` (a ValueError); only 2-D
    images are accepted.  On the GPU, cuFFT rounds differently from scipy.fft: a spectral bin that is
    exactly 0 on the CPU (integer images) may be ~1e-13 there, which phase normalization turns
    into a unit term, moving ``phasediff`` by about ``1 / (H * W)``.

    Examples
    --------
    >>> from scipy import ndimage as ndi
    >>> ref = ndi.gaussian_filter(np.random.default_rng(1).random((64, 64)), 3)
    >>> moved = np.roll(ref, (4, -7), axis=(0, 1))  # (the content moved by (4, -7))
    >>> shift, error, phasediff = phase_cross_correlation(ref, moved, upsample_factor=10)
    >>> shift.tolist()
    [-4.0, 7.0]
    """
    space = space.lower() if isinstance(space, str) else space
    if space not in ("real", "fourier"):
        raise InputError(f"space must be 'real' or 'fourier', got {space!r}")
    if normalization not in NORMALIZATIONS:
        raise InputError(f"unknown normalization {normalization!r}; use 'phase' or None")
    try:
        u = float(upsample_factor)
    except (TypeError, ValueError):
        u = float("nan")
    if not 1 <= u < float("inf"):
        raise InputError(f"upsample_factor must be a finite number >= 1, got "
                         f"{upsample_factor!r}")
    if reference_mask is not None or moving_mask is not None:
        return _masked(reference_image, moving_image, reference_mask, moving_mask, overlap_ratio,
                       u, space)
    xp = array_module_of(reference_image, moving_image)
    reference, moving = to_xp(reference_image, xp), to_xp(moving_image, xp)
    if reference.ndim != 2 or reference.shape != moving.shape:
        raise InputError(f"phase_cross_correlation needs two 2-D images of the same shape, got "
                         f"{reference.shape} and {moving.shape}")
    if 0 in reference.shape:
        raise InputError(f"phase_cross_correlation needs images with pixels, got "
                         f"{reference.shape}")
    _check_region(u, reference.shape)

    src_freq, target_freq = _spectrum(reference, space, xp), _spectrum(moving, space, xp)
    # scikit-image's own operations, in its order (full scipy.fft spectra, circular): the
    # results match it bitwise, which the FFT home's shared steps would not promise
    product = src_freq * target_freq.conj()
    float_dtype = product.real.dtype
    if normalization == "phase":
        whiten(product)
    cross_correlation = _fft_module(xp).ifft2(product)
    iy, ix = peak_index(xp.abs(cross_correlation))
    shift = signed_shifts(xp.stack([iy, ix]), xp.asarray(product.shape)).astype(float_dtype)
    src_amp = xp.sum(xp.real(src_freq * src_freq.conj()))
    target_amp = xp.sum(xp.real(target_freq * target_freq.conj()))
    if u == 1:
        src_amp, target_amp = src_amp / src_freq.size, target_amp / target_freq.size
        cc_max = cross_correlation[iy, ix]
    else:  # refine, then the (unnormalized) upsampled correlation at the refined peak
        shift = refine_peak(product[None], shift[None], u)[0][0]
        cc_max = upsampled_dft(product.conj(), 1, u, -shift * u)[0, 0].conj()
    shift = to_numpy(shift).astype(float_dtype)
    shift[np.asarray(product.shape) == 1] = 0  # a length-1 axis carries no shift
    cc_max, src_amp, target_amp = (to_numpy(v)[()] for v in (cc_max, src_amp, target_amp))
    if np.isnan(cc_max) or np.isnan(src_amp) or np.isnan(target_amp):
        raise InputError("NaN or infinite values in the images; remove them, or register "
                         "with masks False there (reference_mask=, moving_mask=)")

    if disambiguate:
        if space == "fourier":
            reference, moving = _fft_module(xp).ifft2(reference), _fft_module(xp).ifft2(moving)
        shift = _disambiguate_shift(reference, moving, shift, xp)

    amp = src_amp * target_amp
    if amp == 0:
        warnings.warn("Could not determine RMS error between images with the normalized average "
                      f"intensities {src_amp!r} and {target_amp!r}. Either the reference or "
                      "moving image may be empty.", UserWarning, stacklevel=2)
    with np.errstate(invalid="ignore"):
        error = np.sqrt(np.abs(1.0 - cc_max * cc_max.conj() / amp))
    return shift, error, np.arctan2(cc_max.imag, cc_max.real)
