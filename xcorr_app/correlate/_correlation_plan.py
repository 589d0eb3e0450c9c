"""Correlation plans: one problem checked, planned and prepared once, then run many times.

In the style of cuFFT and CuPy FFT plans, :func:`correlation_plan` does everything that
depends only on the problem (form, shapes, shift range, input type, device) when it is made:
it validates them, asks the planner for a kernel (:func:`choose_method`), configures the
kernel's launches and packs their constant arguments (:meth:`Plan.prepared
<xcorr_app.correlate._plans.Plan.prepared>`).  A call checks only what is cheap (shape tuples,
dtype, C-contiguous CuPy arrays on the plan's GPU), writes three pointers into the packed
arguments and calls the driver (in one C call where the compiled launch path is built:
:func:`~xcorr_app._cuda.launch.compiled_call`); it allocates only an output not given.

A call runs one problem on the current stream or a caller's; :meth:`CorrelationPlan.many` N
problems in one ``n_to_mn`` launch where the form allows, and :meth:`CorrelationPlan.graph`
records a CUDA graph bound to fixed buffers (:mod:`xcorr_app.correlate._plan_graph`).
:func:`xcorr_app.cross_correlate` keeps the plans of its last problems (``_plan_cache``).

Examples
--------
>>> import numpy as np
>>> plan = correlation_plan((16, 16), (16, 16), max_shift=2, device="cpu")
>>> a = np.random.default_rng(0).random((16, 16), np.float32)
>>> plan(a, a).shape
(5, 5)
>>> plan.many(np.stack([a, a, a]), np.stack([a, a, a])).shape
(3, 5, 5)
>>> import cupy as cp  # doctest: +SKIP
>>> plan = correlation_plan((32, 32), (32, 32))  # doctest: +SKIP
>>> frames = cp.random.rand(100, 32, 32, dtype=cp.float32)  # doctest: +SKIP
>>> surfaces = [plan(frames[0], f) for f in frames]  # doctest: +SKIP
"""

from __future__ import annotations

from contextlib import nullcontext
from threading import get_ident

import numpy as np

from .._cuda import PlanCallBase, compiled_call, current_stream_ptr_getter, stream_pointer
from ..backend import resolve_device
from ..errors import InputError
from ._candidates import plan_fits
from ._forms import form_layout
from ._overlap import c_contiguous
from ._plan_arguments import check_method_device, choose_method, dtype_argument, shape_argument
from ._plans import Plan, run_plan
from ._shifts import check_max_shift, normalize_max_shift, output_shape

__all__ = ["CorrelationPlan", "correlation_plan"]


