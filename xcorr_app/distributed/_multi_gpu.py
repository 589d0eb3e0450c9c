"""Several GPUs of one host without a cluster: ``--gpus 0,1,...``.

One thread per GPU, each with its own reader of the input (file handle, read-ahead thread,
pinned buffers) and its own CUDA streams, so that the reads, copies and kernels of the GPUs
overlap.  :func:`align_on_gpus` gives each GPU one contiguous range of frames; the reference is
prepared and the correlation plan chosen once, on the first GPU, and copied to the others, so
every frame is measured exactly as a run on one GPU measures it.  :func:`map_chunks` hands the
chunks of a stack to the GPUs in turn and yields the results in frame order (filtering,
writing the aligned stack).

Examples
--------
>>> frame_ranges(10, 3)
[(0, 3), (3, 6), (6, 10)]
>>> frame_ranges(2, 4)
[(0, 1), (1, 2)]
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from .. import backend
from ..errors import XcorrError


def parse_gpus(spec) -> tuple[int, ...]:
    """GPU ids from ``"0,1"``, ``"all"`` or a sequence of ints, checked against this host."""
    usable, reason = backend._probe_gpu()
    if not usable:
        raise XcorrError(f"--gpus needs CUDA GPUs, but none is usable here ({reason})")
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    if isinstance(spec, str):
        text = spec.strip()
        if text == "all":
            return tuple(range(count))
        try:
            ids = [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise XcorrError(f"--gpus {spec!r}: give GPU numbers separated by commas, e.g. 0,1, "
                             "or 'all'") from None
    else:
        ids = [int(t) for t in spec]
    if not ids:
        raise XcorrError("--gpus: name at least one GPU, e.g. 0,1, or 'all'")
    if len(set(ids)) != len(ids):
        raise XcorrError(f"--gpus {spec!r} names a GPU twice")
    bad = [i for i in ids if not 0 <= i < count]
    if bad:
        raise XcorrError(f"--gpus: GPU {bad[0]} does not exist; this host has {count} "
                         f"(0 to {count - 1})")
    return tuple(ids)


def frame_ranges(n_frames: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``0:n_frames`` whose sizes differ by at most one
    (fewer when there are fewer frames)."""
    parts = max(1, min(int(parts), int(n_frames)))
    bounds = [n_frames * k // parts for k in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


class _Cancelled(Exception):
    """Another GPU's work failed: stop this one."""


_EXECUTORS: dict = {}
_EXECUTORS_LOCK = threading.Lock()


def _executor(device_id):
    """The one long-lived worker thread of GPU ``device_id``: CuPy keeps cuFFT plans per thread
    and device, so a thread that stays keeps them from one run to the next."""
    with _EXECUTORS_LOCK:
        ex = _EXECUTORS.get(device_id)
        if ex is None:
            ex = _EXECUTORS[device_id] = ThreadPoolExecutor(
                1, thread_name_prefix=f"xcorr-gpu{device_id}")
        return ex


def _run_all(ids, work, meanwhile=None, on_abort=None):
    """Run ``work(k, stop_event)`` for every GPU ``ids[k]`` on its worker thread (and
    ``meanwhile()`` in this one, ``on_abort()`` if that fails or is interrupted); re-raise the
    first failure in GPU order (not a cancellation caused by it)."""
    stop = threading.Event()

    def guarded(k):
        import cupy

        try:
            with cupy.cuda.Device(ids[k]):
                return work(k, stop)
        except BaseException:
            stop.set()
            raise

    futures = []
    try:
        futures += [_executor(ids[k]).submit(guarded, k) for k in range(len(ids))]
        if meanwhile is not None:
            meanwhile()
        concurrent.futures.wait(futures)
    except BaseException:  # e.g. Ctrl-C: the GPUs stop after their chunk in progress
        stop.set()
        if on_abort is not None:
            on_abort()
        while True:  # a second Ctrl-C must not leave while the GPUs still read the input
            try:
                concurrent.futures.wait(futures)
                break
            except KeyboardInterrupt:
                continue
        raise
    errors = [f.exception() for f in futures]
    real = [e for e in errors if e is not None and not isinstance(e, _Cancelled)]
    if real:
        raise real[0]
    return [f.result() for f in futures]


def align_on_gpus(opts, stack_or_path, gpus, *, chunk_frames=64, budget=None, progress=None):
    """:func:`xcorr_app.align` with the frames shared out over ``gpus``; ``budget`` (bytes) is
    split evenly between them.  The GPUs start reading their frames while the first one
    prepares the reference."""
    import cupy

    from ..alignment._pipeline import (_device_free_bytes, check_frame_shape, measure_frames,
                              prepared_reference, result_from_table, shared_plan, search_range)
    from ..alignment._memory_budget import chunk_frames_for
    from ..io._reader import open_source

    ids = parse_gpus(gpus)
    if backend.is_cupy_array(stack_or_path):
        raise XcorrError("--gpus shares out frames read from a file or a NumPy stack; this "
                         "CuPy stack is already on one GPU")
    lock = threading.Lock()
    share = None if budget is None else max(1, budget // len(ids))

    def chunk_for(src):
        return chunk_frames_for(src.frame_shape, src.dtype.itemsize,
                                opts.surface_shape(src.frame_shape), budget=share,
                                limit=chunk_frames, device_free=_device_free_bytes(cupy))

    with open_source(stack_or_path, opts.channel) as src:
        check_frame_shape(src.frame_shape)
        n = src.n_frames
        ranges = frame_ranges(n, len(ids))
        ids = ids[:len(ranges)]
        with cupy.cuda.Device(ids[0]):
            chunk = chunk_for(src)
        setup = Future()  # (reference on the host, plan), made by this thread on GPU ids[0]

        def prepare():
            try:
                with cupy.cuda.Device(ids[0]):
                    ref = prepared_reference(opts, src, cupy, chunk)
                    plan = shared_plan(opts, cupy, src.frame_shape, min(chunk, n), ref)
                    ref = None if ref is None else tuple(cupy.asnumpy(a) for a in ref)
                setup.set_result((ref, plan))
            except BaseException as exc:
                setup.set_exception(exc)
                raise

        def work(k, stop):
            def tick(done):
                if stop.is_set():
                    raise _Cancelled
                if progress is not None:
                    with lock:
                        progress(done)

            # a memory-mapped file is shared (reads are copies out of one map); others are
            # opened again, one reader per GPU
            own = contextlib.nullcontext(src) if getattr(src, "concurrent_reads", False) \
                else open_source(stack_or_path, opts.channel)
            with own as frames:
                return measure_frames(opts, frames, cupy, chunk_for(frames), setup,
                                      start=ranges[k][0], stop=ranges[k][1], progress=tick)

        def unblock():  # workers waiting for the reference must not wait for ever
            if not setup.done():
                setup.set_exception(_Cancelled())

        parts = _run_all(ids, work, prepare, unblock)
        shape = src.frame_shape
        sources = [src.source_name(i) for i in range(n)]
        notes = list(src.notes)
    table = np.concatenate([t for t, _ in parts])
    settings = {"search_range": list(search_range(shape, opts.max_shift)), "device": "gpu",
                "gpus": list(ids), "chunk_frames": chunk, "max_memory": budget, "notes": notes}
    return result_from_table(opts, table, sources, settings, parts[0][1], stack_or_path)


def map_chunks(open_src, gpus, chunk_frames, fn, depth=2):
    """Yield ``(start, fn(start, frames on the GPU))`` for every chunk of a source, in order,
    with chunk ``j`` computed on GPU ``gpus[j % len(gpus)]``.

    Parameters
    ----------
    open_src : callable() -> frame source
        Opens the input (each GPU's thread opens its own).
    fn : callable(int, cupy.ndarray (n, H, W) of the input's dtype) -> array
        The work on the chunk of frames ``start:start + n``; its result is copied to the host
        in the GPU's thread.
    depth : int
        Results each GPU may hold ahead of the consumer.
    """
    import cupy

    ids = parse_gpus(gpus)
    with open_src() as src:
        n = src.n_frames
    starts = list(range(0, n, chunk_frames))
    ids = ids[:max(1, len(starts))]
    queues = [queue.Queue(maxsize=depth) for _ in ids]
    stop = threading.Event()
    done = object()

    def work(k):
        try:
            with cupy.cuda.Device(ids[k]), open_src() as own:
                for j in range(k, len(starts), len(ids)):
                    if stop.is_set():
                        return
                    a = starts[j]
                    frames = cupy.asarray(own.read(a, min(a + chunk_frames, n)))
                    out = backend.to_numpy(fn(a, frames))
                    while not stop.is_set():
                        try:
                            queues[k].put((a, out), timeout=0.1)
                            break
                        except queue.Full:
                            pass
        except BaseException as exc:  # handed to the consumer
            queues[k].put((done, exc))

    threads = [threading.Thread(target=work, args=(k,), daemon=True,
                                name=f"xcorr-gpu{ids[k]}") for k in range(len(ids))]
    for t in threads:
        t.start()
    try:
        for j in range(len(starts)):
            a, out = queues[j % len(ids)].get()
            if a is done:
                raise out
            yield a, out
    finally:
        stop.set()
        for q in queues:  # unblock producers waiting on a full queue
            while not q.empty():
                q.get_nowait()
        for t in threads:
            t.join()

