"""The patch pass's rows (:mod:`._patch_pass`): ``(N, P, 5)`` float64 per frame and patch,
the field (2: the frame's rigid shift plus the patch's deviation from it, added where the rows
are written: on the GPU by the kernel that writes them, so that the GPU does not idle at the
run's end while the host adds them), the peak, the confidence (0 on the search's border) and
the low flag; on the GPU kept on the device and brought to the host as the pass
goes (:class:`KeptRows`), and the :class:`~._motion_field.MotionField` made from them
(:func:`field_from_rows`).
"""

from __future__ import annotations

import numpy as np

from ... import backend
from ...streaming import copy_to_host_async, host_buffer
from ._motion_field import MotionField

#: the patch pass's rows kept on the device (40 bytes a patch and frame: 640 MB for a million
#: frames of 4x4 patches) go to the host once they take more than this
KEPT_MAX_BYTES = 256 * 2**20


class KeptRows:
    """The GPU patch pass's rows left on the device (frames numbered from the range's first,
    as the host ``table`` of the range): the chunks write theirs into consecutive slices of
    one device table (:meth:`slot`), which comes to the host in one copy once it is full (a
    device-wide wait, at most once every :data:`KEPT_MAX_BYTES`) and at the end of the pass
    (:meth:`fetch`), not a copy a chunk at the end, which left the GPU idle.

    Where the host ``table`` is page-locked (``pinned``; :meth:`for_range` makes it so up to
    :data:`KEPT_MAX_BYTES`), each chunk's rows are copied into it as soon as the chunk's
    kernels have written them (:meth:`sent`: an asynchronous copy on the chunk's stream,
    overlapping the next chunks' work), and :meth:`fetch` only waits for the device (a copy
    into pageable memory at the run's end left the GPU idle: docs/how-align-works.md)."""

    def __init__(self, xp, table, pinned=False, low=None):
        self.xp, self.table, self.pinned = xp, table, pinned
        n, p = table.shape[:2]
        # the low flags as bools beside the rows (``low``: (n, P), page-locked like the
        # table): read from the rows' float64 column at the run's end they left the GPU idle
        self.low = low if pinned else None
        self.low_frames = 0  # frames whose flags were copied into low
        self.rows = xp.empty((max(1, min(n, KEPT_MAX_BYTES // (40 * max(p, 1)))), p, 5),
                             xp.float64)
        self.base, self.filled = 0, 0  # the table's frame of rows[0]; rows in use
        self.sent_upto = 0  # rows[:sent_upto] are on their way to the table (pinned only)

    @classmethod
    def for_range(cls, xp, shape):
        """The rows of a range of ``shape`` ``(n, P, 5)`` on ``xp``'s GPU, their host table
        page-locked where it takes at most :data:`KEPT_MAX_BYTES` (else pageable)."""
        pinned = 8 * int(np.prod(shape)) <= KEPT_MAX_BYTES
        if not pinned:
            return cls(xp, np.empty(shape))
        return cls(xp, host_buffer(shape, np.float64, pinned=True), True,
                   host_buffer(shape[:2], np.bool_, pinned=True))

    def slot(self, first, n):
        """The device rows ``(n, P, 5)`` of frames ``first .. first + n`` (C-contiguous, to be
        written by the chunk's kernel); the rows so far fetched first where they do not fit
        or the chunk does not follow them."""
        if first != self.base + self.filled or self.filled + n > len(self.rows):
            self.fetch()
            self.base = first
            if n > len(self.rows):
                self.rows = self.xp.empty((n, *self.rows.shape[1:]), self.xp.float64)
        self.filled += n
        return self.rows[first - self.base:first - self.base + n]

    def sent(self, first, n, low=None):
        """The rows of frames ``first .. first + n`` are written (queued on the current stream):
        with a page-locked table, copy them there now, on that stream, and their low flags
        ``low`` (a C-contiguous ``(n, P)`` bool CuPy array, the rows' last column) into
        :attr:`low`."""
        k = first - self.base
        if not self.pinned or k != self.sent_upto or k + n > self.filled:
            return
        copy_to_host_async(self.table[first:first + n], self.rows[k:k + n])
        self.sent_upto = k + n
        if low is not None and self.low is not None \
                and low.shape == self.low[first:first + n].shape and low.dtype == np.bool_ \
                and low.flags.c_contiguous:
            copy_to_host_async(self.low[first:first + n], low)
            self.low_frames += n

    def low_flags(self):
        """The rows' low flags ``(N, P)`` bool once :meth:`fetch` has waited, where every
        chunk's came with its rows (:meth:`sent`), else None."""
        return self.low if self.low is not None and self.low_frames == len(self.table) \
            else None

    def fetch(self):
        """The rows so far to their place in the host table (waits for the device)."""
        if self.filled:
            self.xp.cuda.Device().synchronize()  # (the chunks' streams and copies included)
            if self.sent_upto < self.filled:
                backend.to_numpy(self.rows[self.sent_upto:self.filled],
                                 out=self.table[self.base + self.sent_upto:
                                                self.base + self.filled])
            self.filled = self.sent_upto = 0


def field_from_rows(table, setup, low=None):
    """The :class:`MotionField` of the rows ``(N, P, 5)`` of every frame, in frame order: the
    field and confidence are views of ``table`` (no new arrays, no sums on the host: the GPU
    idles while the host works at the run's end; the kernel that writes the rows adds the rigid
    shifts).  ``setup``: the pass's :class:`~._patch_pass.PatchSetup`.  ``low``: the rows' low
    flags ``(N, P)`` bool where they came apart (:meth:`KeptRows.low_flags`), else read from
    the rows."""
    grid = setup.grid
    gy, gx = grid.grid
    n = len(table)
    low = table[..., 4] == 1 if low is None else np.asarray(low, np.bool_)
    return MotionField(table[..., :2].reshape(n, gy, gx, 2), grid.centres,
                       table[..., 3].reshape(n, gy, gx), low.reshape(n, gy, gx),
                       grid, setup.template_on_host())
