"""A frame source's frames read in another order, or some of them: one plane of a T x Z
stack (:class:`~._ome.PlaneFrames`, ``--z K``), or every plane of one stored Z then T in time
order (:class:`TimeOrder`)."""

from __future__ import annotations

import numpy as np


class FrameOrder:
    """The frames ``frames`` (indices into ``src``'s, in this order) of a frame source ``src``:
    frame ``i`` is ``src``'s frame ``frames[i]``, read a run of consecutive source frames at a
    time (frames, or ``(n, C, H, W)`` channels as ``src`` reads them).  It offers no stored
    pages or array of its own (``stored``, ``stack``): a reader that copies those (a GPU's
    registered file) would read ``src``'s order."""

    stored = stack = None

    def __init__(self, src, frames):
        self.src = src
        self._frames = np.asarray(frames, np.int64)
        self.n_frames = len(self._frames)
        self.frame_shape, self.dtype = src.frame_shape, src.dtype
        self.n_channels = getattr(src, "n_channels", 1)
        self.paths, self.notes = src.paths, src.notes
        self.concurrent_reads = getattr(src, "concurrent_reads", False)
        self.memory_mapped = getattr(src, "memory_mapped", False)

    def source_name(self, i):
        return self.src.source_name(int(self._frames[i]))

    def source_names(self):
        return [self.src.source_name(int(i)) for i in self._frames]

    def read(self, start, stop, out=None):
        """Frames ``start:stop``, one read per run of consecutive source frames."""
        if not 0 <= start <= stop <= self.n_frames:
            raise IndexError(f"frames {start}:{stop} are out of range for a stack of "
                             f"{self.n_frames} frames")
        wanted = self._frames[start:stop]
        if not len(wanted):
            return self.src.read(0, 0) if out is None else out
        result, at = out, 0
        for run in np.split(wanted, np.flatnonzero(np.diff(wanted) != 1) + 1):
            part = self.src.read(int(run[0]), int(run[-1]) + 1)
            if result is None:  # (the source's own frames: planes, or planes of channels)
                result = np.empty((len(wanted), *part.shape[1:]), part.dtype)
            result[at:at + len(run)] = part
            at += len(run)
        return result

    def close(self):
        self.src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __len__(self):
        return self.n_frames


def z_first(axes) -> bool:
    """Whether a T x Z stack of these axes stores its planes Z then T (its frames as read:
    a time point's planes apart, every time point's plane 0 first)."""
    return "Z" in axes and "T" in axes and axes.index("Z") < axes.index("T")


def time_order(src):
    """``src`` read in time order (:class:`TimeOrder`) where it holds the planes of a T x Z
    stack stored Z then T, else ``src`` itself: the order an ImageJ hyperstack holds them in
    (what ``xcorr filter`` and ``xcorr apply`` write back as volumes)."""
    volumes = getattr(src, "volumes", None)
    return TimeOrder(src) if volumes is not None and z_first(volumes.axes) else src


class TimeOrder(FrameOrder):
    """The planes of a T x Z stack stored Z then T (``src``, its ``volumes``) in time order:
    frame ``k`` is plane ``k % Z`` of time point ``k // Z``, the stored frame
    ``(k % Z) * T + k // Z``; the source's other attributes (its volumes, channel...) as
    they are."""

    def __init__(self, src):
        times, planes = src.volumes.times, src.volumes.planes
        k = np.arange(times * planes)
        super().__init__(src, (k % planes) * times + k // planes)
        self.frame_layout = (("T", times), ("Z", planes))
        self.notes = [n.replace("read plane by plane, Z then T",
                                "read plane by plane in time order (stored Z then T)")
                      for n in src.notes]

    def __getattr__(self, name):  # (the source's other attributes: volumes, channel, ...)
        if name == "src":
            raise AttributeError(name)
        return getattr(self.src, name)
