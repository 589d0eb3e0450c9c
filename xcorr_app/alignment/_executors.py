"""Where the ranges of frames of a run are measured: in this process (:class:`InProcess`) or on
several GPUs of this host (:class:`OnGpus`); Dask's executor lives in
:mod:`xcorr_app.distributed`.  The pipeline (:func:`~._run.run_alignment`) is the same for
every one of them; an executor only says where work runs.

An executor offers:

- ``open(stack_or_path, opts)``: the input as the pipeline reads it (a context);
- ``correct_bidi(src, offset)``: the input as every later read takes it, its line offset
  removed; ``correct_static(src, pattern)``: as the passes read it, a pattern fixed on the
  sensor removed;
- ``start(opts, src, out)``: its device, chunk and plan once the options are resolved;
- ``map(fn, progress, before=False, upto=None)``: ``fn(source, xp, start, stop, progress)``
  over its ranges of frames, the results in frame order (``before``: a range needs the frames
  just before it; ``upto``: only the ranges that start below it);
- ``xp``: the array module of the steps that read a few frames (the pipeline's device),
  ``portable(a)``: an array of it as another range's device can take it;
- ``field(opts, rigid, out)``, ``fill_out(res, out)``: the patch pass and the aligned stack.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import numpy as np

from .. import backend
from ..errors import InputError
from ..io import check_planes, open_source
from ..streaming import (Cancelled, DEFAULT_CHUNK, StashedSource, auto_chunk_frames,
                         frame_ranges, keep_on_gpu, parse_gpus, run_on_gpus)

__all__ = ["Executor", "InProcess", "OnGpus"]


class Executor:
    """The common part: the input opened once by the pipeline, and the run's plan."""

    name = "process"
    remote = False  # ranges run on other devices than ``xp``'s
    local = True  # ranges run in this process: their results may be on its devices
    fills_out_in_field = False  # the last patch pass warps ``out`` as it measures

    def __init__(self):
        self.stack = self.src = None
        self.xp, self.device = np, "cpu"
        self.chunk = self.fixed_chunk = None
        self.budget_per_range = None
        self.plan = self.prepared = None
        self.bidi = 0.0  # the line offset removed from every frame read (rigid.BidiSource)

    @contextlib.contextmanager
    def open(self, stack_or_path, opts):
        if opts.channel is not None and not isinstance(stack_or_path, (str, Path)):
            raise InputError(f"channel {opts.channel} picks a channel of a multi-channel file; "
                             "an array in memory is one channel: pass stack[:, channel]")
        self.stack, self.opts = stack_or_path, opts
        with open_source(stack_or_path, opts.channel) as src:
            check_planes(src)  # (a T x Z TIFF's planes are not frames to register)
            self.src = src
            yield src

    def check_out(self, out, shape):
        """``out`` where this executor cannot fill it: refused (here: every ``out`` goes)."""

    def correct_bidi(self, src, offset):
        """``src`` with the line offset ``offset`` of a bidirectional scan removed as it is
        read (:func:`~.rigid.bidi_source`; 0: as it is), the source of every later step."""
        from .rigid import bidi_source

        self.bidi = float(offset)
        self.src = bidi_source(src, offset)
        return self.src

    def correct_static(self, src, pattern):
        """``src`` read less ``pattern`` (:func:`~.rigid.static_source`), and so every range's
        source: what the passes, their templates and the quality report read (the aligned
        stack reads the frames as they are)."""
        from .rigid import static_source

        self.src = static_source(self.src, pattern)
        return static_source(src, pattern)

    def correct_despike(self, src):
        """``src`` despiked as it is read (:class:`~.rigid.DespikedSource`), and so every
        range's source: what the passes, their templates and the quality report read (the
        aligned stack reads the frames as they are)."""
        from .rigid import DespikedSource

        self.src = DespikedSource(self.src)
        return DespikedSource(src)

    def portable(self, a):
        return backend.to_numpy(a) if self.remote else a

    def out_in_report(self, out) -> bool:
        """Whether a rigid run's quality report may fill ``out`` as it reads the frames
        (:func:`~._quality.measure_quality`'s ``out``): it reads the very frames the output
        is made of (here: never)."""
        return False

    def settings(self) -> dict:
        return {"device": self.device, "chunk_frames": self.chunk,
                "max_memory": self.opts.max_memory, "executor": self.name}

    def finish(self):
        if self.prepared is not None:  # (their memory back to CuPy's pool)
            self.prepared.release()


