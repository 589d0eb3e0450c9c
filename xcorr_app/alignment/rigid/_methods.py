"""The measuring methods of a pass: the subpixel fits and normalizations, the search range,
the prefilter a normalization takes, and how the FFT check measures.

>>> search_range((64, 80), None), fft_reference("phase")[1]
((32, 40), 'phase correlation, upsample 20')
"""

from __future__ import annotations

from ...errors import InputError
from ...registration import DEFAULT_UPSAMPLE
from ._preprocess import parse_prefilter

SUBPIXEL = ("auto", "gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none")
NORMALIZATIONS = ("zncc", "none", "phase")
#: upsampling of the FFT reference measurement (the upsampled DFT's default)
FFT_REFERENCE_UPSAMPLE = DEFAULT_UPSAMPLE
#: the FFT reference's plain correlation low-passed by a gaussian of this sigma (px) on both
#: images (:func:`~xcorr_app.registration._fft_register.fft_shifts`' ``lowpass``)
FFT_REFERENCE_LOWPASS = 1.0
#: on the CPU the FFT reference refines in two stages, first at 1/4 px (the same 1/20 px grid
#: at about half the work: :func:`~xcorr_app.registration._fft_register.refine_peak`)
CPU_REFERENCE_COARSE = 4


def fft_reference(normalization):
    """How the FFT reference measures the frames of a run of ``normalization``: keyword
    arguments of :func:`~xcorr_app.registration._fft_register.fft_shifts`, and a description.

    Phase runs are checked by phase correlation.  Others by plain cross-correlation of the
    frames' periodic components (Moisan's decomposition): phase correlation is fooled by photon
    noise over smooth content (the cell sample: up to 1.2 px off, 3 of 12 integer peaks wrong)
    and plain correlation of the raw frames by their FFT seams (pulled up to 0.96 px towards
    zero, 40 of 816 generated and sample frames off by a whole pixel); the periodic components'
    plain correlation found every one of those integer peaks.
    """
    if normalization == "phase":
        return {"normalization": "phase", "periodic": False}, \
            f"phase correlation, upsample {FFT_REFERENCE_UPSAMPLE}"
    return {"normalization": None, "periodic": True, "lowpass": FFT_REFERENCE_LOWPASS}, \
        (f"cross-correlation of the periodic components, gaussian {FFT_REFERENCE_LOWPASS:g} px, "
         f"upsample {FFT_REFERENCE_UPSAMPLE}")

def search_range(frame_shape, max_shift):
    """The bound actually searched: ``max_shift``, or half the frame (what the FFT can tell
    apart) when there is none."""
    if max_shift is not None:
        return max_shift
    return (frame_shape[0] // 2, frame_shape[1] // 2)


def check_choices(normalization, subpixel) -> str:
    """Refuse an unknown subpixel method or normalization (:class:`InputError`); the subpixel
    method with ``"auto"`` decided: the upsampled DFT for phase correlation, whose peak is too
    sharp for a fit to its 3x3 neighbourhood (docs/performance.md), as scikit-image's
    ``phase_cross_correlation`` refines it; else ``"gaussian"``.

    >>> check_choices("phase", "auto"), check_choices("zncc", "auto"), check_choices("phase", "none")
    ('upsample', 'gaussian', 'none')
    """
    if subpixel not in SUBPIXEL:
        raise InputError(f"unknown subpixel method {subpixel!r}; use one of {', '.join(SUBPIXEL)}")
    if normalization not in NORMALIZATIONS:
        raise InputError(f"unknown normalization {normalization!r}; use one of "
                         f"{', '.join(NORMALIZATIONS)}")
    if subpixel == "auto":
        return "upsample" if normalization == "phase" else "gaussian"
    return subpixel


def prefilter_for(prefilter, normalization, features=None):
    """The prefilter function; none for phase correlation, which whitens the spectrum (a
    linear filter cancels out, and smoothing only makes the whitening amplify the edges).
    ``features`` (a filter bank, :func:`xcorr_app.filters._banks.feature_prefilter`) replaces it: the
    frames are registered on the bank's local energy."""
    if features:
        from ...filters import feature_prefilter

        return feature_prefilter(features)
    fn = parse_prefilter(prefilter)
    return None if normalization == "phase" else fn


#: the smallest frame side registered (see :func:`check_frame_shape`)
MIN_FRAME_SIDE = 4


def check_frame_shape(frame_shape):
    """Refuse frames too small to register (:class:`InputError`): both sides must be at least
    :data:`MIN_FRAME_SIDE` (4) pixels.

    Why 4: with 2 or 3 pixels along a side, the overlaps compared at a shift of one pixel hold
    2 to 6 pixels, and two overlaps of 2 pixels correlate perfectly (+-1) whatever their content
    (a 2x2 frame "measured" dx = -1 against itself); and the search window of half the frame
    (+-1 px at 2 or 3 pixels) puts every non-zero shift on its border, where the subpixel fit has
    no neighbour.  From 4 pixels on, a shift of +-1 px lies inside a window of +-2 px and keeps
    an overlap of at least 3 rows or columns.
    """
    h, w = frame_shape
    if h < MIN_FRAME_SIDE or w < MIN_FRAME_SIDE:
        raise InputError(f"frames of {h}x{w} pixels cannot be registered: both sides must be at "
                         f"least {MIN_FRAME_SIDE} pixels")
