"""Pixels stored uncompressed in files, copied into a caller's buffer with ``os.preadv``
(:class:`PreadFile`): the TIFF reader's memory-mapped files, HDF5 datasets stored contiguous or
in chunks of whole frames wherever the chunks lie, and Zarr chunk files holding their bytes as
they are (:class:`StoredArray`).

Why not copy out of the memory map: in a new process a map's first touch of each 4 KiB page
faults (a million faults for a 4 GiB stack), while one read system call copies from the page
cache into a buffer that is already mapped (the prefetcher's page-locked buffers are), and
releases the GIL while it does: docs/how-align-works.md has the measurements.

Examples
--------
>>> import tempfile
>>> path = tempfile.mkdtemp() + "/run.bin"
>>> np.arange(24, dtype=np.uint16).tofile(path)
>>> element_run((2, 3, 4), (1, slice(1, 3), slice(None)))  # frame 1, rows 1-2: one run
(16, 8)
>>> element_run((2, 3, 4), (slice(0, 2), 1, slice(None))) is None  # row 1 of each frame
True
>>> f = PreadFile.open(path)
>>> out = np.empty(8, np.uint16)
>>> f.read_into(out, 16 * 2), out.tolist()
(16, [16, 17, 18, 19, 20, 21, 22, 23])
>>> f.close()
>>> stored = StoredArray(PreadFile.open(path), np.uint16, (2, 3, 4), [24, 0])  # frames swapped
>>> out = np.empty((2, 4), np.uint16)
>>> stored.read(out, (0, slice(1, 3), slice(None))), out[0].tolist()
(True, [16, 17, 18, 19])
>>> stored.close()
"""

from __future__ import annotations

import math
import os
import weakref

import numpy as np

__all__ = ["PreadFile", "StoredArray", "chunk_slabs", "element_run", "preadable"]


def preadable(dtype) -> bool:
    """Whether pixels of ``dtype`` as stored can be read straight into a buffer of the same
    dtype in the machine's byte order, on this platform."""
    return np.dtype(dtype).isnative and hasattr(os, "preadv")


def element_run(shape, key):
    """``(first, count)``: the C-order element index and element count of ``array[key]``
    (``key``: an int or a step-1 slice per axis) where it is one run of the array's elements,
    else None."""
    if len(key) != len(shape):
        return None
    starts, sizes = [], []
    for n, k in zip(shape, key):
        if isinstance(k, slice):
            a, b, step = k.indices(n)
            if step != 1:
                return None
            starts.append(a)
            sizes.append(max(b - a, 0))
        else:
            k = int(k)
            starts.append(k + n if k < 0 else k)
            sizes.append(1)
    count = math.prod(sizes)
    if count == 0:
        return (0, 0)
    wide = False  # past the first axis that takes more than one index: the rest whole
    for n, size in zip(shape, sizes):
        if wide and size != n:
            return None
        wide = wide or size > 1
    return int(np.ravel_multi_index(starts, shape)), count


class PreadFile:
    """A file opened for positioned reads: thread-safe (each call names its offset), so the
    prefetcher's copy threads split a chunk; closed by :meth:`close` or when collected."""

    def __init__(self, fd: int, name=None):
        self.fd, self.name = fd, name
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, path) -> PreadFile:
        return cls(os.open(path, os.O_RDONLY), str(path))

    def read_into(self, out, at: int) -> int:
        """Copy the file's bytes from offset ``at`` into ``out`` (a C-contiguous array or
        buffer); the bytes copied (fewer than its size only where the file ends first)."""
        view = memoryview(out).cast("B")
        done = 0
        while done < len(view):
            n = os.preadv(self.fd, [view[done:]], at + done)
            if n <= 0:
                break
            done += n
        return done

    def close(self) -> None:
        self._closer()  # (closes it once)


def chunk_slabs(shape, chunk):
    """``(a, per)`` where chunks of ``chunk`` hold whole frames (the last two axes whole) and
    take one index on every axis before the one they span several of (``a``): each chunk is
    then ``per = chunk[a]`` slabs of the array's axes after ``a``, in C order; else None.

    >>> chunk_slabs((10, 3, 64, 64), (1, 1, 64, 64)), chunk_slabs((10, 64, 64), (4, 64, 64))
    ((1, 1), (0, 4))
    >>> chunk_slabs((10, 3, 64, 64), (2, 3, 64, 64)), chunk_slabs((10, 64, 64), (1, 32, 64))
    ((0, 2), None)
    >>> chunk_slabs((10, 3, 64, 64), (2, 1, 64, 64)) is None  # (two frames a chunk, apart)
    True
    """
    shape, chunk = tuple(int(n) for n in shape), tuple(int(c) for c in chunk)
    if len(shape) < 2 or len(chunk) != len(shape) or chunk[-2:] != shape[-2:]:
        return None
    wide = [i for i, (c, n) in enumerate(zip(chunk, shape)) if c != n]
    a = wide[-1] if wide else 0
    if any(c != 1 for c in chunk[:a]):
        return None
    return a, chunk[a]


