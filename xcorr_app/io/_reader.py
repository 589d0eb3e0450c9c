"""Lazy reading of image stacks: a folder of TIFF files or one (multi-page, ImageJ, OME) TIFF.

A stack is opened as a :class:`FrameSource`, a sequence of 2-D frames read on demand: the
pixels of uncompressed, contiguous files are memory-mapped (read-only), and other files are
read page by page (:mod:`xcorr_app.io._tiff`), so only the frames asked for are ever in memory.

Frames are all the axes of a file other than Y and X, flattened in file order, except one
channel axis (``C``, or the color samples ``S`` of an RGB file), from which ``channel`` picks
one.  Input files are only ever opened for reading.

Examples
--------
>>> from xcorr_app.io._reader import open_stack
>>> with open_stack("sample_data/cell_drift.tif") as src:
...     first = src.read(0, 4)
>>> first.shape
(4, 120, 160)
"""

from __future__ import annotations

import bisect
import itertools
import re
from pathlib import Path

import numpy as np

from ..backend import is_cupy_array
from ..errors import InputError
from ._frame_order import z_first
from ._tiff import (SUPPORTED_DTYPES, HoldsVolumes, TiffFrames, TruncatedError, plural,
                    readable_allowed, volumes_of)

__all__ = ["SUPPORTED_DTYPES", "TIFF_SUFFIXES", "natural_key", "FrameSource", "open_stack",
           "read_image", "ArraySource", "OffsetFrames", "FrameRange", "ChannelStack",
           "open_source", "SourceArray", "open_array"]

TIFF_SUFFIXES = (".tif", ".tiff")


def natural_key(name: str):
    """Sort key putting ``frame_2.tif`` before ``frame_10.tif`` (case-insensitive)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name.lower())], name


def _list_names(names, limit=10) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


class FrameSource:
    """A lazily read stack of 2-D frames from one TIFF file or a folder of TIFF files.

    Make one with :func:`open_stack`.  Use it as a context manager (or call :meth:`close`).

    Attributes
    ----------
    n_frames : int
        Number of frames (also ``len(source)``).
    frame_shape : tuple of int
        ``(H, W)`` of every frame.
    dtype : numpy.dtype
        Pixel type on disk (native byte order), one of :data:`SUPPORTED_DTYPES`.
    paths : list of pathlib.Path
        Every input file read, in frame order.
    notes : list of str
        Things to tell the user, e.g. ``"skipped 2 non-TIFF files: a.txt, b.csv"``.

    Examples
    --------
    >>> with open_stack("sample_data/cell_frames") as src:
    ...     total = float(src.read(0, 5).sum())
    >>> src.n_frames, src.source_name(1)
    (12, 'frame_2.tif')
    """

    volumes = None  # a T x Z TIFF's HoldsVolumes (open_stack), else None

    def __init__(self, parts: list[TiffFrames], notes: list[str], layout=None):
        self._parts = parts
        self._layout = layout  # (a folder of Z stacks: T files of Z planes)
        self._open_part = None
        self.frame_shape = parts[0].frame_shape
        self.n_channels = parts[0].n_channels
        self.dtype = parts[0].dtype
        self.paths = [p.path for p in parts]
        self.notes = list(notes) + [n for p in parts for n in p.notes]
        self._starts = list(itertools.accumulate((p.n_frames for p in parts), initial=0))
        self.n_frames = self._starts[-1]

    @property
    def frame_layout(self) -> tuple:
        """``(letter, size)`` of each frame axis in the order frames are numbered (a folder's
        files: one after another, ``T``)."""
        if self._layout is not None:
            return self._layout
        return self._parts[0].frame_layout if len(self._parts) == 1 else \
            (("T", self.n_frames),)

    @property
    def memory_mapped(self) -> bool:
        """True when every file is read through a memory map (uncompressed, contiguous data)."""
        return all(p.memory_mapped for p in self._parts)

    @property
    def stored(self):
        """Where the frames lie in the one file, uncompressed in one run (``(path, byte
        offset)``, :attr:`TiffFrames.stored`); None for a folder of files or another layout."""
        return self._parts[0].stored if len(self._parts) == 1 else None

    @property
    def concurrent_reads(self) -> bool:
        """True when several threads may :meth:`read` at once (one memory-mapped file)."""
        return len(self._parts) == 1 and self.memory_mapped

    def _part_of(self, i: int) -> int:
        if not 0 <= i < self.n_frames:
            raise IndexError(f"frame {i} is out of range for a stack of {self.n_frames} frames")
        return bisect.bisect_right(self._starts, i) - 1

    def source_name(self, i: int) -> str:
        """Name of the file that frame ``i`` comes from."""
        return self._parts[self._part_of(i)].path.name

    def source_names(self) -> list:
        """:meth:`source_name` of every frame, in order."""
        return [part.path.name for part, n in zip(self._parts, np.diff(self._starts))
                for _ in range(int(n))]

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Frames ``start`` to ``stop - 1``: a new ``(stop - start, H, W)`` array of :attr:`dtype`,
        or written into ``out`` (e.g. a pinned host buffer) and returned."""
        if not 0 <= start <= stop <= self.n_frames:
            raise IndexError(f"frames {start}:{stop} are out of range for a stack of "
                             f"{self.n_frames} frames")
        if out is not None and out.shape != (stop - start, *self.frame_shape):
            raise InputError(f"out of shape {out.shape} cannot hold frames {start}:{stop}")
        if start == stop:
            return np.empty((0, *self.frame_shape), self.dtype) if out is None else out
        pieces = []
        j, at = self._part_of(start), start
        while at < stop:
            part, first = self._parts[j], self._starts[j]
            end = min(stop, first + part.n_frames)
            if self._open_part not in (None, part):
                self._open_part.close()  # keep one file of a folder open at a time
            self._open_part = part
            target = None if out is None else out[at - start:end - start]
            pieces.append(part.read(at - first, end - first, out=target))
            at, j = end, j + 1
        if out is not None:
            return out
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def close(self) -> None:
        """Release every open file and memory map (reading again reopens them)."""
        for part in self._parts:
            part.close()
        self._open_part = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __len__(self) -> int:
        return self.n_frames

    def __repr__(self) -> str:
        where = (self.paths[0] if len(self.paths) == 1
                 else f"{self.paths[0].parent} ({len(self.paths)} files)")
        return (f"<FrameSource {where}: {self.n_frames} frames of "
                f"{self.frame_shape[0]}x{self.frame_shape[1]} {self.dtype}>")


