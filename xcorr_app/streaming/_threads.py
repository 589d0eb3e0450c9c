"""The CPU's threads: how many compute a chunk, and how a chunk is shared out among them.

On the CPU a chunk is cut into one slice of frames per thread (:func:`frame_slices`) and the
slices are computed at once: NumPy, SciPy's FFTs and filters release the GIL on large arrays,
so the threads use every core, and each frame's result is the same whichever slice it is in.

Examples
--------
>>> frame_slices(10, 3)
[(0, 4), (4, 7), (7, 10)]
>>> frame_slices(2, 4)
[(0, 1), (1, 2)]
"""

from __future__ import annotations

import contextlib
import os

from .._config import THREADS
from .._config import get as config_value
from ..errors import InputError


def cpu_threads() -> int:
    """``$XCORR_THREADS``, else the number of CPUs this process may run on."""
    value = config_value(THREADS)
    if value:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise InputError(f"XCORR_THREADS must be a positive integer, got {value!r}")
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def frame_slices(n: int, parts: int) -> list:
    """``n`` frames cut into at most ``parts`` contiguous ``(start, stop)`` slices of sizes
    differing by at most one."""
    parts = max(1, min(int(parts), int(n)))
    size, extra = divmod(int(n), parts)
    out, start = [], 0
    for k in range(parts):
        stop = start + size + (k < extra)
        out.append((start, stop))
        start = stop
    return out


#: glibc's ``mallopt`` parameters and the values :func:`keep_freed_memory` sets
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 256 << 20
_ALLOCATOR = {"done": False}


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to reuse freed blocks of up to 64 MiB instead of handing each
    back to the system (keeping at most 256 MiB free); once per process, a no-op elsewhere.

    Why: the CPU path allocates and frees arrays of several MiB per frame (FFTs, correlation
    surfaces, their float64 normalization); each came from a fresh ``mmap`` whose pages the
    kernel zeroes on first touch, and system time exceeded user time (docs/how-align-works.md,
    measurements).  The same as ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` set before Python starts.
    """
    if _ALLOCATOR["done"]:
        return True
    _ALLOCATOR["done"] = True
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def one_blas_thread():
    """A context in which BLAS (OpenBLAS, MKL) runs one thread per call, when threadpoolctl is
    installed (a no-op otherwise).

    Why: the CPU path already runs one frame per thread; each thread's small matrix products
    (the upsampled DFT) then asked OpenBLAS for every core again, and the threads spun waiting
    for each other, seventy times the product's time on one thread.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    try:
        return threadpool_limits(limits=1, user_api="blas")
    except UnicodeDecodeError:
        # (threadpoolctl reads /proc/self/maps as UTF-8: a memory-mapped input whose file name
        # is not UTF-8 stopped the run; BLAS then keeps its threads, a slower product)
        return contextlib.nullcontext()
