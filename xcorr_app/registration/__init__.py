"""Image registration primitives: phase correlation, peaks, subpixel refinement, ZNCC, and
bounded surfaces of huge frames band by band (:func:`banded_surface`).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.registration import phase_cross_correlation
>>> img = np.random.default_rng(0).random((64, 64))
>>> shift, error, phase = phase_cross_correlation(img, np.roll(img, (3, -5), axis=(0, 1)))
>>> shift.tolist()
[-3.0, 5.0]
"""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_bands": ["Bands", "band_plan", "banded_surface"],
    "_fft_register": ["fft_shifts", "periodic_spectrum", "phase_surface"],
    "_normalize": ["ZnccLeft", "zncc", "zncc_left"],
    "_peak_math": ["phase_ramps", "surface_argmax", "wrapped_correlations"],
    "_peaks": ["SUBPIXEL_METHODS", "find_shifts", "on_border", "refined_shifts"],
    "_phase_cross_correlation": ["phase_cross_correlation"],
    "_surfaces": ["GpuSurfaces", "summed_area_tables", "surface_peaks", "table_layout"],
    "_upsampled": ["refine_upsampled"],
})

__all__ = ["SUBPIXEL_METHODS", "Bands", "GpuSurfaces", "ZnccLeft", "band_plan", "banded_surface",
           "fft_shifts", "find_shifts", "on_border", "periodic_spectrum", "phase_cross_correlation",
           "phase_surface", "refine_upsampled", "refined_shifts", "summed_area_tables",
           "phase_ramps", "surface_argmax", "surface_peaks", "table_layout", "wrapped_correlations", "zncc",
           "zncc_left"]
