"""Writing in the background: :class:`BackgroundWrites` hands each chunk to one writer thread, so
that the next chunk is read and computed while this one goes to disk (the aligned stack of
``xcorr align``, the filtered stack of ``xcorr filter``).

Examples
--------
>>> class Collect:
...     def __init__(self):
...         self.chunks = []
...     def write(self, chunk):
...         self.chunks.append(chunk)
>>> sink = Collect()
>>> with BackgroundWrites(sink) as bg:
...     for k in range(3):
...         bg.write(k)
>>> sink.chunks
[0, 1, 2]
"""

from __future__ import annotations

import queue
import threading

import numpy as np

from ..backend import is_cupy_array

_STOP = object()

#: bytes of GPU frames copied back at once: the thread's page-locked buffer (it copies a piece,
#: then writes it); a callable of ``align(out=)`` gets pieces of it, one copied while it writes
#: the one before
PIECE_BYTES = 64 << 20


class BackgroundWrites:
    """The ``write(chunk)`` calls of ``writer`` made by one thread, in order.

    Parameters
    ----------
    writer : object with ``write(chunk)``
        E.g. a :class:`~xcorr_app.io.TiffStackWriter`; only the thread calls it.
    depth : int
        Chunks that may wait for the thread besides the one it writes (each is held in memory
        until written: one chunk more than writing in the caller's thread, by default).

    The chunks must not change after :meth:`write` (hand over fresh arrays).  A CuPy chunk
    (complete on the device: its stream synchronized) is copied to the host by the thread,
    :data:`PIECE_BYTES` at a time into one page-locked buffer, and written piece by piece
    (``writer.write`` must not keep the array it is given), so the caller need not wait for
    the copy.  An error of the
    thread (a full disk) is raised by the next :meth:`write` or by :meth:`close`; later chunks
    are dropped.  As a context manager it waits for the queued writes on success; on an
    exception in the block (or one that stops the wait) it drops the chunks not written yet and
    waits only for the one in progress, so that the writer can then be aborted.

    Safe against signals: Python raises a signal handler's exception (Ctrl-C's
    :class:`KeyboardInterrupt`) in the caller's thread between any two steps of Python code,
    also inside the standard library's queues and conditions, which are written in Python.
    With a :class:`queue.Queue` one landed in ``Condition.notify`` after it had woken the
    writer but before it had forgotten the writer's waiter: the next wake-up (the stop) went
    to that stale waiter, the writer slept on and the interrupted run hung in its clean-up.  So
    the two threads share only :class:`queue.SimpleQueue` objects (in C: a ``put`` or ``get``
    is done or not done): the chunks one way, a token per chunk that may wait the other.
    """

    def __init__(self, writer, depth: int = 1):
        self._writer = writer
        self._chunks: queue.SimpleQueue = queue.SimpleQueue()
        self._room: queue.SimpleQueue = queue.SimpleQueue()  # a token per chunk that may wait
        for _ in range(max(1, int(depth))):
            self._room.put(None)
        self._error = None
        self._host = None  # the page-locked bytes of CuPy chunks' pieces
        self._cancel = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="xcorr-writer", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            item = self._chunks.get()
            if item is _STOP:
                self._host = None
                return
            self._room.put(None)  # the next chunk may wait while this one is written
            if self._error is None and not self._cancel:
                try:
                    if is_cupy_array(item):
                        self._write_from_device(item)
                    else:
                        self._writer.write(item)
                except BaseException as exc:  # raised in the caller's thread
                    self._error = exc
            item = None  # (a chunk on the GPU goes back to the pool now, not at the next one)

    def _write_from_device(self, chunk):
        import cupy

        with chunk.device:
            if not chunk.size:
                self._writer.write(chunk.get())
                return
            if chunk.ndim == 2 or not chunk.flags.c_contiguous:
                chunk = cupy.ascontiguousarray(chunk[None] if chunk.ndim == 2 else chunk)
                cupy.cuda.get_current_stream().synchronize()
            # (a stream of its own: the copies overlap the run's next kernels instead of taking
            # turns with them on the default stream)
            stream = cupy.cuda.Stream(non_blocking=True)
            rows = max(1, PIECE_BYTES // max(1, chunk[:1].nbytes))
            size = min(rows, len(chunk)) * chunk[:1].nbytes
            if self._host is None or self._host.size < size:
                self._host = np.frombuffer(cupy.cuda.alloc_pinned_memory(size), np.uint8, size)
            for start in range(0, len(chunk), rows):
                if self._cancel:  # (a stop: the piece in progress was the last)
                    return
                piece = chunk[start:start + rows]
                host = self._host[:piece.nbytes].view(piece.dtype).reshape(piece.shape)
                piece.get(stream=stream, out=host)
                self._writer.write(host)

    def write(self, chunk) -> None:
        """Queue ``chunk`` (blocks while ``depth`` chunks wait)."""
        if self._closed:
            raise RuntimeError("write after close")
        self._raise()
        self._room.get()
        self._chunks.put(chunk)

    def _raise(self):
        if self._error is not None:
            raise self._error

    def _stop(self):
        if not self._closed:  # (a stop interrupted before it is marked is made again)
            self._chunks.put(_STOP)
            self._closed = True
        try:
            self._thread.join()
        except BaseException:  # e.g. Ctrl-C while the queued chunks are written: drop them
            self._cancel = True
            while self._thread.is_alive():  # the write in progress ends, even on a second one
                try:
                    self._thread.join()
                except KeyboardInterrupt:
                    continue
            raise

    def close(self) -> None:
        """Wait until every queued chunk is written; raise the thread's error, if any."""
        self._stop()
        self._raise()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:
            self._cancel = True
            self._stop()
