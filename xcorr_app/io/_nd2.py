"""Nikon ND2 files as frame sources (the ``nd2`` extra: the ``nd2`` package, which reads them
without Nikon's SDK): each point of the file's loops (T, P, Z) holds one frame of every channel,
read as the file stores it (:class:`Nd2Planes`, sliced like an array by
:class:`~xcorr_app.io._formats.ArrayFrames`), with the pixel size and channel names of its
metadata; grayscale channels of one field of view (an RGB or multi-position file is refused).

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
    """An open :class:`nd2.ND2File` as a read-only ``(T, Z, C, Y, X)`` array (its T and Z
    loops as the file has them, outermost first): indexing with integers and slices of the
    loop axes reads one stored frame per point, keeping only the channels asked for.

    Refused: several positions (P) or any other loop of several points (their frames are no
    time series of one field of view) and more than one component per channel (RGB).  An
    acquisition stopped early keeps its complete time points (:attr:`notes` says so)."""

    def __init__(self, nd2file, name):
        sizes = dict(nd2file.sizes)
        if nd2file.components_per_channel != 1:
            raise InputError(f"{name} holds {nd2file.components_per_channel} components per "
                             "channel (RGB or spectral), which xcorr does not align; export a "
                             "grayscale channel")
        other = {a: n for a, n in sizes.items() if a not in "TZCYXS" and n > 1}
        if other:
            what = ", ".join(f"{n} {'positions' if a == 'P' else 'points of loop ' + a} ({a})"
                             for a, n in other.items())
            raise InputError(f"{name} holds {what}: xcorr aligns the frames of one field of "
                             "view; export each position on its own (e.g. as OME-TIFF)")
        self._file = nd2file
        self.axes = "".join(a for a in sizes if a in "TZ") + "CYX"
        self._full = tuple(int(sizes[a]) for a in self.axes[:-3])  # (as stored)
        self._loops = list(self._full)
        self.notes = []
        stored, inner = int(nd2file.attributes.sequenceCount), int(np.prod(self._loops[1:]))
        if self.axes[0] == "T" and stored < int(np.prod(self._loops)):
            self._loops[0] = max(1, stored // inner)  # (the frames after are zeros in the file)
            self.notes.append(f"{name}: the acquisition stopped early: its first "
                              f"{self._loops[0]} of {sizes['T']} time points are read")
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
        tail = key[n:]  # (the channels and the area asked for, taken frame by frame)
        out = np.empty((*map(len, points), *np.empty(self.shape[n:], np.uint8)[tail].shape),
                       self.dtype)
        for at in itertools.product(*(range(len(p)) for p in points)):
            point = tuple(p[i] for p, i in zip(points, at))
            seq = int(np.ravel_multi_index(point, self._full)) if n else 0
            out[at] = self._file.read_frame(seq).reshape(self.shape[n:])[tail]
        return out[tuple(slice(None) if isinstance(k, slice) else 0 for k in key[:n])]


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
    except Exception:  # (the metadata are a bonus: a file whose frames read is read)
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