def _cut_folder_note(folder, path, why, left, parts) -> str:
    """The warning of a folder read up to its damaged file ``path`` under
    :func:`~._tiff.readable_frames`: the files ``left`` out, the frames used."""
    n = sum(p.n_frames for p in parts)
    return (f"warning: {path} is truncated or damaged ({why}): {plural(len(left), 'file')} of "
            f"{folder} from {left[0].name} on left out; using frames 0 to {n - 1} (counted "
            "from 0; readable_frames)")


def _open_folder(folder: Path, channel: int | None, axes=None) -> FrameSource:
    entries = sorted(folder.iterdir(), key=lambda p: natural_key(p.name))
    if not entries:
        raise InputError(f"folder {folder} is empty; give a folder of TIFF files or a TIFF stack")
    tiffs = [p for p in entries
             if p.suffix.lower() in TIFF_SUFFIXES and not p.name.startswith(".") and p.is_file()]
    chosen = set(tiffs)
    skipped = [p.name + ("/" if p.is_dir() else "") for p in entries if p not in chosen]
    if not tiffs:
        raise InputError(f"folder {folder} holds no .tif or .tiff files (found "
                         f"{_list_names(skipped)}); give a folder of TIFF files")
    notes = ([f"skipped {plural(len(skipped), 'non-TIFF file')}: {_list_names(skipped)}"]
             if skipped else [])
    parts: list[TiffFrames] = []
    try:
        for k, path in enumerate(tiffs):
            try:
                part = TiffFrames(path, channel, axes)
            except TruncatedError as exc:
                # (--readable-frames: the frames before the damaged file, as in one file)
                if not (parts and readable_allowed(path)):
                    raise
                notes.append(_cut_folder_note(folder, path, exc.why, tiffs[k:], parts))
                break
            part.close()  # reopened when read: a big folder must not hold all files open
            parts.append(part)
            first = parts[0]
            if part.frame_shape != first.frame_shape:
                raise InputError(
                    f"{path} has frames of {part.frame_shape[0]}x{part.frame_shape[1]} pixels but "
                    f"{first.path.name} has {first.frame_shape[0]}x{first.frame_shape[1]}; all "
                    "files of a folder must have the same frame shape"
                )
            if part.dtype != first.dtype:
                raise InputError(
                    f"{path} has pixel type {part.dtype} but {first.path.name} has {first.dtype}; "
                    "all files of a folder must have the same pixel type"
                )
            if part.cut is not None and k + 1 < len(tiffs):  # (its whole frames, then none)
                notes.append(_cut_folder_note(folder, path, part.cut.why, tiffs[k + 1:],
                                              parts))
                break
    except BaseException:
        for part in parts:
            part.close()
        raise
    if len(parts) > 1 and all(p.z_stack for p in parts):
        # a light-sheet export, a Z stack a time point: its volumes, as a T x Z file's (its
        # planes registered as frames would mix depth with drift)
        planes = {p.n_frames for p in parts}
        if len(planes) > 1:
            for part in parts:
                part.close()
            counts = ", ".join(str(n) for n in sorted(planes))
            raise InputError(f"folder {folder} holds Z stacks of {counts} planes: a series of "
                             "volumes needs as many planes in every file (a file cut short: "
                             "copy it again, or move it out)")
        z = planes.pop()
        for p in parts:
            p.notes = [n for n in p.notes if "every Z plane is a frame" not in n]
        src = FrameSource(parts, notes + [
            f"folder {folder.name} holds {plural(len(parts), 'file')} of {z} Z planes each: "
            f"{plural(len(parts), 'volume')} (a file a time point), read plane by plane"],
            layout=(("T", len(parts)), ("Z", z)))
        src.volumes = HoldsVolumes(folder, len(parts), z, "TZYX", folder=True)
        return src
    return FrameSource(parts, notes)


