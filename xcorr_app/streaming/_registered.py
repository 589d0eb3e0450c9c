"""A file's frames copied to the GPU straight out of the page cache: a read-only memory map of
the file registered with CUDA (``cudaHostRegister``, read-only), so that each chunk's copy to
the device is a DMA from the file's cached pages, with no read into a buffer first.

Why: registered pages are copied several times faster than four threads' ``pread`` into a
page-locked ring and its copies reach, more so in a run, where the ring's page-locking and the reads
share the host (docs/how-align-works.md, measurements behind the design).  The pages are registered
a chunk at a time, just ahead of the chunk's copy, and unregistered once copied
(:meth:`RegisteredFile.pin`, :meth:`RegisteredFile.release`): the page-locking of the next chunk
then overlaps the device's work on this one, where the whole file's came before the first copy.
Only for a source that says where its frames lie in a file, in C order and the machine's byte order
(``stored``: ``(path, byte offset)``), that fits a quarter of the host's available memory, whose
pages are in the page cache already (registering a file on the disk would read it from there a page
at a time, without the progress of the reads) and whose first frame registers; elsewhere the reads
go on as before.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.io import ArraySource
>>> RegisteredFile.open(ArraySource(np.zeros((2, 4, 4)))) is None  # (no file behind it)
True
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import mmap
import os
import threading

import numpy as np

from .. import backend

__all__ = ["RegisteredFile", "MAX_REGISTERED_BYTES", "CACHED_SHARE"]

#: the largest file registered (and at most a quarter of the available memory): a consumer
#: that holds chunks back could keep much of it page-locked at once
MAX_REGISTERED_BYTES = 8 * 2**30
#: cudaHostRegisterReadOnly: the device only reads the pages (a read-only mapping needs it)
_READ_ONLY = 8
#: the share of the file's pages that must be in the page cache (``mincore``) to register it
CACHED_SHARE = 0.9
#: pages ``mincore`` looks at, in windows spread evenly over the file (all of a large file's
#: were a cost of their own in a one-shot run; a file is read whole or in runs)
SAMPLED_WINDOWS, WINDOW_PAGES = 256, 16


def _cached_share(pointer, length) -> float:
    """The share of the mapped pages ``pointer .. pointer + length`` in the page cache
    (``mincore``, Linux; in :data:`SAMPLED_WINDOWS` windows of a large mapping); 0 where it
    cannot say."""
    import ctypes

    try:
        page = mmap.PAGESIZE
        pages = (length + page - 1) // page
        width = min(pages, WINDOW_PAGES)
        count = min(SAMPLED_WINDOWS, pages // width)  # (sorted set: np.unique imports numpy.ma)
        firsts = sorted({(pages - width) * i // max(1, count - 1) for i in range(count)})
        vec = (ctypes.c_ubyte * width)()
        libc = ctypes.CDLL(None, use_errno=True)
        cached = 0
        for first in firsts:
            if libc.mincore(ctypes.c_void_p(pointer + first * page),
                            ctypes.c_size_t(width * page), vec) != 0:
                return 0.0
            cached += int(np.count_nonzero(np.frombuffer(vec, np.uint8) & 1))
    except (OSError, AttributeError, ValueError):
        return 0.0
    return cached / max(1, width * len(firsts))


class RegisteredFile:
    """The frames of a source's file as a read-only NumPy array (:attr:`array`, ``(n_frames,
    *item_shape)``) whose pages are registered with CUDA a run of frames at a time, for
    asynchronous copies (:meth:`pin` or :meth:`pin_ahead` before a copy, :meth:`upload` the
    copy, :meth:`release` after it); :meth:`close` (after the copies from it are done)
    unregisters what is left and unmaps the file."""

    def __init__(self, mm, pointer, length, array, frame_bytes, device=0):
        self._mm, self._pointer, self._length, self.array = mm, pointer, length, array
        self._frames_at = array.ctypes.data  # (frame 0's address in the mapping)
        self._frame_bytes = frame_bytes
        self._device = device  # (registered in its context, whichever thread registers)
        self._end = pointer  # the first byte not registered (a page boundary)
        self._pieces = []  # (start, end) addresses of the registered runs, in file order
        self._lock = threading.Lock()  # (pin_ahead's thread registers beside the copies)
        self._worker, self._ahead = None, []

    @classmethod
    def open(cls, src):
        """A :class:`RegisteredFile` for ``src``'s frames, its first frame registered, or None
        where it does not apply (no ``stored`` file, another byte order, too large, not in the
        page cache, no GPU or a failed registration)."""
        stored = getattr(src, "stored", None)
        if stored is None or not backend.gpu_available():
            return None
        dtype = np.dtype(src.dtype)
        shape = (int(src.n_frames), *getattr(src, "item_shape", src.frame_shape))
        nbytes = int(np.prod(shape)) * dtype.itemsize
        available = backend.host_available_bytes()
        if not dtype.isnative or nbytes > MAX_REGISTERED_BYTES \
                or available is None or nbytes > available // 4 or shape[0] < 1:
            return None
        path, offset = stored
        # the mapping starts at the frames' first page (a range of frames: not the file's
        # frames before it, which nothing copies)
        base = offset - offset % mmap.ALLOCATIONGRANULARITY
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if os.fstat(fd).st_size < offset + nbytes:
                    return None
                mm = mmap.mmap(fd, offset + nbytes - base, prot=mmap.PROT_READ, offset=base)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return None
        whole = np.frombuffer(mm, np.uint8)
        pointer, length = whole.ctypes.data, len(whole)
        # registering faults the pages in: a file not in the page cache would be read from the
        # disk a page at a time (many times slower than cached pages), where the reader's
        # threads read it faster and the progress shows
        array = whole[offset - base:offset - base + nbytes].view(dtype).reshape(shape)
        import cupy

        registered = cls(mm, pointer, length, array, nbytes // shape[0], cupy.cuda.Device().id)
        del whole, array
        if _cached_share(pointer, length) < CACHED_SHARE or not registered.pin(1):
            registered.close()
            return None
        return registered

    def pin(self, stop) -> bool:
        """Register the pages up to the end of frame ``stop - 1`` not registered yet; False
        where CUDA refuses (a copy from them is then an ordinary, synchronous one)."""
        end = self._frames_at + int(stop) * self._frame_bytes
        end = min(self._pointer + self._length, -(-end // mmap.PAGESIZE) * mmap.PAGESIZE)
        with self._lock:
            if end <= self._end:
                return True
            try:
                import cupy

                with cupy.cuda.Device(self._device):
                    cupy.cuda.runtime.hostRegister(self._end, end - self._end, _READ_ONLY)
            except Exception:  # noqa: BLE001 - (a driver or platform without it: as before)
                return False
            self._pieces.append((self._end, end))
            self._end = end
        return True

    def pin_ahead(self, stop) -> None:
        """:meth:`pin` in a thread of its own (the next :meth:`upload` waits for it): the
        page-locking of the next chunk overlaps the device's work on this one and the host's
        waits for it, where on the run's thread it added to the run's time."""
        self._ahead.append(self._thread().submit(self.pin, stop))

    def release_ahead(self, stop) -> None:
        """:meth:`release` in :meth:`pin_ahead`'s thread, after the pins queued before it
        (nothing waits for it): on the run's thread, unregistering a chunk's run took half the
        thread's time a chunk."""
        self._thread().submit(self.release, stop)

    def _thread(self):
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="xcorr-register")
        return self._worker

    def upload(self, out, start, stop, stream) -> None:
        """Queue on ``stream`` the copy of frames ``start:stop`` into the device array ``out``
        (C order), a registered run at a time: CUDA refuses a copy that spans two
        registrations (and one from pages it could not register is an ordinary copy)."""
        import cupy

        while self._ahead:
            self._ahead.pop(0).result()
        self.pin(stop)  # (what is not registered yet; pages CUDA refuses stay as they are)
        lo = self._frames_at + int(start) * self._frame_bytes
        hi = lo + (int(stop) - int(start)) * self._frame_bytes
        with self._lock:
            ends = [a for a, _ in self._pieces] + [self._end]
        cuts = sorted({lo, hi} | {a for a in ends if lo < a < hi})
        for a, b in zip(cuts, cuts[1:]):
            cupy.cuda.runtime.memcpyAsync(out.data.ptr + (a - lo), a, b - a,
                                          cupy.cuda.runtime.memcpyHostToDevice, stream.ptr)

    def release(self, stop=None) -> None:
        """Unregister the runs that hold only frames before ``stop`` (their copies done; a
        run's last page may hold later frames, as many as a page holds); None: every run."""
        import cupy

        at = None if stop is None else self._frames_at + int(stop) * self._frame_bytes
        with self._lock:  # (the runs taken off the list; unregistered without holding it)
            done = []
            while self._pieces and (at is None or self._pieces[0][1] <= at):
                done.append(self._pieces.pop(0)[0])
        for start in done:
            with contextlib.suppress(Exception):  # (the device already gone at exit)
                with cupy.cuda.Device(self._device):
                    cupy.cuda.runtime.hostUnregister(start)

    def close(self) -> None:
        """Unregister and unmap (the copies out of it must be done)."""
        if self._mm is None:
            return
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
            self._worker, self._ahead = None, []
        if self._pieces:
            self.release()
        self.array = None
        with contextlib.suppress(BufferError):  # (a view still held: unmapped when collected)
            self._mm.close()
        self._mm = None
