"""The plans :func:`xcorr_app.cross_correlate` keeps: a small LRU cache of
:class:`~xcorr_app.correlate._correlation_plan.CorrelationPlan` keyed by the problem, so that
a repeated problem skips the planner, the layout and the kernel's configuration; and in front
of it, the fast path's table (:func:`call_key`, :func:`remembered`, :func:`remember`): the
plans of the last calls keyed by the arguments as given (array types, shapes, dtypes, form,
shift range, method, device), so that a repeated call skips the argument checks too.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.correlate._forms import form_layout
>>> a = np.zeros((8, 8), np.float32)
>>> lay = form_layout("one_to_one", a.shape, a.shape)
>>> cached_plan(lay, (1, 1), "cpu", None, a, a) is cached_plan(lay, (1, 1), "cpu", None, a, a)
True
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .._config import PLANNER, TUNE
from .._config import get as config_value
from ..backend import is_cupy_array
from ._correlation_plan import CorrelationPlan

__all__ = ["cached_plan", "clear_plan_cache", "cache_size", "PLAN_CACHE_SIZE", "call_key",
           "remembered", "remember"]

#: plans :func:`xcorr_app.cross_correlate` keeps (least recently used dropped first)
PLAN_CACHE_SIZE = 64

_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()
#: call key -> (plan, direct, planner settings or None): the fast path's table
_CALLS: dict = {}


def cached_plan(layout, max_shift, device: str, plan, left, right) -> CorrelationPlan:
    """The plan :func:`xcorr_app.cross_correlate` runs for these (checked) arguments: kept for
    the last :data:`PLAN_CACHE_SIZE` problems, keyed by the form, shapes, dtypes, shift range,
    method, device (and CUDA device), and for ``auto`` the planner's settings
    (``XCORR_PLANNER``, ``XCORR_TUNE``).  ``plan`` is a :class:`Plan` or ``None`` (auto);
    ``left`` and ``right`` are the arrays of the device's module (the planner may measure
    on them)."""
    gpu = device == "gpu"
    dev_id = None
    if gpu:
        import cupy as cp

        dev_id = cp.cuda.runtime.getDevice()
    settings = _settings() if plan is None and gpu else None
    key = (layout.form, tuple(left.shape), tuple(right.shape), left.dtype.str, right.dtype.str,
           max_shift, plan, device, dev_id, settings)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
            return found
    made = CorrelationPlan(left.shape, right.shape, layout.form, max_shift, left.dtype,
                           device, plan, sample=(left, right))
    with _CACHE_LOCK:
        _CACHE[key] = made
        while len(_CACHE) > PLAN_CACHE_SIZE:
            _CACHE.popitem(last=False)
    return made


def _settings():
    """The planner's settings an ``auto`` GPU plan was chosen under."""
    return config_value(PLANNER), config_value(TUNE)


def call_key(left, right, form, max_shift, method, device):
    """The fast path's key of a :func:`xcorr_app.cross_correlate` call: its arguments as given
    (the inputs by array type, shape and dtype); raises AttributeError for inputs without a
    shape or dtype and TypeError for an unhashable argument (the checked path takes those)."""
    key = (form, max_shift, method, device, type(left), left.shape, left.dtype, type(right),
           right.shape, right.dtype)
    hash(key)
    return key


def remembered(key):
    """``(plan, direct)`` kept for ``key`` by :func:`remember`, or ``None``: none kept, or
    the current CUDA device or the planner's settings differ from the plan's (the checked
    path then finds or makes the right plan).  ``direct``: the plan's own call runs these
    inputs (CuPy float32, a kernel plan)."""
    found = _CALLS.get(key)
    if found is None:
        return None
    plan, direct, settings = found
    if plan.device_id is not None and plan._cp.cuda.runtime.getDevice() != plan.device_id:
        return None
    if settings is not None and settings != _settings():
        return None
    return plan, direct


def remember(key, plan, left, right) -> None:
    """Keep ``plan`` for the calls of ``key`` (its arrays ``left`` and ``right`` as given) in
    the fast path's table (the last :data:`PLAN_CACHE_SIZE` keys)."""
    direct = bool(plan.fast and is_cupy_array(left) and is_cupy_array(right)
                  and right.dtype == plan.dtype)
    settings = _settings() if plan._auto and plan.device == "gpu" else None
    with _CACHE_LOCK:
        _CALLS.pop(key, None)  # (re-inserted last: the oldest key goes first)
        _CALLS[key] = (plan, direct, settings)
        while len(_CALLS) > PLAN_CACHE_SIZE:
            del _CALLS[next(iter(_CALLS))]


def clear_plan_cache() -> None:
    """Forget the plans :func:`xcorr_app.cross_correlate` keeps (after
    ``xcorr_app.correlate._planner.forget()``, say, to plan again)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _CALLS.clear()


def cache_size() -> int:
    """Plans kept by :func:`cached_plan` now."""
    return len(_CACHE)