def open_stack(path, channel: int | None = None) -> FrameSource:
    """Open a TIFF stack, or a folder of TIFF files, for lazy reading.

    Parameters
    ----------
    path : str or os.PathLike
        A TIFF file (multi-page, ImageJ hyperstack, OME-TIFF, RGB) or a folder of TIFF files,
        read in natural order (``frame_2.tif`` before ``frame_10.tif``); other files in the
        folder are skipped with a note in :attr:`FrameSource.notes`.  Or a Zarr store or
        OME-Zarr image, an HDF5 or NWB file (:mod:`xcorr_app.io._formats`: their optional
        libraries), read chunk by chunk; ``FILE:/DATASET`` names a dataset inside one, and
        ``?z=K`` at the end picks one Z plane and ``?axes=TZYX`` names the file's axes
        (:func:`~xcorr_app.io.source_path`; the letters: :func:`~xcorr_app.io.parse_axes`).
    channel : int, optional
        Channel (or RGB sample) to read from multi-channel files; required for them.

    Returns
    -------
    FrameSource

    Raises
    ------
    InputError
        For a missing path, a path that is neither a regular file nor a folder (a named pipe,
        a device), an empty folder or one without TIFF files, files of mixed shapes, a file
        that cannot be read (permission denied), a truncated or damaged file (naming the
        frame where it breaks), a zero-size image, an unsupported pixel type, a bad
        ``channel``.  A T x Z TIFF without ``?z=K`` is read plane by plane, T then Z, and says
        so (``volumes``: what :func:`~xcorr_app.io.check_planes` refuses where frames are
        registered).

    Examples
    --------
    >>> src = open_stack("sample_data/moon_drift.tif")
    >>> len(src), src.frame_shape, src.dtype
    (12, (120, 160), dtype('uint16'))
    >>> src.close()
    """
    from ._formats import format_of, source_parts

    path, dataset, z, axes = source_parts(path)  # FILE, FILE:/DATASET, FILE?z=K&axes=TZYX
    if not path.exists():
        raise InputError(f"{path} does not exist; check the path")
    fmt = format_of(path) if path.is_dir() or path.is_file() else "tiff"
    if fmt != "tiff":
        from ._sources import open_format

        return open_format(fmt, path, dataset, channel, z, axes)
    if dataset and path.is_dir():
        raise InputError(f"{path} is a folder of TIFF files: a dataset ({dataset}) names an "
                         "array inside an HDF5, Zarr or NWB file, or a TIFF file's image "
                         "series; leave it out")
    if path.is_dir():
        if z is not None:
            raise InputError(f"--z {z}: {path} is a folder of TIFF files; --z picks a plane "
                             "of one file")
        try:
            return _open_folder(path, channel, axes)
        except PermissionError:
            raise InputError(f"{path}: permission denied; xcorr needs to read the folder "
                             "and its files") from None
    if not path.is_file():  # reading a named pipe or a device would block or never end
        raise InputError(f"{path} is not a regular file (a named pipe, socket or device); "
                         "give a TIFF file or a folder of TIFF files")
    frames = TiffFrames(path, channel, axes, series=dataset or None)  # (FILE:N: a series)
    src = FrameSource([frames], [])
    if z is None:  # (a T x Z stack's planes, read as frames: align refuses them, check_planes)
        src.volumes = volumes_of(frames, path)
        if src.volumes is not None:
            src.notes.append(f"{path.name} holds {plural(src.volumes.times, 'volume')} of "
                             f"{plural(src.volumes.planes, 'Z plane')}: read plane by plane, "
                             + ("Z then T" if z_first(src.volumes.axes) else "T then Z"))
    if z is not None:
        from ._ome import PlaneFrames

        return PlaneFrames(src, path, z, axes, dataset or None)
    return src


