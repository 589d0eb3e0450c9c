"""Volumes to register: an array (NumPy, CuPy, memory-mapped, Zarr or Dask: anything with a
shape that slices) or a path (``.npy``, a TIFF hyperstack, Zarr, HDF5, NWB; a source path
naming a dataset or the file's axes), read a chunk at a time; of a multi-channel file
(TCZYX, TZCYX) one channel, read alone where the format allows (its TIFF pages, a Zarr or
HDF5 slice).

Examples
--------
>>> import numpy as np
>>> src = open_volumes(np.zeros((3, 4, 5, 6), np.uint16))
>>> src.shape, src.read(1, 3).dtype, src.read(1, 3).shape
((3, 4, 5, 6), dtype('float32'), (2, 4, 5, 6))
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...backend import array_module_of, is_cupy_array, to_numpy
from ...errors import InputError
from ...io import PreadFile, preadable
from ._rows import item_sums


class Volumes:
    """A (T, Z, Y, X) source read a chunk at a time as float32 (NumPy, or CuPy for a CuPy
    array): the caller's data is never written."""

    def __init__(self, data, name="the stack", stored=None, n_channels=1):
        self.data, self.name = data, name
        self.shape = tuple(int(n) for n in data.shape)
        self.n_channels = int(n_channels)  # (the file's; ``data``: the one channel picked)
        # (path, byte offset) where ``data`` is a file's memory map of all its volumes, in C
        # order and the machine's byte order: read with positioned reads (io.PreadFile)
        self.stored = stored

    def read(self, start, stop, xp=None, chunk=None, scale=None):
        """Volumes ``start:stop`` (or ``chunk``, those volumes as stored, already read: from
        :meth:`frames`) as float32 on ``xp``'s device (default: where the data lies);
        InputError where one holds NaN or infinity.  Integers go to the device as they are
        (half the bytes of float32 for uint16) and are converted there; they need no
        finiteness check.

        ``scale``: ``"each"`` multiplies each float volume by the power of two that brings its
        largest magnitude into ``[0.5, 1)``, ``"all"`` the whole chunk by one
        (:func:`~xcorr_app.alignment.rigid.scale_free`, before the float32 conversion): the
        float32 sums and spectra of volumes of 1e20 overflow, of 1e-30 underflow, and an exact
        power of two changes no shift and no normalized correlation; None: values as stored."""
        if chunk is None:
            chunk = self.data[start:stop]
            chunk = chunk if is_cupy_array(chunk) else np.asarray(chunk)
        if xp is None:
            xp = array_module_of(chunk)
        moved = array_module_of(chunk) is not xp
        data = self.raw(start, stop, xp, chunk)
        own = moved  # (data a copy of its own: the input stays as it is)
        if scale is not None and data.dtype.kind == "f" and data.dtype.itemsize >= 4:
            from ..rigid import scale_free

            items = data.reshape(len(data) if scale == "each" else 1, -1, data.shape[-1])
            scaled = scale_free(items, xp)
            own = own or scaled is not items
            data = scaled.reshape(data.shape)
        if xp is np or (own and data.dtype == np.float32):
            out = data.astype(xp.float32, copy=not own)
        else:  # (one kernel of ours: CuPy's astype compiles one at first use)
            from ..rigid import area_float

            out = area_float(data.reshape(len(data), -1, data.shape[-1])).reshape(data.shape)
        if np.dtype(chunk.dtype).kind != "f":
            return out
        # a volume's float64 sum is finite where every voxel is (float32 cannot overflow it):
        # xcorr's row sums on the GPU, where CuPy's isfinite and all compiled at first use
        bad = ~np.isfinite(to_numpy(item_sums(out)))
        if bool(bad.any()):
            i = int(np.argmax(bad))
            item = "volume" if len(self.shape) == 4 else "frame"  # (zlocate's movie: frames)
            if np.isfinite(to_numpy(data[i])).all():  # (float64 past float32's range, unscaled)
                raise InputError(f"{item} {start + i} of {self.name} has values beyond "
                                 "float32's range (3.4e38); scale the data down first")
            raise InputError(f"{item} {start + i} of {self.name} has NaN or infinite values; "
                             "replace them (e.g. numpy.nan_to_num) first")
        return out

    def raw(self, start, stop, xp=None, chunk=None):
        """Volumes ``start:stop`` (or ``chunk``, as :meth:`read`) as stored, on ``xp``'s device
        (default: where the data lies): no conversion, no check; not to be written."""
        if chunk is None:
            chunk = self.data[start:stop]
            chunk = chunk if is_cupy_array(chunk) else np.asarray(chunk)
        if xp is None:
            xp = array_module_of(chunk)
        return to_numpy(chunk) if xp is np else xp.asarray(chunk)

    def frames(self):
        """The volumes as the streaming layer's frames, one volume an item, as stored
        (:class:`~xcorr_app.streaming.DeviceChunks` copies them to the device on two streams
        while it works: from the file's registered pages, or read ahead into page-locked
        buffers)."""
        return _VolumeItems(self.data, self.stored)


