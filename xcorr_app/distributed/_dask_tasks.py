"""The tasks of a Dask run, as they run on a worker: open the task's frames (a path or a block),
pick the worker's device, and compute a chunk of the run at a time.

Examples
--------
>>> import numpy as np
>>> range_task(lambda src, xp, a, b, _: float(src.read(a, b).sum()),
...            (np.ones((4, 2, 2)), None, 4), 1, 3, "cpu")
8.0
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import numpy as np

from .. import backend
from .._cuda import own_stream
from ..io import OffsetFrames
from ..streaming import chunk_bounds

#: frames a filter, shift or channel task sends to its device at once
CHUNK_FRAMES = 16

#: set in the worker processes that :func:`local_client` starts on a plain LocalCluster: worker
#: ``k`` then uses GPU ``k mod count`` (dask-cuda's workers see their own GPU as device 0)
WORKER_GPU_ENV = "XCORR_WORKER_GPU_BY_NAME"


@contextlib.contextmanager
def _on_device(device, source=None):
    """``xp`` of the task's device; on a GPU worker, the current device is the worker's GPU, or
    the GPU that holds the task's CuPy block."""
    dev = backend.resolve_device(device)
    xp = backend.xp_for(dev)
    if xp is np:
        yield xp
        return
    block = None if source is None or isinstance(source[0], str) else source[0]
    gpu = block.device.id if backend.is_cupy_array(block) else _worker_gpu(xp)
    with xp.cuda.Device(gpu), own_stream():  # (a threaded worker's tasks share the GPU)
        yield xp


def _worker_gpu(cp) -> int:
    """GPU ``name mod count`` on a worker of :func:`local_client`'s LocalCluster; the current
    device anywhere else (dask-cuda workers, other clusters, no worker)."""
    if not os.environ.get(WORKER_GPU_ENV):
        return cp.cuda.Device().id
    try:
        from distributed import get_worker

        name = get_worker().name
    except (ImportError, ValueError):  # not in a worker
        return cp.cuda.Device().id
    count = cp.cuda.runtime.getDeviceCount()
    return int(name) % count if str(name).lstrip("-").isdigit() else cp.cuda.Device().id


class _Block:
    """Frames ``offset:offset + len(frames)`` of an ``n_frames`` stack held in memory (one
    block of a dask array, with the frame before it for ``reference="previous"``)."""

    def __init__(self, frames, offset, n_frames):
        self.frames, self.offset, self.n_frames = frames, int(offset), int(n_frames)
        self.first_frame = self.offset  # frames before it cannot be read (the look-back stops)
        self.frame_shape, self.dtype = tuple(frames.shape[1:]), np.dtype(frames.dtype)
        self.notes, self.paths = [], []
        # a CuPy block is used where it is (no copy through the host)
        self.stack = OffsetFrames(frames, self.offset) if backend.is_cupy_array(frames) else None

    def source_name(self, i):
        return "array"

    def read(self, start, stop, out=None):
        frames = self.frames[start - self.offset:stop - self.offset]
        if out is None:
            return frames
        out[...] = frames
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def channels_task(path, start, stop, bank, mix, device, chunk_frames=CHUNK_FRAMES):
    """Frames ``start:stop`` of every channel through a bank or a mix: (n, F, H, W)."""
    from ..alignment.rigid import check_filtered_range
    from ..filters import channel_filter
    from ..io import ChannelStack

    with _on_device(device) as xp, ChannelStack(path) as src:
        _, fn = channel_filter(bank, mix, src.n_channels)

        def part(a, b):
            frames = src.read(a, b)
            check_filtered_range(frames, _stack_name(("path", path)), a)
            return backend.to_numpy(fn(xp.asarray(frames).astype(xp.float32)))

        return _in_chunks(start, stop, chunk_frames, part)


def channels_block(block, bank, mix, device, block_info=None):
    """A block of an (N, C, H, W) dask array through a bank or a mix (``block_info``: dask's,
    where the block starts)."""
    from ..alignment.rigid import check_filtered_range
    from ..filters import channel_filter

    start = block_info[0]["array-location"][0][0] if block_info else 0
    check_filtered_range(block, "the stack", start)
    with _on_device(device, (block,)) as xp:
        _, fn = channel_filter(bank, mix, block.shape[1])
        out = fn(xp.asarray(block).astype(xp.float32))
        return out if backend.is_cupy_array(block) else backend.to_numpy(out)


def _stack_name(source) -> str:
    """What a task's errors call its stack: a path's file name, else the stack."""
    return Path(str(source[1])).name if isinstance(source[0], str) else "the stack"


def _open(source, start, xp=np):
    """The frame source of a task: a path (opened by the task) or ``(block, frame before,
    frames in all)``; a CuPy block stays on the GPU when the task runs there (``xp``)."""
    from ..io import open_source

    if isinstance(source[0], str):  # ("path", path, channel)
        return open_source(source[1], source[2])
    block, before, n = source
    bxp = np if xp is np else backend.array_module_of(block)
    block = backend.to_xp(block, bxp)
    if before is not None:
        return _Block(bxp.concatenate([backend.to_xp(before, bxp)[None], block]), start - 1, n)
    return _Block(block, start, n)


