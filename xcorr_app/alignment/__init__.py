"""Aligning a stack of frames to a reference: :func:`align`, :func:`estimate_shifts`,
:func:`apply_shifts` and the :class:`AlignResult` they return; for the other subpackages, the
run's options (:class:`AlignOptions`), its pipeline (:func:`run_alignment`) and the
:class:`Executor` an executor elsewhere (Dask) builds on.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.alignment import estimate_shifts
>>> img = np.random.default_rng(1).random((48, 40))
>>> stack = np.stack([img, np.roll(img, (2, -1), axis=(0, 1))])
>>> shifts, peak, confidence = estimate_shifts(img, stack, max_shift=4, device="cpu")
>>> np.round(shifts).tolist()  # (dy, dx) that moves each frame back onto the reference
[[0.0, 0.0], [-2.0, 1.0]]
"""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