def read_image(path, channel: int | None = None) -> np.ndarray:
    """Read one 2-D image (e.g. a reference image); a one-frame stack file is fine.

    Examples
    --------
    >>> from xcorr_app.io._reader import read_image
    >>> read_image("sample_data/cell_frames/frame_1.tif").shape
    (120, 160)
    """
    with open_stack(path, channel) as src:
        if src.n_frames != 1:
            raise InputError(f"{path} holds {src.n_frames} frames; a reference image must be "
                             "a single 2-D image")
        return src.read(0, 1)[0]


class ArraySource:
    """An in-memory ``(N, H, W)`` stack (NumPy or CuPy) with the interface of :class:`FrameSource`.

    Examples
    --------
    >>> src = ArraySource(np.zeros((3, 4, 5), np.uint16))
    >>> src.n_frames, src.frame_shape, src.read(1, 3).shape
    (3, (4, 5), (2, 4, 5))
    """

    def __init__(self, stack, name="array"):
        if stack.ndim == 2:
            stack = stack[None]
        if stack.ndim != 3:
            raise InputError(f"a stack must be (N, H, W) or one (H, W) frame, got shape {stack.shape}")
        if 0 in stack.shape:
            raise InputError(f"cannot align an empty stack of shape {stack.shape}")
        self.stack, self.name = stack, name
        self.concurrent_reads = isinstance(stack, np.ndarray)
        self.n_frames, self.frame_shape = stack.shape[0], tuple(stack.shape[1:])
        self.dtype = np.dtype(stack.dtype)
        self.notes, self.paths = [], []

    def source_name(self, i):
        return self.name

    def source_names(self):
        """:meth:`source_name` of every frame (the array's name: one list, not a call a
        frame: 4096 calls were a millisecond of the GPU's idle time between the passes)."""
        return [self.name] * self.n_frames

    def read(self, start, stop, out=None):
        if out is None:
            return self.stack[start:stop]
        out[...] = self.stack[start:stop]
        return out

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class OffsetFrames:
    """Frames indexed by the frame numbers of a larger stack: frame ``i`` is
    ``frames[i - first]``; ``view[a:b]`` slices ``frames`` only when asked (h5py, zarr and the
    like read on slicing).

    Examples
    --------
    >>> view = OffsetFrames(np.arange(10), first=4)
    >>> view[5:7].tolist()
    [1, 2]
    """

    def __init__(self, frames, first):
        self.frames, self.first = frames, int(first)

    def __getitem__(self, key):
        return self.frames[key.start - self.first:key.stop - self.first]


def _window(stack, start, stop):
    """Frames ``start:stop`` of ``stack`` as frames ``0:stop - start``: a view of a NumPy or
    CuPy array, else an :class:`OffsetFrames` that slices later."""
    base, first = (stack.frames, stack.first) if isinstance(stack, OffsetFrames) else (stack, 0)
    if isinstance(base, np.ndarray) or is_cupy_array(base):
        return base[start - first:stop - first]
    return OffsetFrames(base, first - start)


