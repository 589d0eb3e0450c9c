"""Multi-channel convolution of NCHW stacks: :func:`conv2d` (im2win and Winograd kernels on the
GPU) and :func:`pointwise` (1x1 filters, dynamic blocking).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.conv import conv2d
>>> conv2d(np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))).shape  # NumPy in: on the CPU
(1, 3, 3, 3)
"""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_api": ["METHODS", "chosen_method", "conv2d", "pointwise"],
    "_im2win": ["im2win_conv2d"],
    "_validation": ["REAL_KINDS"],
})

__all__ = ["METHODS", "REAL_KINDS", "chosen_method", "conv2d", "im2win_conv2d", "pointwise"]
