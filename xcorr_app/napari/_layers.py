"""A napari layer's data as the stacks xcorr measures and warps (no Qt, no napari needed).

A layer's axes are named by a string such as ``"TCYX"``: ``T`` the frames (what is aligned),
``C`` channels, ``Z`` planes, ``Y X`` the frame.  :func:`measure_stack` picks the ``(N, H, W)``
stack a run measures (one channel; one plane or the planes' maximum); :func:`planes` yields
every ``(N, H, W)`` stack of a layer that the shifts are applied to.

Examples
--------
>>> import numpy as np
>>> data = np.zeros((5, 2, 8, 9), np.uint16)
>>> default_axes(data.ndim), measure_stack(data, "TCYX", channel=1).shape
('TCYX', (5, 8, 9))
>>> [index for index, _ in planes(data, "TCYX")]
[(slice(None, None, None), 0, slice(None, None, None), slice(None, None, None)), \
(slice(None, None, None), 1, slice(None, None, None), slice(None, None, None))]
"""

from __future__ import annotations

import itertools

import numpy as np

from ..io import SUPPORTED_DTYPES

#: the axes assumed for a layer of each number of dimensions (the widget lets the user change it)
DEFAULT_AXES = {3: "TYX", 4: "TCYX", 5: "TZCYX"}
#: the choice of plane for stacks with a Z axis that measures on the maximum over Z
MAX_PROJECTION = "max"


class Cancelled(Exception):
    """Raised from a progress callback to stop a run (the cancel button)."""


def default_axes(ndim: int) -> str:
    """The axes string assumed for a layer of ``ndim`` dimensions (``"TYX"`` for 3)."""
    if ndim not in DEFAULT_AXES:
        raise ValueError(f"a layer of {ndim} dimensions cannot be aligned: it needs frames (T) "
                         "and 2-D images (Y, X), with at most a channel (C) and a plane (Z) axis")
    return DEFAULT_AXES[ndim]


def check_axes(axes: str, shape) -> str:
    """``axes`` upper-cased, checked against the layer's ``shape``: one letter per dimension,
    each of T, C, Z at most once, ending in YX (ValueError otherwise)."""
    axes = axes.upper()
    if len(axes) != len(shape) or not axes.endswith("YX") or "T" not in axes \
            or sorted(axes) != sorted(set(axes)) or set(axes) - set("TCZYX"):
        raise ValueError(f"axes {axes!r} do not fit a layer of shape {tuple(shape)}: give one "
                         "letter per dimension from T, C, Z, ending in YX (e.g. TCYX)")
    return axes


def is_lazy(data) -> bool:
    """True for data napari holds lazily (a Dask or Zarr array): streamed, never loaded."""
    module = type(data).__module__
    return module.startswith(("dask.array", "zarr"))


def as_dask(data):
    """A dask array of lazy ``data`` (a Zarr array gets blocks of its own chunks)."""
    import dask.array as da

    if type(data).__module__.startswith("dask.array"):
        return data
    return da.from_array(data, chunks=getattr(data, "chunks", "auto"))


def measure_stack(data, axes: str, channel: int = 0, plane=MAX_PROJECTION):
    """The ``(N, H, W)`` stack a run measures: channel ``channel`` of a C axis, plane ``plane``
    (an int) or the maximum over a Z axis; NumPy or dask as ``data`` is (a Zarr array becomes
    dask).  Pixel types the reader does not take (int64, bool, ...) become float32."""
    axes = check_axes(axes, data.shape)
    if type(data).__module__.startswith("zarr"):
        data = as_dask(data)
    index = tuple(channel if a == "C" else (plane if a == "Z" and plane != MAX_PROJECTION
                                            else slice(None)) for a in axes)
    stack = data[index]
    rest = "".join(a for a, i in zip(axes, index) if isinstance(i, slice))
    if "Z" in rest:  # the maximum over the planes (a projection that keeps every feature)
        # (what stays is T, Y, X in that order: the axes end in YX)
        stack = stack.max(axis=rest.index("Z"))
    if np.dtype(stack.dtype) not in SUPPORTED_DTYPES:
        stack = stack.astype(np.float32)
    if is_lazy(stack):  # blocks of whole frames: the tasks of xcorr_app.dask.align
        stack = stack.rechunk({1: -1, 2: -1})
    return stack


def planes(data, axes: str):
    """Yield ``(index, stack)``: every ``(N, H, W)`` stack of the layer (one per channel and
    plane), ``index`` the tuple of the layer's data it is (slices on T, Y and X)."""
    axes = check_axes(axes, data.shape)
    if type(data).__module__.startswith("zarr"):  # (indexing a Zarr array reads it)
        data = as_dask(data)
    extra = [i for i, a in enumerate(axes) if a in "CZ"]
    for combo in itertools.product(*(range(data.shape[i]) for i in extra)):
        index = [slice(None)] * len(axes)
        for i, k in zip(extra, combo):
            index[i] = k
        yield tuple(index), data[tuple(index)]  # (T, Y, X): the axes end in YX
