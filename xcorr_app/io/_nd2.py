"""Nikon ND2 files as frame sources (the ``nd2`` extra: the ``nd2`` package, which reads them
without Nikon's SDK): each point of the file's loops (T, P, Z) holds one frame of every channel,
read as the file stores it (:class:`Nd2Planes`, sliced like an array by
:class:`~xcorr_app.io._formats.ArrayFrames`), with the pixel size and channel names of its
metadata; grayscale channels (an RGB file is refused).

Examples
--------
>>> with open_nd2(Path("scan.nd2"), None, None, None) as src:  # doctest: +SKIP
...     src.n_frames, src.frame_shape, src.axes, src.channel_names
(8, (40, 48), 'TCYX', ['GCaMP', 'red'])
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from ..errors import InputError
from ._formats import ArrayFrames, document_frames, need

__all__ = ["open_nd2", "Nd2Planes"]


class Nd2Planes:
    """An open :class:`nd2.ND2File` as a read-only ``(loops..., C, Y, X)`` array (its loops in
    the file's order, outermost first, as its ``sizes`` list them): indexing with integers and
    slices of the loop axes reads one stored frame (all channels) per point."""

    def __init__(self, nd2file, name):
        sizes = dict(nd2file.sizes)
        if "S" in sizes:
            raise InputError(f"{name} holds RGB images, which xcorr does not align; export "
                             "a grayscale channel (or convert it to grayscale)")
        self._file = nd2file
        self._loops = tuple(int(n) for a, n in sizes.items() if a not in "CYX")
        self.axes = "".join(a for a in sizes if a not in "CYX") + "CYX"
        self.shape = (*self._loops, int(sizes.get("C", 1)), int(sizes["Y"]), int(sizes["X"]))
        self.dtype = np.dtype(nd2file.dtype)
        self.chunks = (1,) * len(self._loops) + self.shape[-3:]  # (a stored frame a point)
        self.ndim = len(self.shape)

    def __getitem__(self, key):
        key = tuple(key) if isinstance(key, tuple) else (key,)
        key += (slice(None),) * (self.ndim - len(key))
        n = len(self._loops)
        points = [range(size)[k] if isinstance(k, slice) else [range(size)[k]]
                  for k, size in zip(key[:n], self._loops)]
        out = np.empty((*map(len, points), *self.shape[n:]), self.dtype)
        for at in itertools.product(*(range(len(p)) for p in points)):
            point = tuple(p[i] for p, i in zip(points, at))
            seq = int(np.ravel_multi_index(point, self._loops)) if n else 0
            out[at] = self._file.read_frame(seq).reshape(self.shape[n:])
        picked = tuple(slice(None) if isinstance(k, slice) else 0 for k in key[:n])
        return out[picked + key[n:]]


def _metadata(nd2file):
    """``(pixel size (y, x, "µm") or None, channel names)`` of an ND2 file's metadata."""
    size, names = None, []
    try:
        channels = nd2file.metadata.channels or []
        names = [str(c.channel.name or "") for c in channels]
        volume = channels[0].volume if channels else None
        if volume is not None and all(volume.axesCalibrated[:2]):
            x, y = volume.axesCalibration[:2]
            size = (float(y), float(x), "µm") if x > 0 and y > 0 else None
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        pass
    return size, names if any(names) else []


def open_nd2(file: Path, dataset, channel, z) -> ArrayFrames:
    """An ND2 file as an :class:`ArrayFrames` (axes: the file's loops, then ``CYX``).

    Raises
    ------
    InputError
        A missing ``nd2`` package (naming the pip command), a file that is no ND2 or is
        damaged, an RGB file, a ``dataset`` (ND2 has none), a bad channel or plane.
    """
    nd2 = need("nd2")
    return document_frames(file, dataset, channel, z, fmt="ND2",
                           open_document=lambda: nd2.ND2File(str(file)), planes=Nd2Planes,
                           metadata=_metadata)
