"""The plans :func:`xcorr_app.cross_correlate` keeps: a small LRU cache of
:class:`~xcorr_app.correlate._correlation_plan.CorrelationPlan` keyed by the problem, so that
a repeated problem skips the planner, the layout and the kernel's configuration.

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
from ._correlation_plan import CorrelationPlan

__all__ = ["cached_plan", "clear_plan_cache", "cache_size", "PLAN_CACHE_SIZE"]

#: plans :func:`xcorr_app.cross_correlate` keeps (least recently used dropped first)
PLAN_CACHE_SIZE = 64

_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()


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
    settings = (config_value(PLANNER), config_value(TUNE)) if plan is None and gpu else None
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


def clear_plan_cache() -> None:
    """Forget the plans :func:`xcorr_app.cross_correlate` keeps (after
    ``xcorr_app.correlate._planner.forget()``, say, to plan again)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def cache_size() -> int:
    """Plans kept by :func:`cached_plan` now."""
    return len(_CACHE)
