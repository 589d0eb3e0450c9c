"""Launching a compiled kernel many times with the same grid and scalar arguments, cheaply.

CuPy's ``RawKernel.__call__`` converts every argument on every call; with a dozen scalars that
is several times what the kernel itself takes on the smallest correlation problems
(docs/kernels.md, launches).  A
:class:`PreparedLaunch` packs the constant arguments once into the driver's parameter buffer
(``CU_LAUNCH_PARAM_BUFFER_POINTER``) and, per call, writes only the leading array pointers and
calls ``cuLaunchKernel``.

Where the compiled launch path is built (``_fastlaunch.c``, :func:`fastlaunch`), a correlation
plan goes further: :func:`compiled_call` makes one C callable of the plan's checks and launches
(about 2 us of Python per call less); ``XCORR_FASTLAUNCH=0`` turns it off.

Examples
--------
>>> import numpy as np
>>> buf, offsets, size = pack_arguments(2, (np.int32(7), np.float32(0.5), np.int64(-1)))
>>> offsets, size  # two pointers, an int, a float, an 8-byte aligned int64
([0, 8, 16, 20, 24], 32)
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import struct
import threading

import numpy as np

from .._config import FASTLAUNCH
from .._config import get as config_value
from ..errors import InputError

#: the driver's markers in the ``extra`` array of ``cuLaunchKernel``
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE, _PARAM_END = 1, 2, 0
#: dynamic shared memory a kernel may take without raising its attribute first
_DEFAULT_SHARED_LIMIT = 48 * 1024
#: ``0`` turns the compiled launch path off (read once, at the first plan made)
FASTLAUNCH_ENV = FASTLAUNCH
_FASTLAUNCH_MODULE = __package__ + "._fastlaunch"
#: the roles of a compiled call's pointer slots (as ``_fastlaunch.c`` numbers them)
ROLES = {"left": 0, "right": 1, "out": 2, "workspace": 3}


def stride_blocks(total: int, threads: int, most: int = 65535) -> int:
    """Blocks of ``threads`` for a grid-stride loop over ``total`` elements: one element a
    thread, at most ``most`` blocks (at least one).

    >>> stride_blocks(1000, 256), stride_blocks(0, 256), stride_blocks(10**9, 256, 1024)
    (4, 1, 1024)
    """
    return max(1, min(-(-int(total) // int(threads)), int(most)))


def _is_device_array(a) -> bool:
    return hasattr(a, "data") and hasattr(getattr(a, "data"), "ptr")


def pack_arguments(n_arrays: int, constants) -> tuple[np.ndarray, list, int]:
    """The parameter buffer of a kernel whose first ``n_arrays`` parameters are pointers.

    ``constants`` follow them: NumPy scalars (placed at their natural alignment) and device
    arrays (their pointers, 8-byte aligned).  Returns ``(buffer, offsets)``: a uint64 array
    with the pointer slots zero, and each parameter's byte offset.
    """
    offsets, blobs, pos = [], [], 0
    for _ in range(n_arrays):
        offsets.append(pos)
        pos += 8
    for c in constants:
        if _is_device_array(c):
            blob = np.uint64(c.data.ptr).tobytes()
        elif isinstance(c, np.generic):
            blob = c.tobytes()
        else:
            raise TypeError(f"kernel constants must be NumPy scalars or device arrays, got "
                            f"{type(c).__name__} (a Python int has no fixed width)")
        pos = -(-pos // len(blob)) * len(blob)
        offsets.append(pos)
        blobs.append((pos, blob))
        pos += len(blob)
    buf = np.zeros(-(-pos // 8), np.uint64)
    raw = buf.view(np.uint8)
    for at, blob in blobs:
        raw[at:at + len(blob)] = np.frombuffer(blob, np.uint8)
    return buf, offsets, pos


class PreparedLaunch:
    """A kernel with its grid, block, shared memory and constant arguments fixed.

    Parameters
    ----------
    fn : cupy.RawKernel
        The compiled kernel (:meth:`xcorr_app._cuda.loader.KernelFamily.get`), on the current
        device.
    grid, block : tuple of int
    n_arrays : int
        Leading pointer parameters given per call.
    constants : tuple
        The parameters after them (NumPy scalars, or device arrays kept alive here).
    shared_mem : int
        Dynamic shared memory in bytes.

    Calling it with ``n_arrays`` C-contiguous device arrays launches the kernel on the current
    stream.  Where CuPy lacks ``cuda.driver.launchKernel`` it calls the kernel the usual way.
    More than 48 KiB of dynamic shared memory is opted into here (the kernel's attribute, only
    ever raised: other launches of the same function may need more).
    """

    def __init__(self, fn, grid, block, n_arrays, constants=(), shared_mem=0):
        import cupy as cp

        self.fn, self.grid, self.block = fn, tuple(grid), tuple(block)
        self.n_arrays, self.constants, self.shared_mem = n_arrays, tuple(constants), shared_mem
        self._stream = cp.cuda.get_current_stream
        self._launch = getattr(cp.cuda.driver, "launchKernel", None)
        # The opt-in is the compiled function's, shared by every launch of it: raise it, never
        # lower it (a problem prepared later with less shared memory would otherwise make the
        # launches of one prepared before fail with CUDA_ERROR_INVALID_VALUE).
        if shared_mem > max(_DEFAULT_SHARED_LIMIT, fn.max_dynamic_shared_size_bytes):
            fn.max_dynamic_shared_size_bytes = shared_mem
        if self._launch is None:
            return
        kernel = getattr(fn, "kernel", fn)  # RawKernel -> cupy.cuda.function.Function
        self._ptr = kernel.ptr
        self._buf, _, size = pack_arguments(n_arrays, self.constants)
        self._size = np.array([size], np.uint64)
        self._extra = np.array([_PARAM_BUFFER_POINTER, self._buf.ctypes.data, _PARAM_BUFFER_SIZE,
                                self._size.ctypes.data, _PARAM_END], np.uint64)
        dims = self.grid + (1,) * (3 - len(self.grid)) + self.block + (1,) * (3 - len(self.block))
        self._head = (self._ptr,) + dims + (shared_mem,)  # cuLaunchKernel's leading arguments
        self._extra_ptr = int(self._extra.ctypes.data)
        self._pack = struct.Struct(f"{n_arrays}Q").pack_into  # the pointers, in one call
        self._lock = threading.Lock()  # the buffer is shared: one launch writes it at a time

    def __call__(self, *arrays):
        if len(arrays) != self.n_arrays:
            raise TypeError(f"this launch takes {self.n_arrays} arrays, got {len(arrays)}")
        if self._launch is None:
            self.fn(self.grid, self.block, arrays + self.constants, shared_mem=self.shared_mem)
            return
        ptrs = [a.data.ptr for a in arrays]
        stream = self._stream().ptr
        with self._lock:  # the driver copies the buffer at launch, so it may change after
            self._pack(self._buf, 0, *ptrs)
            self._launch(*self._head, stream, 0, self._extra_ptr)

    @property
    def direct(self) -> bool:
        """Whether :meth:`launch_on` can be used (CuPy has ``cuda.driver.launchKernel``)."""
        return self._launch is not None

    def fast_step(self, *roles: str) -> tuple:
        """This launch as a step of a :func:`compiled_call`: the function, grid, block, shared
        memory, a **copy** of the packed arguments (the compiled call's own: a Python launch
        writes this one's from another thread while the driver reads it) and which pointer
        (``"left"``, ``"right"``, ``"out"``, ``"workspace"``) goes into each leading slot."""
        if len(roles) != self.n_arrays:
            raise ValueError(f"this launch takes {self.n_arrays} pointers, got {roles}")
        ints = lambda values: tuple(int(v) for v in values)  # noqa: E731 - C reads Python ints
        return ("launch", int(self._ptr), ints(self._head[1:4]), ints(self._head[4:7]),
                int(self.shared_mem), self._buf.copy(), int(self._size[0]),
                tuple(ROLES[r] for r in roles))

    def launch_on(self, stream_ptr: int, *ptrs: int) -> None:
        """Launch with raw device pointers (ints, the ``n_arrays`` leading parameters) on the
        stream ``stream_ptr``: no array attribute is read and no stream looked up, for callers
        that checked their arrays already (:class:`xcorr_app.correlate.CorrelationPlan`).
        Needs :attr:`direct`."""
        with self._lock:  # the driver copies the buffer at launch, so it may change after
            self._pack(self._buf, 0, *ptrs)
            self._launch(*self._head, stream_ptr, 0, self._extra_ptr)


def current_stream_ptr_getter(cp):
    """The quickest way to read the current stream's pointer: CuPy's
    ``cuda.stream.get_current_stream_ptr`` where it answers an int (no Stream object made),
    else ``get_current_stream().ptr``."""
    quick = getattr(cp.cuda.stream, "get_current_stream_ptr", None)
    try:
        if callable(quick) and quick() == cp.cuda.get_current_stream().ptr:
            return quick
    except Exception:  # noqa: BLE001 - not the function we know: the usual way
        pass
    return lambda: cp.cuda.get_current_stream().ptr


def stream_pointer(stream) -> int:
    """The pointer of a caller's CuPy stream (:class:`~xcorr_app.errors.InputError` for
    anything else).

    Examples
    --------
    >>> stream_pointer("default")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: stream must be a cupy.cuda.Stream, got str
    """
    try:
        return stream.ptr
    except AttributeError:
        raise InputError(f"stream must be a cupy.cuda.Stream, got "
                         f"{type(stream).__name__}") from None


@functools.lru_cache(maxsize=None)
def fastlaunch():
    """``(module, why)``: the compiled launch module (``_fastlaunch``) and ``"available"``, or
    ``None`` and why not (``XCORR_FASTLAUNCH=0``; not built: ``python3 setup.py build_ext
    --inplace`` in a source tree; built but libcuda.so.1 absent).  Decided once per process.

    Examples
    --------
    >>> module, why = fastlaunch()
    >>> isinstance(why, str) and (module is None) == (why != "available")
    True
    """
    if config_value(FASTLAUNCH_ENV, "1").strip() == "0":
        return None, f"off ({FASTLAUNCH_ENV}=0)"
    if importlib.util.find_spec(_FASTLAUNCH_MODULE) is None:
        return None, "not built (python3 setup.py build_ext --inplace in a source tree)"
    try:
        return importlib.import_module(_FASTLAUNCH_MODULE), "available"
    except ImportError as exc:
        return None, f"built, not usable here: {exc}"


class _PythonPlanCall:
    """What :class:`PlanCallBase` is where its extension is not built: the call goes to the
    plan's ``_call`` (which tries the compiled call itself)."""

    _direct_call = None
    _stream_ptr = None

    def __call__(self, left, right, out=None, stream=None):
        return self._call(left, right, out, stream, False)


