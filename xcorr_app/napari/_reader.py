"""The napari reader of the TIFF stacks xcorr reads (a multi-page file, an ImageJ hyperstack,
OME-TIFF, a folder of TIFFs), through :func:`xcorr_app.io.open_stack`, and the sample stacks.

A stack larger than :data:`LAZY_BYTES` becomes a dask array read a block of frames at a time
(napari reads what it shows; the widget streams it).  Channels become a C axis: ``(T, C, Y,
X)``.

Examples
--------
>>> data, kwargs, kind = read_stack("sample_data/moon_drift.tif")[0]
>>> data.shape, kwargs["name"], kind
((12, 120, 160), 'moon_drift', 'image')
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import XcorrError
from ..io import TIFF_SUFFIXES, open_stack

#: stacks at least this large are opened lazily (dask), not read whole
LAZY_BYTES = 1 << 30
#: frames per dask block of a lazy stack
BLOCK_FRAMES = 64
#: the bundled sample stacks (``sample_data/<name>_drift.tif`` of a checkout)
SAMPLES = ("cell", "moon", "hubble")


def napari_get_reader(path):
    """The reader function for ``path`` (a TIFF file or a folder), or None for other paths
    (napari then asks the next reader)."""
    if isinstance(path, list):
        path = path[0] if len(path) == 1 else None
    if path is None:
        return None
    p = Path(path)
    if p.suffix.lower() in TIFF_SUFFIXES or p.is_dir():
        return read_stack
    return None


def _channel(path, c, n, dtype, shape):
    """One channel's frames: all of them in memory, or a lazy dask array for a big stack."""
    with open_stack(path, channel=c) as src:
        if n * np.prod(shape) * dtype.itemsize < LAZY_BYTES:
            return src.read(0, n)
    import dask.array as da
    from dask import delayed

    def block(a, b):
        with open_stack(path, channel=c) as s:
            return s.read(a, b)

    return da.concatenate([da.from_delayed(delayed(block)(a, min(a + BLOCK_FRAMES, n)),
                                           (min(a + BLOCK_FRAMES, n) - a, *shape), dtype)
                           for a in range(0, n, BLOCK_FRAMES)])


def read_stack(path):
    """napari layer data ``[(data, {"name", "metadata"}, "image")]`` of a TIFF stack or folder:
    ``(T, Y, X)``, or ``(T, C, Y, X)`` for several channels; ``metadata["xcorr_axes"]`` says
    which (the widget starts from it)."""
    if isinstance(path, list):
        path = path[0]
    path = Path(path)
    try:
        with open_stack(path, channel=0) as src:
            n, shape, dtype, channels = src.n_frames, src.frame_shape, src.dtype, src.n_channels
    except XcorrError as e:  # napari shows the message
        raise ValueError(str(e)) from None
    stacks = [_channel(path, c, n, dtype, shape) for c in range(channels)]
    if channels == 1:
        data, axes = stacks[0], "TYX"
    else:
        stack = np.stack if all(isinstance(s, np.ndarray) for s in stacks) else _dask_stack
        data, axes = stack(stacks, axis=1), "TCYX"
    meta = {"xcorr_axes": axes, "xcorr_source": str(path)}
    return [(data, {"name": path.stem, "metadata": meta}, "image")]


def _dask_stack(arrays, axis):
    import dask.array as da

    return da.stack(arrays, axis=axis)


def sample_path(name: str) -> Path:
    """``sample_data/<name>_drift.tif`` of the checkout the package runs from (the samples are
    not in the wheel); FileNotFoundError where there is none."""
    import xcorr_app

    path = Path(xcorr_app.__file__).resolve().parents[1] / "sample_data" / f"{name}_drift.tif"
    if not path.is_file():
        raise FileNotFoundError(f"the sample stacks come with a checkout of xcorr "
                                f"(sample_data/); {path} is not there")
    return path


def _sample(name):
    def load():
        return read_stack(sample_path(name))
    load.__name__ = f"{name}_sample"
    load.__doc__ = f"The {name} sample stack (``sample_data/{name}_drift.tif``)."
    return load


cell_sample, moon_sample, hubble_sample = (_sample(n) for n in SAMPLES)
