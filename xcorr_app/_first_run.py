"""A process's first use of the GPU: what it costs, what is started ahead of it, and when
``device="auto"`` leaves a job to the CPU instead.

A GPU process first imports CuPy (the GIL held), initializes the CUDA driver and makes the
device's context, loads cuFFT, and where this run's kernels were never built, compiles them.
So:

* the probe of whether a GPU is usable (:func:`probe_gpu`, asked once a process; behind
  :func:`xcorr_app.backend.resolve_device`) can run in a background thread, the warm-up
  (:func:`start_gpu_warm_up`), while the command imports its modules and opens its input; the
  driver's start runs in a thread of its own beside it (:func:`start_cuda_driver`, which
  releases the GIL), and so do the contexts of the other GPUs of a run on several
  (:func:`start_cuda_drivers`);
* a job so small that the CPU is done before a GPU run would be (at most
  :data:`SMALL_JOB_PIXELS` pixels; :data:`FIRST_RUN_PIXELS` while this run's kernels are not
  built) is measured on the CPU under ``auto`` (:func:`auto_device`), without importing CuPy
  to look at the GPU where one is likely (:func:`small_job_note`); a command that can tell a
  small job from its input file's size alone (:func:`small_job_file`) holds the warm-up
  (:func:`hold_gpu_warm_up`), which would only slow it down.

The figures behind these choices are in docs/performance.md (first runs).  This module imports
neither NumPy nor CuPy: the command line starts it before its own imports.

Examples
--------
>>> auto_device(12, (120, 160), kernels_built=True)[0]
'cpu'
>>> auto_device(512, (2048, 2048), kernels_built=False)
('gpu', None)
"""

from __future__ import annotations

import functools
import threading

__all__ = ["probe_gpu", "gpu_likely", "start_gpu_warm_up", "start_cuda_driver",
           "start_cuda_drivers", "hold_gpu_warm_up", "SMALL_JOB_PIXELS", "FIRST_RUN_PIXELS",
           "small_job_file", "small_job_note", "auto_device", "NVIDIA_DEVICE_NODES"]

#: frames x pixels up to which ``device="auto"`` aligns on the CPU (about 0.4 s there on 2
#: cores, against the GPU's start)
SMALL_JOB_PIXELS = 4 * 2**20
#: the same when this run's GPU kernels are not built yet (about 3 s on 2 cores, against 5-14 s
#: of compiling on a first GPU run)
FIRST_RUN_PIXELS = 32 * 2**20
#: device nodes of an NVIDIA driver (Linux; ``/dev/dxg``: WSL)
NVIDIA_DEVICE_NODES = ("/dev/nvidiactl", "/dev/dxg")

#: the thread of :func:`start_gpu_warm_up` (None: never started)
_warm_up = None
#: set by :func:`hold_gpu_warm_up`: this process starts no warm-up
_warm_up_held = False


def gpu_likely() -> bool:
    """A hint without importing CuPy (about 0.5-1 s) or touching a device: CuPy is installed,
    an NVIDIA driver's device node exists and ``CUDA_VISIBLE_DEVICES`` does not hide every
    device (empty or ``-1``).  Not a probe: :func:`probe_gpu` says for sure."""
    import importlib.util
    import os

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1")
    return not hidden and importlib.util.find_spec("cupy") is not None and any(
        os.path.exists(p) for p in NVIDIA_DEVICE_NODES)


def start_gpu_warm_up(fft: bool = False) -> bool:
    """Import CuPy and start the CUDA context (:func:`probe_gpu`) in a background thread,
    while the caller imports its modules and opens its input; the probe, when the run asks for
    it, waits for the thread instead of starting over.  With ``fft``, the thread also loads
    cuFFT (its library's load was the first transform's in the run).  Only where a GPU is
    likely (:func:`gpu_likely`), once a process and not while held (:func:`hold_gpu_warm_up`);
    True when a thread was started.

    >>> start_gpu_warm_up() in (True, False)
    True
    """
    global _warm_up
    if _warm_up is not None or _warm_up_held or probe_gpu.cache_info().currsize \
            or not gpu_likely():
        return False
    # the driver's context in a thread of its own: CuPy's import (the GIL held) goes on
    # beside it instead of after it
    threading.Thread(target=start_cuda_driver, name="xcorr-cuda-driver", daemon=True).start()
    _warm_up = threading.Thread(target=_warm_up_with_fft if fft else probe_gpu,
                                name="xcorr-gpu-warm-up", daemon=True)
    _warm_up.start()
    return True


def _warm_up_with_fft() -> None:
    """The warm-up's probe, then cuFFT loaded (a failure there is the run's to report)."""
    if probe_gpu()[0]:
        try:
            from cupy.cuda import cufft

            cufft.getVersion()
        except Exception:  # noqa: BLE001 - (the transform that needs it raises in the run)
            pass


