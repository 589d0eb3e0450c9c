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
from .warp import common_area
from ._executors import Executor
from ._limits import check_limits, limit_devices
from .piecewise import FIELD_RESAMPLE, apply_field, field_area
from ._options import BOUNDARIES, DEFAULT_UPSAMPLE, LUCAS_KANADE, AlignOptions, options_signature
from .rigid import NORMALIZATIONS, SUBPIXEL
from .piecewise import measure_field
from .piecewise import parse_patches
from .rigid import shared_plan
from ._prebuild import STAGES as PREBUILD_STAGES
from ._prebuild import prebuild
from .rigid import WINDOWS, parse_prefilter
from ._result import AlignResult, strict_json
from ._run import run_alignment
from .warp import RESAMPLE, check_fill, shift_frames
from .volume import VolumeResult, align_volumes

__all__ = ["BOUNDARIES", "DEFAULT_UPSAMPLE", "FIELD_RESAMPLE", "LUCAS_KANADE", "NORMALIZATIONS",
           "PREBUILD_STAGES", "RESAMPLE", "SUBPIXEL", "WINDOWS", "AlignOptions", "AlignResult",
           "VolumeResult", "Executor", "align", "align_volumes", "apply_field", "apply_shifts",
           "check_fill", "check_limits",
           "common_area", "limit_devices",
           "estimate_shifts",
           "field_area", "measure_field", "options_signature", "parse_patches", "parse_prefilter",
           "prebuild", "run_alignment", "shared_plan", "shift_frames", "strict_json"]
