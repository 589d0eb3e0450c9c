"""HDF5 datasets and NWB image series as frame sources (the ``hdf5`` and ``nwb`` extras, both
read with h5py): ``FILE.h5:/path`` (or ``--dataset``), a file's only image dataset, or an NWB
``ImageSeries``/``TwoPhotonSeries``/``OnePhotonSeries`` by name or path; read chunk by chunk,
with the calibration the file says: an HDF5 dataset's ``element_size_um`` and CaImAn's ``fr``
(frames per second), an NWB series' rate or regular timestamps and its imaging plane's
``grid_spacing``; an attribute that says nothing usable is a note, never a failure.

Examples
--------
>>> import tempfile, h5py
>>> path = tempfile.mkdtemp() + "/movie.h5"
>>> with h5py.File(path, "w") as f:
...     f["scan/data"] = np.ones((3, 8, 8), np.uint16)
>>> with open_hdf5(Path(path), None, None, None) as src:
...     src.n_frames, src.axes, src.name.endswith("movie.h5:/scan/data")
(3, 'TYX', True)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import InputError
from ._axes import given_axes, guessed_axes
from ._formats import ArrayFrames, library_errors, micrometers, need
from ._pread import PreadFile, StoredArray, chunk_slabs, preadable

__all__ = ["open_hdf5", "open_nwb", "stored_offsets", "stored_dataset", "absent_chunks",
           "NWB_SERIES"]

#: the NWB types whose ``data`` are frames
NWB_SERIES = ("ImageSeries", "TwoPhotonSeries", "OnePhotonSeries")


def _datasets(h5file):
    """Every dataset of two or more dimensions: ``{"/path": dataset}``."""
    found = {}

    def visit(name, item):
        if hasattr(item, "dtype") and item.ndim >= 2:
            found["/" + name] = item
    h5file.visititems(visit)
    return found


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _hdf5_layout(ds, notes):
    """``(axes or None, pixel size)`` from a dataset's attributes (``axes``, dimension labels,
    Fiji/ilastik ``element_size_um``); an attribute that says nothing usable is a note in
    ``notes``, not a failure (files carry many variants of them)."""
    axes = ds.attrs.get("axes")
    labels = [_text(d.label) for d in ds.dims] if hasattr(ds, "dims") else []
    if axes is not None:
        # (a letter an element, ['T', 'Y', 'X'], as h5py stores a list of strings: joined)
        axes = "".join(_text(a) for a in np.atleast_1d(axes).ravel()).upper() \
            if isinstance(axes, (np.ndarray, list, tuple)) else _text(axes).upper()
    elif labels and all(labels):
        axes = "".join(label[:1].upper() for label in labels)
    return axes, _pixel_size(ds.attrs.get("element_size_um"), notes)


def _pixel_size(size, notes):
    """``(y, x, "µm")`` from an ``element_size_um`` attribute (one size per axis, the last two
    Y and X; numbers, or their text), else None (a note where it was there but unusable).

    >>> _pixel_size([2.0, 0.5, 0.25], []), _pixel_size(b"1.5 0.5 0.5", [])
    ((0.5, 0.25, 'µm'), (0.5, 0.5, 'µm'))
    >>> notes = []; _pixel_size(0.3, notes), notes
    (None, ['element_size_um 0.3 holds no Y and X sizes: pixel size unknown'])
    """
    if size is None:
        return None
    try:
        if isinstance(size, (bytes, str)):
            values = [float(v) for v in _text(size).replace(",", " ").split()]
        else:
            values = [float(v) for v in np.atleast_1d(np.asarray(size)).ravel()]
        y, x = values[-2:]
        if len(values) >= 2 and all(np.isfinite((y, x))) and y > 0 and x > 0:
            return y, x, "µm"
    except (TypeError, ValueError):
        pass
    notes.append(f"element_size_um {_text(size)} holds no Y and X sizes: pixel size unknown")
    return None


def _z_size(size, axes):
    """The Z step (µm) an ``element_size_um`` attribute gives a dataset of ``axes`` (one size
    an axis, Fiji's and ilastik's, in the axes' order, or the last three Z, Y and X), where
    the axes name a Z before Y and X; else None.

    >>> _z_size([1.2, 0.3, 0.3], "TZYX"), _z_size([1, 2.0, 0.5, 0.5], "TZYX")
    (1.2, 2.0)
    >>> _z_size([0.3, 0.3], "TZYX"), _z_size([1.2, 0.3, 0.3], "TYX")
    (None, None)
    """
    if size is None or not axes or "Z" not in axes:
        return None
    try:
        values = [float(v) for v in (_text(size).replace(",", " ").split()
                                     if isinstance(size, (bytes, str))
                                     else np.atleast_1d(np.asarray(size)).ravel())]
    except (TypeError, ValueError):
        return None
    at = axes.index("Z") if len(values) == len(axes) else len(values) - 3
    if at < 0 or len(values) < 3 or not axes.endswith("YX"):
        return None
    return _positive(values[at])


def _positive(value):
    """``value`` as a finite positive number where it is one (a scalar number, or its text),
    else None (zero, negative, NaN, an array, a text or type that is no number).

    >>> _positive(30), _positive(b"2.5"), _positive(0.0), _positive("abc"), _positive([1, 2])
    (30.0, 2.5, None, None, None)
    """
    try:
        if isinstance(value, (bytes, str)):
            value = float(_text(value))
        array = np.asarray(value)
        if array.ndim or array.dtype.kind not in "iuf":
            return None
        number = float(array)
    except (TypeError, ValueError, UnicodeDecodeError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def _frame_interval(fr, notes, name="fr", unit="frames per second"):
    """Seconds between frames, ``1 / fr``, from a frame rate ``fr`` (``name`` in ``unit``:
    CaImAn's ``fr`` attribute, as ``movie.save`` and xcorr's HDF5 output write it, or an NWB
    series' ``starting_time`` rate); None where there is none, or it is no positive number (a
    note).

    >>> _frame_interval(20.0, [])
    0.05
    >>> notes = []; _frame_interval(0, notes), notes
    (None, ['fr 0 is no frame rate (frames per second): frame interval unknown'])
    """
    if fr is None:
        return None
    rate = _positive(fr)
    if rate is None:
        notes.append(f"{name} {_text(fr)} is no frame rate ({unit}): frame interval unknown")
        return None
    return 1.0 / rate


def _channel_names(value, notes):
    """The ``channel_names`` attribute as a list of texts (a single text: one name), or none
    (a note) where it is not a list of names.

    >>> _channel_names([b"GCaMP", "tdTomato"], []), _channel_names("GFP", [])
    (['GCaMP', 'tdTomato'], ['GFP'])
    >>> notes = []; _channel_names(3, notes), notes
    ([], ['channel_names 3 is not a list of names: channels unnamed'])
    """
    if value is None:
        return []
    if isinstance(value, (bytes, str)):
        return [_text(value)]
    values = np.asarray(value)
    if values.ndim == 1 and values.dtype.kind in "SUO":
        return [_text(v) for v in values]
    notes.append(f"channel_names {_text(value)} is not a list of names: channels unnamed")
    return []


def _open_file(h5py, file):
    with library_errors(file, "open"):
        return h5py.File(file, "r")


def open_hdf5(file: Path, dataset, channel, z, axes=None) -> ArrayFrames:
    """An HDF5 dataset as an :class:`ArrayFrames`; ``axes`` (:mod:`._axes`) names its axes
    instead of its attributes.

    Raises
    ------
    InputError
        A missing ``h5py`` (naming the pip command), a file that is no HDF5 or is truncated,
        a missing dataset, several datasets and none named, a bad layout, a 4-D or 5-D
        dataset whose attributes name no axes and none given (:class:`~._axes.AxesUnknown`).
    """
    given = axes
    h5py = need("hdf5")
    with _open_file(h5py, file) as f:
        found = _datasets(f)
        if dataset:
            item = f.get(dataset)
            if item is None or not hasattr(item, "dtype"):
                what = "no dataset" if item is None else "a group, not a dataset, at"
                raise InputError(f"{file} has {what} {dataset}; it holds "
                                 f"{', '.join(sorted(found)) or 'no image dataset'}")
            path = item.name
        elif len(found) == 1:
            path = next(iter(found))
        else:
            held = (f"{len(found)} datasets ({', '.join(sorted(found)[:10])})" if found
                    else "no dataset of two or more dimensions")
            raise InputError(f"{file} holds {held}; name one as {file}:/PATH (or --dataset "
                             "PATH)")
        said = []
        axes, pixel_size = _hdf5_layout(f[path], said)
        shape = f[path].shape
        sizes = f[path].attrs.get("element_size_um")
        names = _channel_names(f[path].attrs.get("channel_names"), said)
        interval = _frame_interval(f[path].attrs.get("fr"), said)
    notes = []
    if given is not None:
        axes = given_axes(axes, given, f"{file.name}:{path}", shape, notes)
    elif axes is None:
        axes = guessed_axes(len(shape), f"{file}:{path}", shape, channel, z)
        if len(shape) > 3:  # (3-D: TYX is no guess)
            notes.append(f"{file.name}:{path}: no axes in its attributes; read as {axes} "
                         "(axes=... names them otherwise)")
    notes += [f"{file.name}:{path}: {n}" for n in said]
    src = ArrayFrames(lambda: _opened(h5py, file, path), axes, f"{file}:{path}",
                      channel=channel, z=z, pixel_size=pixel_size, channel_names=names,
                      fmt="HDF5", paths=[file], notes=notes, stored=stored_dataset,
                      absent=absent_chunks)
    src.frame_interval = interval
    src.z_step = _z_size(sizes, axes)  # (the axes as read, given or guessed)
    return src


def _opened(h5py, file, path):
    """``(dataset, close)``: the h5py dataset of the open file."""
    f = h5py.File(file, "r")
    return f[path], f.close


def stored_dataset(ds):
    """A :class:`~._pread.StoredArray` of an h5py dataset stored uncompressed
    (:func:`stored_offsets`), else None: :class:`~._formats.ArrayFrames` reads it by
    ``os.preadv``, from several threads at once."""
    try:
        offsets = stored_offsets(ds)
        return None if offsets is None else StoredArray(PreadFile.open(ds.file.filename),
                                                        ds.dtype, ds.shape, offsets)
    except OSError:  # (a file that cannot be opened twice: h5py reads it)
        return None


def stored_offsets(ds):
    """The file offsets of the slabs of an h5py dataset ``ds`` stored uncompressed in the
    machine's byte order (see :class:`~._pread.StoredArray`): contiguous, or in chunks of
    whole frames (each chunk a run of whole slabs), every chunk written, wherever h5py put
    them; else None.

    Why: h5py serializes its calls, so a stack is read on one thread (docs/performance.md,
    OME-Zarr and HDF5 inputs), and HDF5 puts its chunk index's nodes between the
    chunks of a large dataset, so its frames are rarely one run of the file; read by
    ``os.preadv`` at each chunk's offset, on the prefetcher's threads, as a TIFF is.

    >>> import tempfile, h5py
    >>> path = tempfile.mkdtemp() + "/m.h5"
    >>> with h5py.File(path, "w") as f:
    ...     f["a"] = np.arange(24, dtype=np.uint16).reshape(2, 3, 4)
    ...     _ = f.create_dataset("c", data=np.ones((3, 2, 2), "u2"), chunks=(2, 2, 2))
    ...     _ = f.create_dataset("z", data=np.ones((2, 3, 4)), compression="gzip")
    >>> with h5py.File(path, "r") as f:
    ...     a, c = stored_offsets(f["a"]), stored_offsets(f["c"])
    ...     len(a), int(c[1] - c[0]), stored_offsets(f["z"])
    (2, 8, None)
    """
    try:
        from h5py import h5t

        plist = ds.id.get_create_plist()
        if ds.dtype.kind not in "uif" or not preadable(ds.dtype) or ds.size == 0 \
                or ds.ndim < 2 or plist.get_nfilters() or plist.get_external_count() \
                or getattr(ds, "is_virtual", False) \
                or not ds.id.get_type().equal(h5t.py_create(ds.dtype)):
            return None  # (a stored type h5py converts, e.g. 12 bits at an offset: h5py)
        shape, size = ds.shape, ds.dtype.itemsize
        if ds.chunks is None:
            offset = ds.id.get_offset()
            if offset is None:  # (never written)
                return None
            frame = math.prod(shape[1:]) * size
            return offset + frame * np.arange(shape[0], dtype=np.int64)
        return _chunk_offsets(ds, shape, tuple(ds.chunks), size)
    except (AttributeError, KeyError, RuntimeError, TypeError, ValueError):
        return None  # (an h5py without chunk queries, or a layout it cannot tell)


def absent_chunks(ds):
    """``(missing, block, fill)`` of an h5py dataset (see :class:`~._formats.ArrayFrames`'
    ``absent``): which of its chunks were never written (a contiguous dataset: all or none),
    by HDF5's chunk index (its count first: a dataset missing none costs that alone); None
    where none is missing, or where HDF5 cannot tell (external, virtual, compact storage).

    >>> import tempfile, h5py
    >>> path = tempfile.mkdtemp() + "/m.h5"
    >>> with h5py.File(path, "w") as f:
    ...     f.create_dataset("c", shape=(6, 4, 4), dtype="u2", chunks=(2, 4, 4))[:2] = 1
    >>> with h5py.File(path, "r") as f:
    ...     missing, block, fill = absent_chunks(f["c"])
    >>> missing.ravel().tolist(), block, int(fill)
    ([False, True, True], (2, 4, 4), 0)
    """
    from h5py import h5d

    plist = ds.id.get_create_plist()
    if ds.size == 0 or plist.get_external_count() or getattr(ds, "is_virtual", False) \
            or plist.get_layout() not in (h5d.CONTIGUOUS, h5d.CHUNKED):
        return None
    shape = tuple(int(n) for n in ds.shape)
    if ds.chunks is None:
        if ds.id.get_offset() is not None:
            return None
        return np.ones((1,) * len(shape), bool), shape, ds.fillvalue
    block = tuple(int(c) for c in ds.chunks)
    grid = tuple(-(-n // c) for n, c in zip(shape, block))
    count = ds.id.get_num_chunks()
    if count >= math.prod(grid):
        return None
    missing = np.ones(grid, bool)
    infos = []
    if hasattr(ds.id, "chunk_iter"):  # one pass (get_chunk_info(i) walks the index each call)
        ds.id.chunk_iter(infos.append)
    else:
        infos = [ds.id.get_chunk_info(i) for i in range(count)]
    for info in infos:
        missing[tuple(int(o) // c for o, c in zip(info.chunk_offset, block))] = False
    return missing, block, ds.fillvalue


def _chunk_offsets(ds, shape, chunk, size):
    """:func:`stored_offsets` of a chunked dataset whose chunks are runs of whole slabs
    (:func:`~._pread.chunk_slabs`), each where h5py's chunk index says."""
    layout = chunk_slabs(shape, chunk)
    if layout is None:
        return None
    a, per = layout
    slab = math.prod(shape[a + 1:]) * size
    grid = (*shape[:a], -(-shape[a] // per))
    if ds.id.get_num_chunks() != math.prod(grid):
        return None  # (chunks never written: h5py gives their fill value)
    infos = []
    if hasattr(ds.id, "chunk_iter"):  # one pass (get_chunk_info(i) walks the index each call)
        ds.id.chunk_iter(infos.append)
    else:
        infos = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
    offsets = np.full(math.prod(shape[:a + 1]), -1, np.int64)
    whole = math.prod(chunk) * size
    for info in infos:
        at = info.chunk_offset
        if info.filter_mask or info.size != whole or any(at[a + 1:]):
            return None
        first = int(np.ravel_multi_index(at[:a + 1], shape[:a + 1]))
        k = min(per, shape[a] - at[a])
        offsets[first:first + k] = info.byte_offset + slab * np.arange(k, dtype=np.int64)
    return None if (offsets < 0).any() else offsets


def _series(f):
    """Every NWB image series of the file: ``{"/path": group}``."""
    found = {}

    def visit(name, item):
        kind = _text(item.attrs.get("neurodata_type", ""))
        if kind in NWB_SERIES and "data" in item and hasattr(item["data"], "dtype"):
            found["/" + name] = item
    f.visititems(visit)
    return found


def _nwb_axes(group, shape):
    """``(axes, said)`` of an NWB series' ``data`` of ``shape``: the schema's (frames, x, y[,
    z]), unless its ``dimension`` (pixels on x, y[, z]) names x and y the other way round, as
    a series stored (frames, rows, cols) does (``said``: whether the file tells)."""
    spec = "TXYZ"[:len(shape)]
    try:
        sizes = [int(v) for v in np.asarray(group["dimension"][()]).ravel()][:2]
    except (KeyError, TypeError, ValueError, OSError):
        sizes = []
    if len(sizes) == 2 and sizes[0] != sizes[1]:
        if tuple(shape[1:3]) == tuple(sizes):
            return spec, True
        if tuple(shape[1:3]) == tuple(sizes[::-1]):
            return "TYX" + spec[3:], True
    return spec, False


def _nwb_interval(group, notes):
    """Seconds between frames of an NWB series: ``1 / rate`` of its ``starting_time`` (Hz),
    else the median step of its ``timestamps`` where every step is within 1 % of it; None
    otherwise (a note where a rate is there but is no positive number; irregular timestamps
    have no one interval, and say so by themselves).

    >>> import tempfile, h5py
    >>> with h5py.File(tempfile.mkdtemp() + "/s.nwb", "w") as f:
    ...     f["a/starting_time"] = 0.0; f["a/starting_time"].attrs["rate"] = 25.0
    ...     f["b/timestamps"] = 3 + 0.04 * np.arange(6)
    ...     _nwb_interval(f["a"], []), round(_nwb_interval(f["b"], []), 9)
    (0.04, 0.04)
    """
    start = group.get("starting_time")
    if start is not None:
        return _frame_interval(start.attrs.get("rate"), notes, "starting_time rate", "Hz")
    stamps = group.get("timestamps")
    if stamps is None or not hasattr(stamps, "dtype") or stamps.dtype.kind not in "iuf" \
            or stamps.size < 2:
        return None
    steps = np.diff(np.asarray(stamps[()], np.float64).ravel())
    step = float(np.median(steps))
    if math.isfinite(step) and step > 0 and np.all(np.abs(steps - step) <= 0.01 * step):
        return step
    return None


def _nwb_pixel_size(group, notes):
    """``(y, x, "µm")`` of an NWB series from its imaging plane's ``grid_spacing`` ((x, y[,
    z]) in its ``unit``, ``meters`` by default; an ``ImageSeries`` has no plane), else None
    (a note where a spacing is there but holds no usable x and y, or a unit xcorr does not
    know).

    >>> import tempfile, h5py
    >>> with h5py.File(tempfile.mkdtemp() + "/s.nwb", "w") as f:
    ...     f["plane/grid_spacing"] = [5e-7, 2.5e-7]
    ...     f["s/imaging_plane"] = h5py.SoftLink("/plane")
    ...     _nwb_pixel_size(f["s"], [])
    (0.25, 0.5, 'µm')
    """
    plane = group.get("imaging_plane")
    spacing = plane.get("grid_spacing") if hasattr(plane, "get") else None
    if spacing is None or not hasattr(spacing, "dtype"):
        return None
    unit = _text(spacing.attrs.get("unit", "meters")).strip()
    scale = micrometers(1.0, unit)
    values = np.asarray(spacing[()])
    xy = [_positive(v) for v in values.ravel()[:2]] if values.ndim == 1 else []
    if len(xy) != 2 or None in xy or values.size > 3:
        notes.append(f"imaging plane grid_spacing {_text(values)} holds no x and y spacing: "
                     "pixel size unknown")
        return None
    if scale is None:
        notes.append(f"imaging plane grid_spacing unit {unit!r} is no length unit xcorr "
                     "reads (meters, millimeters, micrometers, nanometers): pixel size "
                     "unknown")
        return None
    x, y = (float(f"{v * scale:.12g}") for v in xy)  # (1e-6 m: 1 µm, not 0.9999...)
    return y, x, "µm"


def _nwb_calibration(group, name, notes):
    """``(frame interval, pixel size)`` of an NWB series (:func:`_nwb_interval`,
    :func:`_nwb_pixel_size`); what a file holds in a form not read (a broken link) is a note,
    never a failure."""
    said = []
    try:
        interval = _nwb_interval(group, said)
    except (KeyError, OSError, TypeError, ValueError, RuntimeError) as exc:
        interval = None
        said.append(f"its timing could not be read ({exc}): frame interval unknown")
    try:
        size = _nwb_pixel_size(group, said)
    except (KeyError, OSError, TypeError, ValueError, RuntimeError) as exc:
        size = None
        said.append(f"its imaging plane could not be read ({exc}): pixel size unknown")
    notes += [f"{name}: {n}" for n in said]
    return interval, size


def open_nwb(file: Path, dataset, channel, z, axes=None) -> ArrayFrames:
    """An NWB image series (``ImageSeries``, ``TwoPhotonSeries``, ``OnePhotonSeries``) by name
    or path; its ``data`` are (frame, x, y[, z]) as the NWB schema has them, (frame, y, x[,
    z]) where its ``dimension`` says so, or ``axes`` as the caller names them (pynwb writes a
    NumPy movie as it is given, usually (frames, rows, cols): ``axes="TYX"``); a note says
    which order was read where neither tells.  Its frame interval and pixel size as
    :func:`_nwb_interval` and :func:`_nwb_pixel_size` read them.

    Raises
    ------
    InputError
        A missing ``h5py``, a file that is no HDF5 (NWB in Zarr is not read), no such series,
        several series and none named, a series whose frames are stored outside the file.
    """
    h5py = need("nwb")
    given, notes = axes, []
    with _open_file(h5py, file) as f:
        series = _series(f)
        if dataset:
            key = "/" + dataset.strip("/")
            match = [p for p in series if p == key or p.rsplit("/", 1)[-1] == key[1:]]
        else:
            match = list(series)
        if len(match) != 1:
            held = ", ".join(sorted(series)) or "no image series"
            why = (f"has no image series {dataset}" if dataset and not match
                   else f"has {len(match)} series named {dataset}" if dataset
                   else "holds several image series" if series else "holds no image series")
            raise InputError(f"{file} {why} ({held}); name one as {file}:NAME (or --dataset "
                             "NAME)")
        group = series[match[0]]
        data = group["data"]
        if data.ndim < 3 or (data.size == 0 and "external_file" in group):
            # (pynwb writes an empty (0, 0, 0) data beside the external files' names)
            names = [_text(v) for v in np.asarray(group["external_file"][()]).ravel()] \
                if "external_file" in group else []
            held = f" ({', '.join(names)}, beside {file.name})" if names else ""
            raise InputError(f"{file}:{match[0]} stores its frames outside the file, in "
                             f"external files{held}; align those files instead")
        axes, said = _nwb_axes(group, data.shape)
        name = f"{file.name}:{match[0]}"
        if given is not None:
            axes = given_axes(axes if said else None, given, name, data.shape, notes)
        elif said and axes.startswith("TYX"):
            notes.append(f"{name}: stored as (frames, rows, cols), as its dimension says; "
                         f"read as axes {axes}")
        elif not said:
            notes.append(f"{name}: read as (frames, x, y), NWB's order (the file does not say "
                         "which); a series stored as (frames, rows, cols), as pynwb writes a "
                         "NumPy movie, is read right with axes=TYX")
        kind = _text(group.attrs.get("neurodata_type"))
        path = data.name
        interval, size = _nwb_calibration(group, name, notes)
    src = ArrayFrames(lambda: _opened(h5py, file, path), axes, f"{file}:{match[0]}",
                      channel=channel, z=z, fmt=f"NWB {kind}", paths=[file], notes=notes,
                      stored=stored_dataset, absent=absent_chunks, pixel_size=size)
    src.frame_interval = interval
    return src
