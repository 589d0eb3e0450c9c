"""Nikon ND2 files as frame sources (the ``nd2`` extra: the ``nd2`` package, which reads them
without Nikon's SDK): each point of the file's loops (T, P, Z) holds one frame of every channel,
read as the file stores it (:class:`Nd2Planes`, sliced like an array by
:class:`~xcorr_app.io._formats.ArrayFrames`), with the pixel size and channel names of its
metadata; grayscale channels of one position (``FILE.nd2:/P<k>`` or ``--dataset P<k>`` where
the file has several; an RGB file is refused).

Examples
--------
>>> with open_nd2(Path("scan.nd2"), None, None, None) as src:  # doctest: +SKIP
...     src.n_frames, src.frame_shape, src.axes, src.channel_names
(8, (40, 48), 'TCYX', ['GCaMP', 'red'])
"""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path

import numpy as np

from ..errors import InputError
from ._formats import ArrayFrames, document_frames, need

__all__ = ["open_nd2", "Nd2Planes"]


class Nd2Planes:
    """An open :class:`nd2.ND2File` as a read-only ``(T, Z, C, Y, X)`` array (its T and Z
    loops as the file has them, outermost first) of one position (``position``: the P loop's
    index, required where it has several): indexing with integers and slices of the loop axes
    reads one stored frame per point, keeping only the channels asked for.

    Refused: several positions and none named, any other loop of several points and more than
    one component per channel (RGB).  An acquisition stopped early keeps its complete time
    points (:attr:`notes` says so)."""

    def __init__(self, nd2file, name, position=None):
        sizes = dict(nd2file.sizes)
        if nd2file.components_per_channel != 1:
            raise InputError(f"{name} holds {nd2file.components_per_channel} components per "
                             "channel (RGB or spectral), which xcorr does not align; export a "
                             "grayscale channel")
        other = {a: n for a, n in sizes.items() if a not in "TPZCYXS" and n > 1}
        if other:
            what = ", ".join(f"{n} points of loop {a}" for a, n in other.items())
            raise InputError(f"{name} holds {what}: xcorr aligns the frames of one field of "
                             "view a run; export them one by one (e.g. as OME-TIFF)")
        positions = int(sizes.get("P", 1))
        if position is None and positions > 1:
            raise InputError(f"{name} holds {positions} positions (P): name one, e.g. "
                             f"{Path(str(name)).name}:/P0 or --dataset P0 (0 to {positions - 1})")
        if position is not None and not 0 <= position < positions:
            raise InputError(f"{name} has {positions} position(s) (P): P{position} is not one "
                             f"of them (P0 to P{positions - 1})")
        self._file = nd2file
        self.axes = "".join(a for a in sizes if a in "TZ") + "CYX"
        stored = [a for a in sizes if a not in "CYXS"]  # (the loops, outermost first)
        self._full = tuple(int(sizes[a]) for a in stored)
        self._where = [stored.index(a) for a in self.axes[:-3]]  # (each axis among the loops)
        # the point of the loops that are no axis: the position named, 0 on one-point loops
        self._base = [(position or 0) if a == "P" else 0 for a in stored]
        self._loops = [self._full[i] for i in self._where]
        self.notes = []
        done = int(nd2file.attributes.sequenceCount)
        if stored and stored[0] == "T" and done < int(np.prod(self._full)):
            self._loops[0] = max(1, done // int(np.prod(self._full[1:])))  # (zeros after)
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
            point = list(self._base)
            for axis, p, i in zip(self._where, points, at):
                point[axis] = p[i]
            seq = int(np.ravel_multi_index(point, self._full)) if self._full else 0
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


def open_nd2(file: Path, dataset, channel, z, axes=None) -> ArrayFrames:
    """An ND2 file as an :class:`ArrayFrames` (axes: the file's loops, then ``CYX``; or
    ``axes`` as the caller names them).

    Raises
    ------
    InputError
        A missing ``nd2`` package (naming the pip command), a file that is no ND2 or is
        damaged, an RGB file, several positions and none named (``dataset`` ``P<k>``), a
        ``dataset`` that names no position, a bad channel or plane.
    """
    nd2 = need("nd2")
    position = None
    if dataset:
        match = re.fullmatch(r"/?[Pp](\d+)", dataset.strip())
        if not match:
            raise InputError(f"{file} is ND2: its only datasets are its positions, P0, P1, ...; "
                             f"{dataset} is not one (e.g. {file.name}:/P0 or --dataset P0)")
        position = int(match.group(1))
    return document_frames(file, None, channel, z, fmt="ND2",
                           open_document=lambda: nd2.ND2File(str(file)),
                           planes=functools.partial(Nd2Planes, position=position),
                           metadata=_metadata, axes=axes)
