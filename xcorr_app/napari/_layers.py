"""A napari layer's data as the stacks xcorr measures and warps (no Qt, no napari needed).

A layer's axes are named by a string such as ``"TCYX"``: ``T`` the frames (what is aligned),
``C`` channels, ``Z`` planes, ``Y X`` the frame, and after them ``S`` the colour samples of an
RGB(A) layer (``"TYXS"``).  :func:`measure_stack` picks the ``(N, H, W)`` stack a run measures
(one channel; one plane or the planes' maximum; the luminance or one colour); :func:`planes`
yields every ``(N, H, W)`` stack of a layer that the shifts are applied to.

Examples
--------
>>> import numpy as np
>>> data = np.zeros((5, 2, 8, 9), np.uint16)
>>> default_axes(data.ndim), measure_stack(data, "TCYX", channel=1).shape
('TCYX', (5, 8, 9))
>>> [index for index, _ in planes(data, "TCYX")]
[(slice(None, None, None), 0, slice(None, None, None), slice(None, None, None)), \
(slice(None, None, None), 1, slice(None, None, None), slice(None, None, None))]
>>> rgb = np.zeros((5, 8, 9, 3), np.uint8)
>>> measure_stack(rgb, "TYXS").shape, len(list(planes(rgb, "TYXS")))
((5, 8, 9), 3)
"""

from __future__ import annotations

import itertools

import numpy as np

from ..io import SUPPORTED_DTYPES

#: the axes assumed for a layer of each number of dimensions (the widget lets the user change it)
DEFAULT_AXES = {3: "TYX", 4: "TCYX", 5: "TZCYX"}
#: the choice of plane for stacks with a Z axis that measures on the maximum over Z
MAX_PROJECTION = "max"
#: the choice of plane that registers whole volumes in 3-D (:mod:`._volumes`): (dz, dy, dx)
VOLUMES = "3-D (volumes)"
#: the choice of colour of an RGB(A) layer that measures on the luminance (Rec. 601 weights of
#: R, G, B; alpha left out)
LUMINANCE = "luminance"
#: the colours of an RGB(A) layer's S axis, by index
COLOURS = ("red", "green", "blue", "alpha")
#: the weights of R, G, B in :data:`LUMINANCE`
LUMA = (0.299, 0.587, 0.114)
#: axis label (lower case) -> its axis letter
LABELS = {"t": "T", "time": "T", "frame": "T", "frames": "T", "c": "C", "ch": "C",
          "channel": "C", "channels": "C", "z": "Z", "plane": "Z", "planes": "Z", "depth": "Z",
          "y": "Y", "x": "X"}


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
    each of T, C, Z at most once, ending in YX, or in YXS for the 3 or 4 colour samples of an
    RGB(A) layer (ValueError otherwise)."""
    axes = axes.upper()
    frame = axes[:-1] if axes.endswith("S") else axes
    if len(axes) != len(shape) or not frame.endswith("YX") or "T" not in axes \
            or sorted(axes) != sorted(set(axes)) or set(axes) - set("TCZYXS") \
            or (axes.endswith("S") and shape[-1] not in (3, 4)):
        raise ValueError(f"axes {axes!r} do not fit a layer of shape {tuple(shape)}: give one "
                         "letter per dimension from T, C, Z, ending in YX (e.g. TCYX), or in "
                         "YXS for an RGB(A) layer's 3 or 4 colours")
    return axes


def axes_from_labels(labels, ndim: int):
    """The axes string a layer's axis labels say (``("t", "z", "y", "x")``, ``("time",
    "channel", "y", "x")``: one of :data:`LABELS` each, ending in y, x), or None where they
    say none (napari's own numbers, ``"-3"``, or a label it does not know).

    >>> axes_from_labels(("Time", "c", "y", "x"), 4), axes_from_labels(("-3", "-2", "-1"), 3)
    ('TCYX', None)
    """
    letters = "".join(LABELS.get(str(a).strip().lower(), "?") for a in labels or ())
    if len(letters) != ndim or "?" in letters or not letters.endswith("YX") \
            or len(set(letters)) != len(letters):
        return None
    return letters



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


def measure_stack(data, axes: str, channel: int = 0, plane=MAX_PROJECTION, colour=LUMINANCE):
    """The ``(N, H, W)`` stack a run measures: channel ``channel`` of a C axis, plane ``plane``
    (an int) or the maximum over a Z axis, and of an RGB(A) layer (an S axis) colour
    ``colour`` (an index or a name of :data:`COLOURS`) or the luminance; NumPy or dask as
    ``data`` is (a Zarr array becomes dask).  Pixel types the reader does not take (int64,
    bool, ...) become float32."""
    axes = check_axes(axes, data.shape)
    if type(data).__module__.startswith("zarr"):
        data = as_dask(data)
    chosen = {"C": channel, "Z": None if plane == MAX_PROJECTION else plane,
              "S": None if colour == LUMINANCE else COLOURS.index(colour)
              if colour in COLOURS else colour}
    if "S" in axes and chosen["S"] is not None and not 0 <= chosen["S"] < data.shape[-1]:
        raise ValueError(f"colour {colour!r}: the layer has {data.shape[-1]} colours")
    index = tuple(slice(None) if chosen.get(a) is None else chosen[a] for a in axes)
    stack = data[index]
    rest = "".join(a for a, i in zip(axes, index) if isinstance(i, slice))
    if "S" in rest:  # the luminance: the colours weighed as the eye sees them
        rgb = stack[..., :3].astype(np.float32)
        stack = sum(rgb[..., k] * np.float32(w) for k, w in enumerate(LUMA))
        rest = rest[:-1]
    if "Z" in rest:  # the maximum over the planes (a projection that keeps every feature)
        # (what stays is T, Y, X in that order: the axes end in YX)
        stack = stack.max(axis=rest.index("Z"))
    if np.dtype(stack.dtype) not in SUPPORTED_DTYPES:
        stack = stack.astype(np.float32)
    if is_lazy(stack):  # blocks of whole frames: the tasks of xcorr_app.dask.align
        stack = stack.rechunk({1: -1, 2: -1})
    return stack


def planes(data, axes: str):
    """Yield ``(index, stack)``: every ``(N, H, W)`` stack of the layer (one per channel,
    plane and colour), ``index`` the tuple of the layer's data it is (slices on T, Y and X)."""
    axes = check_axes(axes, data.shape)
    if type(data).__module__.startswith("zarr"):  # (indexing a Zarr array reads it)
        data = as_dask(data)
    extra = [i for i, a in enumerate(axes) if a in "CZS"]
    for combo in itertools.product(*(range(data.shape[i]) for i in extra)):
        index = [slice(None)] * len(axes)
        for i, k in zip(extra, combo):
            index[i] = k
        yield tuple(index), data[tuple(index)]  # (T, Y, X): the axes end in YX[S]


def frames_in(shape, axes: str) -> int:
    """How many ``(H, W)`` frames a layer of ``shape`` and ``axes`` holds (every channel,
    plane and colour counted)."""
    return int(np.prod([k for k, a in zip(shape, axes.upper()) if a not in "YX"]))
