"""Filtering image stacks with ``scipy.ndimage`` semantics (NumPy in, NumPy out; CuPy in, CuPy
out), on the GPU by the column/row-reuse kernels.

Examples
--------
>>> import numpy as np
>>> from xcorr_app import filters
>>> filters.box(np.ones((5, 6)), 3).round(6).tolist()[2][2]  # NumPy in: on the CPU
1.0
"""

from ._api import (box, convolve2d, correlate2d, dog, gaussian, gaussian_light, gaussian_taps, laplace,
                   parse_kernel_spec, sobel)
from ._modes import MODES

__all__ = ["MODES", "box", "convolve2d", "correlate2d", "dog", "gaussian", "gaussian_light", "gaussian_taps",
           "laplace", "parse_kernel_spec", "sobel"]
