"""The CPU's separable filters of float32 frames for the alignment's prefilter: both 1-D
passes over a band of rows at a time, in float32, the two taps of a symmetric filter's pair
added before their product (:func:`~xcorr_app.filters.gaussian` itself stays SciPy's, bit
for bit).

``scipy.ndimage.correlate1d`` copies every line into a float64 buffer and back, one line at a
time; a 1024x1024 frame's gaussian took it 4.6 times as long (docs/performance.md, "The CPU
path").  Here each band (its rows, the filter's reach above and below it, gathered by the
mode's index) is filtered down its columns and then along its rows while it sits in the
core's cache.  The same extension of the frame as SciPy's (its modes, axis by axis: the
columns first, then the rows of that result), the sums in float32 (within float32's
rounding of SciPy's float64 sums).

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> img = np.random.default_rng(0).random((7, 9)).astype(np.float32)
>>> taps = np.array([0.25, 0.5, 0.25])
>>> got = host_separable(img, taps, taps, "reflect", 0.0)
>>> want = ndi.correlate1d(ndi.correlate1d(img, taps, axis=0), taps, axis=1)
>>> bool(np.abs(got - want).max() < 1e-6)
True
"""

from __future__ import annotations

import numpy as np

__all__ = ["host_separable", "host_separable_fits"]

#: pixels of a band of rows (with the temporaries of its two passes, a few times this many
#: float32 values stay in a core's L2 cache)
BAND_PIXELS = 32768
#: scipy.ndimage's modes as NumPy's padding modes (``constant``: its ``cval``)
NUMPY_MODE = {"reflect": "symmetric", "mirror": "reflect", "nearest": "edge", "wrap": "wrap",
              "constant": "constant"}


def host_separable_fits(stack, reach_y, reach_x, mode) -> bool:
    """Whether :func:`host_separable` filters this stack with taps reaching ``reach_y`` and
    ``reach_x`` pixels either side: a float32 NumPy frame or stack of frames (not empty), a
    mode it knows and a reach short of the frame's sides (SciPy's extension of a frame past
    its own size, and its errors, are left to SciPy)."""
    return (isinstance(stack, np.ndarray) and stack.dtype == np.float32
            and stack.ndim in (2, 3) and stack.size > 0 and mode in NUMPY_MODE
            and 0 <= reach_y < stack.shape[-2] and 0 <= reach_x < stack.shape[-1])


def host_separable(stack, taps_y, taps_x, mode, cval):
    """``stack`` (H, W) or (N, H, W) float32 correlated with ``taps_y`` down its columns and
    then ``taps_x`` along its rows (each ``scipy.ndimage.correlate1d`` in ``mode``, origin 0),
    every frame alone: a new float32 array (:func:`host_separable_fits` says which stacks;
    odd tap counts)."""
    ty, tx = (np.asarray(t, np.float64).astype(np.float32) for t in (taps_y, taps_x))
    if len(ty) % 2 == 0 or len(tx) % 2 == 0:
        raise ValueError(f"host_separable: odd tap counts, got {len(ty)} and {len(tx)}")
    ry, rx = len(ty) // 2, len(tx) // 2
    h, w = stack.shape[-2:]
    rows_at, cols_at = (_extended(n, r, mode) for n, r in ((h, ry), (w, rx)))
    out = np.empty(stack.shape, np.float32)
    band = max(1, BAND_PIXELS // w)
    for frame, into in zip(stack.reshape(-1, h, w), out.reshape(-1, h, w)):
        for a in range(0, h, band):
            b = min(h, a + band)
            # the band's rows and the reach above and below it, as the mode extends the frame
            src = _gathered(frame, rows_at[a:b + 2 * ry], 0, cval)
            down = _taps(src, ty, 0, b - a)
            _taps(_gathered(down, cols_at, 1, cval), tx, 1, w, out=into[a:b])
    return out


def _extended(n, r, mode):
    """The indices of the ``n`` samples of an axis extended by ``r`` on either side as
    ``mode`` extends it (-1 where ``constant`` reads ``cval``)."""
    if mode == "constant":
        return np.pad(np.arange(n), r, mode="constant", constant_values=-1)
    return np.pad(np.arange(n), r, mode=NUMPY_MODE[mode])


def _gathered(a, index, axis, cval):
    """``a`` taken at ``index`` along ``axis`` (a copy), ``cval`` where the index is -1."""
    out = np.take(a, index, axis=axis)
    outside = index < 0
    if outside.any():
        cut = [slice(None)] * 2
        cut[axis] = outside
        out[tuple(cut)] = cval
    return out


def _taps(src, taps, axis, n, out=None):
    """``sum_k taps[k] * src[k : k + n]`` along ``axis`` in float32 (a symmetric filter's
    pairs added first: about half the products)."""
    r = len(taps) // 2

    def at(k):
        cut = [slice(None)] * 2
        cut[axis] = slice(k, k + n)
        return src[tuple(cut)]

    out = np.multiply(at(r), taps[r], out=out)
    tmp = np.empty_like(out)
    symmetric = bool(np.array_equal(taps, taps[::-1]))
    for k in range(r) if symmetric else range(len(taps)):
        if k == r:
            continue
        if symmetric:
            np.add(at(k), at(2 * r - k), out=tmp)
            tmp *= taps[k]
        else:
            np.multiply(at(k), taps[k], out=tmp)
        out += tmp
    return out
