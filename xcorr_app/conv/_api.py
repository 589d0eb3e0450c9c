"""Multi-channel convolution (filter banks and channel mixing) for NCHW stacks.

:func:`conv2d` applies a bank of ``F`` filters of ``C`` channels (deep-learning convention:
cross-correlation, zero padding, a stride); :func:`pointwise` mixes channels (a 1x1
convolution).  CuPy in: the im2win kernel (``kernels/im2win_conv.cu``), for 3x3 filters at
stride 1 the fused Winograd kernel where it is faster (``kernels/winograd_conv.cu``, measured
on the first call of each problem) or, for 1x1 filters at stride 1 without padding, the
pointwise kernel with dynamic blocking (``kernels/pointwise_conv.cu``); float32 out.  NumPy
in: the float64 reference (:func:`xcorr_app.correlate._reference.conv2d_reference`), cast to the input's
float type.

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

from .. import backend
from ..errors import XcorrError

#: ``method`` of :func:`conv2d`: the fastest GPU kernel for the problem, or one by name
METHODS = ("auto", "im2win", "winograd")


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


def conv2d(x, w, stride=1, padding=0, method="auto"):
    """Convolve ``x`` (N, C, H, W) with the filter bank ``w`` (F, C, KH, KW).

    Parameters
    ----------
    x : ndarray (NumPy or CuPy)
    w : ndarray
        ``F`` filters over the ``C`` channels of ``x``.
    stride, padding : int or (int, int)
        As ``torch.nn.functional.conv2d`` (zero padding).
    method : {"auto", "im2win", "winograd"}
        The GPU kernel: ``"auto"`` measures, on the first call of each problem, the im2win
        kernel against the Winograd kernel where that applies (3x3 filters at stride 1) and
        keeps the faster (1x1 filters at stride 1 without padding take the pointwise kernel);
        NumPy input always takes the float64 reference.

    Returns
    -------
    (N, F, HO, WO) array of the input's module: ``HO = (H + 2 pad - KH) // stride + 1``.
    """
    key = _prepared_key(x, w, stride, padding, method)
    run = _PREPARED.get(key) if key is not None else None
    if run is not None:  # this problem ran before: checked, tuned and its launch packed
        return run(x, w)
    if method not in METHODS:
        raise XcorrError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
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
    from ._winograd import unsupported

    why_not = unsupported(x.shape, w.shape, (sy, sx), (py, px))
    winograd = why_not is None
    if method == "winograd" and not winograd:
        raise XcorrError(f"method='winograd' cannot compute this convolution: {why_not}")
    if xp is np:
        from ..correlate._reference import conv2d_reference

        return conv2d_reference(x, w, (sy, sx), (py, px)).astype(_out_dtype(x))
    if method == "auto" and _is_pointwise(w, (sy, sx), (py, px)):
        from ._im2win import pointwise_conv2d

        out = pointwise_conv2d(x, w)
        method = "pointwise"
    else:
        if method == "auto":
            method = _fastest_gpu_method(x, w, (sy, sx), (py, px)) if winograd else "im2win"
        out = _GPU_METHODS[method](x, w, (sy, sx), (py, px))
    if key is not None:
        _remember(key, x, w, (sy, sx), (py, px), method, out.shape)
    return out


def _im2win(x, w, stride, padding):
    from ._im2win import im2win_conv2d

    return im2win_conv2d(x, w, stride, padding)


def _winograd(x, w, stride, padding):
    from ._winograd import winograd_conv2d

    return winograd_conv2d(x, w, padding)


_GPU_METHODS = {"im2win": _im2win, "winograd": _winograd}
_CHOSEN: dict = {}
#: prepared calls of the problems run so far: (x, w) -> out with nothing left to check
_PREPARED: dict = {}
_PREPARED_MAX = 512


def _prepared_key(x, w, stride, padding, method):
    """What makes a GPU call of :func:`conv2d` repeatable without its checks: C-contiguous
    float32 CuPy arrays (views included: the kernels need 4-byte alignment, the pointwise
    kernel's 16 is checked per call) of the same shapes on the same device, the same
    arguments; ``None`` for anything else (NumPy, other dtypes, strided views, unhashable
    arguments).  A prepared call keeps the tiles and launch groups of its first call (a later
    change of ``gpu_conv.MAX_COLUMNS``, for tests, does not reach it)."""
    if not type(x).__module__.startswith("cupy") or type(w) is not type(x):
        return None
    if x.dtype.char != "f" or w.dtype.char != "f" or not (x.flags.c_contiguous and
                                                          w.flags.c_contiguous):
        return None
    import cupy

    key = (x.shape, w.shape, stride, padding, method, cupy.cuda.runtime.getDevice())
    try:
        hash(key)
    except TypeError:  # a list for a pair
        return None
    return key


def _remember(key, x, w, stride, padding, method, out_shape):
    import cupy as cp

    if method == "pointwise":
        if x.data.ptr % 16:
            return  # the kernel reads 16-byte vectors: an odd view takes the copying path
        from ._im2win import prepared_pointwise

        run = prepared_pointwise(x, w)
    elif method == "winograd":
        from ._winograd import prepared

        run = prepared(x, w, padding)
    else:
        from ._im2win import prepared_direct

        run = prepared_direct(x, w, stride, padding)
    if len(_PREPARED) >= _PREPARED_MAX:
        _PREPARED.clear()
    if method == "pointwise":
        _PREPARED[key] = lambda x, w: (run(x, w, cp.empty(out_shape, cp.float32))
                                       if x.data.ptr % 16 == 0 else _slow_pointwise(x, w))
    else:
        _PREPARED[key] = lambda x, w: run(x, w, cp.empty(out_shape, cp.float32))


def _slow_pointwise(x, w):
    from ._im2win import pointwise_conv2d

    return pointwise_conv2d(x, w)


def _fastest_gpu_method(x, w, stride, padding) -> str:
    """The faster of the GPU kernels for this problem (each tuned first), measured on its first
    call and remembered for the process (batches of similar size share the choice)."""
    from .._cuda.timing import fastest

    key = _choice_key(x, w, stride, padding)
    best = _CHOSEN.get(key)
    if best is None:
        runs = {m: (lambda f=f: f(x, w, stride, padding)) for m, f in _GPU_METHODS.items()}
        for run in runs.values():  # the tuning of each, outside the comparison
            run()
        best = _CHOSEN[key] = fastest(runs)
    return best


def chosen_method(x, w, stride=1, padding=0) -> str:
    """The kernel ``conv2d(x, w, stride, padding)`` runs: "reference" for NumPy input, else
    "pointwise", "im2win" or "winograd" (after that call, for the measured choice)."""
    if backend.array_module_of(x) is np:
        return "reference"
    stride, padding = _pair(stride, "stride", 1), _pair(padding, "padding", 0)
    if _is_pointwise(w, stride, padding):
        return "pointwise"
    from ._winograd import applicable

    if not applicable(x.shape, w.shape, stride, padding):
        return "im2win"
    return _CHOSEN.get(_choice_key(x, w, stride, padding), "auto: not measured yet")


def _is_pointwise(w, stride, padding) -> bool:
    return w.shape[2:] == (1, 1) and stride == (1, 1) and padding == (0, 0)


def _choice_key(x, w, stride, padding):
    from ._im2win import tuning_key

    return tuning_key(x.shape, w.shape, stride, padding)


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
