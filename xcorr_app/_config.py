"""Every environment variable xcorr reads, and the cache directory: the one home of settings
that come from outside the arguments.

============================  ===============================================================
``XCORR_CACHE_DIR``           folder of the tuning cache (default: the user cache directory
                              that platformdirs gives, e.g. ``~/.cache/xcorr``)
``XCORR_PLANNER``             ``model`` (default): the planner's cost model chooses, nothing
                              is run; ``measure``: time every candidate kernel once per
                              problem; ``rules``: a fixed rule, nothing measured
``XCORR_TUNE``                ``1``: the planner measures the likeliest candidates (at most 2 s
                              a problem, on a subsample) and caches the choice; ``0`` or unset:
                              the cost model (or a choice measured and cached before)
``XCORR_KERNEL_DIR``          a folder of kernel sources replacing the package's
                              ``kernels/`` (laid out as it, or flat: every ``*.cu``/``*.cuh``)
``XCORR_DEBUG``               ``1``: the command line shows tracebacks instead of one line
``XCORR_THREADS``             threads of the CPU path (default: the CPUs this process may use)
``XCORR_WORKER_GPU_BY_NAME``  set by :func:`xcorr_app.dask.local_client` in its workers: worker
                              ``k`` uses GPU ``k mod count``
``XCORR_FFT_WARM``            ``0``: no helper processes building a cold FFT size's cuFFT plans
                              for the next run (:mod:`xcorr_app.correlate._fft_plans`)
``XCORR_FASTLAUNCH``          ``0``: correlation plans launch from Python even where the
                              compiled launch path is built (:mod:`xcorr_app._cuda.launch`)
============================  ===============================================================

Examples
--------
>>> import os
>>> os.environ["XCORR_CACHE_DIR"] = "/tmp/xcorr-cache"
>>> str(cache_dir())
'/tmp/xcorr-cache'
>>> del os.environ["XCORR_CACHE_DIR"]
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR = "XCORR_CACHE_DIR"
PLANNER = "XCORR_PLANNER"
TUNE = "XCORR_TUNE"
KERNEL_DIR = "XCORR_KERNEL_DIR"
DEBUG = "XCORR_DEBUG"
THREADS = "XCORR_THREADS"
WORKER_GPU_BY_NAME = "XCORR_WORKER_GPU_BY_NAME"
FFT_WARM = "XCORR_FFT_WARM"
FASTLAUNCH = "XCORR_FASTLAUNCH"

#: every variable above, with its one-line meaning (``xcorr info`` and the docs list them)
VARIABLES = {
    CACHE_DIR: "folder of the tuning cache",
    PLANNER: "model (default), measure or rules",
    TUNE: "1: measure the likeliest kernels (bounded) instead of the cost model's choice",
    KERNEL_DIR: "one folder of kernel sources replacing the package's",
    DEBUG: "1: tracebacks instead of one-line errors",
    THREADS: "threads of the CPU path (default: every CPU this process may use)",
    WORKER_GPU_BY_NAME: "set in Dask workers started by xcorr_app.dask.local_client",
    FFT_WARM: "0: no helper processes building a cold FFT size's plans for the next run",
    FASTLAUNCH: "0: plans launch from Python even where the compiled launch path is built",
}


def get(name: str, default: str | None = None) -> str | None:
    """The value of the variable ``name`` (one of :data:`VARIABLES`), or ``default``."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not an xcorr setting")
    return os.environ.get(name) or default


def cache_dir() -> Path:
    """The folder of xcorr's caches: ``$XCORR_CACHE_DIR``, else the user cache directory."""
    env = get(CACHE_DIR)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("xcorr", appauthor=False))


def tune_requested() -> bool:
    """Whether ``XCORR_TUNE`` asks the planner to measure (``1``, ``true``, ``yes``, ``on``)
    or not (unset, empty, ``0``, ``false``, ``no``, ``off``); any other value is an error.

    Examples
    --------
    >>> import os
    >>> os.environ["XCORR_TUNE"] = "1"
    >>> tune_requested()
    True
    >>> del os.environ["XCORR_TUNE"]
    >>> tune_requested()
    False
    """
    value = (get(TUNE, "") or "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    from .errors import InputError

    raise InputError(f"{TUNE} must be 0 or 1, got {get(TUNE)!r}")


def planner_mode() -> str:
    """``XCORR_PLANNER``: ``model`` (unset or empty), ``measure`` or ``rules``; any other value
    is an error (a misspelt one, ``measured``, meant ``model`` without a word).

    >>> import os
    >>> os.environ["XCORR_PLANNER"] = "measured"
    >>> planner_mode()
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: XCORR_PLANNER must be model, measure or rules, got 'measured'
    >>> del os.environ["XCORR_PLANNER"]
    """
    value = (get(PLANNER, "") or "model").strip().lower()
    if value in ("model", "measure", "rules"):
        return value
    from .errors import InputError

    raise InputError(f"{PLANNER} must be model, measure or rules, got {get(PLANNER)!r}")


def debug() -> bool:
    """Whether ``XCORR_DEBUG`` asks for tracebacks."""
    return get(DEBUG, "") not in ("", "0")
