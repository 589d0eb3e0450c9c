"""The tasks of a Dask run, as they run on a worker: open the task's frames (a path or a block),
pick the worker's device, and compute a chunk of the run at a time.

Examples
--------
>>> import numpy as np
>>> frame_sum((np.ones((4, 2, 2)), None, 4), 0, 3).tolist()
[[3.0, 3.0], [3.0, 3.0]]
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from .. import backend
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
    with xp.cuda.Device(gpu):
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
    from ..filters._banks import channel_filter
    from ..io import ChannelStack

    with _on_device(device) as xp, ChannelStack(path) as src:
        _, fn = channel_filter(bank, mix, src.n_channels)
        return _in_chunks(start, stop, chunk_frames, lambda a, b: backend.to_numpy(
            fn(xp.asarray(src.read(a, b)).astype(xp.float32))))


def channels_block(block, bank, mix, device):
    from ..filters._banks import channel_filter

    with _on_device(device, (block,)) as xp:
        _, fn = channel_filter(bank, mix, block.shape[1])
        out = fn(xp.asarray(block).astype(xp.float32))
        return out if backend.is_cupy_array(block) else backend.to_numpy(out)


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


def _chunk(opts, src, xp, chunk_frames, budget):
    """Frames per chunk on this worker: one frame checked against ``budget`` and the worker's
    free memory first (an :class:`InputError` saying what helps when it does not fit)."""
    from ..alignment._pipeline import Measurer
    from ..errors import InputError

    chunk, bands = Measurer.memory_plan(opts, src, xp, chunk_frames, budget)
    if bands is not None:
        h, w = src.frame_shape
        raise InputError(f"frames of {h}x{w} need a search in bands of rows on this worker "
                         "(their whole-frame correlation does not fit its memory), which Dask "
                         "runs do not do; run without --workers/--scheduler, or give the "
                         "workers more memory")
    return chunk


def frame_sum(source, start, stop, chunk_frames=16):
    """float64 sum of frames ``start:stop`` (a part of ``reference="mean"``), read a few frames
    at a time."""
    with _open(source, start) as src:
        acc = np.zeros(src.frame_shape, np.float64)
        for a, b in chunk_bounds(start, stop, chunk_frames):
            acc += np.asarray(src.read(a, b), np.float64).sum(axis=0)
        return acc


def mean_of_sums(sums, n):
    """The mean of per-task frame sums, added up in frame order."""
    acc = np.zeros_like(sums[0])
    for s in sums:  # in frame order, as the single-process pass adds them
        acc += s
    return acc / n


def reference_task(opts, source, image, device, chunk_frames, budget):
    """The prepared reference (host copies) and the run's plan, computed once."""
    from ..alignment._pipeline import prepared_reference, shared_plan

    with _on_device(device, source) as xp, _open(source, 0, xp) as src:
        chunk = _chunk(opts, src, xp, chunk_frames, budget)
        ref = prepared_reference(opts, src, xp, chunk, image=image)
        plan = shared_plan(opts, xp, src.frame_shape, min(chunk, src.n_frames), ref)
        return (None if ref is None else tuple(backend.to_numpy(a) for a in ref)), plan


def measure_task(opts, source, start, stop, reference, device, chunk_frames, budget):
    """Rows ``start:stop`` of the run's table."""
    from ..alignment._pipeline import measure_frames

    ref, plan = reference
    with _on_device(device, source) as xp, _open(source, start, xp) as src:
        table, plan = measure_frames(opts, src, xp, _chunk(opts, src, xp, chunk_frames, budget),
                                     ref, plan=plan, start=start, stop=stop)
        return table, str(plan) if plan is not None else ""


def aligned_sum_task(opts, source, start, stop, rigid, device, chunk_frames, budget):
    """``reference="refined"`` with patches: per chunk of frames ``start:stop``, the sum of its
    rigidly aligned frames and their count (host, frame order)."""
    from ..alignment._patch_pass import aligned_sums

    with _on_device(device, source) as xp, _open(source, start, xp) as src:
        return aligned_sums(src, xp, _chunk(opts, src, xp, chunk_frames, budget), rigid, start,
                            stop)