class StoredArray:
    """An array of ``shape`` and ``dtype`` (the machine's byte order) stored uncompressed as
    slabs in C order: slab ``s`` holds the array's elements ``s * k`` to ``s * k + k - 1``
    (``k``: its size over ``len(offsets)``) at offset ``offsets[s]`` of ``files[file_of[s]]``
    (``files``: one :class:`PreadFile`, closed with this, or a sequence of paths, each opened
    as it is read: a Zarr store's chunks, a file missing then read by its library); slabs
    stored one after the other are read by one call."""

    def __init__(self, files, dtype, shape, offsets, file_of=None):
        self.files = [files] if isinstance(files, PreadFile) else files
        self.dtype, self.shape = np.dtype(dtype), tuple(int(n) for n in shape)
        self.offsets = np.asarray(offsets, np.int64)
        self.file_of = np.zeros(len(self.offsets), np.int64) if file_of is None \
            else np.asarray(file_of, np.int64)
        self.slab = math.prod(self.shape) // max(len(self.offsets), 1)
        if self.slab * len(self.offsets) != math.prod(self.shape):
            raise ValueError(f"{len(self.offsets)} slabs do not divide an array of {self.shape}")

    def read(self, dest: np.ndarray, key) -> bool:
        """``self[key]`` (an int or a step-1 slice per axis) into the C-contiguous ``dest`` of
        as many elements; False where ``key`` is of another kind or a file named is missing
        (``dest`` then partly written).  Raises ``EOFError`` where a file ends first."""
        if len(key) != len(self.shape) or not all(isinstance(k, slice) and k.step in (None, 1)
                                                   or isinstance(k, (int, np.integer))
                                                   for k in key):
            return False
        run = element_run(self.shape, key)
        if run is None:  # one call per index of the first axis that takes several
            sel = [len(range(*k.indices(n))) for k, n in zip(key, self.shape)
                   if isinstance(k, slice)]
            view = dest.reshape(sel)
            ax = next(i for i, (k, n) in enumerate(zip(key, self.shape))
                      if isinstance(k, slice) and len(range(*k.indices(n))) > 1)
            pos = sum(isinstance(k, slice) for k in key[:ax])  # (those before take one index)
            for j, i in enumerate(range(*key[ax].indices(self.shape[ax]))):
                if not self.read(view[(0,) * pos + (j, ...)], key[:ax] + (i,) + key[ax + 1:]):
                    return False
            return True
        first, count = run
        if count != dest.size:
            raise ValueError(f"{dest.size} elements cannot hold {count}")
        if count:
            try:
                self._read_run(memoryview(dest).cast("B"), first, count)
            except FileNotFoundError:  # (a Zarr chunk never written: its fill value)
                return False
        return True

    def _read_run(self, view, first, count):
        size, k = self.dtype.itemsize, self.slab
        s0, s1 = first // k, (first + count - 1) // k + 1
        offs, owner = self.offsets[s0:s1], self.file_of[s0:s1]
        breaks = (np.flatnonzero((np.diff(offs) != k * size) | (np.diff(owner) != 0))
                  + 1).tolist()
        pos = 0
        for g0, g1 in zip([0] + breaks, breaks + [len(offs)]):
            e0 = max(first, (s0 + g0) * k)
            e1 = min(first + count, (s0 + g1) * k)
            n = (e1 - e0) * size
            at = int(offs[g0]) + (e0 - (s0 + g0) * k) * size
            file = self.files[int(owner[g0])]
            opened = None if isinstance(file, PreadFile) else PreadFile.open(file)
            try:
                got = (opened or file).read_into(view[pos:pos + n], at)
            finally:
                if opened is not None:
                    opened.close()
            if got < n:
                raise EOFError(f"{getattr(file, 'name', file)} ends before byte {at + n}")
            pos += n

    def close(self) -> None:
        if isinstance(self.files, list):
            for file in self.files:
                if isinstance(file, PreadFile):
                    file.close()
