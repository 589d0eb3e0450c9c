"""Bounded correlation surfaces of frames too large to correlate at once, band by band.

A bounded search (shifts ``-sy..sy`` by ``-sx..sx``) needs only the overlap around each shift,
and the raw correlation sums ``c[k] = sum_n ref[n + k] mov[n]`` are additive over any split of
the moving frame's pixels ``n``.  :func:`banded_surface` splits the moving frames into bands of
``band_rows`` rows; a band needs the reference rows within ``sy`` of it, so each step
correlates a slab of ``band_rows + 2 sy`` reference rows with the band (placed at its rows of
an equal slab, zero elsewhere) over the same bound, and adds the result.  Every step has the
same shape (the slabs of the first and last bands are zero-padded past the frame's edges), so
one correlation plan serves every band.  The ZNCC normalization of the summed surface is the
whole-frame one (:func:`~xcorr_app.registration._normalize.zncc`), whose rectangle sums read
only the rows within the bound of the frames' edges.

Phase correlation is circular over the whole frame: it has no bands.

Examples
--------
>>> import numpy as np
>>> from xcorr_app.registration._normalize import zncc
>>> from xcorr_app.correlate._direct import xcorr_direct
>>> rng = np.random.default_rng(0)
>>> ref = rng.random((23, 17)).astype(np.float32)
>>> mov = np.roll(ref, (2, -1), axis=(0, 1))[None]
>>> z = banded_surface(ref, mov, 3, "zncc", band_rows=5, device="cpu")
>>> want = zncc(xcorr_direct(ref, mov, "one_to_many", 3), ref, mov, 3)
>>> bool(np.abs(z - want).max() < 1e-5), z.shape
(True, (1, 7, 7))
"""

from __future__ import annotations

import dataclasses

from ..backend import compute_device, xp_for
from ..correlate import choose_method, cross_correlate, form_layout, normalize_max_shift
from ..errors import InputError
from ._normalize import zncc

#: normalizations a banded surface can be (phase correlation is circular over the whole frame)
BANDED_NORMALIZATIONS = ("zncc", "none")


@dataclasses.dataclass(frozen=True)
class Bands:
    """How a run measures frames whose whole-frame correlation does not fit in memory: bands
    of ``rows`` rows of the moving frames, each correlated with ``plan`` (``None``: chosen by
    :func:`band_plan` on the first batch).  Its text is the run's recorded plan.

    >>> str(Bands(512, "fft"))
    'bands:rows=512,fft'
    """

    rows: int
    plan: object = None

    def __str__(self):
        return f"bands:rows={self.rows}" + ("" if self.plan is None else f",{self.plan}")


def _check(reference, frames, max_shift, normalization, band_rows):
    bound = normalize_max_shift(max_shift)
    if bound is None:
        raise InputError("a banded surface needs a bounded search (max_shift)")
    if normalization not in BANDED_NORMALIZATIONS:
        raise InputError(f"normalization {normalization!r} has no bands (phase correlation is "
                         "circular over the whole frame); use zncc or none, or whole frames")
    if int(band_rows) < 1:
        raise InputError(f"band_rows must be >= 1, got {band_rows}")
    if frames.ndim != 3 or reference.shape[-2:] != frames.shape[-2:] or reference.ndim not in (2, 3) \
            or (reference.ndim == 3 and len(reference) != len(frames)):
        raise InputError(f"frames must be (N, H, W) and the reference (H, W) or (N, H, W) of the "
                         f"same frame size; got {frames.shape} and {reference.shape}")
    return bound, min(int(band_rows), frames.shape[-2])


def _slabs(reference, frames, bound, band_rows, xp):
    """The band-step's zero-filled buffers (left slab, right band) and the form."""
    h, w = frames.shape[-2:]
    rows = band_rows + 2 * bound[0]
    left = xp.zeros(reference.shape[:-2] + (rows, w), xp.float32)
    right = xp.zeros((len(frames), rows, w), xp.float32)
    return left, right, "n_to_mn" if reference.ndim == 3 else "one_to_many"


