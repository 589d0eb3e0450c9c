"""The float64 reference of the convolution kernels: the CPU path of :func:`conv2d` and the
yardstick of the tests."""

import numpy as np

__all__ = ["conv2d_reference"]


def conv2d_reference(x, w, stride=1, padding=0):
    """float64 NCHW convolution (cross-correlation, as in deep learning) of ``x`` (N, C, H, W)
    with ``w`` (F, C, KH, KW), zero padding and a stride: the reference of the im2win and
    pointwise kernels.  Sums over the filter taps with one matrix product each.

    >>> conv2d_reference(np.ones((1, 2, 4, 4)), np.ones((3, 2, 3, 3)), stride=1, padding=1)[0, 0]
    array([[ 8., 12., 12.,  8.],
           [12., 18., 18., 12.],
           [12., 18., 18., 12.],
           [ 8., 12., 12.,  8.]])
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    sy, sx = (stride, stride) if np.isscalar(stride) else stride
    py, px = (padding, padding) if np.isscalar(padding) else padding
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp_ = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)))
    ho, wo = (h + 2 * py - kh) // sy + 1, (wd + 2 * px - kw) // sx + 1
    out = np.zeros((n, f, ho, wo))
    for i in range(kh):
        for j in range(kw):
            patch = xp_[:, :, i:i + sy * (ho - 1) + 1:sy, j:j + sx * (wo - 1) + 1:sx]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j], optimize=True)
    return out
