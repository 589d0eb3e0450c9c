"""HDF5 datasets and NWB image series as frame sources (the ``hdf5`` and ``nwb`` extras, both
read with h5py): ``FILE.h5:/path`` (or ``--dataset``), a file's only image dataset, or an NWB
``ImageSeries``/``TwoPhotonSeries``/``OnePhotonSeries`` by name or path; read chunk by chunk.

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
from ._formats import ArrayFrames, default_axes, library_errors, need

__all__ = ["open_hdf5", "open_nwb", "memory_map", "NWB_SERIES"]

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


def _hdf5_layout(ds):
    """``(axes, pixel size, guessed)`` from a dataset's attributes (``axes``, dimension labels,
    Fiji/ilastik ``element_size_um``)."""
    axes = ds.attrs.get("axes")
    labels = [_text(d.label) for d in ds.dims] if hasattr(ds, "dims") else []
    if axes is not None:
        axes, guessed = _text(axes).upper(), False
    elif labels and all(labels):
        axes, guessed = "".join(label[:1].upper() for label in labels), False
    else:
        axes, guessed = default_axes(ds.ndim), True
    size = ds.attrs.get("element_size_um")
    pixel_size = (float(size[-2]), float(size[-1]), "µm") if size is not None and \
        len(size) >= 2 else None
    return axes, pixel_size, guessed


def _open_file(h5py, file):
    with library_errors(file, "open"):
        return h5py.File(file, "r")


def open_hdf5(file: Path, dataset, channel, z) -> ArrayFrames:
    """An HDF5 dataset as an :class:`ArrayFrames`.

    Raises
    ------
    InputError
        A missing ``h5py`` (naming the pip command), a file that is no HDF5 or is truncated,
        a missing dataset, several datasets and none named, a bad layout.
    """
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
        axes, pixel_size, guessed = _hdf5_layout(f[path])
        ndim = f[path].ndim
        names = [_text(n) for n in f[path].attrs.get("channel_names", [])]
    notes = [f"{file.name}:{path}: no axes in its attributes; read as {axes}"] \
        if guessed and ndim > 3 else []
    return ArrayFrames(lambda: _opened(h5py, file, path), axes, f"{file}:{path}",
                       channel=channel, z=z, pixel_size=pixel_size, channel_names=names,
                       fmt="HDF5", paths=[file], notes=notes)


def _opened(h5py, file, path):
    """``(array, close)``: the dataset's bytes memory-mapped where they lie in the file as one
    run (:func:`memory_map`), else the h5py dataset."""
    f = h5py.File(file, "r")
    try:
        mapped = memory_map(file, f[path])
    except (OSError, ValueError):  # (a file system without memory maps: h5py reads it)
        mapped = None
    if mapped is not None:
        f.close()
        return mapped, None
    return f[path], f.close


def memory_map(file, ds):
    """The h5py dataset ``ds`` of ``file`` as a read-only ``np.memmap``, where its elements lie
    in the file in order, unfiltered: a contiguous dataset, or chunks of whole frames stored
    one after the other (h5py's chunk index says where); else None.

    Why: h5py serializes its calls, so a stack is read on one thread (about 3.5 GB/s from the
    page cache on an H100 host); a memory map is copied out on two, as the TIFF reader does.

    >>> import tempfile, h5py
    >>> path = tempfile.mkdtemp() + "/m.h5"
    >>> with h5py.File(path, "w") as f:
    ...     f["a"] = np.arange(24, dtype=np.uint16).reshape(2, 3, 4)
    ...     _ = f.create_dataset("z", data=np.ones((2, 3, 4)), compression="gzip")
    >>> with h5py.File(path, "r") as f:
    ...     memory_map(path, f["a"])[1, 2].tolist(), memory_map(path, f["z"])
    ([20, 21, 22, 23], None)
    """
    try:
        plist = ds.id.get_create_plist()
        if ds.dtype.kind not in "uif" or ds.size == 0 or plist.get_nfilters() \
                or plist.get_external_count() or getattr(ds, "is_virtual", False):
            return None
        if ds.chunks is None:
            offset = ds.id.get_offset()
        else:
            offset = _chunks_in_order(ds)
    except (AttributeError, KeyError, RuntimeError, TypeError, ValueError):
        return None  # (an h5py without chunk queries, or a layout it cannot tell)
    if offset is None:
        return None
    mapped = np.memmap(file, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape)
    mapped.chunks = ds.chunks  # (what ``xcorr info`` shows, as for the dataset)
    return mapped


def _chunks_in_order(ds):
    """The file offset of a chunked dataset's first chunk where every chunk holds whole
    frames, is written, unfiltered and follows the one before it in the file; else None."""
    chunk = ds.chunks
    if tuple(chunk[1:]) != tuple(ds.shape[1:]):
        return None
    n = -(-ds.shape[0] // chunk[0])
    if ds.id.get_num_chunks() != n:
        return None
    size = ds.dtype.itemsize * math.prod(chunk)
    infos = []
    if hasattr(ds.id, "chunk_iter"):  # one pass (get_chunk_info(i) walks the index each call)
        ds.id.chunk_iter(infos.append)
    else:
        infos = [ds.id.get_chunk_info(i) for i in range(n)]
    first = None
    for info in infos:
        at = info.chunk_offset[0] // chunk[0]
        if info.filter_mask or info.size != size \
                or tuple(info.chunk_offset[1:]) != (0,) * (ds.ndim - 1):
            return None
        if first is None:
            first = info.byte_offset - at * size
        if info.byte_offset != first + at * size:
            return None
    return first if len(infos) == n else None


def _series(f):
    """Every NWB image series of the file: ``{"/path": group}``."""
    found = {}

    def visit(name, item):
        kind = _text(item.attrs.get("neurodata_type", ""))
        if kind in NWB_SERIES and "data" in item and hasattr(item["data"], "dtype"):
            found["/" + name] = item
    f.visititems(visit)
    return found


def open_nwb(file: Path, dataset, channel, z) -> ArrayFrames:
    """An NWB image series (``ImageSeries``, ``TwoPhotonSeries``, ``OnePhotonSeries``) by name
    or path; its ``data`` are (frame, x, y[, z]) as the NWB schema has them.

    Raises
    ------
    InputError
        A missing ``h5py``, a file that is no HDF5 (NWB in Zarr is not read), no such series,
        several series and none named, a series whose frames are stored outside the file.
    """
    h5py = need("nwb")
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
        if data.ndim < 3:
            raise InputError(f"{file}:{match[0]} stores its frames outside the file (external "
                             "files); align those files instead")
        axes = "TXYZ"[:data.ndim]
        kind = _text(group.attrs.get("neurodata_type"))
        path = data.name
    return ArrayFrames(lambda: _opened(h5py, file, path), axes, f"{file}:{match[0]}",
                       channel=channel, z=z, fmt=f"NWB {kind}", paths=[file])

