"""Filtering image stacks with ``scipy.ndimage`` semantics (NumPy in, NumPy out; CuPy in, CuPy
out), on the GPU by the column/row-reuse kernels.

Examples
--------
>>> import numpy as np
>>> from xcorr_app import filters
>>> filters.box(np.ones((5, 6)), 3).round(6).tolist()[2][2]  # NumPy in: on the CPU
1.0
"""

from ._api import (box, convolve2d, correlate2d, dog, gaussian, gaussian_light, gaussian_taps,
                   laplace, parse_kernel_spec, sobel)
from ._banks import bank_weights, channel_filter, feature_prefilter
from ._gradient import gradient
from ._modes import MODES
from ._reuse import PAPER_SIZES, reuse_correlate
from ._separable import SIZES as SEPARABLE_SIZES
from ._separable import separable_correlate
from ._validation import check_radius

__all__ = ["MODES", "PAPER_SIZES", "SEPARABLE_SIZES", "bank_weights", "box",
           "channel_filter", "check_radius", "convolve2d", "correlate2d", "dog",
           "feature_prefilter", "gaussian", "gaussian_light", "gaussian_taps",
           "gradient", "laplace", "parse_kernel_spec", "reuse_correlate",
           "separable_correlate", "sobel"]
