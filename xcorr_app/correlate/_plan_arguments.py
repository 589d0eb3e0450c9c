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

import numbers

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
    """``value`` as a tuple of ints, none negative (:class:`~xcorr_app.errors.InputError`
    naming ``name`` otherwise: ``int()`` would take ``8.5`` as 8 and ``True`` as 1).

    >>> shape_argument((8, 8.5), "left_shape")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: left_shape must be a tuple of ints, got (8, 8.5)
    >>> shape_argument((-8, 8), "left_shape")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: left_shape must not have a negative size, got (-8, 8)
    """
    try:
        items = tuple(value)
    except TypeError:
        items = None
    if items is None or not all(isinstance(n, numbers.Integral)
                                and not isinstance(n, (bool, np.bool_)) for n in items):
        raise InputError(f"{name} must be a tuple of ints, got {value!r}")
    shape = tuple(int(n) for n in items)
    if min(shape, default=0) < 0:
        raise InputError(f"{name} must not have a negative size, got {value!r}")
    return shape


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
