"""The one place that decides between NumPy (CPU) and CuPy (GPU).

``device`` arguments everywhere in xcorr take ``"auto"``, ``"gpu"`` or ``"cpu"``:

* ``"gpu"`` needs CuPy and a usable CUDA device, else it raises :class:`~xcorr_app.errors.InputError`
  (saying what to install).
* ``"cpu"`` always uses NumPy/SciPy.
* ``"auto"`` uses the GPU when one is usable and falls back to the CPU otherwise, saying so
  once (through :mod:`warnings`, category :class:`BackendFallbackWarning`).

Array type rule of the Python API: NumPy in gives NumPy out, CuPy in gives CuPy out.  Functions
call :func:`array_module_of` on their inputs to know which module to return, and
:func:`compute_device` to know where to compute; a whole run (:func:`xcorr_app.align`) asks
:func:`decide_device` once, which also weighs the GPU's first use against the job
(:mod:`xcorr_app._first_run`: the probe, the warm-up, small jobs).

Examples
--------
>>> from xcorr_app import backend
>>> backend.resolve_device("cpu")
'cpu'
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from ._first_run import auto_device, probe_gpu, small_job_note
from .errors import InputError

DEVICES = ("auto", "gpu", "cpu")


class BackendFallbackWarning(UserWarning):
    """``device="auto"`` found no usable GPU and runs on the CPU."""


def gpu_available() -> bool:
    """True when CuPy is installed and a CUDA device can run a kernel."""
    return probe_gpu()[0]


def gpu_unavailable_reason() -> str:
    """Why :func:`gpu_available` is False (empty when a GPU is usable)."""
    ok, reason = probe_gpu()
    return "" if ok else reason


#: what to install for the GPU (the CuPy wheel of the CUDA major version)
INSTALL_CUPY = "pip install cupy-cuda12x or cupy-cuda13x"


def gpu_remedy() -> str:
    """What to do where no GPU is usable: install CuPy when it is not importable, else check
    the driver and the devices this process may see.

    >>> gpu_remedy() if not gpu_available() else "ok"  # doctest: +ELLIPSIS
    '...'
    """
    if probe_gpu()[1].startswith("CuPy is not importable"):
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
    ok, reason = probe_gpu()
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


def decide_device(device, n_frames, frame_shape, *arrays, kernels_built=None) -> tuple:
    """``(device, note)``: where a run of ``n_frames`` frames of ``frame_shape`` computes,
    ``device`` (``"auto"``, ``"gpu"``, ``"cpu"``) asked; the one decision of a run, which its
    entry point makes once and passes down.  CuPy ``arrays`` stay on the GPU.  Under ``"auto"``
    a small job goes to the CPU without a look at the GPU where one is likely
    (:func:`~xcorr_app._first_run.small_job_note`); any other to the GPU where one is usable
    (:func:`resolve_device`: else the CPU, warned once), unless it is small enough for the
    CPU while this run's GPU kernels are not built (``kernels_built``: a callable, asked only
    then; :func:`~xcorr_app._first_run.auto_device`).  ``note`` says why ``auto`` chose the
    CPU for a job (None otherwise).

    >>> decide_device("cpu", 12, (120, 160))
    ('cpu', None)
    """
    on_gpu = any(is_cupy_array(a) for a in arrays)
    if device == "auto" and not on_gpu:
        note = small_job_note(n_frames, frame_shape)
        if note is not None:
            return "cpu", note
    dev = compute_device(*arrays, device=device)
    if device == "auto" and dev == "gpu" and not on_gpu and kernels_built is not None:
        return auto_device(n_frames, frame_shape, kernels_built())
    return dev, None


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
