"""The prepared chunks of a GPU run kept for its later passes (:class:`PreparedFrames`).

Every pass over the stack prepares each chunk again (:func:`~._preprocess.prepare`: float32,
the means subtracted, prefiltered, the means subtracted again): the rigid pass, the template
passes of ``reference="refined"`` or Lucas-Kanade, and the patch pass (which prepares as the
rigid pass does where the run's normalization is ZNCC and it has no window).  Where the
prepared stack fits :data:`~xcorr_app.streaming.STASH_SHARE` of the device's free memory, the
first pass keeps each chunk's :class:`~._preprocess.Prepared` and the later passes that
prepare the same way take it from there: the same arrays, no kernel run twice (the patch
pass's preparation was about a tenth of a GPU-resident ``--patches`` run's GPU work).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.alignment.rigid._preprocess import prepare
>>> key = preparation_key("gaussian:1", "zncc", None, "none")
>>> kept = PreparedFrames(key, device=None)
>>> p = prepare(np.ones((2, 4, 4), np.uint16), np)
>>> kept.keep(key, 10, p)
>>> kept.take(key, 10, 2) is p, kept.take(key, 10, 3), kept.take(("other",), 10, 2)
(True, None, None)
"""

from __future__ import annotations

import numpy as np

from ... import backend
from ...streaming import stash_fits


def preparation_key(prefilter, normalization, features, window) -> tuple:
    """What :func:`~._preprocess.prepare` of a pass depends on besides the frames: its
    prefilter option (resolved), the normalization and features that pick the filter
    (:func:`~._options.prefilter_for`), and the window (``None`` is ``"none"``)."""
    return (prefilter, normalization, features, "none" if window is None else window)


def pass_key(opts) -> tuple:
    """:func:`preparation_key` of a rigid pass of ``opts``."""
    return preparation_key(opts.prefilter, opts.normalization, opts.features, opts.window)


def patch_key(opts) -> tuple:
    """:func:`preparation_key` of the patch pass of ``opts`` (ZNCC, no window)."""
    return preparation_key(opts.prefilter, "zncc", opts.features, "none")


class PreparedFrames:
    """Prepared chunks by ``(first frame, frame count)``, for passes whose
    :func:`preparation_key` is ``key``, on the device ``device`` (an id; ``None``: any)."""

    def __init__(self, key, device):
        self.key, self.device = key, device
        self._chunks: dict = {}

    @classmethod
    def for_run(cls, opts, src, xp, device_free=None):
        """A store for a run of ``opts`` over ``src`` on ``xp``'s current device (the key of
        its rigid passes), or ``None``: the CPU, or a prepared stack (two float32 arrays a
        frame where a prefilter or window makes the correlated frames differ from the
        demeaned ones) over the share of free memory (``device_free``, else asked now) a run
        may keep."""
        if xp is np:
            return None
        arrays = 1 if opts.prefilter in (None, "none") and opts.window in (None, "none") else 2
        if device_free is None:
            device_free = backend.device_free_bytes(xp)
        if not stash_fits(src.n_frames * arrays, src.frame_shape, np.float32, device_free):
            return None
        return cls(pass_key(opts), xp.cuda.Device().id)

    def _here(self, key) -> bool:
        if key != self.key:
            return False
        if self.device is None:
            return True
        import cupy

        return cupy.cuda.Device().id == self.device

    def take(self, key, first, n):
        """The kept chunk of frames ``first:first + n`` prepared as ``key`` says, or None."""
        return self._chunks.get((int(first), int(n))) if self._here(key) else None

    def keep(self, key, first, prepared) -> None:
        """Keep ``prepared`` (:class:`~._preprocess.Prepared` of frames ``first:first +
        len(prepared.raw)``) where it was prepared as the store's passes prepare."""
        if self._here(key):
            self._chunks[(int(first), len(prepared.raw))] = prepared

    def release(self) -> None:
        """Drop every kept chunk (their memory goes back to CuPy's pool)."""
        self._chunks.clear()
