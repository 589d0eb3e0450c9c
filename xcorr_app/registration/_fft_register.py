"""Reference shifts by FFT (phase) cross-correlation, batched over frames.

:func:`fft_shifts` is the shift every other method of xcorr is checked against.  It gives, for
each frame, what ``skimage.registration.phase_cross_correlation(reference, frame, ...)`` gives:
the ``(dy, dx)`` to apply to the frame to align it with the reference, optionally refined to
``1 / upsample_factor`` pixel with the matrix-multiply DFT of Guizar-Sicairos et al. (2008).
All frames go through one batched FFT; NumPy in gives NumPy out, CuPy in gives CuPy out.

References
----------
.. [1] Manuel Guizar-Sicairos, Samuel T. Thurman and James R. Fienup, "Efficient subpixel image
       registration algorithms", Optics Letters 33, 156-158 (2008). DOI:10.1364/OL.33.000156

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> rng = np.random.default_rng(0)
>>> ref = ndi.gaussian_filter(rng.random((48, 64)), 2)
>>> frames = np.stack([np.roll(ref, (-3, 5), axis=(0, 1)), ref])
>>> shifts, peak = fft_shifts(ref, frames)
>>> shifts.tolist()
[[3.0, -5.0], [0.0, 0.0]]
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..backend import array_module_of, device_copy, to_xp
from ..correlate import conj_product, fft_of, irfftn_unnormalized
from ..errors import InputError
from ._peak_math import (COMPLEX, edge_differences, fits, phase_cross_power, subtract_smooth,
                         surface_argmax, upsampled_peaks, weighted_spectrum)
from ._peaks import peak_index

NORMALIZATIONS = ("phase", None)


def upsampled_dft(data, region_size, upsample_factor, offsets, full_width=None):
    """Upsampled DFT of a small region, by matrix multiplication (Guizar-Sicairos et al.).

    Gives the same values as zero-padding ``data`` to ``upsample_factor`` times its size,
    taking the FFT, and cutting out a ``region_size`` block whose first sample sits
    ``offsets`` (in upsampled pixels) before zero frequency -- at a fraction of the cost:
    ``out[..., r, c] = sum_{h, w} data[..., h, w]
    * exp(-2j*pi * ((r - oy) * fy[h] + (c - ox) * fx[w]))`` with ``fy = fftfreq(H,
    upsample_factor)`` and ``fx = fftfreq(W, upsample_factor)``.

    Parameters
    ----------
    data : (..., H, W) complex ndarray
        Spectra to transform (NumPy or CuPy).
    region_size : int or (int, int)
        Size ``(rh, rw)`` of the upsampled region.
    upsample_factor : float
        Upsampling factor.
    offsets : (..., 2) array_like
        ``(oy, ox)`` per batch element (upsampled pixels); broadcast against
        ``data.shape[:-2]``.
    full_width : int, optional
        ``data`` is the half spectrum of real images (``rfft2`` layout, ``W // 2 + 1`` columns)
        of this full width: the missing columns are ``conj(data[-h, W - w])``.

    Returns
    -------
    out : (..., rh, rw) complex ndarray
        Same module and precision as ``data``.

    Examples
    --------
    >>> import numpy as np
    >>> img = np.zeros((8, 8)); img[2, 3] = 1.0
    >>> spec = np.fft.fft2(img)
    >>> out = upsampled_dft(spec.conj(), 3, 1, (1 - 2, 1 - 3)).conj() / img.size
    >>> np.abs(out).round(6).tolist()   # the centre of the region is pixel (2, 3)
    [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]
    """
    xp = array_module_of(data)
    h, w = data.shape[-2:]
    half = w
    if full_width is not None:
        w = int(full_width)
    rh, rw = (region_size, region_size) if np.ndim(region_size) == 0 else region_size
    offsets = xp.asarray(to_xp(offsets, xp), dtype=xp.float64)
    two_pi_i = -2j * np.pi
    rows = xp.arange(int(rh))[:, None] - offsets[..., 0, None, None]           # (..., rh, 1)
    cols = xp.arange(int(rw))[None, :] - offsets[..., 1, None, None]           # (..., 1, rw)
    ky = xp.exp(two_pi_i * rows * xp.fft.fftfreq(h, upsample_factor)[None, :])  # (..., rh, H)
    kx = xp.exp(two_pi_i * xp.fft.fftfreq(w, upsample_factor)[:, None] * cols)  # (..., W, rw)
    ky, kx = ky.astype(data.dtype), kx.astype(data.dtype)
    if full_width is None:
        return ky @ data @ kx
    # the mirrored columns w' = 1..W - half: sum_h ky[r, h] conj(data[-h, w'])
    #   = conj((conj(ky[:, -h]) @ data)[r, w'])
    out = (ky @ data) @ kx[..., :half, :]
    mirrored = w - half
    if mirrored:
        ky_neg = xp.conj(ky[..., (-np.arange(h)) % h])
        part = xp.conj((ky_neg @ data)[..., 1:mirrored + 1])
        out += part @ kx[..., w - np.arange(1, mirrored + 1), :]
    return out


def whiten(product, real_dtype=None):
    """Phase normalization, in place: every bin of a cross-power spectrum divided by its
    magnitude, floored at 100 eps of ``real_dtype`` (default: the spectrum's precision) so that
    empty bins stay near zero.  Returns ``product``."""
    eps = np.finfo(product.real.dtype if real_dtype is None else real_dtype).eps
    xp = array_module_of(product)
    product /= xp.maximum(xp.abs(product), 100 * eps)
    return product


def cross_power(reference_spectrum, spectrum, phase=False, weights=None):
    """``spectrum = reference_spectrum * conj(spectrum)`` in place (``reference_spectrum``
    broadcast), divided by its magnitude as :func:`whiten` does when ``phase``, then times
    ``weights`` (real, broadcast as the reference) where given; on the GPU one fused kernel
    (the phase's weights in it).  Returns ``spectrum``.

    The plain product is the FFT home's :func:`xcorr_app.correlate._fft.conj_product`; phase
    correlation whitens every bin in the same pass (its own kernel on the GPU).
    """
    xp = array_module_of(spectrum)
    if not phase or xp is np:
        conj_product(reference_spectrum, spectrum, out=spectrum)
        if phase:
            whiten(spectrum)
    else:
        real = np.dtype(spectrum.real.dtype)
        floor = 100 * np.finfo(real).eps
        ref = reference_spectrum.astype(spectrum.dtype, copy=False)
        if phase_cross_power(ref, spectrum, floor, weights):
            return spectrum
        conj_product(ref, spectrum, out=spectrum)  # other layouts: CuPy's operations
        spectrum /= xp.maximum(xp.abs(spectrum), real.type(floor))
    if weights is not None:
        spectrum *= weights
    return spectrum


@functools.lru_cache(maxsize=16)
def _periodic_factors(h, w, wk, dtype):
    """The CPU's factors of the smooth component, ``(ga, gb)`` of shapes ``(h, wk)``: its
    spectrum is ``a[None, :] * ga + b[:, None] * gb`` (edge differences ``a``, ``b``), the
    same for every frame of a shape, so computed once (a third of the work per frame)."""
    sq, cq = np.sin(np.pi * np.arange(h) / h)[:, None], np.cos(np.pi * np.arange(h) / h)[:, None]
    sr, cr = np.sin(np.pi * np.arange(wk) / w)[None], np.cos(np.pi * np.arange(wk) / w)[None]
    den = -4 * (sq * sq + sr * sr)
    den[0, 0] = 1.0  # the smooth component has no mean: smooth[0, 0] is 0
    ga = (2 * sq * sq - 2j * sq * cq) / den + 0 * sr
    gb = (2 * sr * sr - 2j * sr * cr) / den + 0 * sq
    ga[0, 0] = gb[0, 0] = 0.0
    return ga.astype(dtype), gb.astype(dtype)


def periodic_spectrum(images, spectrum):
    """Subtract the smooth component of Moisan's periodic-plus-smooth decomposition [2]_ from
    ``spectrum`` (the ``fft2``, or ``rfft2`` half, of ``images``), in place.

    What is left is the spectrum of the periodic component: the image without the seam its
    opposite edges make when an FFT wraps it around, which otherwise correlates with itself at
    zero shift and pulls plain cross-correlation towards it.  The smooth component's spectrum is
    built from 1-D FFTs of the edge differences, at no extra 2-D FFT.

    Parameters
    ----------
    images : (..., H, W) real ndarray
    spectrum : (..., H, W) or (..., H, W // 2 + 1) complex ndarray

    Returns
    -------
    ndarray
        ``spectrum``.

    References
    ----------
    .. [2] Lionel Moisan, "Periodic plus smooth image decomposition", Journal of Mathematical
           Imaging and Vision 39, 161-179 (2011). DOI:10.1007/s10851-010-0227-1

    Examples
    --------
    >>> import numpy as np
    >>> ramp = np.add.outer(np.arange(6.0), np.arange(8.0))  # far from periodic
    >>> p = np.fft.ifft2(periodic_spectrum(ramp, np.fft.fft2(ramp))).real
    >>> bool(np.abs(p[0] - p[-1]).max() < np.abs(ramp[0] - ramp[-1]).max())
    True
    """
    xp = array_module_of(spectrum)
    h, w = images.shape[-2:]
    wk = spectrum.shape[-1]
    # edge differences: rows a = u[H-1] - u[0], columns b = u[:, W-1] - u[:, 0]
    if xp is not np and fits(images):  # one kernel (kernels/registration/peak_math.cu) for both
        a, b = edge_differences(images)
        # their half spectra (real edges: no conversion to complex, which compiled a CuPy copy
        # kernel on a first run); the kernel takes the other half from the conjugate symmetry
        fft = fft_of(xp)
        if subtract_smooth(fft.rfft(a, axis=-1), fft.rfft(b, axis=-1), (h, w), spectrum):
            return spectrum
    else:
        a, b = images[..., -1, :] - images[..., 0, :], images[..., :, -1] - images[..., :, 0]
    a = fft_of(xp).fft(a, axis=-1)[..., :wk]
    b = fft_of(xp).fft(b, axis=-1)
    a, b = a.astype(spectrum.dtype, copy=False), b.astype(spectrum.dtype, copy=False)
    # In half angles, free of cancellation near 0: 1 - exp(i t) = 2 sin^2(t/2) - i sin t and
    # 2 cos t1 + 2 cos t2 - 4 = -4 (sin^2(t1/2) + sin^2(t2/2)).
    if xp is np:
        ga, gb = _periodic_factors(h, w, wk, np.dtype(spectrum.dtype).name)
        smooth = a[..., None, :] * ga
        smooth += b[..., :, None] * gb
        spectrum -= smooth
        return spectrum
    ga, gb = (xp.asarray(g) for g in _periodic_factors(h, w, wk, np.dtype(spectrum.dtype).name))
    spectrum -= a[..., None, :] * ga + b[..., :, None] * gb  # other layouts: CuPy's operations
    return spectrum


def gaussian_weights(xp, shape, sigma, half=True, dtype=np.float32):
    """The transfer function of a gaussian of ``sigma`` px applied to both images of a
    cross-power spectrum of ``shape`` (H, W): ``exp(-4 pi^2 sigma^2 (fy^2 + fx^2))`` over its
    frequencies, ``(H, W // 2 + 1)`` with ``half`` (``rfft2`` layout) else ``(H, W)``, on
    ``xp``'s device, kept per shape, sigma and type.

    >>> g = gaussian_weights(np, (4, 6), 1.0)
    >>> g.shape, float(g[0, 0]), bool(g[0, 1] < 1)
    ((4, 4), 1.0, True)
    """
    device = None if xp is np else xp.cuda.Device().id
    return _weights(xp, tuple(int(v) for v in shape), float(sigma), bool(half),
                    np.dtype(dtype).name, device)


@functools.lru_cache(maxsize=16)
def _weights(xp, shape, sigma, half, dtype, device):
    h, w = shape
    fy = np.fft.fftfreq(h)[:, None]
    fx = (np.fft.rfftfreq(w) if half else np.fft.fftfreq(w))[None, :]
    g = np.exp(-4.0 * np.pi ** 2 * sigma ** 2 * (fy * fy + fx * fx)).astype(dtype)
    if xp is np:
        return g
    from .._cuda import upload_shared

    return upload_shared(g)


def signed_shifts(index, size):
    """Wrap circular peak indices into signed shifts (above half the size means negative)."""
    xp = array_module_of(index)
    return xp.where(index > size // 2, index - size, index)


def refine_peak(product, shifts, upsample_factor, full_width=None, coarse=None):
    """Refine integer ``shifts`` (N, 2) by the upsampled DFT of the cross-power ``product``
    (a half spectrum of real images when ``full_width`` is given) in a 1.5-pixel region around
    them; returns (refined shifts, peak magnitude scaled by H*W).

    ``coarse`` (an upsampling factor below ``upsample_factor``): refine in two stages, first
    at ``1 / coarse`` px over the 1.5-pixel region, then at ``1 / upsample_factor`` px over
    ``+-1 / coarse`` px around that: the same grid, at about half the work for 20 and 4 (the
    work is the number of upsampled samples times the spectrum's size).  The CPU's FFT
    reference measurement uses it.
    """
    xp = array_module_of(product)
    h, w = product.shape[-2:]
    w = w if full_width is None else full_width
    u = float(upsample_factor)
    region = math.ceil(1.5 * u)
    if coarse is not None and 1 < coarse < u:
        shifts = refine_peak(product, shifts, coarse, full_width)[0]
        region = 2 * math.ceil(u / coarse) + 1
    dftshift = region // 2
    if xp is not np and np.dtype(product.dtype) in COMPLEX and product.ndim == 3 \
            and len(product) and tuple(shifts.shape) == (len(product), 2) \
            and shifts.dtype == np.float64:  # (float32 shifts round in float32 below)
        # two kernels (kernels/registration/peak_math.cu) around cuBLAS's products: the same numbers
        # without a dozen small CuPy operations, each compiled on a first run
        return upsampled_peaks(product, shifts, u, region, dftshift, full_width)
    shifts = xp.round(shifts * u) / u
    local = xp.abs(upsampled_dft(product.conj(), region, u, dftshift - shifts * u, full_width))
    uy, ux = peak_index(local)
    shifts = shifts + (xp.stack([uy, ux], axis=-1) - dftshift) / u
    peak = local.reshape(len(local), -1).max(axis=1).astype(xp.float64) / (h * w)
    return shifts, peak


def fft_shifts(reference, frames, *, upsample_factor=1, normalization="phase",
               periodic=False, reference_is_fft=False, return_integer=False, coarse=None,
               lowpass=None):
    """Shift of every frame against a reference by circular FFT cross-correlation.

    Parameters
    ----------
    reference : (H, W) or (N, H, W) ndarray
        Reference image (or one per frame), or its ``fft2`` when ``reference_is_fft`` is True
        (to reuse it; with real frames, the ``fft2`` of a real reference, or its ``rfft2``: the
        half spectrum, ``(H, W // 2 + 1)``, is all that is read of it then).
    frames : (N, H, W) ndarray
        Moving images; a single ``(H, W)`` frame is taken as ``N = 1``.
    upsample_factor : float, optional
        Register to within ``1 / upsample_factor`` pixel (1: integer shifts only).
    normalization : {"phase", None}, optional
        ``"phase"`` normalizes the cross-power spectrum to unit magnitude (phase
        correlation); None keeps the plain cross-correlation.
    periodic : bool, optional
        Correlate the periodic components of the images (:func:`periodic_spectrum`) instead of
        the images, so the seams of the FFT's wrap-around do not pull the peak towards zero.
        A reference given as its ``fft2`` must then be the periodic component's.
    reference_is_fft : bool, optional
        ``reference`` is already ``fft2(reference)``.
    return_integer : bool, optional
        Also return the integer peak (before refinement) of every frame.
    coarse : int, optional
        Refine in two stages, first at ``1 / coarse`` px (see :func:`refine_peak`).
    lowpass : float, optional
        Correlate both images as filtered by a gaussian of this sigma (px), circularly: the
        cross-power weighted by :func:`gaussian_weights` (the plain product through the
        reference's spectrum, at no cost per frame; a phase one after its whitening).  A
        reference that is the mean of drifting frames keeps little but its low frequencies, and
        the frames' noise above them scatters the plain correlation (the moon sample's: several
        tenths of a pixel without, a twentieth with sigma 1).

    Returns
    -------
    shifts : (N, 2) float64 ndarray
        ``(dy, dx)`` to apply to each frame to align it with the reference, as
        ``skimage.registration.phase_cross_correlation(reference, frame)`` returns.
    peak : (N,) float64 ndarray
        Magnitude of the circular cross-correlation at the (refined) peak, scaled like
        ``ifft2`` (for phase correlation 1.0 means a perfect integer circular shift).
    integer : (N, 2) float64 ndarray
        Only with ``return_integer``: the integer peak as a shift.

    Notes
    -----
    Computed in single precision when every input is float32/complex64, in double precision
    otherwise.  Shifts are only known modulo the image size: a circular peak index above half
    the size is reported as a negative shift.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import ndimage as ndi
    >>> rng = np.random.default_rng(1)
    >>> ref = ndi.gaussian_filter(rng.random((40, 50)), 2)
    >>> moved = ndi.fourier_shift(np.fft.fft2(ref), (1.3, -2.6))  # frame = ref moved by +(1.3, -2.6)
    >>> shifts, _ = fft_shifts(ref, np.fft.ifft2(moved).real[None], upsample_factor=20)
    >>> shifts.round(2).tolist()
    [[-1.3, 2.6]]
    """
    if normalization not in NORMALIZATIONS:
        raise InputError(f"unknown normalization {normalization!r}; use 'phase' or None")
    if not upsample_factor >= 1:
        raise InputError(f"upsample_factor must be >= 1, got {upsample_factor!r}")
    xp = array_module_of(reference, frames)
    reference, frames = to_xp(reference, xp), to_xp(frames, xp)
    if frames.ndim == 2:
        frames = frames[None]
    half = (reference_is_fft and frames.ndim == 3 and not xp.iscomplexobj(frames)
            and reference.shape[-2:] == (frames.shape[1], frames.shape[2] // 2 + 1))
    if frames.ndim != 3 or (reference.shape[-2:] != frames.shape[1:] and not half) \
            or reference.ndim not in (2, 3) \
            or (reference.ndim == 3 and reference.shape[0] != frames.shape[0]):
        raise InputError(f"frames must be (N, H, W) with (H, W) the reference shape "
                         f"{reference.shape}, got {frames.shape}")
    single = all(a.dtype in (np.float32, np.complex64) for a in (reference, frames))
    real, cplx = (xp.float32, xp.complex64) if single else (xp.float64, xp.complex128)

    n, h, w = frames.shape
    fft = fft_of(xp)
    # Circular on purpose, unlike the FFT home's linear correlation (xcorr_app.correlate._fft):
    # no padding, the shift is known modulo (h, w) as scikit-image reports it, and the product
    # is whitened (phase) and may be of periodic components; only the product is shared
    # (cross_power -> conj_product).
    # real images: half spectra (rfft2), the same numbers at half the work
    halves = not xp.iscomplexobj(frames) and (reference_is_fft or not xp.iscomplexobj(reference))
    if halves:
        ref_fft = reference[..., :w // 2 + 1] if reference_is_fft \
            else fft.rfft2(reference.astype(real, copy=False))
        product = fft.rfft2(frames.astype(real, copy=False)).astype(cplx, copy=False)
    else:
        ref_fft = reference if reference_is_fft else \
            fft.fft2(reference.astype(cplx if xp.iscomplexobj(reference) else real))
        product = fft.fft2(frames).astype(cplx, copy=False)
    if periodic:
        product = periodic_spectrum(frames, product)
        if not reference_is_fft:
            ref_fft = periodic_spectrum(reference, ref_fft.astype(cplx, copy=False))
    weights = None if not lowpass else gaussian_weights(xp, (h, w), lowpass, halves, real)
    if weights is not None and normalization != "phase":  # (a new array: the caller's
        # spectrum stays as it was; on the GPU one kernel of ours, where CuPy's compiles)
        weighted = None if xp is np else weighted_spectrum(ref_fft, weights)
        ref_fft = ref_fft * weights if weighted is None else weighted
    cross_power(ref_fft, product, normalization == "phase",
                weights if normalization == "phase" else None)

    if xp is not np and n:  # |x|, its peak and the signed shifts in one kernel (peak_math.cu)
        if halves and upsample_factor > 1:
            # the inverse of a copy (refine_peak reads the product), without its 1/n: the
            # integer peak's place does not depend on it, and refine_peak measures the peak
            # anew (cupy.fft.irfft2's own copy and division compiled two kernels at first use)
            corr = irfftn_unnormalized(device_copy(product), (h, w))
        else:
            corr = fft.irfft2(product, s=(h, w)) if halves else fft.ifft2(product)
        _, _, peak, both = surface_argmax(corr, absolute=True, copies=2)
        shifts, integer = both[0], both[1]
    else:
        size = xp.asarray([h, w])
        if halves:
            corr = xp.abs(fft.irfft2(product, s=(h, w)))
        else:
            corr = xp.abs(fft.ifft2(product))
        iy, ix = peak_index(corr)
        shifts = signed_shifts(xp.stack([iy, ix], axis=-1), size).astype(xp.float64)
        peak = xp.take_along_axis(corr.reshape(n, -1), (iy * w + ix)[:, None], axis=1)[:, 0]
        peak = peak.astype(xp.float64)
        integer = shifts.copy()
    if upsample_factor > 1:
        shifts, peak = refine_peak(product, shifts, upsample_factor, w if halves else None,
                                   coarse)

    for axis, length in enumerate((h, w)):
        if length == 1:  # a length-1 axis carries no shift
            shifts[:, axis] = 0.0
    return (shifts, peak, integer) if return_integer else (shifts, peak)


def phase_surface(reference_fft, frames, max_shift=None):
    """Phase-correlation surfaces in xcorr's layout, for peak finding like any other surface.

    Parameters
    ----------
    reference_fft : (H, W) or (N, H, W) complex ndarray
        ``fft2`` of the (mean-subtracted) reference(s).
    frames : (N, H, W) real ndarray
    max_shift : (int, int), optional
        Keep shifts ``-sy..sy`` by ``-sx..sx`` (at most half the frame: the circular surface
        cannot tell larger shifts apart); default every circular shift.

    Returns
    -------
    surface : (N, Ho, Wo) float32
        ``surface[iy, ix]`` is the normalized circular cross-power at shift ``(iy, ix) - origin``.
    origin : (int, int)

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import ndimage as ndi
    >>> ref = ndi.gaussian_filter(np.random.default_rng(3).random((32, 40)), 2)
    >>> surf, origin = phase_surface(np.fft.fft2(ref), np.roll(ref, (2, -3), (0, 1))[None], (4, 4))
    >>> idx = np.unravel_index(int(surf[0].argmax()), surf.shape[1:])
    >>> (int(idx[0]) - origin[0], int(idx[1]) - origin[1])
    (-2, 3)
    """
    xp = array_module_of(reference_fft, frames)
    n, h, w = frames.shape
    # circular and whitened (see fft_shifts): the crop keeps signed shifts modulo the frame, not
    # the alias-free linear range of xcorr_app.correlate._fft.crop_indices
    product = reference_fft * fft_of(xp).fft2(frames.astype(xp.float32)).conj()
    whiten(product, np.float32)
    circ = fft_of(xp).ifft2(product).real.astype(xp.float32)
    if max_shift is None:
        sy, sx = h // 2, w // 2
        ys, xs = np.arange(-(h - 1 - sy), sy + 1), np.arange(-(w - 1 - sx), sx + 1)
        origin = (h - 1 - sy, w - 1 - sx)
    else:
        sy, sx = min(int(max_shift[0]), h // 2), min(int(max_shift[1]), w // 2)
        ys, xs = np.arange(-sy, sy + 1), np.arange(-sx, sx + 1)
        origin = (int(max_shift[0]), int(max_shift[1]))
    rows = xp.asarray(ys % h)
    cols = xp.asarray(xs % w)
    surf = circ[:, rows[:, None], cols[None, :]]
    if max_shift is not None and (sy, sx) != origin:  # a bound beyond half the frame: pad
        full = xp.full((n, 2 * origin[0] + 1, 2 * origin[1] + 1), -1.0, dtype=xp.float32)
        full[:, origin[0] - sy:origin[0] + sy + 1, origin[1] - sx:origin[1] + sx + 1] = surf
        surf = full
    return surf, origin