def _like_block(result, source):
    """A task's result: CuPy where its input block was CuPy, NumPy otherwise."""
    if not isinstance(source[0], str) and backend.is_cupy_array(source[0]):
        return result
    return backend.to_numpy(result)


#: what this worker keeps between the passes of runs (:func:`range_task`'s ``keep``):
#: ``{(run, start, stop): (the open source's context, the source as the passes read it)}``
_KEPT: dict = {}
#: the runs whose kept ranges were dropped: a task of theirs still running keeps nothing
_DROPPED: set = set()
_KEPT_LOCK = threading.Lock()


def range_task(fn, source, start, stop, device, keep=None):
    """An executor's unit of work on a worker: ``fn(src, xp, start, stop, None)`` with the
    task's frames opened on the worker's device (:meth:`DaskExecutor.map`).

    ``keep``: the run's id where its passes read a path's frames again; the worker then keeps
    the range's source open and, on a GPU where they fit, its frames on the device
    (:func:`~xcorr_app.streaming.keep_on_gpu`) for the run's later passes, which the executor
    sends to the same worker, until :func:`drop_kept`."""
    with _on_device(device, source) as xp:
        if keep is None or xp is np or not isinstance(source[0], str):
            with _open(source, start, xp) as src:
                return fn(src, xp, start, stop, None)
        with _KEPT_LOCK:
            kept = _KEPT.get((keep, start, stop))
        if kept is None:
            from ..streaming import StashedSource, keep_on_gpu

            context = contextlib.ExitStack()
            with context:
                src = context.enter_context(_open(source, start, xp))
                # (its pages read into page-locked buffers, not registered with CUDA: workers
                # registering theirs at once were slower, as several GPUs' readers are)
                kept = (context.pop_all(), StashedSource(src, keep_on_gpu(src, xp, None, start,
                                                                          stop),
                                                         registered=False))
            with _KEPT_LOCK:
                late = keep in _DROPPED
                if not late:
                    _KEPT[keep, start, stop] = kept
            if late:  # (its run ended, or failed, while this task opened the range)
                kept[0].close()
                with _open(source, start, xp) as src:
                    return fn(src, xp, start, stop, None)
        return fn(kept[1], xp, start, stop, None)


def drop_kept(run) -> int:
    """Close what this worker kept for ``run`` (:func:`range_task`): its sources, and its
    frames' device memory back to CuPy's pool; the number of ranges dropped."""
    with _KEPT_LOCK:
        _DROPPED.add(run)
        keys = [k for k in _KEPT if k[0] == run]
        dropped = [_KEPT.pop(k) for k in keys]
    for context, _ in dropped:
        context.close()
    return len(dropped)


def plan_task(opts, frame_shape, chunk_frames, device):
    """The run's correlation plan, chosen once on a worker's device for every task (``None``
    where the measuring loop decides by a fixed rule: the CPU, phase)."""
    from ..alignment import shared_plan

    with _on_device(device) as xp:
        return shared_plan(opts, xp, frame_shape, chunk_frames,
                           (xp.zeros(frame_shape, xp.float32),))


def _in_chunks(start, stop, chunk_frames, fn):
    """``fn(a, b)`` over ``start:stop`` a chunk at a time, joined along the frames: a task of
    many frames holds one chunk of work on the device at once."""
    parts = [fn(a, b) for a, b in chunk_bounds(start, stop, chunk_frames)]
    if len(parts) == 1:
        return parts[0]
    return backend.array_module_of(*parts).concatenate(parts)


def filter_task(source, start, stop, kernel, mode, cval, device, chunk_frames=CHUNK_FRAMES):
    from ..alignment.rigid import check_filtered_range
    from ..filters import parse_kernel_spec

    fn = parse_kernel_spec(kernel)
    with _on_device(device, source) as xp, _open(source, start, xp) as src:
        def part(a, b):
            frames = src.read(a, b)
            check_filtered_range(frames, _stack_name(source), a)  # (float32 out: no Inf made)
            return _like_block(fn(xp.asarray(frames), mode, cval), source).astype(
                np.float32, copy=False)

        return _in_chunks(start, stop, chunk_frames, part)


def shift_task(source, start, stop, shifts, fill, resample, box, device,
                chunk_frames=CHUNK_FRAMES):
    from ..alignment import shift_frames

    y0, y1, x0, x1 = box
    with _on_device(device, source) as xp, _open(source, start, xp) as src:
        def part(a, b):
            frames = xp.asarray(src.read(a, b)).astype(xp.float32)
            out = shift_frames(frames, xp.asarray(shifts[a:b]), fill=fill, method=resample)
            return _like_block(out[:, y0:y1, x0:x1], source)

        return _in_chunks(start, stop, chunk_frames, part)


def session_task(session) -> dict:
    """The one recording of ``session`` (:class:`~xcorr_app.alignment.Session`, its paths
    absolute) aligned and saved by this worker, on its device: its row (failed, not raised,
    where even its device cannot be used: the session's other recordings go on)."""
    import time

    t0 = time.perf_counter()
    try:
        with _on_device(session.opts.device):
            return session.align(0)
    except Exception as exc:  # noqa: BLE001 - (whatever it is: this recording's row)
        return session.failed(0, exc, time.perf_counter() - t0)
