"""Zeiss CZI files as frame sources (the ``czi`` extra: pylibCZIrw, Zeiss's own reader): the
planes of a T x C x Z x Y x X image read one by one (:class:`CziPlanes`, sliced like an array
by :class:`~xcorr_app.io._formats.ArrayFrames`), with the pixel size and channel names of its
metadata; grayscale pixel types (Gray8, Gray16, Gray32Float).

Examples
--------
>>> import tempfile
>>> from pylibCZIrw import czi as pyczi  # doctest: +SKIP
>>> path = tempfile.mkdtemp() + "/t.czi"  # doctest: +SKIP
>>> with pyczi.create_czi(path) as f:  # doctest: +SKIP
...     for t in range(3):
...         f.write(data=np.full((8, 9), t, np.uint16), plane={"T": t, "C": 0, "Z": 0})
>>> with open_czi(Path(path), None, None, None) as src:  # doctest: +SKIP
...     src.n_frames, src.frame_shape, src.axes
(3, (8, 9), 'TCZYX')
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError
from ._formats import ArrayFrames, document_frames, need

__all__ = ["open_czi", "CziPlanes"]

#: CZI's grayscale pixel types xcorr reads
PIXEL_TYPES = {"Gray8": np.dtype(np.uint8), "Gray16": np.dtype(np.uint16),
               "Gray32Float": np.dtype(np.float32)}


class CziPlanes:
    """An open CZI document as a read-only ``(T, C, Z, Y, X)`` array: indexing with integers
    and slices reads the planes asked for (each the whole image's bounding box)."""

    axes = "TCZYX"

    def __init__(self, doc, name):
        self._doc, self.name = doc, name
        box = doc.total_bounding_box
        self._start = {a: box.get(a, (0, 1))[0] for a in "TCZ"}
        self._box = (box["X"][0], box["Y"][0], box["X"][1] - box["X"][0],
                     box["Y"][1] - box["Y"][0])
        counts = [box.get(a, (0, 1))[1] - box.get(a, (0, 1))[0] for a in "TCZ"]
        self.shape = (*counts, self._box[3], self._box[2])
        kinds = set(doc.pixel_types.values())
        if len(kinds) != 1 or next(iter(kinds)) not in PIXEL_TYPES:
            raise InputError(f"{name} has pixel types {', '.join(sorted(kinds))}, which xcorr "
                             f"cannot read; it reads {', '.join(PIXEL_TYPES)}")
        self.dtype = PIXEL_TYPES[next(iter(kinds))]
        self._kind = next(iter(kinds))
        self.chunks = (1, 1, 1, *self.shape[3:])
        self.ndim = 5

    def __getitem__(self, key):
        axes = []
        for k, n in zip(key[:3], self.shape[:3]):
            axes.append(range(n)[k] if isinstance(k, slice) else [k])
        out = np.empty((len(axes[0]), len(axes[1]), len(axes[2]), *self.shape[3:]), self.dtype)
        for i, t in enumerate(axes[0]):
            for j, c in enumerate(axes[1]):
                for m, z in enumerate(axes[2]):
                    plane = {"T": t + self._start["T"], "C": c + self._start["C"],
                             "Z": z + self._start["Z"]}
                    out[i, j, m] = self._doc.read(roi=self._box, plane=plane,
                                                  pixel_type=self._kind)[..., 0]
        drop = tuple(0 if not isinstance(k, slice) else slice(None) for k in key[:3])
        return out[drop]


def _metadata(doc):
    """``(pixel size (y, x, "µm") or None, channel names)`` of a CZI's XML metadata."""
    size, names = None, []
    try:
        meta = doc.metadata["ImageDocument"]["Metadata"]
        items = meta["Scaling"]["Items"]["Distance"]
        items = items if isinstance(items, list) else [items]
        scale = {d["@Id"]: float(d["Value"]) * 1e6 for d in items}  # metres -> µm
        if scale.get("X", 0) > 0 and scale.get("Y", 0) > 0:
            size = (scale["Y"], scale["X"], "µm")
    except (KeyError, TypeError, ValueError):
        pass
    try:
        channels = doc.metadata["ImageDocument"]["Metadata"]["Information"]["Image"][
            "Dimensions"]["Channels"]["Channel"]
        channels = channels if isinstance(channels, list) else [channels]
        names = [str(c.get("@Name", "")) for c in channels]
    except (KeyError, TypeError, AttributeError):
        pass
    return size, names if any(names) else []


def open_czi(file: Path, dataset, channel, z, axes=None) -> ArrayFrames:
    """A CZI file as an :class:`ArrayFrames` (axes ``TCZYX``, or ``axes`` as the caller names
    them).

    Raises
    ------
    InputError
        A missing pylibCZIrw (naming the pip command), a file that is no CZI or is damaged, a
        colour or complex pixel type, a ``dataset`` (CZI has none), a bad channel or plane.
    """
    pyczi = need("czi")
    return document_frames(file, dataset, channel, z, fmt="CZI",
                           open_document=lambda: pyczi.CziReader(str(file)), planes=CziPlanes,
                           metadata=_metadata, axes=axes)