def _plan_call_base():
    try:
        return importlib.import_module(__package__ + "._plancall").PlanCall
    except ImportError:  # not built: the Python base
        return _PythonPlanCall


#: The base class of :class:`~xcorr_app.correlate.CorrelationPlan`: its call goes straight
#: to the plan's ``_direct_call(left, right, out, stream_ptr)`` (the compiled call, where set)
#: when ``out`` is given and ``stream`` is not, without a Python frame (``_plancall.c``);
#: otherwise, and where that call refuses (``NotImplemented``) or the driver raises, to
#: ``self._call(left, right, out, stream, direct_tried)``.
PlanCallBase = _plan_call_base()


def compiled_call(ndarray, shapes, device_id, zero_bytes, kernel, arrange=None, graph=True):
    """One C callable doing a correlation plan call's checks and launches (:func:`fastlaunch`),
    or ``None`` where the compiled path is not available.

    ``shapes`` are the left, right and out shapes of float32 ``ndarray`` arrays on the device
    ``device_id``; the call zeroes the output's first ``zero_bytes`` (0: none), runs
    ``arrange(right, workspace)`` if given, then ``kernel(left, right, out)`` (reading the
    workspace in place of ``right`` after an ``arrange``; ``None``: no kernel), each a
    :class:`PreparedLaunch`.  The callable, ``fc(left, right, out, stream_ptr[,
    workspace_ptr])`` (the workspace where there is an ``arrange``), returns ``out``, or
    ``NotImplemented`` when an array is not a C-contiguous float32 ``ndarray`` of its shape on
    ``device_id`` (the caller's checked path then says what is wrong); a driver error raises
    RuntimeError.  With ``graph`` (and no zeroing), the launches are made once into a CUDA
    graph in the current context and each call sets their parameters and launches the graph
    (``_fastlaunch_graph.c``: the GPU takes graph launches faster); its ``graph`` attribute
    says whether it does.
    """
    module, _ = fastlaunch()
    launches = [] if kernel is None else \
        [(kernel, ("left", "right" if arrange is None else "workspace", "out"))]
    if arrange is not None:
        launches.insert(0, (arrange, ("right", "workspace")))
    if module is None or not all(k.direct for k, _ in launches):
        return None
    steps = [("memset", int(zero_bytes))] if zero_bytes else []
    steps += [k.fast_step(*roles) for k, roles in launches]
    return module.FastCall(ndarray, *(tuple(int(n) for n in s) for s in shapes),
                           np.dtype(np.float32), int(device_id), steps,
                           tuple(k for k, _ in launches),  # the functions, the constants
                           graph=bool(graph))