class FrameRange:
    """Frames ``start:stop`` of a source, with the source's interface (frame ``i`` of the range is
    frame ``start + i`` of the source; :meth:`source_name` and errors use the source's numbers).

    Examples
    --------
    >>> src = FrameRange(ArraySource(np.arange(6)[:, None, None] * np.ones((6, 2, 2))), 2, 5)
    >>> src.n_frames, float(src.read(0, 1)[0, 0, 0]), src.start
    (3, 2.0, 2)
    """

    def __init__(self, src, start: int, stop: int):
        if not 0 <= start <= stop <= src.n_frames:
            raise InputError(f"frames {start}:{stop} out of range for {src.n_frames} frames")
        self.src, self.start, self.stop = src, int(start), int(stop)
        self.n_frames = self.stop - self.start
        self.frame_shape, self.dtype = src.frame_shape, src.dtype
        self.paths = src.paths
        self.concurrent_reads = getattr(src, "concurrent_reads", False)
        stash = getattr(src, "stash", None)  # (a stack kept on the GPU: streaming/_stash.py)
        self.stash = None if stash is None else stash.window(start, stop)
        # (the whole stack kept there, or one GPU's range of a gpus run)
        if self.stash is not None and self.stash.complete:
            self.stack = self.stash.frames
        else:
            stack = getattr(src, "stack", None)
            self.stack = None if stack is None else _window(stack, start, stop)

    def source_name(self, i):
        return self.src.source_name(self.start + i)

    @property
    def notes(self):
        """The source's (asked when read: a task reading its range looks for nothing more)."""
        return self.src.notes

    @property
    def stored(self):
        """Where the range's frames lie in the source's file (``(path, byte offset)``, the
        source's :attr:`TiffFrames.stored` moved on by ``start`` frames), else None."""
        stored = getattr(self.src, "stored", None)
        if stored is None:
            return None
        frame_bytes = int(np.prod(getattr(self.src, "item_shape", self.frame_shape))) \
            * np.dtype(self.dtype).itemsize
        return stored[0], stored[1] + self.start * frame_bytes

    def read(self, start, stop, out=None):
        return self.src.read(self.start + start, self.start + stop, out=out)


class ChannelStack:
    """Every channel of a multi-channel TIFF (or folder): :meth:`read` gives
    ``(stop - start, C, H, W)`` frames (one :func:`open_stack` per channel underneath).

    Examples
    --------
    >>> import tempfile, tifffile
    >>> path = tempfile.mkdtemp() + "/rgb.tif"
    >>> tifffile.imwrite(path, np.zeros((4, 3, 5, 6), np.uint8), imagej=True,
    ...                  metadata={"axes": "TCYX"})
    >>> with ChannelStack(path) as cs:
    ...     cs.n_frames, cs.n_channels, cs.read(1, 3).shape
    (4, 3, (2, 3, 5, 6))
    """

    def __init__(self, path):
        first = open_stack(path, channel=0)
        self.n_channels = first.n_channels
        self._srcs = [first]
        try:
            self._srcs += [open_stack(path, channel=c) for c in range(1, self.n_channels)]
        except BaseException:
            self.close()
            raise
        self.n_frames, self.frame_shape = first.n_frames, first.frame_shape
        self.item_shape = (self.n_channels, *self.frame_shape)  # one frame as read
        self.dtype, self.notes, self.paths = first.dtype, first.notes, first.paths
        self.volumes = getattr(first, "volumes", None)  # (a T x Z stack's, as open_stack's)

    def source_name(self, i):
        return self._srcs[0].source_name(i)

    def read(self, start, stop, out=None):
        frames = np.stack([s.read(start, stop) for s in self._srcs], axis=1)
        if out is None:
            return frames
        out[...] = frames
        return out

    def close(self):
        for s in self._srcs:
            s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_source(stack_or_path, channel=None):
    """A frame source for a path (see :func:`open_stack`) or an in-memory array."""
    if isinstance(stack_or_path, (str, Path)):
        return open_stack(stack_or_path, channel=channel)
    return ArraySource(stack_or_path)


