"""The one chunk loop: a stack streamed chunk by chunk through the current device or several
GPUs.

:class:`DeviceChunks` is the loop on one device: a reader thread decodes chunks ahead into a
ring of (pinned) host buffers (:class:`~xcorr_app.streaming.ChunkPrefetcher`); on the GPU each
chunk is copied to the device on one of two CUDA streams and handed out inside that stream's
context, so the copy of one chunk, the kernels of another and the reading of a third overlap.
The alignment pipeline consumes it directly (it keeps its results on the device, one chunk
behind, and carries state from chunk to chunk).  :func:`map_chunks` is the loop for a
function of one chunk: on the current device through :class:`DeviceChunks`, or with the
chunks handed to several GPUs in turn; results come back to the host, in frame order.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.io import ArraySource
>>> stack = np.arange(5 * 2 * 2, dtype=np.float32).reshape(5, 2, 2)
>>> [(a, r.tolist()) for a, r in map_chunks(lambda: ArraySource(stack), 2,
...                                         lambda a, f: f.sum(axis=(1, 2)))]
[(0, [6.0, 22.0]), (2, [38.0, 54.0]), (4, [70.0])]
"""

from __future__ import annotations

import contextlib
import queue
import threading

import numpy as np

from .. import backend
from ..errors import InputError
from ._gpus import parse_gpus
from ._into_out import Downloads, FaultAhead, join_threads, out_view
from ._memory_budget import READ_AHEAD
from ._prefetch import ChunkPrefetcher
from ._ranges import chunk_bounds, piece_bounds
from ._registered import RegisteredFile

#: threads copying one chunk (one piece on the GPU) into its buffer from a source several threads
#: may read (a memory map, a file's stored bytes by pread); they wait in the read call, so more
#: than the GPU needs costs little (docs/performance.md, several GPUs)
COPY_THREADS = 8
#: on the GPU a chunk is read and copied to the device in pieces of at most this many bytes
#: (at least a frame), so the page-locked ring is small: page-locking a ring of whole chunks
#: was on a one-shot run's path (docs/how-align-works.md, measurements)
PIECE_BYTES = 64 * 2**20
#: pieces read ahead on the GPU (the ring holds one more): enough that the reads keep ahead of a
#: GPU measuring a large stack from the page cache (docs/performance.md, several GPUs)
PIECES_AHEAD = 6
#: the first piece at most this many bytes (at least a frame): it is read into ordinary memory
#: while the ring is page-locked, and such a copy blocks the run before any work is queued
#: (docs/how-align-works.md, measurements)
FIRST_PIECE_BYTES = 4 * 2**20


_STREAMS = threading.local()


def chunk_streams(xp):
    """The two CUDA streams of this thread's chunk loops on the current device, made once:
    CuPy's memory pool reuses a freed block only on the stream that freed it, so loops on
    fresh streams allocate their working set anew every pass (from the driver)."""
    per_device = getattr(_STREAMS, "streams", None)
    if per_device is None:
        per_device = _STREAMS.streams = {}
    key = xp.cuda.Device().id
    if key not in per_device:
        per_device[key] = [xp.cuda.Stream(non_blocking=True) for _ in range(2)]
    return per_device[key]


@contextlib.contextmanager
def caller_ordered_streams(xp):
    """:func:`chunk_streams`, starting after the work queued on the caller's stream (it may
    have made what the chunks read), and the caller's stream waiting for theirs at the end
    (what the consumer queued there, results written into its arrays, a CuPy ``out``, comes
    before the caller's next work)."""
    caller, streams = xp.cuda.get_current_stream(), chunk_streams(xp)
    ready = caller.record()
    for s in streams:
        s.wait_event(ready)
    try:
        yield streams
    finally:
        for s in streams:
            caller.wait_event(s.record())