class InProcess(Executor):
    """One range, every frame, on this process's device (``device`` auto: the GPU where it
    pays: :func:`~xcorr_app.backend.decide_device`, asked once)."""

    fills_out_in_field = True

    def start(self, opts, src, out):
        from .rigid import Measurer, shared_plan
        from ._prebuild import helper_stages, kernels_built
        from .rigid import PreparedFrames

        stack = self.stack
        on_gpu = backend.is_cupy_array(stack)

        def built():  # (asked only where device auto weighs a first run's compilations)
            from .._cuda import shipped_here

            return kernels_built(opts, src.frame_shape, src.dtype, helper_stages(shipped_here()))

        dev, note = backend.decide_device(
            opts.device, src.n_frames, src.frame_shape,
            *([stack] if not isinstance(stack, (str, Path)) else []), kernels_built=built)
        self.device_note = note
        self.device, self.xp = dev, backend.xp_for(dev)
        xp = self.xp
        chunk = opts.chunk_frames or auto_chunk_frames(src.frame_shape, dev)
        # the device's free memory asked once for the run's decisions, less what the stash
        # takes of it (cheap on an idle GPU, but a call waits behind queued work)
        free = backend.device_free_bytes(xp)
        self.chunk, self.plan = Measurer.memory_plan(opts, src, xp, chunk, opts.max_memory,
                                                     free)
        self.fixed_chunk = self.chunk
        # (not for despiked reads: each pass despikes what it reads, the stash held it raw)
        stash = keep_on_gpu(src, xp, free) if reads_again(opts, out) and dev == "gpu" \
            and not on_gpu and opts.despike != "on" else None
        self.src = StashedSource(src, stash)
        if opts.max_memory is None and (opts.patches is not None or opts.refined
                                        or opts.lucas_kanade == "on"):
            kept = 0 if stash is None else stash.base.nbytes
            self.prepared = PreparedFrames.for_run(opts, self.src, xp,
                                                   None if free is None else free - kept)
        if dev == "gpu" and self.plan is None:  # the plan from the shapes (the cost model)
            passes = 1 + (opts.refined or 0)
            self.plan = shared_plan(opts, xp, src.frame_shape, self.chunk,
                                    (xp.zeros(src.frame_shape, xp.float32),),
                                    n_frames=passes * src.n_frames)
            _prebuild_later_stages(opts, src, self.plan)

    def map(self, fn, progress, before=False, upto=None):
        return [fn(self.src, self.xp, 0, self.src.n_frames, progress)]

    def settings(self) -> dict:
        return {**super().settings(), "device_note": self.device_note}

    def field(self, opts, rigid, out, quality=None, progress=None):
        from .piecewise import measure_field

        src = self.src
        kept = src.stack if src.stash is not None and src.stash.complete else self.stack
        return measure_field(opts, kept, rigid, self.xp, self.chunk, out=out,
                             prepared=self.prepared, quality=quality, progress=progress)

    def out_in_report(self, out) -> bool:
        """A CuPy ``out`` of a CuPy stack read as it is (no line offset or static pattern
        taken from what the report reads: :meth:`fill_out` shifts these same frames)."""
        src = self.src
        return backend.is_cupy_array(out) and backend.is_cupy_array(self.stack) \
            and not self.bidi and isinstance(src, StashedSource) and src.stash is None \
            and backend.is_cupy_array(src.stack) and src.stack.shape == self.stack.shape \
            and src.stack.data.ptr == self.stack.data.ptr \
            and src.stack.strides == self.stack.strides and src.stack.dtype == self.stack.dtype

    def fill_out(self, res, out):
        from ._aligned_out import fill_out

        src = self.src
        if src.stash is not None and src.stash.complete:  # (read corrected already)
            fill_out(res, out, src.stack, self.device)
        elif self.bidi and src.stack is not None:  # a CuPy stack's corrected copy
            fill_out(res, out, src.stack, self.device)
        else:
            fill_out(res, out, self.stack, self.device, bidi=self.bidi)


def reads_again(opts, out) -> bool:
    """Whether a run's passes are certain to read the stack again (patches, ``out``,
    templates, the quality report): then the first pass keeps it on the GPU where it fits
    (those "auto" may add read it as before); not under a ``max_memory`` budget."""
    return opts.max_memory is None and (
        opts.patches is not None or out is not None or opts.refined
        or opts.model != "translation"
        or opts.lucas_kanade == "on" or opts.quality
        or (opts.boundary == "circular" and opts.lk_possible))