class CorrelationPlan(PlanCallBase):
    """A cross-correlation problem checked, planned and prepared once (see
    :func:`correlation_plan`, which makes one).

    Attributes
    ----------
    form, left_shape, right_shape : str, tuple, tuple
        The problem.
    max_shift : (int, int) or None
        The shift range, normalized.
    dtype : numpy.dtype
        The inputs' dtype.
    device : {"gpu", "cpu"}
    device_id : int or None
        The CUDA device the plan was made on (GPU plans).
    fast : bool
        Whether a call goes straight to the driver (a kernel plan on float32 inputs).
    fast_call : callable or None
        A fast plan's checks and launches in one C call (:func:`~xcorr_app._cuda.launch.
        compiled_call`, for calls without ``stream``), or ``None`` (Python does them; setting
        it to ``None`` sends every call through Python).
    method : Plan
        The kernel (or FFT, or direct sum) that runs.
    out_shape : tuple
        ``batch_shape + (Ho, Wo)`` of the result (float32).

    Notes
    -----
    **Calls.** ``plan(left, right, out=None, stream=None)`` correlates one pair (or batch) of
    the plan's problem and returns ``out`` (or a new array), float32, as
    :func:`xcorr_app.cross_correlate` returns it. ``left`` and ``right`` are of the plan's
    shapes and dtype: C-contiguous CuPy arrays on the plan's GPU (GPU plans) or NumPy arrays
    (CPU plans); ``out``, if given, a C-contiguous float32 array of :attr:`out_shape`;
    ``stream`` a CuPy stream to launch on (default: the current stream). Arrays of another
    shape, dtype, array type or device, or a bad ``out``, raise
    :class:`~xcorr_app.errors.InputError`. With ``out`` given and no ``stream``, a call goes
    from the caller straight to the compiled call (no Python frame between them).

    **Threads and streams.** A plan may be called from several threads at once: a call reads
    the plan and writes nothing of it but the packed kernel arguments, which each launch
    writes and hands to the driver under a lock (the compiled call: a copy of its own, the
    GIL released around the driver calls; the driver copies the arguments; its CUDA graph is
    updated and launched under a lock, and only on the first stream the plan is called on: a
    call on another stream launches the kernels one by one, see ``docs/pipelines.md``).  Each
    call runs on ``stream`` (any CuPy stream, e.g. ``cupy.cuda.Stream(non_blocking=True)``) or,
    by default, on the current stream of the calling thread (``with stream:``), and never
    synchronizes: the result is ready when that stream reaches it, so read it on the same
    stream or after synchronizing.  Inputs must be complete on that stream too (written on it,
    or the stream made to wait for the writer's event).  The plans that rearrange the right
    matrices first (``pair_tiled``) keep one workspace per stream, so calls on different
    streams may overlap; calls on one stream are ordered anyway.  A plan belongs to the GPU
    it was made on: call it with that device current (``with cupy.cuda.Device(i):``).
    """

    def __init__(self, left_shape, right_shape, form="one_to_one", max_shift=None,
                 dtype="float32", device="auto", method="auto", *, sample=None,
                 _bound_checked=False):
        self.left_shape = shape_argument(left_shape, "left_shape")
        self.right_shape = shape_argument(right_shape, "right_shape")
        lay = form_layout(form, self.left_shape, self.right_shape)
        self.form, self.layout = form, lay
        self.dtype = dtype_argument(dtype)
        if _bound_checked:  # (cached_plan, for callers that checked it once: not public)
            self.max_shift = max_shift
        else:
            self.max_shift = normalize_max_shift(max_shift)
            check_max_shift(self.max_shift, lay.left_shape, lay.right_shape)  # (before out_shape)
        self.device = resolve_device(device)
        plan = None if method is None or (isinstance(method, str) and method == "auto") \
            else Plan.parse(method)
        check_method_device(plan, self.device)
        self._auto = plan is None  # the planner's choice (else the caller's)
        self.out_shape = lay.batch_shape + output_shape(lay.left_shape, lay.right_shape,
                                                        self.max_shift)
        self.device_id = None
        self._launch = None
        self.fast, self.fast_call = False, None
        self._many = {}  # batch size -> the n_to_mn plan of many()
        if self.device == "cpu":
            self.method = plan or choose_method(lay, self.max_shift, "cpu")
            return
        import cupy as cp

        self._cp = cp
        self.device_id = cp.cuda.runtime.getDevice()
        if plan is None:
            left, right = sample if sample is not None else \
                (cp.zeros(self.left_shape, self.dtype), cp.zeros(self.right_shape, self.dtype))
            plan = choose_method(lay, self.max_shift, "gpu", left, right)
        self.method = plan
        cfg = self._launch = plan.prepared(form, self.left_shape, self.right_shape,
                                           self.max_shift)
        if cfg is None:
            return
        # the fast call (raw pointers straight to the driver) where the inputs are read as
        # they are: float32, and CuPy with cuda.driver.launchKernel
        self.fast = (self.dtype == np.float32
                      and (cfg.kernel is None or cfg.kernel.direct)
                      and (cfg.arrange is None or cfg.arrange.direct))
        self._kernel, self._arrange = cfg.kernel, cfg.arrange
        self._zero = cfg.zero_first or cfg.kernel is None
        self._out_nbytes = 4 * int(np.prod(self.out_shape, dtype=np.int64))
        self._workspaces = {}  # (stream, thread, device) -> the rearranged rights (pair_tiled)
        self._ndarray = cp.ndarray
        self._empty = cp.empty
        self._memset = cp.cuda.runtime.memsetAsync
        self._stream_ptr = current_stream_ptr_getter(cp)
        self._contiguous = (lambda a: a._c_contiguous) if hasattr(cp.ndarray, "_c_contiguous") \
            else c_contiguous
        if self.fast and hasattr(cp.ndarray, "_c_contiguous"):  # what the C checks read
            self.fast_call = compiled_call(cp.ndarray, (self.left_shape, self.right_shape,
                                                        self.out_shape), self.device_id,
                                           self._zero and self._out_nbytes, cfg.kernel,
                                           cfg.arrange)

    def __repr__(self) -> str:
        where = "cpu" if self.device == "cpu" else f"gpu {self.device_id}"
        return (f"CorrelationPlan({self.form}, {self.left_shape} x {self.right_shape}, "
                f"max_shift={self.max_shift}, dtype={self.dtype}, {where}, method={self.method})")

    def __getstate__(self):  # copy and pickle: the C base's members are not in __dict__
        return dict(self.__dict__, _stream_ptr=self._stream_ptr)

    def __setstate__(self, state):
        state = dict(state)
        self._stream_ptr = state.pop("_stream_ptr", None)
        self.__dict__.update(state)
        self.fast_call = state.get("_fast_call")  # and the direct call with it

    @property
    def fast_call(self):
        return self._fast_call

    @fast_call.setter
    def fast_call(self, fc):
        # a call with out and no stream goes straight to it (PlanCallBase), but for the plans
        # that rearrange the right matrices into a per-stream workspace first
        self._fast_call = fc
        self._direct_call = fc if getattr(self, "_arrange", None) is None else None

    # -------------------------------------------------------------------- checks

    def check_inputs(self, left, right) -> None:
        """Raise :class:`~xcorr_app.errors.InputError` saying what is wrong with ``left`` or
        ``right`` for this plan (the checks of a call, spelt out)."""
        gpu = self.device == "gpu"
        kind = self._cp.ndarray if gpu else np.ndarray
        where = "CuPy" if gpu else "NumPy"
        for name, a, shape in (("left", left, self.left_shape),
                               ("right", right, self.right_shape)):
            if not isinstance(a, kind):
                raise InputError(f"{name} must be a {where} array for this {self.device} plan, "
                                 f"got {type(a).__name__}")
            if tuple(a.shape) != shape:
                raise InputError(f"{name} has shape {tuple(a.shape)}; this plan was made for "
                                 f"{shape} (make a plan per problem)")
            if a.dtype != self.dtype:
                raise InputError(f"{name} has dtype {a.dtype}; this plan was made for "
                                 f"{self.dtype}")
            if not gpu:
                continue
            if not c_contiguous(a):
                raise InputError(f"{name} must be C-contiguous (cupy.ascontiguousarray)")
            if a.data.device_id != self.device_id:
                raise InputError(f"{name} is on GPU {a.data.device_id}; this plan was made on "
                                 f"GPU {self.device_id}")
        if gpu and self._cp.cuda.runtime.getDevice() != self.device_id:
            raise InputError(f"the current device is GPU {self._cp.cuda.runtime.getDevice()}; "
                             f"this plan was made on GPU {self.device_id}: call it under "
                             f"`with cupy.cuda.Device({self.device_id}):`")

    def check_out(self, out, shape=None) -> None:
        """Raise :class:`~xcorr_app.errors.InputError` unless ``out`` can receive a result of
        ``shape`` (default: :attr:`out_shape`)."""
        shape = self.out_shape if shape is None else shape
        gpu = self.device == "gpu"
        kind = self._cp.ndarray if gpu else np.ndarray
        where = f"CuPy array on GPU {self.device_id}" if gpu else "NumPy array"
        if not (isinstance(out, kind) and tuple(out.shape) == shape and out.dtype == np.float32
                and c_contiguous(out) and (not gpu or out.data.device_id == self.device_id)):
            got = f"{out.dtype} {tuple(out.shape)}" if hasattr(out, "shape") else \
                type(out).__name__
            raise InputError(f"out must be a C-contiguous float32 {where} of shape {shape}, "
                             f"got {got}")

    # -------------------------------------------------------------------- calls

    def _call(self, left, right, out=None, stream=None, direct_tried=False):
        """The plan's call, ``plan(left, right, out=None, stream=None)`` (the class's Notes
        say what it takes), where :class:`~xcorr_app._cuda.launch.PlanCallBase` sends it:
        every call of a plan without a compiled call, and those its compiled call refused
        (``direct_tried``: the compiled call was tried on these arrays and ``out``)."""
        fc = self.fast_call
        if fc is not None and stream is None and not direct_tried:  # checks and launches in C
            s = self._stream_ptr()
            dest = self._empty(self.out_shape, np.float32) if out is None else out
            ws = None if self._arrange is None else self._workspace(s, None)
            try:
                got = fc(left, right, dest, s) if ws is None else \
                    fc(left, right, dest, s, ws.data.ptr)
            except RuntimeError:  # the driver refused: another device current says so here,
                self.check_inputs(left, right)  # else the Python path raises CuPy's own error
                got = NotImplemented
            if got is not NotImplemented:
                return got  # else a check failed: the path below says which
        if direct_tried:  # refused, or the driver raised: say what is wrong before launching
            self.check_inputs(left, right)
        if not self.fast:
            return self._call_checked(left, right, out, stream)
        nd, dev, contiguous = self._ndarray, self.device_id, self._contiguous
        if not (isinstance(left, nd) and isinstance(right, nd)
                and left.shape == self.left_shape and right.shape == self.right_shape
                and left.dtype.char == "f" and right.dtype.char == "f"
                and contiguous(left) and contiguous(right)
                and left.data.device_id == dev and right.data.device_id == dev):
            self.check_inputs(left, right)  # raises, saying what is wrong
        s = self._stream_ptr() if stream is None else stream_pointer(stream)
        if out is None:
            if stream is None:
                out = self._empty(self.out_shape, np.float32)
            else:
                with stream:  # the memory pool's stream: reused only after this stream's work
                    out = self._empty(self.out_shape, np.float32)
        elif not (isinstance(out, nd) and out.shape == self.out_shape and out.dtype.char == "f"
                  and contiguous(out) and out.data.device_id == dev):
            self.check_out(out)
        workspace = None if self._arrange is None else self._workspace(s, stream)
        ptrs = (left.data.ptr, right.data.ptr, out.data.ptr, s, workspace)
        try:
            self.enqueue(*ptrs)
        except Exception as exc:  # the driver refuses a kernel of another device's context
            self.check_inputs(left, right)  # says so, if that is it (the current device)
            if "INVALID_CONTEXT" not in str(exc):
                raise
            self._cp.cuda.runtime.free(0)  # a thread's first CUDA call: its context made current
            self.enqueue(*ptrs)
        return out

    def enqueue(self, left_ptr, right_ptr, out_ptr, stream_ptr, workspace=None) -> None:
        """Launch on raw device pointers (ints), checked by the caller: zero the output where
        the kernel adds to it, rearrange the right matrices into ``workspace`` where the kernel
        reads them so, run the kernel.  Fast plans only (a Python call and a graph capture)."""
        if self._zero:
            self._memset(out_ptr, 0, self._out_nbytes, stream_ptr)
        kernel = self._kernel
        if kernel is None:  # no shift overlaps: zeros
            return
        if self._arrange is not None:
            self._arrange.launch_on(stream_ptr, right_ptr, workspace.data.ptr)
            right_ptr = workspace.data.ptr
        kernel.launch_on(stream_ptr, left_ptr, right_ptr, out_ptr)

    def _workspace(self, s, stream):  # per stream pointer, thread (threads may share the
        # default streams' pointers) and current device (a wrong call's buffer stays apart)
        key = (s, get_ident(), self._cp.cuda.runtime.getDevice())
        ws = self._workspaces.get(key)
        if ws is None:
            ws = self._workspaces[key] = self.new_workspace(stream)
        return ws

    def new_workspace(self, stream=None):
        """A buffer for the rearranged right matrices (``pair_tiled`` plans; else ``None``),
        allocated on ``stream`` (default: the current stream)."""
        if self._arrange is None:
            return None
        with stream if stream is not None else nullcontext():
            return self._empty(self._launch.arranged_shape, np.float32)

    def _call_checked(self, left, right, out, stream):
        """A call without the fast path: CPU, ``fft`` and ``overlap`` plans, other dtypes."""
        self.check_inputs(left, right)
        if out is not None:
            self.check_out(out)
        if self.device == "cpu" or stream is None:
            return self.execute(left, right, out)
        with stream:
            return self.execute(left, right, out)

    def execute(self, left, right, out=None):
        """Run the plan on arrays of its shapes as :func:`xcorr_app.cross_correlate` does
        (which calls this): without the call's checks, inputs of any real dtype and layout
        converted where needed, ``out`` checked (or allocated), on the current stream."""
        cfg = self._launch
        if cfg is None:
            return run_plan(self.method, left, right, self.form, self.max_shift, out=out)
        from ._warp_shuffle import run_prepared

        try:
            return run_prepared(cfg, left, right, out)
        except ValueError as exc:  # a bad ``out``
            raise InputError(f"method {self.method}: {exc}") from None

    # -------------------------------------------------------------------- many pairs

    def many(self, lefts, rights, out=None, stream=None):
        """Correlate ``N`` independent problems of this plan's shapes.

        ``lefts`` is ``(N,) + left_shape`` and ``rights`` ``(N,) + right_shape``; the result
        is ``(N,) + out_shape``, the same as ``N`` calls.  ``one_to_one``, ``one_to_many`` and
        ``n_to_mn`` problems run as one ``n_to_mn`` problem (one launch, the plan's kernel where
        it runs and suits the batch, else the planner's; a plan is made once per ``N``);
        ``n_to_m`` problems run one call each.  ``out`` and ``stream`` as a call.

        Examples
        --------
        >>> import numpy as np
        >>> plan = correlation_plan((8, 8), (8, 8), max_shift=1, device="cpu")
        >>> a = np.ones((4, 8, 8), np.float32)
        >>> float(plan.many(a, a)[2, 1, 1])
        64.0
        """
        n = self._batch_size(lefts, rights)
        shape = (n,) + self.out_shape
        if out is not None:
            self.check_out(out, shape)
        if self.form == "n_to_m":
            if out is None:
                out = self.allocate(shape, stream)
            for i in range(n):
                self(lefts[i], rights[i], out[i], stream)
            return out
        sub = self._many.get(n)
        if sub is None:
            if len(self._many) >= 16:  # a plan per batch size: keep a few
                self._many.clear()
            sub = self._many[n] = self._batch_plan(n)
        got = sub(lefts.reshape(sub.left_shape), rights.reshape(sub.right_shape),
                  None if out is None else out.reshape(sub.out_shape), stream)
        return out if out is not None else got.reshape(shape)

    def _batch_size(self, lefts, rights) -> int:
        ls, rs = tuple(getattr(lefts, "shape", ())), tuple(getattr(rights, "shape", ()))
        if ls[1:] != self.left_shape or rs[1:] != self.right_shape or ls[:1] != rs[:1]:
            raise InputError(f"many() takes lefts of shape (N,) + {self.left_shape} and rights "
                             f"of shape (N,) + {self.right_shape}, got {ls} and {rs}")
        if ls[0] < 1:
            raise InputError("many() needs at least one pair")
        return ls[0]

    def allocate(self, shape, stream=None):
        """An empty float32 array of ``shape`` on the plan's device (GPU: ``stream``'s pool)."""
        if self.device == "cpu":
            return np.empty(shape, np.float32)
        with stream if stream is not None else nullcontext():
            return self._cp.empty(shape, np.float32)

    def _batch_plan(self, n) -> "CorrelationPlan":
        """The ``n_to_mn`` plan of ``n`` problems: the same kernel where it can run them."""
        (h, w), (hr, wr) = self.layout.left_shape, self.layout.right_shape
        groups = n * self.layout.n_left  # left matrices in all
        shapes = ((groups, h, w), (groups, self.layout.m, hr, wr))
        auto = self._auto and not plan_fits(self.method, form_layout("n_to_mn", *shapes))
        method = "auto" if auto else self.method  # the few-pair kernel is not one for many
        try:
            return CorrelationPlan(*shapes, "n_to_mn", self.max_shift, self.dtype,
                                   self.device, method)
        except InputError:  # the kernel cannot run this batch: the planner's choice
            return CorrelationPlan(*shapes, "n_to_mn", self.max_shift, self.dtype,
                                   self.device, "auto")

    # -------------------------------------------------------------------- graphs

    def graph(self, left, right, out=None):
        """Record this plan's launch on ``left``, ``right`` and ``out`` in a CUDA graph.

        The graph is **bound to these buffers** (``out`` allocated if not given): copy new
        data into ``graph.left`` / ``graph.right`` on the replay's stream, replay, read
        ``graph.out``.  Returns a :class:`~xcorr_app.correlate._plan_graph.CorrelationGraph`
        with ``replay(stream=None)``.
        """
        from ._plan_graph import CorrelationGraph

        return CorrelationGraph(self, left, right, out)


