"""xcorr: image registration by cross-correlation on NVIDIA GPUs (CuPy) and on the CPU.

NumPy arrays in give NumPy arrays out (computed on the CPU, or on the GPU when ``device="gpu"``);
CuPy arrays in give CuPy arrays out.  The public names below are imported on first use, so
``import xcorr_app`` is quick and does not import CuPy.

Subpackages
-----------
correlate     cross-correlation of many matrices (the four forms), its kernels and planner
registration  ``phase_cross_correlation``, peaks, subpixel refinement, normalizations
alignment     aligning a stack of frames: ``align``, ``estimate_shifts``, ``apply_shifts``
filters       scipy.ndimage-style filters on stacks (``xcorr_app.filters.gaussian``, ...)
conv          multi-channel convolution (``conv2d``, ``pointwise``)
io            reading stacks, writing outputs, the drift plot
dask          the same on a Dask cluster (``pip install 'xcorr-app[dask]'``)

Examples
--------
>>> import numpy as np, xcorr_app
>>> ref = np.random.default_rng(0).random((32, 32))
>>> xcorr_app.cross_correlate(ref, ref, max_shift=2, device="cpu").shape
(5, 5)
"""

import importlib

from ._version import __version__
from .errors import InputError, OutputError, XcorrError

#: public name -> the module that defines it (imported on first use, PEP 562)
_LAZY = {
    "align": "xcorr_app.alignment",
    "align_sessions": "xcorr_app.alignment",
    "apply_shifts": "xcorr_app.alignment",
    "estimate_shifts": "xcorr_app.alignment",
    "AlignResult": "xcorr_app.alignment",
    "cross_correlate": "xcorr_app.correlate",
    "correlation_plan": "xcorr_app.correlate",
    "CorrelationPlan": "xcorr_app.correlate",
    "phase_cross_correlation": "xcorr_app.registration",
    "conv2d": "xcorr_app.conv",
    "pointwise": "xcorr_app.conv",
}
_SUBPACKAGES = ("filters", "conv", "correlate", "registration", "alignment", "io", "dask",
                "distributed", "bench", "cli", "backend")

__all__ = ["align", "align_sessions", "apply_shifts", "estimate_shifts", "AlignResult",
           "cross_correlate", "correlation_plan", "CorrelationPlan",
           "phase_cross_correlation", "conv2d", "pointwise",
           "filters", "XcorrError", "InputError", "OutputError", "__version__"]


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"xcorr_app.{name}")
    else:
        raise AttributeError(f"module 'xcorr_app' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