def patch_setup_task(opts, source, grid, image, previous, sums, device, chunk_frames, budget):
    """The :class:`~xcorr_app.alignment._patch_pass.PatchSetup` of a patch pass (host arrays),
    made once: against ``image`` (``None``: the reference as this task reads it); with
    ``reference="refined"`` the mean of the aligned frames (``sums``: ``fold_parts`` of
    :func:`aligned_sum_task`); after a pass with ``previous`` (its setup), the mean of the
    warped frames (``sums``: ``(2, H, W)`` total and coverage)."""
    from ..alignment._patch_pass import PatchSetup, next_image, refined_image
    from ..alignment._references import reference_frame

    with _on_device(device, source) as xp, _open(source, 0, xp) as src:
        chunk = _chunk(opts, src, xp, chunk_frames, budget)
        if previous is not None:  # the next template (as :func:`measure_field` makes it)
            image = next_image(xp, src.frame_shape, [sums], previous.image)
        elif sums is not None:
            image = refined_image(sums, src.frame_shape)
        elif image is None:
            image = reference_frame(opts.reference, src, xp, chunk, opts.channel)
        return PatchSetup.make(opts, src, xp, chunk, grid, image).on_host()


def patch_task(opts, source, start, stop, setup, rigid, accumulate, device, chunk_frames,
               budget):
    """Rows ``start:stop`` ``(n, P, 5)`` of a patch pass against ``setup``, and with
    ``accumulate`` the warped frames' sums per chunk (``(2, H, W)`` total and coverage, host,
    frame order) for the next template, else ``None``."""
    from ..alignment._patch_pass import measure_range

    parts = [] if accumulate else None

    def add(total, count):
        parts.append(np.stack([backend.to_numpy(total), backend.to_numpy(count)]))

    with _on_device(device, source) as xp, _open(source, start, xp) as src:
        rows = measure_range(opts, src, xp, _chunk(opts, src, xp, chunk_frames, budget), setup,
                             rigid, start, stop, add if accumulate else None)
        return rows, parts


def _in_chunks(start, stop, chunk_frames, fn):
    """``fn(a, b)`` over ``start:stop`` a chunk at a time, joined along the frames: a task of
    many frames holds one chunk of work on the device at once."""
    parts = [fn(a, b) for a, b in chunk_bounds(start, stop, chunk_frames)]
    if len(parts) == 1:
        return parts[0]
    return backend.array_module_of(*parts).concatenate(parts)


def filter_task(source, start, stop, kernel, mode, cval, device, chunk_frames=CHUNK_FRAMES):
    from ..filters._api import parse_kernel_spec

    fn = parse_kernel_spec(kernel)
    with _on_device(device, source) as xp, _open(source, start, xp) as src:
        return _in_chunks(start, stop, chunk_frames, lambda a, b: _like_block(
            fn(xp.asarray(src.read(a, b)), mode, cval), source).astype(np.float32, copy=False))


def shift_task(source, start, stop, shifts, fill, resample, box, device,
                chunk_frames=CHUNK_FRAMES):
    from ..alignment._warp import shift_frames

    y0, y1, x0, x1 = box
    with _on_device(device, source) as xp, _open(source, start, xp) as src:
        def part(a, b):
            frames = xp.asarray(src.read(a, b)).astype(xp.float32)
            out = shift_frames(frames, xp.asarray(shifts[a:b]), fill=fill, method=resample)
            return _like_block(out[:, y0:y1, x0:x1], source)

        return _in_chunks(start, stop, chunk_frames, part)


def read_frame(source, i):
    """Frame ``i`` of a task's source, as NumPy (a reference frame)."""
    with _open(source, i) as src:
        return np.asarray(src.read(i, i + 1)[0])
