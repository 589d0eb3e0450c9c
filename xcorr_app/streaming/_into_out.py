"""The results of :func:`~xcorr_app.streaming.map_chunks` written into one array ``out``: the
pages of the next chunks' rows faulted in on threads ahead of the loop (:class:`FaultAhead`),
on the GPU each chunk's result copied into its rows on a thread of its own while the loop goes
on (:class:`Downloads`), and the threads that run that work (:class:`Workers`).

The main thread and the workers share only :class:`queue.SimpleQueue` objects (written in C: a
put or a get happens whole or not at all) and plain flags: a Ctrl-C raised in the main thread
between any two lines of Python, as a signal handler's exception is, can leave no lock or
condition of the standard library half changed, so the loop's clean-up always ends
(``tests/streaming/test_chunks.py``, ``tests/interrupts.py``).

Examples
--------
>>> w = Workers(2, "xcorr-example")
>>> w.submit("a", lambda: None); w.submit("b", lambda: 1 / 0)
>>> sorted((key, type(err).__name__) for key, err in (w.collect(), w.collect()))
[('a', 'NoneType'), ('b', 'ZeroDivisionError')]
>>> w.close()
"""

from __future__ import annotations

import queue
import threading
import weakref

import numpy as np

from ..errors import InputError
from ._prefetch import copy_to_host_async
from ._threads import frame_slices

#: threads that fault in the pages of ``out`` ahead of the chunks written into it, the chunks
#: ahead, and a page
FAULT_THREADS = 4
FAULT_AHEAD = 2
PAGE = 4096
#: seconds between an idle worker's looks at whether its owner is gone
IDLE_CHECK = 0.2


class Workers:
    """``n`` daemon threads running the jobs :meth:`submit` queues, in the order queued; each
    job's ``(key, exception or None)`` comes back through :meth:`collect` as it ends.
    :meth:`close` lets the jobs still queued go (not run) and waits for the threads; a Ctrl-C
    during that wait is raised once they have ended.  Where ``close`` is never reached or
    never ends its work (a Ctrl-C in the caller's clean-up itself), the threads end within
    :data:`IDLE_CHECK` seconds of this object being let go: they hold only a weak reference
    to it (and any code that would stop them, a finalizer too, could itself be interrupted)."""

    def __init__(self, n, name):
        self._todo, self._done, self._flags = queue.SimpleQueue(), queue.SimpleQueue(), _Flags()
        self._n = n
        self._threads = [threading.Thread(target=_run_jobs, daemon=True, name=f"{name}-{i}",
                                          args=(self._todo, self._done,
                                                weakref.ref(self._flags)))
                         for i in range(n)]
        try:
            for t in self._threads:
                t.start()
        except BaseException:  # (a Ctrl-C while starting: the started threads end at once)
            self._stop()
            raise

    def _stop(self):
        self._flags.skip = True
        for _ in range(self._n):
            self._todo.put(None)

    def submit(self, key, job):
        self._todo.put((key, job))

    def collect(self):
        """``(key, exception or None)`` of the next job to end (waits for one)."""
        return self._done.get()

    def close(self):
        self._stop()
        join_threads(self._threads)


def join_threads(threads):
    """Wait for the started ones of ``threads`` (told to end); a Ctrl-C during the wait is
    raised once they have ended (they end soon)."""
    interrupted = None
    for t in threads:
        while t.ident is not None:  # (started)
            try:
                t.join()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
    if interrupted is not None:
        raise interrupted


class _Flags:
    skip = False


def _run_jobs(todo, done, owner):
    """A worker: jobs from ``todo`` until a None, or until its :class:`Workers` (``owner``, a
    weak reference to its flags) is gone."""
    while True:
        try:
            item = todo.get(timeout=IDLE_CHECK)
        except queue.Empty:
            if owner() is None:
                return
            continue
        if item is None:
            return
        key, job = item
        flags, err = owner(), None
        try:
            if flags is not None and not flags.skip:
                job()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            err = exc
        del flags
        done.put((key, err))


def out_view(result, out, start):
    """``out``'s rows for the chunk's ``result`` (InputError where it does not fit)."""
    view = out[start:start + len(result)]
    if view.shape != tuple(result.shape) \
            or not np.can_cast(result.dtype, view.dtype, casting="same_kind"):
        raise InputError(f"out ({out.dtype} {out.shape}) has no room for the result "
                         f"({result.dtype} {tuple(result.shape)}) of frames {start}.."
                         f"{start + len(result)}")
    return view


