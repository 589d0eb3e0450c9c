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

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
