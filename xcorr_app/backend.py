"""The one place that decides between NumPy (CPU) and CuPy (GPU).

``device`` arguments everywhere in xcorr take ``"auto"``, ``"gpu"`` or ``"cpu"``:

* ``"gpu"`` needs CuPy and a usable CUDA device, else it raises :class:`~xcorr_app.errors.InputError`
  (saying what to install).
* ``"cpu"`` always uses NumPy/SciPy.
* ``"auto"`` uses the GPU when one is usable and falls back to the CPU otherwise, saying so
  once (through :mod:`warnings`, category :class:`BackendFallbackWarning`).

Array type rule of the Python API: NumPy in gives NumPy out, CuPy in gives CuPy out.  Functions
call :func:`array_module_of` on their inputs to know which module to return, and
:func:`compute_device` to know where to compute.

Examples
--------
>>> from xcorr_app import backend
>>> backend.resolve_device("cpu")
'cpu'
"""

from __future__ import annotations

import functools
import threading
import warnings

import numpy as np

from .errors import InputError

DEVICES = ("auto", "gpu", "cpu")


class BackendFallbackWarning(UserWarning):
    """``device="auto"`` found no usable GPU and runs on the CPU."""


#: the thread of :func:`start_gpu_warm_up` (None: never started)
_warm_up = None
#: set by :func:`hold_gpu_warm_up`: this process starts no warm-up
_warm_up_held = False


def start_gpu_warm_up(fft: bool = False) -> bool:
    """Import CuPy and start the CUDA context (the probe of :func:`resolve_device`) in a
    background thread, while the caller opens and reads its input; the probe, when the run
    asks for it, waits for the thread instead of starting over.  With ``fft``, the thread
    also loads cuFFT (its library's load was the first transform's in the run; the figures:
    docs/performance.md, first runs).
    Only where a GPU is likely (:func:`gpu_likely`) and once a process; True when a thread
    was started.

    >>> start_gpu_warm_up() in (True, False)
    True
    """
    global _warm_up
    if _warm_up is not None or _warm_up_held or _probe_gpu.cache_info().currsize \
            or not gpu_likely():
        return False
    # the driver's context in a thread of its own: CuPy's import (0.3-0.5 s, the GIL held)
    # goes on beside it instead of after it
    threading.Thread(target=start_cuda_driver, name="xcorr-cuda-driver", daemon=True).start()
    _warm_up = threading.Thread(target=_warm_up_with_fft if fft else _probe_gpu,
                                name="xcorr-gpu-warm-up", daemon=True)
    _warm_up.start()
    return True


