"""The arguments of a correlation plan: the method ``"auto"`` runs (:func:`choose_method`), a
GPU kernel refused on the CPU, the shapes and dtype checked.

Examples
--------
>>> shape_argument([16, 16], "left_shape")
(16, 16)
>>> dtype_argument("float32")
dtype('float32')
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._direct import direct_is_small
from ._plans import Plan

__all__ = ["choose_method", "check_method_device", "shape_argument", "dtype_argument"]


def choose_method(layout, max_shift, device: str, left=None, right=None, tune=False, calls=None):
    """The plan ``method="auto"`` runs.

    GPU: the planner's (:func:`~._planner.decide`, with ``tune`` and ``calls``); CPU: the
    direct sum for bounded searches of little work, else the FFT.
    """
    if device == "gpu":
        from ._planner import decide

        return decide(left, right, layout.form, max_shift, tune=True if tune else None,
                      calls=calls).plan
    if max_shift is None:
        return Plan("fft")
    return Plan("direct" if direct_is_small(layout, max_shift) else "fft")


def check_method_device(plan, device: str) -> None:
    """Refuse a GPU kernel's plan (a :class:`Plan` or ``None`` for auto) on the CPU."""
    if plan is not None and plan.on_gpu_only and device != "gpu":
        raise InputError(f"method {plan.method!r} is a GPU kernel; use device='gpu' or method "
                         "'direct' or 'fft'")


def shape_argument(value, name) -> tuple:
    """``value`` as a tuple of ints (:class:`~xcorr_app.errors.InputError` naming ``name``
    otherwise)."""
    try:
        return tuple(int(n) for n in value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a tuple of ints, got {value!r}") from None


def dtype_argument(dtype) -> np.dtype:
    """``dtype`` as a NumPy dtype of real numbers (:class:`~xcorr_app.errors.InputError`
    otherwise)."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InputError(f"unknown dtype {dtype!r}") from None
    if dt.kind not in "biuf":
        raise InputError(f"dtype must be a real number type, got {dt}")
    return dt
