"""Zarr (v2 and v3) arrays and OME-Zarr images as frame sources (the ``zarr`` extra): an array,
an array of a group named by ``STORE.zarr:/path``, a group's only array, or an OME-Zarr
image's level 0 with its axes, pixel size and channel names; read chunk by chunk.

Examples
--------
>>> import tempfile, zarr
>>> store = tempfile.mkdtemp() + "/movie.zarr"
>>> zarr.create_array(store, data=np.ones((4, 8, 8), np.uint16), chunks=(2, 8, 8)) is not None
True
>>> with open_zarr(Path(store), None, None, None) as src:
...     src.n_frames, src.axes, src.chunks
(4, 'TYX', (2, 8, 8))
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path

import numpy as np

from ..errors import InputError
from ._axes import given_axes, guessed_axes
from ._formats import SECONDS, ArrayFrames, library_errors, need, z_step
from ._pread import StoredArray, chunk_slabs, preadable

__all__ = ["open_zarr", "ome_metadata", "stored_chunks", "absent_chunks"]


def ome_metadata(attrs) -> dict | None:
    """The OME-NGFF ``multiscales`` metadata of a group's attributes (v0.4: at the top,
    v0.5: under ``ome``) with its ``omero`` channels and its ``version`` (0.5: the ``ome``
    key's, else the image's; None where neither says one), or None.

    >>> ome_metadata({"ome": {"version": "0.5", "multiscales": [{"axes": []}]}})["version"]
    '0.5'
    >>> ome_metadata({"multiscales": [{"version": "0.4", "axes": []}]})["version"]
    '0.4'
    """
    attrs = dict(attrs)
    ome = attrs.get("ome", attrs)
    scales = ome.get("multiscales") if isinstance(ome, dict) else None
    if not scales:
        return None
    version = (ome.get("version") if ome is not attrs else None) or \
        (scales[0].get("version") if isinstance(scales[0], dict) else None)
    return {"multiscales": scales[0], "omero": ome.get("omero") or attrs.get("omero") or {},
            "version": str(version) if version else None}


def frame_interval_of(meta) -> float | None:
    """Seconds between frames as OME-Zarr metadata (:func:`ome_metadata`) say: the level-0
    scale of its time axis in that axis's unit; None where it says none (no time axis, no
    time unit, no positive scale).

    >>> frame_interval_of({"multiscales": {"axes": [
    ...     {"name": "t", "type": "time", "unit": "millisecond"}, {"name": "y"}, {"name": "x"}],
    ...     "datasets": [{"path": "0", "coordinateTransformations": [
    ...         {"type": "scale", "scale": [50.0, 1.0, 1.0]}]}]}})
    0.05
    """
    scale = meta["multiscales"]
    axes = [a for a in scale.get("axes") or [] if isinstance(a, dict)]
    datasets = scale.get("datasets") or [{}]
    for transform in datasets[0].get("coordinateTransformations") or []:
        values = transform.get("scale", ())
        if transform.get("type") != "scale" or len(values) != len(axes):
            continue
        for axis, value in zip(axes, values):
            seconds = SECONDS.get(axis.get("unit")) if axis.get("type") == "time" \
                else None
            try:
                value = float(value) * seconds if seconds else None
            except (TypeError, ValueError):
                value = None
            if value is not None and math.isfinite(value) and value > 0:
                return value
    return None


@contextlib.contextmanager
def _malformed(file):
    """OME-Zarr metadata of the wrong shapes (a string where the specification has a list or
    an object, a scale that is no number) as one :class:`InputError` naming the store."""
    try:
        yield
    except InputError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise InputError(f"{file}: its OME-Zarr metadata (.zattrs or zarr.json) is malformed "
                         f"({type(exc).__name__}: {exc}); write it again, or give the level-0 "
                         "array as PATH:0") from None


def _ome_layout(meta, name):
    """``(level-0 path, axes, pixel size, channel names, Z step)`` of OME-Zarr metadata: the
    pixel size the level-0 scale of its ``y`` and ``x`` axes in their unit, None where neither
    axis names a unit (a unit is optional in OME-NGFF: a scale without one is in pixels); the
    Z step its ``z`` axis' scale in that unit (:func:`~._formats.z_step`), or None.

    >>> meta = {"multiscales": {"axes": [{"name": "t"}, {"name": "y"}, {"name": "x"}],
    ...     "datasets": [{"path": "0", "coordinateTransformations": [
    ...         {"type": "scale", "scale": [1.0, 1.0, 1.0]}]}]}, "omero": {}}
    >>> _ome_layout(meta, "s.zarr")
    ('0', 'TYX', None, [], None)
    >>> meta["multiscales"]["axes"][2]["unit"] = "micrometer"
    >>> _ome_layout(meta, "s.zarr")[2]
    (1.0, 1.0, 'micrometer')
    """
    scale = meta["multiscales"]
    datasets = scale.get("datasets") or []
    if not datasets:
        raise InputError(f"{name}: its OME-Zarr metadata names no dataset; check the file")
    axes_meta = scale.get("axes") or []
    names = [a["name"] if isinstance(a, dict) else str(a) for a in axes_meta]
    axes = "".join(n[:1].upper() for n in names)
    pixel_size = z = None
    for transform in datasets[0].get("coordinateTransformations") or []:
        if transform.get("type") == "scale" and len(transform.get("scale", ())) == len(names):
            units = {a.get("name"): a.get("unit") for a in axes_meta if isinstance(a, dict)}
            s = dict(zip(names, transform["scale"]))
            unit = units.get("x") or units.get("y")
            if "y" in s and "x" in s and unit:
                pixel_size = (float(s["y"]), float(s["x"]), str(unit))
                if "z" in s:
                    z = z_step(s["z"], units.get("z") or unit, unit)
    labels = [c.get("label", "") for c in meta["omero"].get("channels", [])]
    return datasets[0]["path"], axes, pixel_size, labels, z


def _arrays(group, prefix=""):
    """Every array of a group, recursively: ``{"/path": array}``."""
    found = {}
    for key in sorted(group.keys()):  # (zarr 2 and 3 alike)
        item, path = group[key], f"{prefix}/{key}"
        if hasattr(item, "dtype"):
            found[path] = item
        else:
            found.update(_arrays(item, path))
    return found


def _axes_of(array):
    """The axes the array's metadata name (v3 ``dimension_names``, xarray's
    ``_ARRAY_DIMENSIONS``), else None."""
    names = getattr(getattr(array, "metadata", None), "dimension_names", None) or \
        array.attrs.get("_ARRAY_DIMENSIONS")
    if names and all(names) and len(names) == array.ndim:
        return "".join(str(n)[:1].upper() for n in names)
    return None


def open_zarr(file: Path, dataset, channel, z, axes=None) -> ArrayFrames:
    """A Zarr store (folder) as an :class:`ArrayFrames`; ``dataset`` names an array in a group;
    ``axes`` (:mod:`._axes`) names the array's axes instead of its metadata.

    Raises
    ------
    InputError
        A missing ``zarr`` package (naming the pip command), a store that is no Zarr, a group
        with several arrays and no ``dataset``, a missing dataset, a bad layout, a 4-D or 5-D
        array whose metadata name no axes and none given (:class:`~._axes.AxesUnknown`).
    """
    zarr = need("zarr")
    name = str(file) + (f":{dataset}" if dataset else "")
    with library_errors(file, "open"):
        node = zarr.open(str(file), mode="r")
    given, axes = axes, None
    notes, pixel_size, labels, interval, version, fmt = [], None, [], None, None, "Zarr"
    z_spacing = None
    if not hasattr(node, "dtype"):  # a group: OME-Zarr, a named array, or its only array
        meta = ome_metadata(node.attrs)
        if meta is not None and not dataset:
            with _malformed(file):
                dataset, axes, pixel_size, labels, z_spacing = _ome_layout(meta, file)
                interval, version, fmt = frame_interval_of(meta), meta["version"], "OME-Zarr"
                levels = len(meta["multiscales"].get("datasets", []))
            if levels > 1:
                notes.append(f"{file.name}: OME-Zarr image of {levels} resolution levels; "
                             "reading level 0 (full resolution)")
        if dataset:
            key = dataset.strip("/")
            with library_errors(file, "open"):
                try:
                    node = node[key]
                except KeyError:
                    arrays = sorted(_arrays(node))
                    raise InputError(f"{file} has no array {dataset}; it holds "
                                     f"{', '.join(arrays) or 'no array'}") from None
            if not hasattr(node, "dtype"):
                raise InputError(f"{name} is a group, not an array; name one of "
                                 f"{', '.join(sorted(_arrays(node)))}")
        else:
            arrays = _arrays(node)
            if len(arrays) != 1:
                raise InputError(f"{file} holds {plural_arrays(arrays)}; name one as "
                                 f"{file}:/PATH (or dataset=PATH)")
            dataset, node = next(iter(arrays.items()))
    if axes is None:
        axes = _axes_of(node)
    if given is not None:
        axes = given_axes(axes, given, Path(name).name, node.shape, notes)
    elif axes is None:
        axes = guessed_axes(node.ndim, name, node.shape, channel, z)
        if node.ndim > 3:  # (3-D: TYX is no guess)
            notes.append(f"{Path(name).name}: no axes in its metadata; read as {axes} "
                         "(axes=... names them otherwise)")
    path = (dataset or "").strip("/")

    def opener():
        root = zarr.open(str(file), mode="r")
        return (root[path] if path and not hasattr(root, "dtype") else root), None

    src = ArrayFrames(opener, axes, name, channel=channel, z=z, pixel_size=pixel_size,
                      channel_names=labels, fmt=fmt,
                      paths=[file], notes=notes, stored=stored_chunks, absent=absent_chunks)
    src.frame_interval = interval
    src.z_step = z_spacing if "Z" in axes else None
    src.ngff_version = version  # (an OME-Zarr output keeps it: 0.5 stays 0.5)
    return src


def plural_arrays(arrays) -> str:
    names = sorted(arrays)
    return "no array" if not names else f"{len(names)} arrays ({', '.join(names[:10])})"


def stored_chunks(array):
    """A :class:`~._pread.StoredArray` of a Zarr array (zarr 3) in a local store whose chunks
    are its bytes as they are (v3: the ``bytes`` codec alone, in the machine's byte order;
    v2: no compressor, no filters, C order), hold whole frames (:func:`~._pread.chunk_slabs`)
    and no shards; else None (zarr reads it).  A chunk file missing when read (never written:
    the fill value) is read by zarr; one cut short is an error.

    Why: zarr reads each chunk file into a new buffer, then copies it into the caller's (a
    one-shot ``xcorr align`` of a Zarr stack read that way was much slower than of the same
    stack as HDF5 read by ``pread``: docs/performance.md, OME-Zarr and HDF5 inputs); a chunk
    file's bytes are read straight into the page-locked buffers here, on the prefetcher's
    threads.

    >>> import tempfile, zarr
    >>> a = zarr.create_array(tempfile.mkdtemp() + "/s.zarr", data=np.ones((3, 4, 5), "u2"),
    ...                       chunks=(2, 4, 5), compressors=None)
    >>> stored = stored_chunks(a)
    >>> stored.offsets.tolist(), stored.file_of.tolist(), stored.files[1].endswith("c/1/0/0")
    ([0, 40, 0], [0, 0, 1], True)
    >>> stored_chunks(zarr.create_array(tempfile.mkdtemp() + "/z.zarr", data=np.ones((3, 4, 5)),
    ...                                 chunks=(2, 4, 5))) is None  # (compressed)
    True
    """
    try:
        meta, store = array.metadata, array.store_path.store
        root, dtype = getattr(store, "root", None), np.dtype(array.dtype)
        if root is None or getattr(array, "shards", None) is not None \
                or dtype.kind not in "uif" or not preadable(dtype):  # (v3: always native)
            return None
        if meta.zarr_format == 3:
            codecs = tuple(meta.codecs)
            endian = getattr(getattr(codecs[0], "endian", None), "value", None) \
                if len(codecs) == 1 and type(codecs[0]).__name__ == "BytesCodec" else "?"
            if endian != sys.byteorder and (endian == "?" or dtype.itemsize > 1):
                return None
        elif meta.zarr_format != 2 or meta.compressor is not None or meta.filters \
                or meta.order != "C":
            return None
        shape, chunk = tuple(array.shape), tuple(array.chunks)
        layout = chunk_slabs(shape, chunk)
        if layout is None:
            return None
        a, per = layout
        grid = (*shape[:a], -(-shape[a] // per))
        # slab s: index i along axis a of the leading index r over the axes before it
        r, i = np.divmod(np.arange(math.prod(shape[:a + 1]), dtype=np.int64), shape[a])
        offsets = (i % per) * (math.prod(shape[a + 1:]) * dtype.itemsize)
        file_of = r * grid[-1] + i // per
        files = _ChunkPaths(Path(root) / array.store_path.path, meta, grid, len(shape))
        return StoredArray(files, dtype, shape, offsets, file_of)
    except (AttributeError, TypeError, ValueError):
        return None  # (zarr 2, another store or metadata: zarr reads it)


class _ChunkPaths:
    """The file of each chunk of :func:`stored_chunks` (in C order over its chunk grid),
    named as it is read: a store of many chunks opens at once."""

    def __init__(self, base, meta, grid, ndim):
        self.base, self.meta, self.grid, self.ndim = base, meta, grid, ndim

    def __len__(self):
        return math.prod(self.grid)

    def __getitem__(self, index):
        coords = tuple(int(c) for c in np.unravel_index(index, self.grid))
        return str(self.base / self.meta.encode_chunk_key(
            coords + (0,) * (self.ndim - len(self.grid))))


def absent_chunks(array):
    """``(missing, block, fill)`` of a Zarr array (zarr 3; see
    :class:`~._formats.ArrayFrames`' ``absent``): which of its stored objects (chunks, or the
    shards that hold them) are not in its store; None where none is missing.  A local store:
    a ``stat`` a chunk (microseconds each: a store of 20000 chunks, 0.07 s, where zarr's
    listing of it took 2 s and reading it 4 s); another: one listing of the array's keys.

    >>> import tempfile, zarr
    >>> a = zarr.create_array(tempfile.mkdtemp() + "/s.zarr", shape=(6, 4, 4), dtype="u2",
    ...                       chunks=(2, 4, 4))
    >>> a[:2] = 1
    >>> missing, block, fill = absent_chunks(a)
    >>> missing.ravel().tolist(), block, int(fill)
    ([False, True, True], (2, 4, 4), 0)
    """
    block = tuple(int(v) for v in (getattr(array, "shards", None) or array.chunks))
    grid = tuple(-(-int(n) // b) for n, b in zip(array.shape, block))
    store, prefix = array.store_path.store, array.store_path.path.strip("/")
    encode = array.metadata.encode_chunk_key
    root = getattr(store, "root", None)
    if root is not None:  # (a LocalStore: a folder)
        base = os.path.join(root, prefix)

        def there(key):
            return os.path.isfile(os.path.join(base, key))
    else:
        from zarr.core.sync import sync

        start = f"{prefix}/" if prefix else ""

        async def listed():
            return [key async for key in store.list_prefix(start)]

        keys = {key[len(start):] for key in sync(listed())}
        there = keys.__contains__
    missing = np.fromiter((not there(encode(c)) for c in np.ndindex(*grid)), bool,
                          math.prod(grid)).reshape(grid)
    return (missing, block, array.fill_value) if missing.any() else None
