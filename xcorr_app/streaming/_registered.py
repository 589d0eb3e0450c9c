"""A file's frames copied to the GPU straight out of the page cache: a read-only memory map of
the file registered with CUDA (``cudaHostRegister``, read-only), so that each chunk's copy to
the device is a DMA from the file's cached pages, with no read into a buffer first.

Why: 2 GiB of volumes from a TIFF were registered in 0.05-0.08 s and copied at 55 GB/s, where
four threads' ``pread`` into a page-locked ring and its copies reached 13 GB/s alone and about
6 GB/s in a run, its ring's page-locking (2 GiB/s) and the reads sharing the host (H200,
2026-11-26).  Only for a source that says where its frames lie in a file, in C order and the
machine's byte order (``stored``: ``(path, byte offset)``), that fits a quarter of the host's
available memory (the file's pages stay in memory, locked, until the end), whose pages are in
the page cache already (registering a file on the disk would read it whole before the first
chunk, without the progress of the reads) and where the registration succeeds; elsewhere the
reads go on as before.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.io import ArraySource
>>> RegisteredFile.open(ArraySource(np.zeros((2, 4, 4)))) is None  # (no file behind it)
True
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from .. import backend

__all__ = ["RegisteredFile", "MAX_REGISTERED_BYTES", "CACHED_SHARE"]

#: the most bytes of a file registered at once (and at most a quarter of the available memory)
MAX_REGISTERED_BYTES = 8 * 2**30
#: cudaHostRegisterReadOnly: the device only reads the pages (a read-only mapping needs it)
_READ_ONLY = 8
#: the share of the file's pages that must be in the page cache (``mincore``) to register it
CACHED_SHARE = 0.9


def _cached_share(pointer, length) -> float:
    """The share of the mapped pages ``pointer .. pointer + length`` in the page cache
    (``mincore``, Linux); 0 where it cannot say."""
    import ctypes

    try:
        page = mmap.PAGESIZE
        pages = (length + page - 1) // page
        vec = (ctypes.c_ubyte * pages)()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mincore(ctypes.c_void_p(pointer), ctypes.c_size_t(length), vec) != 0:
            return 0.0
    except (OSError, AttributeError, ValueError):
        return 0.0
    return float(np.count_nonzero(np.frombuffer(vec, np.uint8) & 1)) / max(1, pages)


class RegisteredFile:
    """The frames of a source's file as a read-only NumPy array (:attr:`array`, ``(n_frames,
    *item_shape)``) whose pages are registered with CUDA for asynchronous copies; :meth:`close`
    (after the copies from it are done) unregisters and unmaps them."""

    def __init__(self, mm, pointer, length, array):
        self._mm, self._pointer, self._length, self.array = mm, pointer, length, array

    @classmethod
    def open(cls, src):
        """A :class:`RegisteredFile` for ``src``'s frames, or None where it does not apply
        (no ``stored`` file, another byte order, too large, not in the page cache, no GPU or
        a failed registration)."""
        stored = getattr(src, "stored", None)
        if stored is None or not backend.gpu_available():
            return None
        dtype = np.dtype(src.dtype)
        shape = (int(src.n_frames), *getattr(src, "item_shape", src.frame_shape))
        nbytes = int(np.prod(shape)) * dtype.itemsize
        available = backend.host_available_bytes()
        if not dtype.isnative or nbytes > MAX_REGISTERED_BYTES \
                or available is None or nbytes > available // 4:
            return None
        path, offset = stored
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if os.fstat(fd).st_size < offset + nbytes:
                    return None
                mm = mmap.mmap(fd, offset + nbytes, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return None
        whole = np.frombuffer(mm, np.uint8)
        pointer, length = whole.ctypes.data, len(whole)
        # registering faults every page in: a file not in the page cache would be read whole
        # from the disk before the first chunk (1 GiB 0.53 s against 0.02 s cached, H200),
        # where the reads overlap the work and the progress shows
        if _cached_share(pointer, length) < CACHED_SHARE:
            del whole
            mm.close()
            return None
        try:
            import cupy

            cupy.cuda.runtime.hostRegister(pointer, length, _READ_ONLY)
        except Exception:  # noqa: BLE001 - (a driver or platform without it: read as before)
            del whole
            mm.close()
            return None
        array = whole[offset:offset + nbytes].view(dtype).reshape(shape)
        return cls(mm, pointer, length, array)

    def close(self) -> None:
        """Unregister and unmap (the copies out of it must be done)."""
        if self._mm is None:
            return
        import cupy

        with contextlib.suppress(Exception):  # (the device already gone at exit)
            cupy.cuda.runtime.hostUnregister(self._pointer)
        self.array = None
        with contextlib.suppress(BufferError):  # (a view still held: unmapped when collected)
            self._mm.close()
        self._mm = None