class SourceArray:
    """A frame source (:func:`open_stack`'s) as an array sliced along its first axis, what a
    3-D run reads (``data[start:stop]``): its frames ``(N, Y, X)``, or with ``volumes`` its
    frames grouped by their T and Z axes into ``(T, Z, Y, X)`` volumes (in either order in
    the file).  Make one with :func:`open_array`.

    Examples
    --------
    >>> from xcorr_app.io._formats import ArrayFrames
    >>> data = np.arange(24, dtype=np.uint16).reshape(2, 3, 2, 2)  # (Z, T, Y, X)
    >>> vols = SourceArray(ArrayFrames(lambda: (data, None), "ZTYX", "mem"), volumes=True)
    >>> vols.shape, vols[1:3, :, 0, 0].tolist()
    ((3, 2, 2, 2), [[4, 16], [8, 20]])
    """

    def __init__(self, src, volumes=False, name=None):
        self.src, self.name = src, str(name or getattr(src, "name", "the stack"))
        self.dtype = np.dtype(src.dtype)
        h, w = src.frame_shape
        if not volumes:
            if getattr(src, "volumes", None) is not None:
                raise src.volumes  # (its planes are no frames of one time series)
            self._index = None
            self.shape = (src.n_frames, h, w)
        else:
            self._index = _volume_index(getattr(src, "frame_layout", (("T", src.n_frames),)),
                                        self.name)
            self.shape = (*self._index.shape, h, w)
        self.ndim = len(self.shape)

    def __len__(self):
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        return self[:] if dtype is None else self[:].astype(dtype)

    def __getitem__(self, key):
        key, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if isinstance(key, (int, np.integer)):
            i = range(len(self))[key]  # (IndexError out of range, as NumPy's)
            return self._read(i, i + 1)[0][rest]
        if not isinstance(key, slice):
            raise TypeError(f"{type(self).__name__} is sliced along its first axis, not by "
                            f"{type(key).__name__}")
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise TypeError(f"{type(self).__name__} is read in runs: a step of {step} is not "
                            "supported")
        return self._read(start, max(start, stop))[(slice(None), *rest)]

    def _read(self, start, stop):
        if self._index is None:
            return self.src.read(start, stop)
        frames = self._index[start:stop].ravel()
        h, w = self.shape[2:]
        if len(frames) and (np.diff(frames) == 1).all():  # (T before Z: one run)
            out = self.src.read(int(frames[0]), int(frames[-1]) + 1)
        else:
            out = np.empty((len(frames), h, w), self.dtype)
            for k, i in enumerate(frames.tolist()):
                self.src.read(i, i + 1, out=out[k:k + 1])
        return out.reshape(stop - start, self.shape[1], h, w)

    def close(self):
        self.src.close()


def _volume_index(layout, name):
    """``(T, Z)`` frame numbers of the planes of each volume, from a source's frame layout;
    an InputError where its frames run over other axes than T and Z."""
    letters, sizes = [a for a, _ in layout], [int(n) for _, n in layout]
    other = [f"{a} ({n})" for a, n in layout if a not in "TZ" and n > 1]
    if other or len(set(letters)) != len(letters):
        raise InputError(f"{name} (frames over its axes {''.join(letters)}, sizes {sizes}) is "
                         "no stack of (T, Z) volumes; name its axes, e.g. axes=TZYX")
    size = dict(layout)
    times, planes = size.get("T", 1), size.get("Z", 1)
    if not layout:
        return np.zeros((1, 1), np.int64)
    grid = {"T": np.arange(times)[:, None], "Z": np.arange(planes)[None, :]}
    coords = [np.broadcast_to(grid.get(a, 0), (times, planes)) for a in letters]
    return np.ravel_multi_index(tuple(coords), sizes).astype(np.int64)


def open_array(path, volumes=False, channel=None) -> SourceArray:
    """The source ``path`` (any :func:`open_stack` reads) as a :class:`SourceArray`:
    ``(N, Y, X)`` frames, or with ``volumes`` ``(T, Z, Y, X)`` volumes, where a 4-D array
    whose file names no axes is read as ``TZYX`` (the caller says it holds volumes); of a
    multi-channel file, ``channel`` (:func:`open_stack`'s: only its planes are read)."""
    from ._axes import AxesUnknown
    from ._formats import with_axes

    try:
        src = open_stack(path, channel=channel)
    except AxesUnknown as exc:
        if not volumes or exc.ndim != 4:
            raise
        src = open_stack(with_axes(path, "TZYX"), channel=channel)
    try:
        return SourceArray(src, volumes, name=path)
    except BaseException:
        src.close()
        raise
