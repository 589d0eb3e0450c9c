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

from ._api import align, estimate_shifts
from ._apply import apply_shifts
from ._executors import Executor
from ._options import AlignOptions, options_signature
from ._result import AlignResult
from ._run import run_alignment

__all__ = ["align", "apply_shifts", "estimate_shifts", "AlignResult", "AlignOptions",
           "Executor", "options_signature", "run_alignment"]
