"""The napari reader of the stacks xcorr reads (a multi-page TIFF, an ImageJ hyperstack,
OME-TIFF, a folder of TIFFs; Zarr and OME-Zarr, HDF5, NWB and CZI with their extras), through
:func:`xcorr_app.io.open_stack`, and the sample stacks.

A stack larger than :data:`LAZY_BYTES` becomes a dask array read a block of frames at a time
(napari reads what it shows; the widget streams it).  Channels become a C axis: ``(T, C, Y,
X)``; a stack with T and Z axes keeps both: ``(T, Z, Y, X)`` or ``(T, Z, C, Y, X)``.

Examples
--------
>>> data, kwargs, kind = read_stack("sample_data/moon_drift.tif")[0]
>>> data.shape, kwargs["name"], kind
((12, 120, 160), 'moon_drift', 'image')
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .._samples import SAMPLES, sample_path
from ..errors import XcorrError
from ..io import TIFF_SUFFIXES, describe, format_of, open_stack

#: stacks at least this large are opened lazily (dask), not read whole
LAZY_BYTES = 1 << 30
#: frames per dask block of a lazy stack
BLOCK_FRAMES = 64


def napari_get_reader(path):
    """The reader function for ``path`` (a stack xcorr reads: a TIFF file or folder, a Zarr
    store, an HDF5, NWB, CZI or ND2 file), or None for other paths (napari then asks the next
    reader)."""
    if isinstance(path, list):
        path = path[0] if len(path) == 1 else None
    if path is None:
        return None
    p = Path(path)
    if not p.exists():
        return None
    fmt = format_of(p)
    if fmt == "tiff" and p.is_file() and p.suffix.lower() not in TIFF_SUFFIXES:
        return None
    return read_stack


def frame_layout(axes, shape, n):
    """The frame axes of a source as napari shows them: ``("TZ", (T, Z))`` where the file's
    frames are its T x Z planes (in file order, several of each), else ``("T", (n,))`` (a
    single time point's Z planes are the frames, as ``xcorr align`` takes them).

    >>> frame_layout("TZCYX", (4, 3, 2, 8, 8), 12)
    ('TZ', (4, 3))
    >>> frame_layout("TCZYX", (1, 2, 5, 8, 8), 5), frame_layout("QYX", (5, 8, 8), 5)
    (('T', (5,)), ('T', (5,)))
    """
    lead = [(a, int(k)) for a, k in zip(axes or "", shape or ()) if a not in "YXCS"]
    letters = "".join(a for a, _ in lead)
    sizes = tuple(k for _, k in lead)
    if sorted(letters) == ["T", "Z"] and math.prod(sizes) == n and min(sizes) > 1:
        return letters, sizes
    return "T", (n,)


def _channel(path, c, n, dtype, shape, lead):
    """One channel's frames ``(*lead, H, W)``: all of them in memory, or a lazy dask array
    for a big stack (blocks of whole rows of the last frame axis)."""
    with open_stack(path, channel=c) as src:
        if n * np.prod(shape) * dtype.itemsize < LAZY_BYTES:
            return src.read(0, n).reshape(*lead, *shape)
    import dask.array as da
    from dask import delayed

    def block(a, b):
        with open_stack(path, channel=c) as s:
            return s.read(a, b)

    row = math.prod(lead[1:])
    step = max(BLOCK_FRAMES // row, 1) * row
    flat = da.concatenate([da.from_delayed(delayed(block)(a, min(a + step, n)),
                                           (min(a + step, n) - a, *shape), dtype)
                           for a in range(0, n, step)])
    return flat.reshape(*lead, *shape)


def read_stack(path):
    """napari layer data ``[(data, {"name", "metadata"[, "scale"]}, "image")]`` of a stack:
    ``(T, Y, X)``, ``(T, C, Y, X)`` for several channels, ``(T, Z[, C], Y, X)`` with a Z axis;
    ``metadata["xcorr_axes"]`` says which (the widget starts from it), ``scale`` is the file's
    pixel size where it gives one."""
    if isinstance(path, list):
        path = path[0]
    path = Path(path)
    try:
        info = describe(path)
    except XcorrError as e:  # napari shows the message
        raise ValueError(str(e)) from None
    n, shape, channels = info["frames"], tuple(info["frame_shape"]), info["channels"]
    dtype = np.dtype(info["dtype"])
    letters, lead = frame_layout(info.get("axes"), info.get("shape"), n)
    stacks = [_channel(path, c, n, dtype, shape, lead) for c in range(channels)]
    if channels == 1:
        data, axes = stacks[0], letters + "YX"
    else:
        stack = np.stack if all(isinstance(s, np.ndarray) for s in stacks) else _dask_stack
        data, axes = stack(stacks, axis=len(lead)), letters + "CYX"
    name = path.stem[:-4] if path.stem.lower().endswith(".ome") else path.stem
    kwargs = {"name": name,
              "metadata": {"xcorr_axes": axes, "xcorr_source": str(path)}}
    size = info.get("pixel_size")
    if size and all(isinstance(v, (int, float)) and v > 0 for v in size[:2]):
        kwargs["scale"] = (1.0,) * (data.ndim - 2) + (float(size[0]), float(size[1]))
    return [(data, kwargs, "image")]


def _dask_stack(arrays, axis):
    import dask.array as da

    return da.stack(arrays, axis=axis)


def _sample(name):
    def load():
        return read_stack(sample_path(name))
    load.__name__ = f"{name}_sample"
    load.__doc__ = (f"The {name} sample stack (``{name}_drift.tif``, the installed package's "
                    "or the checkout's: :func:`xcorr_app._samples.sample_path`).")
    return load


cell_sample, moon_sample, hubble_sample = (_sample(n) for n in SAMPLES)