def start_cuda_driver(ordinal: int = 0) -> bool:
    """Initialize the CUDA driver and retain device ``ordinal``'s primary context (the one
    CuPy's runtime then uses) through libcuda itself: ctypes releases the GIL for the driver's
    start, so imports in other threads go on, and CuPy's first allocation then finds the
    context made (docs/performance.md, first runs).  The context is kept for the process.  False where there is
    no driver or it fails (the probe then says why).

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


def _warm_up_with_fft() -> None:
    """The warm-up's probe, then cuFFT loaded (a failure there is the run's to report)."""
    if _probe_gpu()[0]:
        try:
            from cupy.cuda import cufft

            cufft.getVersion()
        except Exception:  # noqa: BLE001 - (the transform that needs it raises in the run)
            pass


def hold_gpu_warm_up(held: bool = True) -> None:
    """Start no warm-up in this process (``held=False``: again allowed): its job will likely
    run on the CPU (a small stack under device auto), where CuPy's import in a thread would
    only slow it down (a large share of the cell sample's one-shot run).
    A GPU run still probes when it needs to, without the overlap."""
    global _warm_up_held
    _warm_up_held = bool(held)


#: frames x pixels up to which ``device="auto"`` aligns on the CPU (about 0.4 s there on 2
#: cores): :mod:`xcorr_app.alignment._device_choice`
SMALL_JOB_PIXELS = 4 * 2**20


def small_job_file(path) -> bool:
    """Whether ``path`` is a file small enough to hold only a small job (:data:`SMALL_JOB_PIXELS`
    pixels of 2 bytes: uint16, the usual camera's), told from its size before anything opens
    it: ``xcorr align`` then starts no warm-up (a compressed file that holds more only starts
    the GPU later).

    >>> small_job_file("no/such/file.tif")
    False
    """
    import os

    try:
        return os.path.isfile(path) and os.path.getsize(path) <= 2 * SMALL_JOB_PIXELS
    except (OSError, TypeError, ValueError):
        return False


def warm_up_held() -> bool:
    """Whether :func:`hold_gpu_warm_up` was called: the job is likely the CPU's, and nothing
    should probe the GPU before the run decides."""
    return _warm_up_held


def gpu_pending() -> bool:
    """Whether the warm-up thread (:func:`start_gpu_warm_up`) is still importing CuPy or
    starting the CUDA context: a decision that would wait for it may wait for the run to
    start on the device, and the work before overlaps the start."""
    return _warm_up is not None and _warm_up.is_alive()


def _probe_gpu() -> tuple[bool, str]:
    """Return ``(usable, reason)``; imports CuPy and touches the device once (the warm-up's
    answer where one was started: waited for)."""
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


_probe_gpu.cache_clear, _probe_gpu.cache_info = _probe_once.cache_clear, _probe_once.cache_info


#: device nodes of an NVIDIA driver (Linux; ``/dev/dxg``: WSL)
NVIDIA_DEVICE_NODES = ("/dev/nvidiactl", "/dev/dxg")


def gpu_likely() -> bool:
    """A hint without importing CuPy (about 0.5-1 s) or touching a device: CuPy is installed,
    an NVIDIA driver's device node exists and ``CUDA_VISIBLE_DEVICES`` does not hide every
    device (empty or ``-1``).  Not a probe: :func:`gpu_available` says for sure."""
    import importlib.util
    import os

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1")
    return not hidden and importlib.util.find_spec("cupy") is not None and any(
        os.path.exists(p) for p in NVIDIA_DEVICE_NODES)


def gpu_available() -> bool:
    """True when CuPy is installed and a CUDA device can run a kernel."""
    return _probe_gpu()[0]


def gpu_unavailable_reason() -> str:
    """Why :func:`gpu_available` is False (empty when a GPU is usable)."""
    ok, reason = _probe_gpu()
    return "" if ok else reason


#: what to install for the GPU (the CuPy wheel of the CUDA major version)
INSTALL_CUPY = "pip install cupy-cuda12x or cupy-cuda13x"


def gpu_remedy() -> str:
    """What to do where no GPU is usable: install CuPy when it is not importable, else check
    the driver and the devices this process may see.

    >>> gpu_remedy() if not gpu_available() else "ok"  # doctest: +ELLIPSIS
    '...'
    """
    if _probe_gpu()[1].startswith("CuPy is not importable"):
        return f"install the CuPy wheel for your CUDA version ({INSTALL_CUPY})"
    return "check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"


def device_free_bytes(xp):
    """Bytes the current device can still allocate (free memory plus CuPy's pool's free
    blocks); ``None`` for NumPy (no cap on the host).

    Examples
    --------
    >>> device_free_bytes(np) is None
    True
    """
    if xp is np:
        return None
    free, _ = xp.cuda.runtime.memGetInfo()
    pool = xp.get_default_memory_pool()
    return free + pool.free_bytes()


def host_available_bytes(meminfo="/proc/meminfo"):
    """Bytes the host can still give this process without swapping: ``MemAvailable`` of
    ``/proc/meminfo`` (Linux), else free physical pages (``os.sysconf``); ``None`` where
    neither says.

    Examples
    --------
    >>> n = host_available_bytes()
    >>> n is None or n > 0
    True
    """
    import os

    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


_warned_fallback = False


def resolve_device(device: str = "auto") -> str:
    """Map ``"auto" | "gpu" | "cpu"`` to ``"gpu"`` or ``"cpu"``.

    Raises
    ------
    InputError
        For an unknown name, and for ``"gpu"`` without a usable GPU (saying what to install).
    """
    global _warned_fallback
    if device not in DEVICES:
        raise InputError(f"unknown device {device!r}; use one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    ok, reason = _probe_gpu()
    if ok:
        return "gpu"
    if device == "gpu":  # (an InputError: a ValueError to the API's callers)
        raise InputError(f"device='gpu' was asked for but {reason}; {gpu_remedy()}, or use "
                         "device='cpu'")
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn(f"no usable GPU ({reason}); running on the CPU", BackendFallbackWarning,
                      stacklevel=2)
    return "cpu"


def is_cupy_array(a) -> bool:
    """True for a ``cupy.ndarray`` (without importing CuPy when it is not loaded)."""
    return type(a).__module__.startswith("cupy")


def array_module_of(*arrays):
    """``cupy`` if any argument is a CuPy array, else ``numpy``."""
    for a in arrays:
        if is_cupy_array(a):
            import cupy

            return cupy
    return np


def xp_for(device: str):
    """The array module for a resolved device (``"gpu"`` or ``"cpu"``); InputError saying
    what to install where ``"gpu"`` has no usable GPU."""
    if device == "gpu":
        resolve_device("gpu")  # (cached: a raw ModuleNotFoundError otherwise)
        import cupy

        return cupy
    return np


def compute_device(*arrays, device: str = "auto") -> str:
    """Where to compute for these inputs: CuPy inputs force ``"gpu"``, otherwise ``device``."""
    if any(is_cupy_array(a) for a in arrays):
        if device == "cpu":
            raise InputError("device='cpu' was given CuPy arrays; pass NumPy arrays (cupy.asnumpy)")
        return "gpu"
    return resolve_device(device)


def to_numpy(a, out=None) -> np.ndarray:
    """A NumPy array with the data of ``a`` (copies from the GPU when needed; a Dask array is
    computed first, its blocks NumPy or CuPy).  ``out``: a C-contiguous NumPy array of
    ``a``'s shape and type to copy into (from the GPU straight into it), returned.

    >>> out = np.zeros(3)
    >>> to_numpy([1.0, 2.0, 3.0], out=out) is out, out.tolist()
    (True, [1.0, 2.0, 3.0])
    """
    if type(a).__module__.startswith("dask.") and hasattr(a, "compute"):
        a = a.compute()
    if out is not None:
        if is_cupy_array(a):
            return a.get(out=out)
        out[...] = a
        return out
    if is_cupy_array(a):
        return a.get()
    return np.asarray(a)


def to_xp(a, xp):
    """``a`` as an array of module ``xp`` (NumPy or CuPy)."""
    if xp is np:
        return to_numpy(a)
    return xp.asarray(a)


def device_copy(a):
    """A C-contiguous copy of a C-contiguous CuPy array by a device-to-device copy on the
    current stream (CuPy's ``copy`` launches an element-wise kernel, compiled at first use for
    each type and layout); other arrays by ``copy``."""
    if not is_cupy_array(a) or not a.flags.c_contiguous:
        return a.copy()
    import cupy

    out = cupy.empty_like(a)
    if a.nbytes:
        out.data.copy_from_device_async(a.data, a.nbytes, cupy.cuda.get_current_stream())
    return out


def stack_frames(frames, xp):
    """``xp.stack`` of 2-D frames of one shape and type (NumPy or CuPy, C-contiguous) as a new
    array on ``xp``'s device, each frame copied into place (on the GPU by memory copies:
    ``cupy.stack`` launches a kernel compiled at first use)."""
    frames = list(frames)
    if xp is np or not frames:
        return xp.stack([to_xp(f, xp) for f in frames])
    import cupy

    out = cupy.empty((len(frames), *frames[0].shape), frames[0].dtype)
    stream = cupy.cuda.get_current_stream()
    for k, f in enumerate(frames):
        if f.shape != out.shape[1:] or f.dtype != out.dtype:
            raise ValueError(f"stack_frames: a {f.dtype} frame {f.shape} among {out.dtype} "
                             f"{out.shape[1:]}")
        if is_cupy_array(f):
            out[k].data.copy_from_device_async(cupy.ascontiguousarray(f).data, f.nbytes, stream)
        else:
            out[k].set(np.ascontiguousarray(f), stream=stream)
    return out


def like_input(result, *inputs):
    """Return ``result`` as the array type of ``inputs`` (NumPy in, NumPy out; CuPy in, CuPy out)."""
    return to_xp(result, array_module_of(*inputs))


@functools.lru_cache(maxsize=None)
def _gpu_name_of(device_id: int) -> str:
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def gpu_name(device_id=None) -> str:
    """The name of a CUDA device (the current one by default), or ``"cpu"`` where CuPy has
    none: the one place a device name is decoded.

    Examples
    --------
    >>> gpu_name() if not gpu_available() else "cpu"
    'cpu'
    """
    try:
        import cupy

        return _gpu_name_of(cupy.cuda.Device().id if device_id is None else int(device_id))
    except Exception:  # noqa: BLE001 - no CuPy, no device
        return "cpu"
