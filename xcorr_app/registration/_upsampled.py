"""The upsampled-DFT refinement of a measured peak (``subpixel="upsample"``, and the circular
refinement of ``boundary="circular"``).

:func:`refine_upsampled` takes integer (or coarse) shifts measured by any correlation and
refines them on the circular cross-correlation of the two images, sampled around the peak by
the matrix-multiply DFT of Guizar-Sicairos et al. (:func:`~._fft_register.refine_peak`), then
places the peak between the samples by a quadratic fit over the 3x3 samples around the best one
(:func:`subgrid_offsets`): the resolution is no longer the ``1 / upsample`` grid (a floor of
about 0.02 px RMS at 20), and the same points are what scikit-image's
``phase_cross_correlation`` samples.

What is correlated depends on how the frames meet at their edges:

- ``circular`` (wrap-around content: circular shifts of one image): the images as they are.
  Their circular correlation is the exact one; a window or the periodic decomposition only
  takes content away (a Hann window weights the centre and drops the edges' content);
- ``linear`` (frames cut from a larger scene): the periodic components of the images (Moisan's
  decomposition, :func:`~._fft_register.periodic_spectrum`), so that the seams the FFT's
  wrap-around makes at the frame edges do not pull the peak towards zero (a Hann window does
  the same, and weights the centre only: several times the error on the sample stacks).

``normalization=None`` is the plain cross-correlation (what every non-phase run refines:
phase whitening amplifies the photon noise of smooth content, such as the cell sample's),
``"phase"`` phase correlation (the runs of ``normalization="phase"``).

Measured against scikit-image and the sample stacks: docs/how-align-works.md.

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> ref = ndi.gaussian_filter(np.random.default_rng(0).random((48, 64)), 2)
>>> moved = np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(ref), (1.23, -2.71))).real
>>> got = refine_upsampled(ref, moved[None], [[-1.0, 3.0]], 20, boundary="circular")
>>> np.round(got, 2).tolist()
[[-1.23, 2.71]]
"""

from __future__ import annotations

import numpy as np

from ..backend import array_module_of, to_xp
from ..correlate import fft_of
from ..errors import InputError
from ._fft_register import cross_power, periodic_spectrum, refine_peak, upsampled_dft
from ._peaks import peak_index, subpixel_fit2d

#: the upsampled DFT's factor where none is given: a resolution of 1/20 px, finer than the
#: accuracy of any stack's peaks (the one default of align's ``upsample``, its FFT check, the
#: volumes' and z-location's refinement)
DEFAULT_UPSAMPLE = 20
#: the largest upsampled DFT factor any command takes (2-D, volumes, z-location): 1/100 px
#: is finer than any correlation peak is located, and the upsampled region's memory
#: grows with the factor squared (cubed for volumes)
MAX_UPSAMPLE = 100
BOUNDARIES = ("linear", "circular")


def refine_upsampled(reference, frames, shifts, upsample_factor, normalization=None,
                     boundary="linear"):
    """Refine ``shifts`` of ``frames`` against ``reference`` on their circular
    cross-correlation: the upsampled DFT around each shift, then :func:`subgrid_offsets`.

    Parameters
    ----------
    reference : (H, W) or (N, H, W) real ndarray
        The reference image, or one per frame.
    frames : (N, H, W) real ndarray
    shifts : (N, 2) array_like
        Integer (or coarse) shifts in xcorr's convention; the peak is looked for within 0.75
        px of each.
    upsample_factor : float
        Spacing ``1 / upsample_factor`` px of the samples of the correlation; 1 or less: the
        shifts are returned as given.
    normalization : {None, "phase"}
        Plain cross-correlation, or phase correlation (the cross-power whitened).
    boundary : {"linear", "circular"}
        ``linear``: correlate the images' periodic components; ``circular``: the images.

    Returns
    -------
    (N, 2) float64 ndarray of the module of ``frames``

    Both images are mean-subtracted first; float32 images are transformed in single
    precision (the refinement of the align pipeline), others in double.
    """
    if normalization not in (None, "phase"):
        raise InputError(f"unknown normalization {normalization!r}; use 'phase' or None")
    if boundary not in BOUNDARIES:
        raise InputError(f"unknown boundary {boundary!r}; use linear or circular")
    xp = array_module_of(reference, frames)
    shifts = to_xp(shifts, xp).astype(xp.float64)
    if upsample_factor <= 1:
        return shifts
    reference, frames = to_xp(reference, xp), to_xp(frames, xp)
    single = reference.dtype == frames.dtype == np.float32
    real = xp.float32 if single else xp.float64
    ref = reference.astype(real) - reference.mean(axis=(-2, -1), keepdims=True, dtype=xp.float64
                                                  ).astype(real)
    mov = frames.astype(real) - frames.mean(axis=(-2, -1), keepdims=True, dtype=xp.float64
                                            ).astype(real)
    w = mov.shape[-1]
    fft = fft_of(xp)
    ref_spec, product = fft.rfft2(ref), fft.rfft2(mov)
    if boundary == "linear":
        ref_spec = periodic_spectrum(ref, ref_spec)
        product = periodic_spectrum(mov, product)
    cross_power(ref_spec, product, normalization == "phase")
    shifts = best_neighbour(product, shifts, full_width=w)
    grid = refine_peak(product, shifts, upsample_factor, full_width=w)[0]
    return grid + subgrid_offsets(product, grid, upsample_factor, full_width=w)


def best_neighbour(product, shifts, full_width=None):
    """``shifts`` (N, 2) moved to the largest of the correlation's 3x3 values at whole pixels
    around them (its magnitude, from the cross-power spectra ``product``, by
    :func:`~._fft_register.upsampled_dft` at factor 1).

    The shifts given come from another surface (the linear-overlap ZNCC of the prefiltered
    frames), whose peak on wrap-around content can lie a pixel off the circular correlation's;
    the refinement looks only 0.75 px around its start."""
    xp = array_module_of(product)
    local = xp.abs(upsampled_dft(product.conj(), 3, 1, 1.0 - shifts, full_width))
    iy, ix = peak_index(local)
    return shifts + xp.stack([iy, ix], axis=-1).astype(xp.float64) - 1.0


def subgrid_offsets(product, shifts, upsample_factor, full_width=None):
    """``(N, 2)`` float64: where the peak of the upsampled correlation lies between its
    samples, in px: the vertex of a quadratic fitted (least squares, with its cross term:
    :func:`~._peaks.subpixel_fit2d`) to the correlation's magnitude at the 3x3 points
    ``1 / upsample_factor`` px apart around ``shifts`` (N, 2), each the best of its grid
    (:func:`~._fft_register.refine_peak`).

    Over a few hundredths of a pixel the correlation is smooth, so the fit is all but exact;
    where it is not a maximum the offset is 0 (the grid point stays).  The samples come from
    the cross-power spectra ``product`` (N, H, W), or their half (``rfft2`` layout) of
    ``full_width``.
    """
    xp = array_module_of(product)
    u = float(upsample_factor)
    local = xp.abs(upsampled_dft(product.conj(), 3, u, 1.0 - shifts * u, full_width))
    centre = xp.ones(local.shape[:-2], xp.int64)
    fy, fx = subpixel_fit2d(local, centre, centre)
    return xp.stack([fy, fx], axis=-1) / u
