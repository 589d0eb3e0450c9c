"""The current GPU's resource limits, which the kernel planners size their tiles by, the
small constant arrays the kernels read, uploaded once per device, and the counters kernels
count their blocks in.

:func:`device_limits` reads the SM count, registers and shared memory of the current device
once (CuPy); without CuPy or a GPU it answers :data:`H100_LIMITS`, so the planners (and their
tests) run anywhere.  :func:`kept_on_device` uploads a small host array (filter taps, a
taper, window starts) once per content and device; :func:`upload_shared` is the upload of every
array a cache keeps on a device.  :func:`stream_counters`: zeroed counters per stream (split-K's
turns, the last block of a surface).

Examples
--------
>>> H100_LIMITS.sms, H100_LIMITS.shared_per_block
(132, 232448)
>>> isinstance(device_limits(), Limits)
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one GPU offers the kernels: SMs, registers and shared memory (bytes) per SM, and
    the shared memory one block may opt in to."""

    sms: int
    registers_per_sm: int
    shared_per_sm: int
    shared_per_block: int


#: NVIDIA H100 SXM (the CPU default, so the search runs anywhere)
H100_LIMITS = Limits(132, 65536, 233472, 232448)


def device_limits() -> Limits:
    """The current GPU's limits (CuPy), or :data:`H100_LIMITS` without one.

    Returns
    -------
    Limits
        Read once per device (the properties call takes about a millisecond).

    Examples
    --------
    >>> device_limits().sms > 0
    True
    """
    try:
        import cupy

        return _limits_of(cupy.cuda.Device().id)
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: plan for an H100
        return H100_LIMITS


@functools.lru_cache(maxsize=None)
def _limits_of(device_id: int) -> Limits:
    """Read once per device: the properties call takes about a millisecond."""
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        return Limits(props["multiProcessorCount"], props["regsPerMultiprocessor"],
                      props["sharedMemPerMultiprocessor"],
                      props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"]))
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: plan for an H100
        return H100_LIMITS


_COUNTERS: dict = {}
#: cudaStreamPerThread: the handle of every thread's own default stream
PER_THREAD_STREAM = 2


def stream_counters(count):
    """Zeroed int32 counters on the current device for the current stream's kernels, at least
    ``count`` (4096 or more), kept: a kernel that counts in them (split-K's turns, the blocks
    of a frame done) sets the ones it used back to 0 before it ends, so the next kernel on the
    stream finds zeros.  One buffer per stream: kernels on other streams never share it (the
    per-thread default stream has one handle for every thread: one buffer per thread)."""
    import threading

    import cupy as cp

    ptr = cp.cuda.get_current_stream().ptr
    key = (cp.cuda.Device().id, ptr, threading.get_ident() if ptr == PER_THREAD_STREAM else 0)
    buf = _COUNTERS.get(key)
    if buf is None or buf.size < count:
        buf = _COUNTERS[key] = cp.zeros(max(count, 4096), cp.int32)
    return buf


@contextlib.contextmanager
def own_stream():
    """This thread's GPU work on its own default stream (CUDA's per-thread default stream)
    where it would go to the legacy default stream, which every thread of the process shares.

    CuPy's memory pool hands a block freed on a stream to the next allocation on that stream:
    two threads on the legacy stream took each other's freed blocks while their own chunk
    streams still used them (two Dask range tasks on one GPU faulted).  The per-thread stream
    has a pool arena per thread, and orders itself with the legacy stream as that does with
    itself.  Nothing changes where CuPy is not loaded or another stream is current.  The main
    thread too: kept on the legacy stream (beside other threads on it), the fault came back."""
    import sys

    cp = sys.modules.get("cupy")
    try:
        legacy = cp is not None and cp.cuda.get_current_stream().ptr == 0
    except Exception:  # noqa: BLE001 - (CuPy without a usable GPU: nothing to order)
        legacy = False
    with cp.cuda.Stream.ptds if legacy else contextlib.nullcontext():
        yield


_UPLOAD_STREAMS: dict = {}


def upload_shared(a):
    """``a`` (a host array) as a CuPy array on the current device, for a cache whose arrays
    kernels on any stream of any thread read: copied on the device's own upload stream and
    waited for.  (Copied on the caller's stream, the array could still be on its way when
    another stream's kernel read it: two threads measuring on one GPU, as Dask's threads do,
    read garbage offsets and faulted.)  The device is waited for first: the block a cache's
    dropped array gave back to the upload stream may be taken, and the kernels still reading
    that array must end before it is copied over.  Uploads are a cache's misses: a few a run."""
    import cupy as cp
    import numpy as np

    a = np.asarray(a, order="C")  # (a CuPy array raises: it has no copy to wait for)
    device = cp.cuda.Device()
    stream = _UPLOAD_STREAMS.get(device.id)
    if stream is None:
        stream = _UPLOAD_STREAMS[device.id] = cp.cuda.Stream(non_blocking=True)
    device.synchronize()
    with stream:
        out = cp.asarray(a)
    stream.synchronize()
    return out


_KEPT: dict = {}
#: the most arrays :func:`kept_on_device` keeps (all of them are dropped when it is reached)
KEPT_MAX = 64


def kept_on_device(a):
    """A small host array as a CuPy array of its shape and type on the current device,
    uploaded once per content and device (:func:`upload_shared`) and then reused (a stack
    processed chunk by chunk reads it in every chunk).  The kernels only read it: it must not be
    written."""
    import cupy as cp
    import numpy as np

    a = np.ascontiguousarray(a)
    key = (a.dtype.str, a.shape, a.tobytes(), cp.cuda.Device().id)
    arr = _KEPT.get(key)
    if arr is None:
        if len(_KEPT) >= KEPT_MAX:
            _KEPT.clear()
        arr = _KEPT[key] = upload_shared(a)
    return arr
