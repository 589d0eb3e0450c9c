"""Cross-correlation of many matrices: the four forms, the kernels, and the planner.

The forms (``one_to_one``, ``one_to_many``, ``n_to_mn``, ``n_to_m``) are described in
:mod:`xcorr_app.correlate._forms`; :func:`cross_correlate` computes any of them over a full or
bounded shift range, on the CPU (direct sums or FFT) or the GPU (a kernel chosen by the planner);
:func:`correlation_plan` prepares one problem once for pipelines that repeat it (calls of a few
microseconds of host time, batches of pairs in one launch, CUDA-graph replay).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.correlate import cross_correlate
>>> a = np.arange(12.0).reshape(3, 4)
>>> bool(cross_correlate(a, a, max_shift=1, device="cpu")[1, 1] == (a * a).sum())
True
"""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
