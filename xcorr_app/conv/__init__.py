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

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