class _VolumeItems:
    """A (T, Z, Y, X) array as a frame source of T items (``read(start, stop, out)``); a device
    array or one in memory is handed out as it is (``stack``)."""

    def __init__(self, data, stored=None):
        self.n_frames, self.frame_shape = int(data.shape[0]), tuple(data.shape[1:])
        # native byte order: the device copies raw bytes (np.copyto swaps into the buffer)
        self.dtype = np.dtype(data.dtype).newbyteorder("=")
        self._data = data
        if is_cupy_array(data) or (type(data) is np.ndarray):
            self.stack = data
        self.concurrent_reads = isinstance(data, np.ndarray)  # (memory maps too)
        # a file's bytes copied by read system calls rather than out of the memory map, whose
        # first touch of each 4 KiB page faults (half a million faults for 2 GiB)
        # (streaming.RegisteredFile: the GPU copies straight out of the file's pages)
        self.stored, self._file = stored, None
        if stored is not None:
            self._file, self._at = PreadFile.open(stored[0]), int(stored[1])
            self._item_bytes = int(np.prod(self.frame_shape)) * self.dtype.itemsize

    def read(self, start, stop, out=None):
        if out is not None and self._file is not None and out.flags.c_contiguous:
            want = (stop - start) * self._item_bytes
            if self._file.read_into(out, self._at + start * self._item_bytes) == want:
                return out
        part = np.asarray(self._data[start:stop])  # (a Dask array computed: no copyto of its own)
        if out is None:
            return part
        np.copyto(out, part)
        return out


def _stored(data):
    """``(path, offset)`` of a memory map that holds a whole file's array in C order and the
    machine's byte order (a fresh ``np.load(mmap_mode="r")`` or ``tifffile.memmap``), else
    None."""
    if isinstance(data, np.memmap) and data.filename and data.flags.c_contiguous \
            and preadable(data.dtype):
        return data.filename, int(data.offset)
    return None


def _plain_tiff(file) -> bool:
    """Whether a TIFF's first series is its volumes as stored: no channel axis (``C``, or
    ``S`` samples) and T before Z where it names both (unnamed axes: ``TZYX``)."""
    import tifffile

    with tifffile.TiffFile(file) as tif:
        axes = tif.series[0].axes if tif.series else ""
    return not set(axes) & set("CS") and not ("T" in axes and "Z" in axes
                                              and axes.index("Z") < axes.index("T"))


def _read_path(path, ndim, channel=None):
    """The array of a path: a ``.npy`` file, or a TIFF of one channel and T before Z, as it
    is (memory-mapped where it can be); any other source path, one naming a dataset, a plane
    or its axes (:func:`~xcorr_app.io.source_parts`), or a ``channel`` of a multi-channel
    file, by the frame readers, as frames (``ndim`` 3) or volumes by its T and Z axes
    (:func:`~xcorr_app.io.open_array`): the channel's planes alone are read."""
    from ...io import format_of, open_array, source_parts

    file, dataset, z, axes = source_parts(path)
    if not file.exists():
        raise InputError(f"{path}: no such file or folder")
    if not file.is_file() and not file.is_dir():  # (open_stack's check: a read would block)
        raise InputError(f"{path} is not a regular file (a named pipe, socket or device); "
                         "give a .npy, TIFF or Zarr path")
    suffix = file.suffix.lower()
    as_it_is = dataset is None and z is None and axes is None
    if channel is not None and suffix == ".npy":
        raise InputError(f"channel {channel}: {path} is a .npy array of one channel; give its "
                         "volumes (T, Z, Y, X) alone, or a TIFF, Zarr or HDF5 file")
    try:
        if suffix == ".npy" and as_it_is:
            return np.load(file, mmap_mode="r")
        # (channel 0 of a file of one: as 2-D runs take it)
        if suffix in (".tif", ".tiff") and as_it_is and file.is_file() \
                and channel in (None, 0) and _plain_tiff(file):
            import tifffile

            try:
                return tifffile.memmap(file, mode="r")  # no copy where the file allows
            except (ValueError, OSError):
                return tifffile.imread(file)
    except InputError:
        raise
    except Exception as exc:  # a broken file: one line for the user
        raise InputError(f"{path}: cannot read it as volumes ({exc})") from exc
    if file.is_file() and format_of(file) == "tiff" and suffix not in (".tif", ".tiff"):
        raise InputError(f"{path}: unknown volume format {suffix!r}; use .npy, .tif, .zarr, "
                         "HDF5 or NWB")
    return open_array(str(path), volumes=ndim == 4, channel=channel)


def open_volumes(stack, ndim=4, what="(T, Z, Y, X)", channel=None):
    """A :class:`Volumes` for an array or a path of ``ndim`` dimensions; of a path to a
    multi-channel file (axes ``TCZYX``, ``TZCYX``), ``channel`` (required for several).

    Raises
    ------
    InputError
        A missing or unreadable path, another number of dimensions, an axis shorter than 2
        (the time axis may be 1), a complex or non-numeric type; a multi-channel file without
        ``channel``, a channel it does not have, a ``channel`` of an array in memory.
    """
    name, stored, n_channels = "the stack", None, 1
    if isinstance(stack, (str, Path)):
        name = str(stack)
        stack = _read_path(stack, ndim, channel)
        stored = _stored(stack)
        n_channels = getattr(getattr(stack, "src", None), "n_channels", 1)
    elif channel is not None:
        raise InputError(f"channel {channel} picks a channel of a multi-channel file; an "
                         "array in memory is one channel: pass stack[:, channel] (TCZYX)")
    elif isinstance(stack, (list, tuple)):
        stack = np.asarray(stack)
    if not hasattr(stack, "shape") or not hasattr(stack, "dtype"):
        raise InputError(f"expected a {what} array or a path, got {type(stack).__name__}")
    shape = tuple(int(n) for n in stack.shape)
    if len(shape) != ndim:
        raise InputError(f"{name} has shape {shape}; expected {what} ({ndim} dimensions)")
    kind = np.dtype(stack.dtype).kind
    if kind not in "biuf":
        raise InputError(f"{name} has dtype {stack.dtype}; expected real numbers")
    if shape[0] < 1 or min(shape[1:]) < 2:
        raise InputError(f"{name} has shape {shape}; each of its {what[1:-1]} axes after the "
                         "first needs 2 or more samples")
    return Volumes(stack, name, stored, n_channels)
