"""A stack kept on the GPU for the later passes of a run (:class:`StashedSource`): the first
pass over every frame uploads each chunk into its rows of one device array instead of a chunk
buffer, and once that pass has ended every later pass (a patch pass, a template pass, the
aligned frames of ``align(out=)``) reads the frames from there: the stack crosses the bus once.

A run keeps its stack on the GPU only where it holds to a small share of the device's free
memory (:func:`stash_fits`); like every array of a run it comes from CuPy's memory pool, and
goes back there when the run ends (``cupy.get_default_memory_pool().free_all_blocks()`` gives
the pool's free blocks back to the driver).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.io import ArraySource
>>> stack = np.zeros((4, 2, 3), np.uint16)
>>> src = StashedSource(ArraySource(stack), DeviceStash(np.ones_like(stack)))  # (NumPy here)
>>> src.n_frames, src.frame_shape, src.stack is stack, src.stash.complete
(4, (2, 3), True, False)
>>> src.stash.mark(0, 4); int(src.stack.sum())  # complete: the stash's frames
24

One GPU's range of a stack (frames 4:8 of 10), a window of it, and one beyond it:

>>> part = DeviceStash(np.zeros((4, 2, 3)), first=4, n=10)
>>> w = part.window(5, 7); w.mark(0, 2); w.complete, part.complete, part.window(6, 9)
(True, False, None)
>>> part.mark(0, 10)
Traceback (most recent call last):
IndexError: frames 0:10 are not among the frames kept (4:8)
"""

from __future__ import annotations

import numpy as np

from .. import backend

#: the share of the device's free memory (at the run's start) a stack kept on the GPU may take
STASH_SHARE = 0.25


def stash_fits(n_frames, frame_shape, dtype, device_free) -> bool:
    """Whether a stack of ``n_frames`` frames fits :data:`STASH_SHARE` of ``device_free`` bytes.

    >>> stash_fits(4096, (512, 512), np.uint16, 80 * 2**30), stash_fits(10, (8, 8), "u1", 100)
    (True, False)
    """
    need = int(n_frames) * int(np.prod(frame_shape)) * np.dtype(dtype).itemsize
    return device_free is not None and need <= STASH_SHARE * device_free


def keep_on_gpu(src, xp, device_free=None, start=0, stop=None):
    """A :class:`DeviceStash` for frames ``start:stop`` (default: every frame) of ``src`` on
    ``xp``'s current device where they fit (:func:`stash_fits`) in ``device_free`` bytes (else
    asked now), else None (NumPy: None)."""
    if xp is np:
        return None
    stop = src.n_frames if stop is None else stop
    if device_free is None:
        device_free = backend.device_free_bytes(xp)
    if not stash_fits(stop - start, src.frame_shape, src.dtype, device_free):
        return None
    return DeviceStash.allocate(stop - start, src.frame_shape, src.dtype, first=start,
                                stack_frames=src.n_frames)


