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

_STOP = object()


class BackgroundWrites:
    """The ``write(chunk)`` calls of ``writer`` made by one thread, in order.

    Parameters
    ----------
    writer : object with ``write(chunk)``
        E.g. a :class:`~xcorr_app.io.TiffStackWriter`; only the thread calls it.
    depth : int
        Chunks that may wait for the thread besides the one it writes (each is held in memory
        until written: one chunk more than writing in the caller's thread, by default).

    The chunks must not change after :meth:`write` (hand over fresh arrays).  An error of the
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
        self._cancel = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="xcorr-writer", daemon=True)
        self._thread.start()

    def _run(self):
        while True:
            item = self._chunks.get()
            if item is _STOP:
                return
            self._room.put(None)  # the next chunk may wait while this one is written
            if self._error is None and not self._cancel:
                try:
                    self._writer.write(item)
                except BaseException as exc:  # raised in the caller's thread
                    self._error = exc

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
