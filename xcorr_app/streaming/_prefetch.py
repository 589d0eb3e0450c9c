"""Reading a stack ahead of the computation: a reader thread fills reused host buffers.

:class:`ChunkPrefetcher` decodes chunks of a frame source (tifffile, memory maps) in a thread,
``depth`` chunks ahead of the consumer, into a fixed ring of ``depth + 1`` host buffers; with
``pinned=True`` the buffers are page-locked (``cupyx.empty_pinned``) so host-to-device copies
run asynchronously on a CUDA stream.  The consumer hands a buffer back with :meth:`release`,
optionally with a CUDA event after which the buffer is no longer read (the end of its copy to
the device); the reader waits for that event before it overwrites the buffer.  So at most
``depth + 1`` chunks are held on the host at once, whatever the stack's size.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.io import ArraySource
>>> src = ArraySource(np.arange(5 * 2 * 3).reshape(5, 2, 3))
>>> with ChunkPrefetcher(src, chunk_frames=2) as chunks:
...     starts = []
...     for start, frames, slot in chunks:
...         starts.append((start, len(frames), int(frames[0, 0, 0])))
...         chunks.release(slot)
>>> starts
[(0, 2, 0), (2, 2, 12), (4, 1, 24)]
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._ranges import chunk_bounds

_END = object()


def host_buffer(shape, dtype, pinned: bool) -> np.ndarray:
    """A host array, page-locked (for asynchronous copies to the GPU) when ``pinned``."""
    if pinned:  # what cupyx.empty_pinned does, without importing cupyx (about 0.6 s)
        import cupy

        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        mem = cupy.cuda.alloc_pinned_memory(max(1, count) * dtype.itemsize)
        return np.frombuffer(mem, dtype, count).reshape(shape)
    return np.empty(shape, dtype)


def copy_to_host_async(dst, src, stream=None):
    """``dst`` (page-locked NumPy, :func:`host_buffer`) from ``src`` (a contiguous CuPy array
    of as many bytes), queued on ``stream`` (default: the current one); the device does not
    wait."""
    import cupy

    if stream is None:
        stream = cupy.cuda.get_current_stream()
    rt = cupy.cuda.runtime
    rt.memcpyAsync(dst.ctypes.data, src.data.ptr, dst.nbytes, rt.memcpyDeviceToHost, stream.ptr)


class HostCopy:
    """A CuPy array's copy to page-locked host memory, queued on the current stream now
    (:func:`host_buffer`; the device does not wait): :meth:`result` waits for that copy alone
    and gives the NumPy array.  For results wanted at the end of a run (a copy made then waits
    for everything queued, and into pageable memory it is slower)."""

    def __init__(self, a):
        import cupy

        # (a transpose of a contiguous array copied as it lies, transposed back on the host:
        # made contiguous on the device it is a kernel CuPy compiles on a first run)
        self._transposed = a.ndim > 1 and not a.flags.c_contiguous and a.T.flags.c_contiguous
        a = a.T if self._transposed else cupy.ascontiguousarray(a)
        self._host = host_buffer(a.shape, a.dtype, pinned=True)
        stream = cupy.cuda.get_current_stream()
        copy_to_host_async(self._host, a, stream)
        self._done = stream.record()
        self._source = a  # (kept alive until the copy is done)

    def ready(self) -> bool:
        """Whether the copy has landed (:meth:`result` would not wait); never waits."""
        return self._done is None or self._done.done

    def result(self) -> np.ndarray:
        if self._done is not None:
            self._done.synchronize()
            self._done = self._source = None
        return self._host.T if self._transposed else self._host

    def __del__(self):
        # dropped before its result (a run ending in an error): the page-locked buffer goes
        # back to CuPy's pool, which does not wait for copies into it; wait for this one
        if getattr(self, "_done", None) is not None:
            try:
                self._done.synchronize()
            except Exception:  # noqa: BLE001 - (the device gone: nothing left to wait for)
                pass


def host_copies(arrays) -> list:
    """NumPy copies of ``arrays`` (CuPy ones: queued at once into page-locked memory,
    :class:`HostCopy`, then waited for: a pageable copy of each in turn was slower; NumPy
    ones: as they are)."""
    copies = [a if isinstance(a, np.ndarray) else HostCopy(a) for a in arrays]
    return [c if isinstance(c, np.ndarray) else c.result() for c in copies]


class ChunkPrefetcher:
    """Iterate over ``(start, frames, slot)`` chunks read ahead by a thread.

    Parameters
    ----------
    src : FrameSource, ArraySource or ChannelStack
        Anything with ``n_frames``, ``frame_shape``, ``dtype`` and ``read(start, stop, out=)``
        (and ``item_shape``, the shape of one frame as read, where it is not ``frame_shape``).
    chunk_frames : int
        Frames per chunk (the last chunk may be shorter); with ``bounds``, the most frames of
        one read (the buffers' size).
    depth : int
        Chunks read ahead of the one being consumed.
    pinned : bool
        Page-locked buffers (needs CuPy).
    copy_threads : int
        Threads copying one read where the source allows concurrent reads.
    bounds : list of (int, int), optional
        The ``(start, stop)`` frames of each read, in order (default: the chunks of
        ``chunk_frames``); e.g. :func:`~xcorr_app.streaming.piece_bounds`.

    ``frames`` is a view into a ring buffer: it stays valid until ``release(slot)``.  The
    consumer must release every chunk it received (or close the prefetcher).
    """

    def __init__(self, src, chunk_frames: int, depth: int = 2, pinned: bool = False,
                 copy_threads: int = 1, bounds=None):
        self.src = src
        self.chunk_frames = int(chunk_frames)
        self._bounds = chunk_bounds(0, src.n_frames, self.chunk_frames) if bounds is None \
            else [(int(a), int(b)) for a, b in bounds]
        if any(not 0 < b - a <= self.chunk_frames for a, b in self._bounds):
            raise ValueError(f"every read of bounds must hold 1 to {self.chunk_frames} frames")
        # one chunk copied by several threads, where the source allows concurrent reads (a
        # memory map: one thread copies out of the page cache at about 9 GB/s, two at 16)
        self._copy_threads = max(1, int(copy_threads)) \
            if getattr(src, "concurrent_reads", False) else 1
        n_chunks = len(self._bounds)
        n_buffers = max(1, min(depth + 1, n_chunks))
        self._n_chunks = n_chunks
        # what one frame of ``read`` is: (H, W), or (C, H, W) for a ChannelStack
        item_shape = getattr(src, "item_shape", src.frame_shape)
        self._shape = (min(self.chunk_frames, src.n_frames), *item_shape)
        self._pinned = pinned
        # allocated by the reader when first needed: page-locking takes the driver about
        # 0.5 s per GiB, which then overlaps the computation of the first chunks
        self._buffers = [None] * n_buffers
        self._plain = [None] * n_buffers  # a slot's ordinary buffer while it waits for its pin
        self._pins = {}  # {slot: future page-locked buffer}
        # the consumer's thread (where Ctrl-C is raised) and the reader share only SimpleQueues,
        # whose put and get are done or not done, and a flag (see io._background's
        # BackgroundWrites: a queue.Queue's wake-up could be lost, and a release's or close's
        # with it; an Event's lock could stay taken)
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for slot in range(n_buffers):
            self._free.put((slot, None))
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="xcorr-reader", daemon=True)
        self._started = False

    @property
    def held_bytes(self) -> int:
        """Host memory the ring of buffers holds once all are allocated."""
        return len(self._buffers) * int(np.prod(self._shape)) * np.dtype(self.src.dtype).itemsize

    def _read(self, start, stop, out, pool):
        if pool is None:
            return self.src.read(start, stop, out=out)
        k = self._copy_threads
        bounds = [start + (stop - start) * i // k for i in range(k + 1)]
        pieces = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        others = [pool.submit(self.src.read, a, b, out[a - start:b - start])
                  for a, b in pieces[1:]]
        a, b = pieces[0]
        self.src.read(a, b, out=out[a - start:b - start])  # this thread copies the first
        for f in others:
            f.result()
        return out

    def _run(self):
        pool = pins = None
        if self._copy_threads > 1:
            pool = ThreadPoolExecutor(self._copy_threads - 1, thread_name_prefix="xcorr-copy")
        try:
            for start, stop in self._bounds:
                slot, event = self._free.get()
                if self._stopping:
                    return
                if event is not None:
                    event.synchronize()  # its copy to the device has finished
                if pins is None:
                    pins = self._pins = self._allocate(slot)
                if slot in pins and pins[slot].done():
                    self._buffers[slot] = pins.pop(slot).result()
                if slot in pins or self._buffers[slot] is None:
                    # ordinary memory until the slot's page-locked buffer is made (its copy
                    # to the device is then synchronous) rather than wait for page-locking,
                    # which is slower than the reads
                    if self._plain[slot] is None:
                        self._plain[slot] = np.empty(self._shape, self.src.dtype)
                    buffer = self._plain[slot]
                else:
                    buffer, self._plain[slot] = self._buffers[slot], None
                frames = self._read(start, stop, buffer[:stop - start], pool)
                self._ready.put((start, frames, slot))
            self._ready.put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            self._ready.put(exc)
        finally:
            if pool is not None:
                pool.shutdown()

    def _allocate(self, first) -> dict:
        """``{slot: future buffer}``: the ring's buffers, allocated by a thread while the first
        chunks are read (page-locking is slow enough to delay a one-shot run's first result
        otherwise).  The reader takes a slot's buffer once its future is done, and reads
        into ordinary memory until then."""
        if not self._pinned:  # nothing to wait for
            return {}
        pinner = ThreadPoolExecutor(1, thread_name_prefix="xcorr-pin")
        # the first slot is filled again only when there are more chunks than buffers
        again = self._n_chunks > len(self._buffers)
        order = [k for k in range(len(self._buffers)) if k != first] + [first] * again
        futures = {k: pinner.submit(host_buffer, self._shape, self.src.dtype, True)
                   for k in order}
        pinner.shutdown(wait=False)  # the queued allocations still run; its thread then ends
        return futures

    def start(self) -> "ChunkPrefetcher":
        """Start reading now (otherwise: when first iterated)."""
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def __iter__(self):
        self.start()
        while True:
            item = self._ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def release(self, slot: int, event=None) -> None:
        """Give buffer ``slot`` back; with ``event``, only once that CUDA event has completed."""
        self._free.put((slot, event))

    def close(self) -> None:
        """Stop the reader (it finishes the read in progress) and wait for it."""
        self._stopping = True
        self._free.put((0, None))  # wake it if it waits for a buffer
        if self._started:
            self._thread.join()
        # page-locking not begun is not needed any more
        for future in self._pins.values():
            future.cancel()
        self._pins = {}  # (those made hold page-locked buffers: back to their pool now)
        # hand the (pinned) buffers back to their pool now, not when a cycle is collected
        self._buffers = [None] * len(self._buffers)
        self._plain = [None] * len(self._buffers)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
