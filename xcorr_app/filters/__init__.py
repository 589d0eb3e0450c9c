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

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