def correlation_plan(left_shape, right_shape, form="one_to_one", max_shift=None,
                     dtype="float32", device="auto", method="auto") -> CorrelationPlan:
    """Make a reusable plan for correlating arrays of these shapes (cuFFT-style).

    Everything that depends only on the problem happens here, once: the checks, the choice
    of kernel, the kernel's compilation and configuration and the packing of its arguments.
    A call of the plan checks only shapes, dtype, array type, contiguity and device, and
    launches: a few microseconds of host time on the smallest problems, where a
    :func:`~xcorr_app.cross_correlate` call spends more on its checks and lookups.

    Parameters
    ----------
    left_shape, right_shape : tuple of int
        The inputs' shapes, as ``form`` requires (:mod:`xcorr_app.correlate._forms`).
    form : {"one_to_one", "one_to_many", "n_to_mn", "n_to_m"}
    max_shift : int or (int, int), optional
        As :func:`xcorr_app.cross_correlate` (default every overlapping shift).
    dtype : dtype, default float32
        The inputs' dtype (a real number type); float32 is read as it is, others are
        converted per call.
    device : {"auto", "gpu", "cpu"}
        Where the plan runs: the current CUDA device (CuPy arrays in and out) or the CPU
        (NumPy arrays in and out).
    method : str or Plan
        ``"auto"`` (the planner's choice, made now) or a plan as
        :func:`~xcorr_app.cross_correlate` takes.

    Returns
    -------
    CorrelationPlan
        ``plan(left, right, out=None, stream=None)`` correlates one problem;
        ``plan.many(lefts, rights)`` N of them; ``plan.graph(left, right)`` records a CUDA
        graph.  See its Notes for threads and streams.

    Raises
    ------
    xcorr_app.errors.InputError
        For shapes that do not fit ``form``, a bad ``max_shift``, ``dtype``, ``device`` or
        ``method``, or a kernel that cannot run the problem.

    Examples
    --------
    >>> import numpy as np
    >>> plan = correlation_plan((16, 16), (8, 16, 16), "one_to_many", max_shift=3,
    ...                         device="cpu")
    >>> plan.out_shape
    (8, 7, 7)
    >>> import cupy as cp  # doctest: +SKIP
    >>> plan = correlation_plan((16, 16), (16, 16))  # doctest: +SKIP
    >>> a, b = cp.random.rand(2, 16, 16, dtype=cp.float32)  # doctest: +SKIP
    >>> out = cp.empty(plan.out_shape, cp.float32)  # doctest: +SKIP
    >>> stream = cp.cuda.Stream(non_blocking=True)  # doctest: +SKIP
    >>> plan(a, b, out, stream=stream)  # doctest: +SKIP
    """
    return CorrelationPlan(left_shape, right_shape, form, max_shift, dtype, device, method)
