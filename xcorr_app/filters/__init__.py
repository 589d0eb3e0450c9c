"""Filtering image stacks with ``scipy.ndimage`` semantics (NumPy in, NumPy out; CuPy in, CuPy
out), on the GPU by the column/row-reuse kernels.

Examples
--------
>>> import numpy as np
>>> from xcorr_app import filters
>>> filters.box(np.ones((5, 6)), 3).round(6).tolist()[2][2]  # NumPy in: on the CPU
1.0
"""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_api": ["box", "convolve2d", "correlate2d", "dog", "gaussian", "gaussian_light",
             "gaussian_taps", "laplace", "parse_kernel_spec", "sobel"],
    "_banks": ["bank_weights", "channel_filter", "feature_prefilter"],
    "_gradient": ["gradient"],
    "_modes": ["MODES"],
    "_reuse": ["PAPER_SIZES", "reuse_correlate"],
    "_separable": ["SEPARABLE_SIZES", "separable_correlate"],
    "_validation": ["check_radius"],
})

__all__ = ["MODES", "PAPER_SIZES", "SEPARABLE_SIZES", "bank_weights", "box",
           "channel_filter", "check_radius", "convolve2d", "correlate2d", "dog",
           "feature_prefilter", "gaussian", "gaussian_light", "gaussian_taps",
           "gradient", "laplace", "parse_kernel_spec", "reuse_correlate",
           "separable_correlate", "sobel"]