def start_cuda_driver(ordinal: int = 0) -> bool:
    """Initialize the CUDA driver and retain device ``ordinal``'s primary context (the one
    CuPy's runtime then uses) through libcuda itself: ctypes releases the GIL for the driver's
    start, so imports in other threads go on, and CuPy's first allocation then finds the
    context made.  The context is kept for the process.  False where there is no driver or it
    fails (the probe then says why).

    >>> start_cuda_driver() in (True, False)
    True
    """
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        return (cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), int(ordinal)) == 0
                and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0)
    except (OSError, AttributeError):  # no NVIDIA driver's library here (or another platform)
        return False


def start_cuda_drivers(ordinals=None) -> None:
    """:func:`start_cuda_driver` for each of ``ordinals`` (None: every device) other than 0
    (the warm-up's), each in a thread of its own, while the command imports and opens its
    input: a run on several GPUs then finds their contexts made instead of making them one
    after the other in its first pass (docs/performance.md, several GPUs)."""

    def start(ordinal):
        threading.Thread(target=start_cuda_driver, args=(ordinal,), daemon=True,
                         name=f"xcorr-cuda-driver-{ordinal}").start()

    def every_device():
        import ctypes

        try:
            cuda, count = ctypes.CDLL("libcuda.so.1"), ctypes.c_int()
            if cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0:
                for k in range(1, count.value):
                    start(k)
        except (OSError, AttributeError):
            pass

    if ordinals is None:
        threading.Thread(target=every_device, name="xcorr-cuda-drivers", daemon=True).start()
        return
    for k in dict.fromkeys(int(k) for k in ordinals if int(k) > 0):
        start(k)


def hold_gpu_warm_up(held: bool = True) -> None:
    """Start no warm-up in this process (``held=False``: again allowed): its job will likely
    run on the CPU (a small stack under device auto), where CuPy's import in a thread would
    only slow it down.  A GPU run still probes when it needs to, without the overlap."""
    global _warm_up_held
    _warm_up_held = bool(held)


def probe_gpu() -> tuple[bool, str]:
    """``(usable, reason)``: imports CuPy and touches the device once a process (the warm-up's
    answer where one was started: waited for).  ``probe_gpu.cache_clear()`` forgets it."""
    warm = _warm_up
    if warm is not None and warm is not threading.current_thread():
        warm.join()
    return _probe_once()


@functools.lru_cache(maxsize=1)
def _probe_once() -> tuple[bool, str]:
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
        if n < 1:
            return False, "CuPy found no CUDA device"
        cupy.zeros(1, dtype=cupy.float32).sum().item()  # a real allocation and launch
    except Exception as exc:
        return False, f"CuPy cannot use a CUDA device ({type(exc).__name__}: {exc})"
    return True, "CUDA device usable"


probe_gpu.cache_clear, probe_gpu.cache_info = _probe_once.cache_clear, _probe_once.cache_info


def small_job_file(path) -> bool:
    """Whether ``path`` is a file small enough to hold only a small job (:data:`SMALL_JOB_PIXELS`
    pixels of 2 bytes: uint16, the usual camera's), told from its size before anything opens
    it (a compressed file that holds more only starts the GPU later).

    >>> small_job_file("no/such/file.tif")
    False
    """
    import os

    try:
        return os.path.isfile(path) and os.path.getsize(path) <= 2 * SMALL_JOB_PIXELS
    except (OSError, TypeError, ValueError):
        return False


def small_job_note(n_frames, frame_shape):
    """The note of a job of at most :data:`SMALL_JOB_PIXELS` on a machine where a GPU is likely
    (:func:`gpu_likely`): ``auto`` measures it on the CPU without importing CuPy or looking at
    the GPU (which would cost more than the job); else ``None``."""
    h, w = frame_shape
    if int(n_frames) * int(h) * int(w) > SMALL_JOB_PIXELS:
        return None
    return auto_device(n_frames, frame_shape, kernels_built=True)[1] if gpu_likely() else None


def auto_device(n_frames, frame_shape, kernels_built) -> tuple:
    """``("cpu", note)`` for a job small enough for the CPU, else ``("gpu", None)``:
    :data:`SMALL_JOB_PIXELS`, or :data:`FIRST_RUN_PIXELS` where this run's GPU kernels are not
    built yet (``kernels_built`` False)."""
    h, w = frame_shape
    pixels = int(n_frames) * int(h) * int(w)
    limit = SMALL_JOB_PIXELS if kernels_built else FIRST_RUN_PIXELS
    if pixels > limit:
        return "gpu", None
    why = ("than starting the GPU" if kernels_built else
           "than compiling this run's GPU kernels, not built yet on this machine "
           "(xcorr info --compile builds them ahead)")
    return "cpu", (f"measured on the CPU: {n_frames} frame{'s' if n_frames != 1 else ''} of "
                   f"{h}x{w} take less there {why}; device='gpu' uses the GPU")