class DeviceChunks:
    """Iterate over ``(start, frames on xp's device)``; a reader thread starts reading at once
    (while the caller prepares), and :meth:`close` stops it.

    On the GPU the chunks alternate between two CUDA streams: a file that allows it is copied
    to the device straight from its cached pages (:class:`RegisteredFile`; into the rows of
    the stack kept on the GPU, where one is); otherwise each
    chunk is read in pieces of at most :data:`PIECE_BYTES` into a small ring of pinned
    buffers, each piece copied to the chunk's device array as it comes.  The chunk is yielded
    inside its stream's context, so the consumer's kernels for it queue on that stream while
    the next chunk is read and copied.  On the CPU (``xp`` NumPy) a chunk read from a file is
    a view of a reused buffer, valid until the consumer asks for the next.
    Frames already on the GPU are handed out as views, on the caller's stream, or with
    ``streams`` on the two streams in turn (:meth:`_on_streams`).
    """

    def __init__(self, src, chunk_frames, xp, streams=False):
        self.src, self.chunk_frames, self.xp = src, chunk_frames, xp
        self._streams = streams
        stack = getattr(src, "stack", None)
        self._direct = stack is not None and (xp is np or backend.is_cupy_array(stack))
        # a stack being kept on the GPU (streaming/_stash.py): the chunks uploaded into it
        self._stash = getattr(src, "stash", None) if xp is not np and not self._direct else None
        self._prefetch = None
        # a file's frames copied straight out of its cached pages where it allows, into the
        # stash where one is kept
        self._mapped = RegisteredFile.open(src) if xp is not np and not self._direct else None
        self._copied = []  # (the last copy out of the mapped file on each stream)
        if not self._direct and self._mapped is None:
            if xp is np:
                self._prefetch = ChunkPrefetcher(src, chunk_frames, READ_AHEAD).start()
            else:
                frame_bytes = int(np.prod(getattr(src, "item_shape", src.frame_shape))) \
                    * np.dtype(src.dtype).itemsize
                piece = max(1, min(int(chunk_frames), PIECE_BYTES // max(1, frame_bytes)))
                first = max(1, min(piece, FIRST_PIECE_BYTES // max(1, frame_bytes)))
                self._prefetch = ChunkPrefetcher(
                    src, piece, PIECES_AHEAD, pinned=True, copy_threads=COPY_THREADS,
                    bounds=piece_bounds(src.n_frames, chunk_frames, piece, first)).start()
        self._gen = self._chunks()

    def _chunks(self):
        xp = self.xp
        if self._direct and xp is not np and self._streams:
            yield from self._on_streams(xp)
            return
        if self._direct:
            for start, stop in chunk_bounds(0, self.src.n_frames, self.chunk_frames):
                chunk = self.src.stack[start:stop]
                yield start, (np.asarray(chunk) if xp is np else chunk)
            return
        if self._mapped is not None:
            yield from self._from_mapped(xp)
            return
        chunks = self._prefetch
        if xp is np:
            for start, host, slot in chunks:
                yield start, host  # the consumer converts it before asking for the next
                chunks.release(slot)
            return
        pieces = iter(chunks)
        stash = self._stash
        bounds = chunk_bounds(0, self.src.n_frames, self.chunk_frames)
        with caller_ordered_streams(xp) as streams:
            for k, (start, stop) in enumerate(bounds):
                stream = streams[k % 2]
                with stream:
                    frames = None if stash is None else stash.rows(start, stop)
                    at = start
                    while at < stop:  # the chunk's pieces, each copied as it is read
                        item = next(pieces, None)
                        if item is None or item[0] != at:
                            raise RuntimeError(f"the reader gave {item and item[0]} for "
                                               f"frame {at}")
                        _, host, slot = item
                        if frames is None:
                            frames = xp.empty((stop - start, *host.shape[1:]), host.dtype)
                        frames[at - start:at - start + len(host)].set(host, stream=stream)
                        chunks.release(slot, stream.record())
                        at += len(host)
                    yield start, frames
            if stash is not None:  # every chunk uploaded: the stash holds them once copied
                for s in streams:
                    s.synchronize()
                stash.mark(0, self.src.n_frames)

    def _on_streams(self, xp):
        """Frames already on the GPU (a CuPy stack, or one kept there) with ``streams``: the
        chunks handed out on two CUDA streams in turn, as uploaded ones are, so one chunk's
        copies to the host (``map_chunks(out=)``) overlap the next one's kernels instead of
        queueing behind them on one stream (without copies to overlap, the caller's stream:
        two were no faster).  The
        streams are ordered after the caller's as :func:`caller_ordered_streams` says."""
        with caller_ordered_streams(xp) as streams:
            for k, (start, stop) in enumerate(chunk_bounds(0, self.src.n_frames,
                                                           self.chunk_frames)):
                with streams[k % 2]:
                    yield start, self.src.stack[start:stop]

    def _from_mapped(self, xp):
        """The chunks copied from the registered file (:class:`RegisteredFile`) on the two
        streams in turn, each handed out inside its stream's context.  The next chunk's copy
        is queued before a chunk is handed out, so it overlaps the consumer's work on it (the
        device holds two chunks' uploads, as the memory plans count), and the pages of the
        chunk after that are registered meanwhile, in a thread; a run of pages is unregistered
        once every chunk it holds is copied (checked two chunks on), by that thread.  Where the
        stack is kept on the GPU the chunks are copied into its rows, marked as holding their
        frames once every chunk has been copied (a loop left early marks none)."""
        mapped, bounds = self._mapped, chunk_bounds(0, self.src.n_frames, self.chunk_frames)
        stash = self._stash if self._stash is not None and self._stash.base.dtype == \
            mapped.array.dtype and self._stash.base.shape[1:] == mapped.array.shape[1:] else None
        with caller_ordered_streams(xp) as streams:
            self._copied = [None] * len(streams)

            def upload(k):
                start, stop = bounds[k]
                stream, earlier = streams[k % 2], self._copied[k % 2]
                if earlier is not None:  # (chunk k - 2's copy: the pages before chunk k - 1)
                    earlier.synchronize()
                with stream:  # (its pool block freed back to the stream that reads it)
                    frames = xp.empty(mapped.array[start:stop].shape, mapped.array.dtype) \
                        if stash is None else stash.rows(start, stop)
                mapped.upload(frames, start, stop, stream)
                self._copied[k % 2] = stream.record()
                if k + 1 < len(bounds):  # (the chunk after: registered while this one works)
                    mapped.pin_ahead(bounds[k + 1][1])
                if earlier is not None:  # (after that pin: the next upload waits for it alone)
                    mapped.release_ahead(bounds[k - 1][0])
                return frames

            ahead = upload(0) if bounds else None
            for k, (start, _) in enumerate(bounds):
                frames, ahead = ahead, (upload(k + 1) if k + 1 < len(bounds) else None)
                with streams[k % 2]:
                    yield start, frames
                del frames
            if stash is not None:  # every chunk copied in: the stash holds them
                for s in streams:
                    s.synchronize()
                stash.mark(0, self.src.n_frames)

    def __iter__(self):
        return self._gen

    def close(self):
        try:
            self._gen.close()
            if self._prefetch is not None:
                self._prefetch.close()
        finally:
            if self._mapped is not None:
                mapped, self._mapped = self._mapped, None
                try:
                    for event in self._copied:  # (the file's pages are read until these end)
                        if event is not None:
                            event.synchronize()
                finally:
                    mapped.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def map_chunks(open_src, chunk_frames, fn, *, gpus=None, xp=np, depth=2, out=None):
    """Yield ``(start, fn(start, frames))`` for every chunk of a frame source, in frame order,
    the results as NumPy arrays.

    Parameters
    ----------
    open_src : callable() -> frame source
        Opens the input: a context manager with ``n_frames``, ``frame_shape``, ``dtype`` and
        ``read(start, stop, out=None)`` (each GPU's thread opens its own).
    chunk_frames : int
        Frames per chunk (the last may be shorter).
    fn : callable(int, array (n, ...) of the input's dtype) -> array
        The work on the chunk of frames ``start:start + n``, given on the device that computes
        it; its result is copied to the host (in the GPU's thread with ``gpus``).  It must not
        keep ``frames`` (on the CPU a reused read buffer).
    gpus : sequence of int or str, optional
        Share the chunks out over these GPUs (:func:`parse_gpus`): chunk ``j`` runs on GPU
        ``gpus[j % len(gpus)]``.  Without it the chunks run on the current device: ``xp``.
    xp : module
        ``numpy`` (the CPU, default) or ``cupy`` (the current GPU, the chunks read ahead and
        copied on two CUDA streams, :class:`DeviceChunks`); only without ``gpus``.
    depth : int
        Results each GPU may hold ahead of the consumer (with ``gpus``).
    out : ndarray, optional
        A C-contiguous NumPy array for all the results (one row per frame): each chunk's result
        is written into ``out[start:start + n]`` (from the GPU straight into it: no array
        allocated per chunk, no copy by the caller) and that view is yielded.  A result that
        does not fit its rows is an :class:`~xcorr_app.errors.InputError`.
    """
    if out is not None and (not isinstance(out, np.ndarray) or not out.flags.c_contiguous
                            or not out.flags.writeable):
        raise InputError("out must be a writeable C-contiguous NumPy array")
    if gpus is None:
        yield from _on_this_device(open_src, chunk_frames, fn, xp, out)
    else:
        yield from _on_gpus(open_src, parse_gpus(gpus), chunk_frames, fn, depth, out)


def _to_host(result, out, start):
    """The chunk's ``result`` (NumPy or CuPy) as NumPy: a copy, or written into
    ``out[start:start + len(result)]`` (the view returned; the result cast to ``out``'s type
    where NumPy's ``same_kind`` rule allows)."""
    if out is None:
        return backend.to_numpy(result)
    view = out_view(result, out, start)
    if backend.is_cupy_array(result):  # from the device straight into out (a strided result
        # is made contiguous on the device first)
        result.astype(view.dtype, copy=False).get(out=view)
    else:
        np.copyto(view, result, casting="same_kind")
    return view


def _on_this_device(open_src, chunk_frames, fn, xp, out=None):
    with open_src() as src, DeviceChunks(src, chunk_frames, xp, streams=out is not None) \
            as chunks, \
            FaultAhead(out, chunk_bounds(0, src.n_frames, chunk_frames)) as faults, \
            Downloads(xp is not np and out is not None) as downloads:
        for k, (start, frames) in enumerate(chunks):
            result = fn(start, frames)
            if out is None and xp is np and isinstance(result, np.ndarray) \
                    and np.may_share_memory(result, frames):
                result = result.copy()  # the read buffer is reused for a later chunk
            faults.wait(k)
            if downloads.on and backend.is_cupy_array(result):
                yield from downloads.add(start, result, out_view(result, out, start))
            else:
                yield from downloads.done()
                yield start, _to_host(result, out, start)
        yield from downloads.done()


def _on_gpus(open_src, ids, chunk_frames, fn, depth, out=None):
    """:func:`map_chunks` with ``gpus``: chunk ``j`` on GPU ``ids[j % len(ids)]``, each GPU's
    thread at most ``depth`` results ahead of the consumer.  The consumer (the main thread)
    and the GPUs' threads share only :class:`queue.SimpleQueue` objects (results one way,
    credits for ``depth`` more the other) and an Event: a Ctrl-C between any two lines of the
    loop or its clean-up leaves no lock of the standard library half changed, so the threads
    always see ``stop`` and end (``tests/streaming/test_chunks.py``)."""
    import cupy

    with open_src() as src:
        n = src.n_frames
    bounds = chunk_bounds(0, n, chunk_frames)
    ids = ids[:max(1, len(bounds))]
    results = [queue.SimpleQueue() for _ in ids]
    credits = [queue.SimpleQueue() for _ in ids]
    for c in credits:
        for _ in range(max(1, depth)):
            c.put(None)
    stop = threading.Event()
    done = object()

    def work(k):
        try:
            with cupy.cuda.Device(ids[k]), open_src() as own:
                for j in range(k, len(bounds), len(ids)):
                    while not stop.is_set():  # room for one more result
                        try:
                            credits[k].get(timeout=0.1)
                            break
                        except queue.Empty:
                            pass
                    if stop.is_set():
                        return
                    a, b = bounds[j]
                    frames = cupy.asarray(own.read(a, b))
                    results[k].put((a, _to_host(fn(a, frames), out, a)))  # (disjoint rows)
        except BaseException as exc:  # handed to the consumer
            results[k].put((done, exc))

    threads = [threading.Thread(target=work, args=(k,), daemon=True,
                                name=f"xcorr-gpu{ids[k]}") for k in range(len(ids))]
    try:
        for t in threads:
            t.start()
        for j in range(len(bounds)):
            k = j % len(ids)
            a, result = results[k].get()
            if a is done:
                raise result
            credits[k].put(None)
            yield a, result
    finally:
        stop.set()
        for c in credits:  # (a thread waiting for room wakes at once)
            c.put(None)
        join_threads(threads)
