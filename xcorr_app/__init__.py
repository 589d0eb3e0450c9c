"""xcorr: image registration by cross-correlation on NVIDIA GPUs (CuPy) and on the CPU.

Examples
--------
>>> import numpy as np, xcorr_app
>>> ref = np.random.default_rng(0).random((32, 32))
>>> xcorr_app.cross_correlate(ref, ref, max_shift=2, device="cpu").shape
(5, 5)
"""

__version__ = "0.1.0"

from .align_result import AlignResult  # noqa: E402
from .align_stack import align, apply_shifts, estimate_shifts  # noqa: E402
from .correlate import cross_correlate  # noqa: E402
from .errors import InputError, OutputError, XcorrError  # noqa: E402
from .registration import phase_cross_correlation  # noqa: E402
from . import filters  # noqa: E402
from .conv import conv2d, pointwise  # noqa: E402

__all__ = ["align", "apply_shifts", "estimate_shifts", "AlignResult", "cross_correlate",
           "phase_cross_correlation", "conv2d", "pointwise",
           "filters", "XcorrError", "InputError", "OutputError", "__version__"]