class DeviceStash:
    """Frames ``offset:offset + n`` of a stack (a window) kept in one device array ``frames``
    whose rows hold frames ``first:first + len(frames)`` (``first`` > 0: one range of the stack,
    as each GPU of a ``gpus`` run keeps its own), and which of those rows hold their pixels
    (``filled``, shared by every window)."""

    def __init__(self, frames, filled=None, offset=0, n=None, first=0):
        self.base, self.offset, self.first = frames, int(offset), int(first)
        self.n = len(frames) + self.first - self.offset if n is None else int(n)
        self.filled = np.zeros(len(frames), bool) if filled is None else filled

    @classmethod
    def allocate(cls, n_frames, frame_shape, dtype, first=0, stack_frames=None):
        """A stash of the current device (from CuPy's memory pool, as every array of a run)
        for frames ``first:first + n_frames`` of a stack of ``stack_frames`` (default: those
        frames alone)."""
        import cupy

        return cls(cupy.empty((int(n_frames), *map(int, frame_shape)), dtype), first=first,
                   n=stack_frames)

    def _kept(self, start, stop):
        """The rows of ``frames`` holding frames ``start:stop`` of this window, or None where
        some of them are not kept there."""
        a = self.offset + start - self.first
        b = a + stop - start
        return (a, b) if 0 <= a <= b <= len(self.base) else None

    def _rows(self, start, stop):
        kept = self._kept(start, stop)
        if kept is None:  # (a range's stash: only its windows are read)
            raise IndexError(f"frames {self.offset + start}:{self.offset + stop} are not among "
                             f"the frames kept ({self.first}:{self.first + len(self.base)})")
        return slice(*kept)

    def window(self, start, stop):
        """Frames ``start:stop`` of this window, as a window; None where some of them are not
        among the rows kept."""
        if self._kept(start, stop) is None:
            return None
        return DeviceStash(self.base, self.filled, self.offset + start, stop - start, self.first)

    def rows(self, start, stop):
        """The device rows of frames ``start:stop`` (to be filled, or read once filled)."""
        return self.base[self._rows(start, stop)]

    def mark(self, start, stop):
        """Frames ``start:stop`` hold their pixels (their copies have ended)."""
        self.filled[self._rows(start, stop)] = True

    @property
    def complete(self) -> bool:
        kept = self._kept(0, self.n)
        return kept is not None and bool(self.filled[slice(*kept)].all())

    @property
    def frames(self):
        return self.rows(0, self.n)


def source_names_of(src) -> list:
    """Every frame's source name of a frame source ``src`` (its own ``source_names`` where it
    has one): what a wrapper of a source (:class:`StashedSource`, a corrected source) gives."""
    names = getattr(src, "source_names", None)
    return names() if names else [src.source_name(i) for i in range(src.n_frames)]


class WrappedSource:
    """A frame source that reads another, ``src``, and changes some of what it gives (a
    subclass's :meth:`read` and :attr:`stack`): the frames' count, shape, type, notes and
    paths are ``src``'s (a subclass may set its own), and so are their source names, closing
    and every other attribute but ``src`` and the subclass's own (:attr:`own`: set in its
    ``__init__``, never looked up on ``src`` while they are not)."""

    own = ()

    def __init__(self, src):
        self.src = src
        self.n_frames, self.frame_shape, self.dtype = src.n_frames, src.frame_shape, src.dtype
        self.notes, self.paths = src.notes, src.paths

    def source_name(self, i):
        return self.src.source_name(i)

    def source_names(self):
        return source_names_of(self.src)

    def close(self):
        self.src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getattr__(self, name):  # the source's other attributes (channel, first_frame, ...)
        if name == "src" or name in type(self).own:
            raise AttributeError(name)
        return getattr(self.src, name)


class StashedSource(WrappedSource):
    """A frame source (``src``) whose frames the GPU chunk loop uploads into ``stash`` (a
    :class:`DeviceStash`, or None: no stash); once every frame is there, :attr:`stack` is the
    device array, so later chunk loops read it directly.  Reads of a few frames
    (:meth:`read`) still come from ``src``.  ``registered=False``: the chunk loop reads its
    file into page-locked buffers instead of registering the file's pages
    (:class:`~xcorr_app.streaming.RegisteredFile`)."""

    own = ("stash",)

    def __init__(self, src, stash, registered=True):
        super().__init__(src)
        self.stash = stash
        self.concurrent_reads = getattr(src, "concurrent_reads", False)
        if not registered:  # its file's pages read into buffers, never registered with CUDA
            self.stored = None

    @property
    def stack(self):
        if self.stash is not None and self.stash.complete:
            return self.stash.frames
        return getattr(self.src, "stack", None)

    def read(self, start, stop, out=None):
        return self.src.read(start, stop, out=out)

    def release(self):
        """Give the device array back (the stack is read from ``src`` again)."""
        self.stash = None