def band_plan(reference, frames, max_shift, band_rows, device="auto"):
    """The correlation plan :func:`banded_surface` runs each band with (``method="auto"``),
    chosen for the band step's shape: a run chooses it once and passes it to every call.

    Examples
    --------
    >>> import numpy as np
    >>> str(band_plan(np.zeros((40, 30)), np.zeros((2, 40, 30)), 2, 8, device="cpu"))
    'direct'
    """
    dev = compute_device(reference, frames, device=device)
    xp = xp_for(dev)
    bound, band_rows = _check(reference, frames, max_shift, "zncc", band_rows)
    left, right, form = _slabs(reference, frames, bound, band_rows, xp)
    right = right[:, None] if form == "n_to_mn" else right
    return choose_method(form_layout(form, left.shape, right.shape), bound, dev, left, right)


def banded_surface(reference, frames, max_shift, normalization="zncc", band_rows=256,
                   device="auto", method="auto"):
    """The bounded correlation surface of ``frames`` against ``reference``, band by band.

    The same surface as correlating the whole frames (:func:`xcorr_app.cross_correlate`, then
    :func:`~xcorr_app.registration._normalize.zncc` for ``"zncc"``) up to float32 rounding, with
    the correlation's working memory bounded by a band of ``band_rows + 2 sy`` rows.

    Parameters
    ----------
    reference : (H, W) or (N, H, W) float ndarray (NumPy or CuPy)
        One reference for all frames, or one per frame.
    frames : (N, H, W) float ndarray
    max_shift : int or (int, int)
        The bound ``(sy, sx)`` of the search.
    normalization : {"zncc", "none"}
        ZNCC per shift, or the raw sums; ``"phase"`` has no bands (:class:`InputError`).
    band_rows : int
        Rows of the moving frames per band (any height; the last band may be shorter).
    device : {"auto", "gpu", "cpu"}
        Where NumPy inputs are computed (CuPy inputs: on their GPU).
    method : str or Plan
        The correlation plan of every band (:func:`band_plan` for ``"auto"``).

    Returns
    -------
    (N, 2 sy + 1, 2 sx + 1) float32 ndarray of the inputs' module
        In the bounded layout of :mod:`xcorr_app.correlate._shifts` (origin ``(sy, sx)``).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> ref = rng.random((30, 20)).astype(np.float32)
    >>> z = banded_surface(ref, ref[None], (2, 4), "zncc", band_rows=7, device="cpu")
    >>> np.unravel_index(int(z[0].argmax()), z[0].shape)  # zero shift at the origin (2, 4)
    (np.int64(2), np.int64(4))
    """
    dev = compute_device(reference, frames, device=device)
    xp = xp_for(dev)
    reference, frames = xp.asarray(reference), xp.asarray(frames)
    bound, band_rows = _check(reference, frames, max_shift, normalization, band_rows)
    if method == "auto":
        method = band_plan(reference, frames, bound, band_rows, dev)
    sy = bound[0]
    h = frames.shape[-2]
    left, right, form = _slabs(reference, frames, bound, band_rows, xp)
    total = None
    for r0 in range(0, h, band_rows):
        r1 = min(h, r0 + band_rows)
        top = r0 - sy  # the frame row of the slab's first row
        a0, a1 = max(0, top), min(h, r0 + band_rows + sy)
        left[...] = 0
        left[..., a0 - top:a1 - top, :] = reference[..., a0:a1, :]
        right[...] = 0
        right[:, sy:sy + r1 - r0, :] = frames[:, r0:r1, :]
        c = cross_correlate(left, right[:, None] if form == "n_to_mn" else right, form, bound,
                            method=method, device=dev)
        c = c[:, 0] if form == "n_to_mn" else c
        if total is None:
            total = c.astype(xp.float64)
        else:
            total += c
    if normalization == "zncc":
        return zncc(total, reference, frames, bound)
    return total.astype(xp.float32)
