"""Several GPUs of one host: choosing them (``--gpus``) and running one worker per GPU.

Each GPU has one long-lived worker thread (:func:`run_on_gpus`): CuPy keeps cuFFT plans per
thread and device, so a thread that stays keeps them from one run to the next.
"""

from __future__ import annotations

import concurrent.futures
import threading
from concurrent.futures import ThreadPoolExecutor

from .. import backend
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
            with cupy.cuda.Device(ids[k]):
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