class FaultAhead:
    """Fault in the pages of the rows of ``out`` that the next chunks (``bounds``) will be
    written into, on :data:`FAULT_THREADS` threads, :data:`FAULT_AHEAD` chunks ahead of the
    loop (:meth:`wait` for chunk ``k`` before writing it); nothing without ``out``.

    A fresh NumPy array's pages are mapped, and zeroed by the kernel, on first write; CUDA's
    copy from the device into pageable memory does that on one thread, as NumPy's copy does,
    five times slower than into pages written before (docs/how-align-works.md, measurements).
    One byte a page is written (0:
    the rows are the loop's output, about to be overwritten).

    >>> out = np.ones((5, 8192), np.uint8)
    >>> with FaultAhead(out, [(0, 2), (2, 4), (4, 5)]) as f:
    ...     f.wait(0); f.wait(1); f.wait(2)
    >>> out[:, :2].tolist(), int(out.sum())  # the first byte of every page written 0
    ([[0, 1], [0, 1], [0, 1], [0, 1], [0, 1]], 40950)
    """

    def __init__(self, out, bounds):
        self.out, self.bounds = out, list(bounds)
        self.workers, self.left, self.next = None, {}, 0
        if out is not None and out.nbytes >= PAGE * FAULT_THREADS:
            self.workers = Workers(FAULT_THREADS, "xcorr-fault")
            try:
                self._submit(FAULT_AHEAD)
            except BaseException:
                self.workers.close()
                raise

    def _submit(self, ahead):
        while self.next < min(len(self.bounds), ahead):
            k = self.next
            a, b = self.bounds[k]
            flat = self.out[a:b].reshape(-1).view(np.uint8)
            parts = [flat[lo * PAGE:hi * PAGE]  # whole pages a thread (the last may be short)
                     for lo, hi in frame_slices(-(-len(flat) // PAGE), FAULT_THREADS)]
            self.left[k] = len(parts)
            for part in parts:
                self.workers.submit(k, lambda part=part: _touch(part))
            self.next += 1

    def wait(self, k):
        """Chunk ``k``'s pages are in (then the next chunk's are asked for)."""
        if self.workers is None:
            return
        while self.left.get(k, 0) > 0:
            j, err = self.workers.collect()
            self.left[j] -= 1
            if err is not None:
                raise err
        self.left.pop(k, None)
        self._submit(k + 1 + FAULT_AHEAD)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.workers is not None:
            self.workers.close()


def _touch(flat):
    flat[::PAGE] = 0  # (NumPy's strided assignment runs without the GIL)


#: the pinned pieces a chunk's result comes to the host through, and the threads that copy
#: each piece on into ``out``
STAGE_BYTES = 32 * 2**20
STAGE_THREADS = 4


class Downloads:
    """``map_chunks(out=)`` on the GPU (``on``): each chunk's result copied into its rows of
    ``out`` by a thread of its own (on the chunk's stream), while the loop goes on to the next
    chunk, and yielded one chunk behind, once its rows are written: the copy from the device
    overlaps the next chunk's upload and kernels instead of following them.

    The copy goes through two page-locked pieces of :data:`STAGE_BYTES` in turn (one piece's
    copy from the device while the last one is copied on into ``out`` by
    :data:`STAGE_THREADS` threads): a copy from the device into pageable memory runs at the
    speed of the driver's one thread copying out of its own staging buffer
    (docs/how-align-works.md, streaming)."""

    def __init__(self, on):
        self.on, self.pending = on, []
        self.workers = Workers(1, "xcorr-down") if on else None
        self.stage = _Staging() if on else None

    def add(self, start, result, view):
        """Start the copy of ``result`` into ``view``; yield the chunk before, once written."""
        import cupy

        stream, device = cupy.cuda.get_current_stream(), cupy.cuda.Device()
        result = cupy.ascontiguousarray(result.astype(view.dtype, copy=False))
        stage = self.stage

        def copy():
            with device:
                stage.get(result, view, stream)

        self.workers.submit(start, copy)
        self.pending.append((start, view))
        if len(self.pending) > 1:
            yield self._finish()

    def _finish(self):
        start, view = self.pending.pop(0)
        _, err = self.workers.collect()  # (one thread: the copies end in the order queued)
        if err is not None:
            raise err
        return start, view

    def done(self):
        """Yield the chunks still pending, once written."""
        while self.pending:
            yield self._finish()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.workers is not None:  # (a copy under way ends before out is let go; the
            self.workers.close()      # copies still queued are not run)
            self.stage.close()


class _Staging:
    """Two page-locked pieces and the threads that copy them on (see :class:`Downloads`),
    made at the first result larger than a piece."""

    def __init__(self):
        self.slots, self.copiers = None, None

    def get(self, result, view, stream):
        """``view[...] = result`` (C-contiguous, same type) through the pieces, waited for."""
        if result.nbytes <= STAGE_BYTES or not view.flags.c_contiguous:
            result.get(stream=stream, out=view)  # (blocking: the stream synchronized)
            return
        if self.slots is None:
            from ._prefetch import host_buffer

            self.slots = [host_buffer(STAGE_BYTES, np.uint8, True) for _ in range(2)]
            self.copiers = Workers(STAGE_THREADS, "xcorr-stage")
        src, dst = result.reshape(-1).view(np.uint8), view.reshape(-1).view(np.uint8)
        pending = None
        for k, a in enumerate(range(0, len(dst), STAGE_BYTES)):
            b = min(len(dst), a + STAGE_BYTES)
            slot = self.slots[k % 2][:b - a]
            copy_to_host_async(slot, src[a:b], stream)
            done = stream.record()
            if pending is not None:
                self._copy_on(*pending)
            pending = (done, slot, dst[a:b])
        self._copy_on(*pending)

    def _copy_on(self, done, slot, dst):
        done.synchronize()
        parts = frame_slices(len(dst), STAGE_THREADS)
        for lo, hi in parts:
            self.copiers.submit(lo, lambda lo=lo, hi=hi: np.copyto(dst[lo:hi], slot[lo:hi]))
        errors = [err for _, err in (self.copiers.collect() for _ in parts) if err is not None]
        if errors:
            raise errors[0]

    def close(self):
        if self.copiers is not None:
            self.copiers.close()
