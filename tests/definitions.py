"""Plain float64 definitions that tests on either device hold the fast paths to."""

import numpy as np


def masked_correlation(a, b, mask) -> float:
    """The zero-normalized correlation of ``a`` and ``b`` over ``mask`` in float64, centred
    over the mask (0 with fewer than 2 pixels or a flat side): the wrap-around test's
    definition (``refine/_template.periodic_frames``)."""
    m = mask.astype(np.float64)
    k = float(m.sum())
    if k < 2:
        return 0.0
    a, b = a.astype(np.float64), b.astype(np.float64)
    am = a - (a * m).sum() / k
    bm = b - (b * m).sum() / k
    den = np.sqrt((am * am * m).sum() * (bm * bm * m).sum())
    return float((am * bm * m).sum() / den) if den > 0 else 0.0


def wrapped_masks(shape, dy, dx):
    """``(overlap, wrapped)`` bool masks of a frame of ``shape`` holding a reference moved
    circularly by the whole shift ``(dy, dx)``: where ``ref[y + dy, x + dx]`` lies inside the
    reference, and where it wrapped around."""
    h, w = shape
    ys, xs = np.arange(h)[:, None] + dy, np.arange(w)[None, :] + dx
    wrapped = (ys < 0) | (ys >= h) | (xs < 0) | (xs >= w)
    return ~wrapped, wrapped
