"""Several GPUs of one host: choosing them (``--gpus``) and running one worker per GPU.

Each GPU has one long-lived worker thread (:func:`run_on_gpus`): CuPy keeps cuFFT plans per
thread and device, so a thread that stays keeps them from one run to the next.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import operator
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .. import backend
from .._cuda import own_stream
from ..errors import InputError

#: ``align --gpus all`` and ``--workers N`` measure on one GPU in this process below this
#: stack size, and say so: smaller stacks do not pay for starting more (docs/performance.md).
#: A list of GPUs (``--gpus 0,1``) is always honoured.
SCALE_OUT_MIN_BYTES = 16 * 2**30


def need_gpus():
    """InputError unless CuPy is importable and a GPU usable (before CuPy is imported)."""
    if not backend.gpu_available():
        raise InputError(f"gpus needs CUDA GPUs, but none is usable here "
                         f"({backend.gpu_unavailable_reason()}); {backend.gpu_remedy()}")


def parse_gpus(spec) -> tuple[int, ...]:
    """GPU ids from ``"0,1"``, ``"all"`` or a sequence of ints, checked against this host.

    Raises :class:`~xcorr_app.errors.InputError` for a bad spec, and where this host has no
    usable GPU (saying what to install: :func:`~xcorr_app.backend.gpu_remedy`).

    Examples
    --------
    >>> parse_gpus("0,1")  # doctest: +SKIP
    (0, 1)
    """
    need_gpus()
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if isinstance(spec, str):
        text = spec.strip()
        if text == "all":
            return tuple(range(count))
        try:
            ids = [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise InputError(f"gpus {spec!r}: give GPU numbers separated by commas, e.g. 0,1, "
                             "or 'all'") from None
    else:
        ids = [int(t) for t in spec]
    if not ids:
        raise InputError("gpus: name at least one GPU, e.g. 0,1, or 'all'")
    if len(set(ids)) != len(ids):
        raise InputError(f"gpus {spec!r} names a GPU twice")
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        raise InputError(f"gpus: GPU {bad[0]} does not exist; this host has {count} "
                         f"(0 to {count - 1})")
    return tuple(ids)


def cuda_cluster() -> bool:
    """Whether a new local Dask cluster is dask-cuda's (one worker a GPU): dask-cuda installed
    and a GPU usable (:func:`xcorr_app.dask.local_client`)."""
    return importlib.util.find_spec("dask_cuda") is not None and backend.gpu_available()


def machine_cpus() -> int:
    """The CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers) -> int:
    """The ``workers`` of a new local Dask cluster as an int, checked against this host: at
    least 1, and at most one a GPU where the cluster is dask-cuda's (:func:`cuda_cluster`),
    else one a CPU core (each worker a single-threaded process: more only wait for the cores,
    each with its own start and memory; 1000 of them never came up).

    >>> check_workers(1)
    1
    >>> check_workers(10 ** 6)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: workers 1000000: this machine has ...
    """
    try:
        if isinstance(workers, bool):
            raise TypeError
        n = operator.index(workers)
    except TypeError:
        raise InputError(f"workers must be a whole number, got {workers!r}") from None
    if n < 1:
        raise InputError(f"workers must be >= 1, got {n}")
    if cuda_cluster():
        import cupy

        count, what = cupy.cuda.runtime.getDeviceCount(), "GPU"
        how = "dask-cuda's local cluster runs one worker a GPU"
    else:
        count, what = machine_cpus(), "CPU core"
        how = "a local cluster runs one single-threaded worker process a core"
    if n > count:
        raise InputError(f"workers {n}: this machine has {count} {what}{'s' * (count != 1)}, "
                         f"and {how}; give at most {count}, or run on a cluster of several "
                         "machines with scheduler=ADDRESS")
    return n


class Cancelled(Exception):
    """Another GPU's work failed: stop this one."""


_EXECUTORS: dict = {}
_EXECUTORS_LOCK = threading.Lock()


def _executor(device_id):
    """The one long-lived worker thread of GPU ``device_id``."""
    with _EXECUTORS_LOCK:
        ex = _EXECUTORS.get(device_id)
        if ex is None:
            ex = _EXECUTORS[device_id] = ThreadPoolExecutor(
                1, thread_name_prefix=f"xcorr-gpu{device_id}")
        return ex


def run_on_gpus(ids, work, meanwhile=None, on_abort=None):
    """Run ``work(k, stop_event)`` for every GPU ``ids[k]`` on its worker thread (and
    ``meanwhile()`` in this one, ``on_abort()`` if that fails or is interrupted); re-raise the
    first failure in GPU order (not a :class:`Cancelled` caused by it).  ``work`` raises
    :class:`Cancelled` to stop once ``stop_event`` is set."""
    need_gpus()  # (else every worker would fail importing CuPy)
    stop = threading.Event()

    def guarded(k):
        import cupy

        try:
            with cupy.cuda.Device(ids[k]), own_stream():  # (device 0's shared with the caller)
                return work(k, stop)
        except BaseException:
            stop.set()
            raise

    futures = []
    try:
        futures += [_executor(ids[k]).submit(guarded, k) for k in range(len(ids))]
        if meanwhile is not None:
            meanwhile()
        concurrent.futures.wait(futures)
    except BaseException:  # e.g. Ctrl-C: the GPUs stop after their chunk in progress
        stop.set()
        if on_abort is not None:
            on_abort()
        while True:  # a second Ctrl-C must not leave while the GPUs still read the input
            try:
                concurrent.futures.wait(futures)
                break
            except KeyboardInterrupt:
                continue
        raise
    errors = [f.exception() for f in futures]
    real = [e for e in errors if e is not None and not isinstance(e, Cancelled)]
    if real:
        raise real[0]
    return [f.result() for f in futures]
