"""Multi-channel convolution of NCHW stacks: :func:`conv2d` (im2win and Winograd kernels on the
GPU) and :func:`pointwise` (1x1 filters, dynamic blocking).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.conv import conv2d
>>> conv2d(np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))).shape  # NumPy in: on the CPU
(1, 3, 3, 3)
"""

from ._api import METHODS, chosen_method, conv2d, pointwise
from ._im2win import im2win_conv2d
from ._validation import REAL_KINDS

__all__ = ["METHODS", "REAL_KINDS", "chosen_method", "conv2d", "im2win_conv2d", "pointwise"]
