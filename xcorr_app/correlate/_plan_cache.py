"""The plans :func:`xcorr_app.cross_correlate` keeps: a small LRU cache of
:class:`~xcorr_app.correlate._correlation_plan.CorrelationPlan` keyed by the problem, so that
a repeated problem skips the planner, the layout and the kernel's configuration; and in front
of it, the fast path's table (:func:`kept_call`, :func:`remember`): the
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

import os
import threading
from collections import OrderedDict

import numpy as np

from .._config import PLANNER, TUNE
from .._config import get as config_value
from ..backend import is_cupy_array, like_input, to_xp
from ..errors import InputError
from ._correlation_plan import CorrelationPlan

__all__ = ["cached_plan", "clear_plan_cache", "cache_size", "PLAN_CACHE_SIZE", "call_key",
           "kept_call", "remembered", "remember"]

#: plans :func:`xcorr_app.cross_correlate` keeps (least recently used dropped first)
PLAN_CACHE_SIZE = 64

_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()
#: call key -> (plan, its run, the planner's settings or None, the method argument): the fast
#: path's table
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
                           device, plan, sample=(left, right), _bound_checked=True)
    with _CACHE_LOCK:
        _CACHE[key] = made
        while len(_CACHE) > PLAN_CACHE_SIZE:
            _CACHE.popitem(last=False)
    return made


def _settings():
    """The planner's settings an ``auto`` GPU plan was chosen under."""
    return config_value(PLANNER), config_value(TUNE)


# the settings' raw values as the fast path compares them: os.environ's own table where it
# has one (os.environ.get of an unset name costs a microsecond, a KeyError raised and caught)
_ENV_TABLE = getattr(os.environ, "_data", None)
_ENV_KEYS = tuple(os.environ.encodekey(n) for n in (PLANNER, TUNE)) \
    if _ENV_TABLE is not None and hasattr(os.environ, "encodekey") else None


def _raw_settings():
    if _ENV_KEYS is None:
        return _settings()
    get = _ENV_TABLE.get
    return get(_ENV_KEYS[0]), get(_ENV_KEYS[1])


def call_key(left, right, form, max_shift, method, device):
    """The fast path's key of a :func:`xcorr_app.cross_correlate` call: its arguments as given
    (the inputs by array type, shape and dtype; a method that is not a string by identity: its
    entry holds it, so the identity stays its own); raises AttributeError for inputs without a
    shape or dtype and TypeError for an unhashable argument (the checked path takes those)."""
    key = (form, max_shift, method if type(method) is str else id(method), device,
           type(left), left.shape, left.dtype, type(right), right.shape, right.dtype)
    hash(key)
    return key


def kept_call(left, right, form, max_shift, method, device, out):
    """``(result, key)`` of a :func:`xcorr_app.cross_correlate` call run by the plan kept for
    its key (:func:`remember`), or ``(NotImplemented, key)``: nothing kept (``key`` None where
    the call has none: :func:`call_key`), the current CUDA device or the planner's settings
    differ from the plan's, or the plan's own call refused the arrays; the checked path then
    runs the call (and says what is wrong, if anything)."""
    try:
        key = (form, max_shift, method if type(method) is str else id(method), device,
               type(left), left.shape, left.dtype, type(right), right.shape, right.dtype)
        found = _CALLS.get(key)
    except (AttributeError, TypeError):  # not arrays, or an unhashable argument
        return NotImplemented, None
    if found is None:
        return NotImplemented, key
    run, settings = found[1], found[2]
    if settings is not None and settings != _raw_settings():
        return NotImplemented, key
    return run(left, right, out), key


def remembered(key):
    """The plan kept for ``key`` by :func:`remember`, or ``None``."""
    found = _CALLS.get(key)
    return None if found is None else found[0]


def remember(key, plan, left, right, method) -> None:
    """Keep ``plan`` for the calls of ``key`` (its arrays ``left`` and ``right`` as given, its
    ``method`` argument held with it) in the fast path's table (the last
    :data:`PLAN_CACHE_SIZE` keys)."""
    settings = _raw_settings() if plan._auto and plan.device == "gpu" else None
    with _CACHE_LOCK:
        _CALLS.pop(key, None)  # (re-inserted last: the oldest key goes first)
        _CALLS[key] = (plan, _runner(plan, left, right), settings, method)
        while len(_CALLS) > PLAN_CACHE_SIZE:
            del _CALLS[next(iter(_CALLS))]


def _runner(plan, left, right):
    """``run(left, right, out)``: what the checked path runs for arrays like ``left`` and
    ``right`` with ``plan``, or NotImplemented where the plan's call refuses them."""
    direct = plan.fast and is_cupy_array(left) and is_cupy_array(right) \
        and right.dtype == plan.dtype
    if not direct:
        xp = plan._cp if plan.device == "gpu" else np

        def run(left, right, out):
            res = plan.execute(to_xp(left, xp), to_xp(right, xp), out=out)
            return like_input(res, left, right)
        return run
    get_device, device_id = plan._cp.cuda.runtime.getDevice, plan.device_id
    fc = plan.fast_call
    if fc is None or plan._arrange is not None:  # the plan's call in Python (its checks)
        def run(left, right, out):
            if get_device() != device_id:
                return NotImplemented
            try:
                return plan._call(left, right, out)
            except InputError:
                return NotImplemented
        return run
    empty, shape, f32, stream_ptr = plan._empty, plan.out_shape, np.float32, plan._stream_ptr

    def run(left, right, out):  # the compiled call: its checks, then straight to the driver
        if get_device() != device_id:
            return NotImplemented
        try:
            return fc(left, right, empty(shape, f32) if out is None else out, stream_ptr())
        except RuntimeError:  # the driver refused: the checked path says why, or runs it
            return NotImplemented
    return run


def clear_plan_cache() -> None:
    """Forget the plans :func:`xcorr_app.cross_correlate` keeps (after
    ``xcorr_app.correlate._planner.forget()``, say, to plan again)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _CALLS.clear()


def cache_size() -> int:
    """Plans kept by :func:`cached_plan` now."""
    return len(_CACHE)