def _prebuild_later_stages(opts, src, plan):
    """The later stages' kernels built by helper processes while this one starts (none where
    the kernels ship built: :func:`~._prebuild.helper_stages`)."""
    from ._prebuild import helper_stages, prebuild

    import cupy

    from .._cuda import shipped_here

    prebuild(opts, src.frame_shape, src.dtype, plan, stages=helper_stages(shipped_here()),
             device=cupy.cuda.Device().id)


class OnGpus(Executor):
    """One contiguous range of frames per GPU of this host, each on a worker thread with its
    own reader (file handle, read-ahead, pinned buffers) and CUDA streams; the pipeline's own
    steps (reference, templates, the few frames' tests) run on the first GPU.  Where the run
    reads the stack again (:func:`reads_again`), each GPU keeps its range, where it fits,
    from the first pass on (as one GPU keeps the stack)."""

    name = "gpus"
    remote = True

    def __init__(self, gpus):
        super().__init__()
        self.spec = gpus
        self._lock = threading.Lock()
        self._stashes = {}  # range k -> its DeviceStash on GPU k, or None (does not fit)

    @contextlib.contextmanager
    def open(self, stack_or_path, opts):
        if backend.is_cupy_array(stack_or_path):
            raise InputError("gpus shares out frames read from a file or a NumPy stack; this "
                             "CuPy stack is already on one GPU")
        with contextlib.ExitStack() as self._context, \
                super().open(stack_or_path, opts) as src:
            yield src

    def start(self, opts, src, out):
        # (the input and its options checked first; without CuPy parse_gpus says what to
        # install, where the import would raise ModuleNotFoundError)
        self.ids = parse_gpus(self.spec)
        import cupy

        from .rigid import Measurer, shared_plan

        self._context.enter_context(cupy.cuda.Device(self.ids[0]))
        self.device, self.xp = "gpu", cupy
        self.ranges = frame_ranges(src.n_frames, len(self.ids))
        self.ids = self.ids[:len(self.ranges)]
        self.registered = len(self.ids) == 1
        budget = opts.max_memory
        self.budget_per_range = None if budget is None else max(1, budget // len(self.ids))
        chunk = opts.chunk_frames or DEFAULT_CHUNK
        self.keep = reads_again(opts, None)  # (its fill_out reads the file, not the ranges)
        self.chunk, bands = Measurer.memory_plan(opts, src, cupy, chunk, self.budget_per_range)
        self.plan = bands if bands is not None else shared_plan(
            opts, cupy, src.frame_shape, min(self.chunk, src.n_frames),
            (cupy.zeros(src.frame_shape, cupy.float32),))

    def map(self, fn, progress, before=False, upto=None):
        ranges = [r for r in self.ranges if upto is None or r[0] < upto]

        def work(k, stop):
            def tick(done):
                if stop.is_set():
                    raise Cancelled
                if progress is not None:
                    with self._lock:
                        progress(done)

            # a source several threads may read is shared (a memory map, stored bytes read by
            # pread); others are opened again, one reader per GPU
            own = contextlib.nullcontext(self.src) if getattr(self.src, "concurrent_reads",
                                                              False) \
                else open_source(self.stack, self.opts.channel)
            import cupy

            with own as frames:
                if k not in self._stashes:  # (range k is only ever on GPU k's thread)
                    self._stashes[k] = keep_on_gpu(frames, cupy, None, *self.ranges[k]) \
                        if self.keep else None
                # several GPUs' threads registering pages with CUDA at once (one process's
                # address space) were slower than their reads into page-locked buffers
                return fn(StashedSource(frames, self._stashes[k], registered=self.registered),
                          cupy, *ranges[k], tick)

        return run_on_gpus(self.ids[:len(ranges)], work)

    def finish(self):
        self._stashes.clear()  # (their memory back to each GPU's pool)
        super().finish()

    def settings(self) -> dict:
        return {**super().settings(), "gpus": list(self.ids)}

    def field(self, opts, rigid, out, quality=None, progress=None):
        from .piecewise import measure_field

        return measure_field(opts, self.stack, rigid, self.xp, self.chunk, executor=self,
                             quality=quality, progress=progress)

    def fill_out(self, res, out):
        from ._aligned_out import fill_out

        fill_out(res, out, self.stack, "gpu", self.ids)
