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

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_api": ["align", "estimate_shifts"],
    "_apply": ["aligned_channels", "apply_shifts"],
    "warp": ["RESAMPLE", "check_fill", "common_area", "shift_frames"],
    "_executors": ["Executor"],
    "_limits": ["check_limits", "limit_devices"],
    "piecewise": ["FIELD_RESAMPLE", "apply_field", "field_area", "measure_field", "parse_patches"],
    "_options": ["AlignOptions", "BOUNDARIES", "DEFAULT_UPSAMPLE", "LUCAS_KANADE",
                 "options_signature"],
    "rigid": ["NORMALIZATIONS", "SUBPIXEL", "WINDOWS", "parse_prefilter", "shared_plan"],
    "_prebuild": ["PREBUILD_STAGES", "prebuild"],
    "_result": ["AlignResult"],
    "_run": ["run_alignment"],
    "volume": ["VolumeResult", "align_volumes"],
})

__all__ = ["BOUNDARIES", "DEFAULT_UPSAMPLE", "FIELD_RESAMPLE", "LUCAS_KANADE", "NORMALIZATIONS",
           "PREBUILD_STAGES", "RESAMPLE", "SUBPIXEL", "WINDOWS", "AlignOptions", "AlignResult",
           "VolumeResult", "Executor", "align", "align_volumes", "aligned_channels", "apply_field",
           "apply_shifts",
           "check_fill", "check_limits",
           "common_area", "limit_devices",
           "estimate_shifts",
           "field_area", "measure_field", "options_signature", "parse_patches", "parse_prefilter",
           "prebuild", "run_alignment", "shared_plan", "shift_frames"]
