"""Multi-channel convolution (filter banks and channel mixing) for NCHW stacks.

:func:`conv2d` applies a bank of ``F`` filters of ``C`` channels (deep-learning convention:
cross-correlation, zero padding, a stride); :func:`pointwise` mixes channels (a 1x1
convolution).  CuPy in: the im2win kernel (``kernels/im2win_conv.cu``) or, for 1x1 filters at
stride 1 without padding, the pointwise kernel with dynamic blocking
(``kernels/pointwise_conv.cu``); float32 out.  NumPy in: the float64 reference
(:func:`xcorr_app.reference.conv2d_reference`), cast to the input's float type.

Examples
--------
>>> import numpy as np
>>> x = np.ones((1, 2, 4, 5), np.float32)
>>> conv2d(x, np.ones((3, 2, 3, 3), np.float32), padding=1).shape
(1, 3, 4, 5)
>>> pointwise(x, np.array([[0.5, 0.5]], np.float32))[0, 0, 0, 0]
np.float32(1.0)
"""

from __future__ import annotations

import numpy as np

from . import backend
from .errors import XcorrError


def _pair(value, name, minimum):
    v = (value, value) if np.isscalar(value) else tuple(value)
    if len(v) != 2 or any(int(a) != a or a < minimum for a in v):
        raise XcorrError(f"{name} must be an integer >= {minimum} (or a pair), got {value!r}")
    return int(v[0]), int(v[1])


def _check(x, w):
    if x.ndim != 4:
        raise XcorrError(f"x must be (N, C, H, W), got shape {x.shape}")
    if w.ndim != 4:
        raise XcorrError(f"w must be (F, C, KH, KW), got shape {w.shape}")
    if w.shape[1] != x.shape[1]:
        raise XcorrError(f"w has {w.shape[1]} channels but x has {x.shape[1]}")
    if 0 in x.shape or 0 in w.shape:
        raise XcorrError(f"empty input: x {x.shape}, w {w.shape}")


def _out_dtype(x):
    return x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)


def conv2d(x, w, stride=1, padding=0):
    """Convolve ``x`` (N, C, H, W) with the filter bank ``w`` (F, C, KH, KW).

    Parameters
    ----------
    x : ndarray (NumPy or CuPy)
    w : ndarray
        ``F`` filters over the ``C`` channels of ``x``.
    stride, padding : int or (int, int)
        As ``torch.nn.functional.conv2d`` (zero padding).

    Returns
    -------
    (N, F, HO, WO) array of the input's module: ``HO = (H + 2 pad - KH) // stride + 1``.
    """
    xp = backend.array_module_of(x)
    x, w = xp.asarray(x), xp.asarray(w)
    _check(x, w)
    sy, sx = _pair(stride, "stride", 1)
    py, px = _pair(padding, "padding", 0)
    ho = (x.shape[2] + 2 * py - w.shape[2]) // sy + 1
    wo = (x.shape[3] + 2 * px - w.shape[3]) // sx + 1
    if ho < 1 or wo < 1:
        raise XcorrError(f"a {w.shape[2]}x{w.shape[3]} filter does not fit a {x.shape[2]}x"
                         f"{x.shape[3]} image with padding {padding}")
    if xp is np:
        from .reference import conv2d_reference

        return conv2d_reference(x, w, (sy, sx), (py, px)).astype(_out_dtype(x))
    if w.shape[2:] == (1, 1) and (sy, sx) == (1, 1) and (py, px) == (0, 0):
        from .gpu_conv import pointwise_conv2d

        return pointwise_conv2d(x, w)
    from .gpu_conv import im2win_conv2d

    return im2win_conv2d(x, w, (sy, sx), (py, px))


def pointwise(x, w):
    """Mix the channels of ``x`` (N, C, H, W) with ``w`` (F, C): ``out[n, f] = sum_c w[f, c]
    x[n, c]`` (a 1x1 convolution; e.g. RGB to luma with ``w = [[0.299, 0.587, 0.114]]``)."""
    xp = backend.array_module_of(x)
    w = xp.asarray(w)
    if w.ndim == 4 and w.shape[2:] == (1, 1):
        w = w.reshape(w.shape[:2])
    if w.ndim != 2:
        raise XcorrError(f"w must be (F, C) (or (F, C, 1, 1)), got shape {w.shape}")
    return conv2d(x, w[:, :, None, None])
