"""Multi-channel convolution (filter banks and channel mixing) for NCHW stacks.

:func:`conv2d` applies a bank of ``F`` filters of ``C`` channels (deep-learning convention:
cross-correlation, zero padding, a stride); :func:`pointwise` mixes channels (a 1x1
convolution).  CuPy in: the im2win kernel (``kernels/conv/im2win_conv.cu``) or, where it is
faster (measured on the first call of each problem), for 3x3 filters at stride 1 the fused
Winograd kernel (``kernels/conv/winograd_conv.cu``) and for 1x1 filters at stride 1 without
padding the pointwise kernel with dynamic blocking (``kernels/conv/pointwise_conv.cu``) or the
tensor cores' 3xTF32 one (``kernels/conv/pointwise_mma.cu``); float32 out.  NumPy in: the
float64 reference (``xcorr_app.conv._reference.conv2d_reference``), cast to the input's float
type.

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
from ..errors import InputError
from ._validation import check_arrays, output_shape, pair

#: ``method`` of :func:`conv2d`: the fastest GPU kernel for the problem, or one by name
METHODS = ("auto", "im2win", "winograd", "pointwise", "mma")


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
    method : {"auto", "im2win", "winograd", "pointwise", "mma"}
        The GPU kernel: ``"auto"`` measures, on the first call of each problem, the im2win
        kernel against the Winograd kernel where that applies (3x3 filters at stride 1) or the
        pointwise kernels (1x1 filters at stride 1 without padding: ``"pointwise"``, FFMAs with
        dynamic blocking, and ``"mma"``, the tensor cores in 3xTF32) and keeps the fastest;
        NumPy input always takes the float64 reference.

    Returns
    -------
    (N, F, HO, WO) array of the input's module: ``HO = (H + 2 pad - KH) // stride + 1``;
    float32 from the GPU, NumPy input keeps its float type (other types give float32).

    Raises
    ------
    InputError
        (a ``ValueError``) for a bad ``method``, ``stride`` or ``padding``, arrays of the wrong
        dimensions, channels or dtype, empty ones, a filter larger than the padded image, or
        ``method="winograd"``, ``"pointwise"`` or ``"mma"`` where that kernel does not apply.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(16.0).reshape(1, 1, 4, 4)
    >>> conv2d(x, np.ones((1, 1, 2, 2)), stride=2).tolist()
    [[[[10.0, 18.0], [42.0, 50.0]]]]
    >>> import cupy as cp  # doctest: +SKIP
    >>> xg, wg = cp.asarray(x, cp.float32), cp.ones((1, 1, 2, 2), cp.float32)  # doctest: +SKIP
    >>> conv2d(xg, wg, stride=2).dtype  # doctest: +SKIP
    dtype('float32')
    """
    key = _prepared_key(x, w, stride, padding, method)
    run = _PREPARED.get(key) if key is not None else None
    if run is not None:  # this problem ran before: checked, tuned and its launch packed
        return run(x, w)
    if not isinstance(method, str) or method not in METHODS:
        raise InputError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    xp = backend.array_module_of(x)
    x, w = xp.asarray(x), xp.asarray(w)
    check_arrays(x, w)
    sy, sx = pair(stride, "stride", 1)
    py, px = pair(padding, "padding", 0)
    output_shape(x.shape, w.shape, (sy, sx), (py, px))
    from ._winograd import unsupported

    why_not = unsupported(x.shape, w.shape, (sy, sx), (py, px))
    if method == "winograd" and why_not is not None:
        raise InputError(f"method='winograd' cannot compute this convolution: {why_not}")
    if method in ("pointwise", "mma") and not _is_pointwise(w.shape, (sy, sx), (py, px)):
        raise InputError(f"method={method!r} computes 1x1 filters at stride 1 without padding "
                         f"only, got {w.shape[2]}x{w.shape[3]} filters, stride {(sy, sx)}, "
                         f"padding {(py, px)}")
    if xp is np:
        from ._reference import conv2d_reference

        return conv2d_reference(x, w, (sy, sx), (py, px)).astype(_out_dtype(x))
    if method == "auto":
        method = _fastest_gpu_method(x, w, (sy, sx), (py, px))
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


def _pointwise(x, w, stride, padding):
    from ._im2win import pointwise_conv2d

    return pointwise_conv2d(x, w)


def _mma(x, w, stride, padding):
    from ._pointwise_mma import pointwise_mma_conv2d

    return pointwise_mma_conv2d(x, w)


_GPU_METHODS = {"im2win": _im2win, "winograd": _winograd, "pointwise": _pointwise, "mma": _mma}
#: the autotuner's namespace of conv2d's choice between the GPU kernels
METHOD_NAMESPACE = "conv2d.method"
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
    run = _prepared_call(method, x, w, stride, padding, out_shape)
    if run is None:
        return  # the pointwise kernel reads 16-byte vectors: an odd view takes the copying path
    if len(_PREPARED) >= _PREPARED_MAX:
        _PREPARED.clear()
    _PREPARED[key] = run


def _prepared_call(method, x, w, stride, padding, out_shape):
    """``(x, w) -> out`` of ``method`` for C-contiguous float32 arrays of these shapes, its
    tuning and packed launch done once (the first call measures); ``None`` for the pointwise
    kernel on an ``x`` not aligned to 16 bytes."""
    import cupy as cp

    if method == "pointwise":
        if x.data.ptr % 16:
            return None
        from ._im2win import prepared_pointwise

        run = prepared_pointwise(x, w)
        return lambda x, w: (run(x, w, cp.empty(out_shape, cp.float32))
                             if x.data.ptr % 16 == 0 else _pointwise(x, w, stride, padding))
    if method == "mma":
        from ._pointwise_mma import prepared_mma

        run = prepared_mma(x, w)
    elif method == "winograd":
        from ._winograd import prepared

        run = prepared(x, w, padding)
    else:
        from ._im2win import prepared_direct

        run = prepared_direct(x, w, stride, padding)
    return lambda x, w: run(x, w, cp.empty(out_shape, cp.float32))


def _applicable(x_shape, w_shape, stride, padding) -> list:
    """The GPU kernels that compute this problem: im2win always, Winograd for 3x3 filters at
    stride 1, the two pointwise kernels for 1x1 filters at stride 1 without padding."""
    from ._winograd import applicable

    out = ["im2win"]
    if applicable(x_shape, w_shape, stride, padding):
        out.append("winograd")
    if _is_pointwise(w_shape, stride, padding):
        out += ["pointwise", "mma"]
    return out


def _fastest_gpu_method(x, w, stride, padding) -> str:
    """The fastest of the GPU kernels that compute this problem (each tuned first), measured
    on its first call on this GPU and remembered by the autotuner
    (:func:`xcorr_app._cuda.tuning.fastest`: in memory and on disk; batches of similar size
    share the choice).  A problem only one kernel computes takes it without a measurement."""
    from .._cuda import fastest

    methods = _applicable(x.shape, w.shape, stride, padding)
    if len(methods) == 1:
        return methods[0]
    key = _choice_key(x, w, stride, padding)
    best = _remembered(key, methods)
    if best is None:  # each kernel's prepared call (tuned as it is made), as later calls run
        import cupy as cp

        xc, wc = cp.ascontiguousarray(x, cp.float32), cp.ascontiguousarray(w, cp.float32)
        if xc.data.ptr % 16:  # (an odd view: aligned, as most calls are, for the comparison)
            xc = xc.copy()
        shape = (x.shape[0], w.shape[0], *output_shape(x.shape, w.shape, stride, padding))
        calls = {m: _prepared_call(m, xc, wc, stride, padding, shape) for m in methods}
        best = fastest({m: (lambda c=c: c(xc, wc)) for m, c in calls.items()},
                       METHOD_NAMESPACE, key)
    return best


def _remembered(key, methods):
    """The kernel among ``methods`` the autotuner remembers for ``key`` on this GPU, or
    ``None``."""
    from .._cuda import device_fingerprint, recall

    entry = recall(METHOD_NAMESPACE, [*device_fingerprint(), key])
    choice = None if entry is None else entry.get("choice")
    return choice if choice in methods else None


def chosen_method(x, w, stride=1, padding=0) -> str:
    """The kernel ``conv2d(x, w, stride, padding)`` runs.

    Parameters
    ----------
    x, w, stride, padding
        As for :func:`conv2d`.

    Returns
    -------
    str
        ``"reference"`` for NumPy input, else ``"im2win"``, ``"winograd"``, ``"pointwise"``
        or ``"mma"`` (where several apply, the measured choice: once measured, on this GPU,
        by this or an earlier process), or ``"auto: not measured yet"``.

    Examples
    --------
    >>> import numpy as np
    >>> chosen_method(np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3)))
    'reference'
    """
    if backend.array_module_of(x) is np:
        return "reference"
    stride, padding = pair(stride, "stride", 1), pair(padding, "padding", 0)
    methods = _applicable(x.shape, w.shape, stride, padding)
    if len(methods) == 1:
        return methods[0]
    return _remembered(_choice_key(x, w, stride, padding), methods) or "auto: not measured yet"


def _is_pointwise(w_shape, stride, padding) -> bool:
    return tuple(w_shape[2:]) == (1, 1) and stride == (1, 1) and padding == (0, 0)


def _choice_key(x, w, stride, padding):
    from ._im2win import tuning_key

    return tuning_key(x.shape, w.shape, stride, padding)


def pointwise(x, w):
    """Mix the channels of ``x`` (N, C, H, W) with ``w`` (F, C): ``out[n, f] = sum_c w[f, c]
    x[n, c]`` (a 1x1 convolution; e.g. RGB to luma with ``w = [[0.299, 0.587, 0.114]]``).

    Parameters
    ----------
    x : ndarray (NumPy or CuPy)
        (N, C, H, W).
    w : array_like
        (F, C) or (F, C, 1, 1) weights.

    Returns
    -------
    (N, F, H, W) array of the input's module (float32 from the GPU kernel; NumPy input keeps
    its float type, as :func:`conv2d`).

    Raises
    ------
    InputError
        A ``w`` of another shape, or anything :func:`conv2d` refuses.

    Examples
    --------
    >>> import numpy as np
    >>> rgb = np.ones((1, 3, 2, 2), np.float32)
    >>> pointwise(rgb, [[0.25, 0.5, 0.25]]).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    xp = backend.array_module_of(x)
    w = xp.asarray(w)
    if w.ndim == 4 and w.shape[2:] == (1, 1):
        w = w.reshape(w.shape[:2])
    if w.ndim != 2:
        raise InputError(f"w must be (F, C) (or (F, C, 1, 1)), got shape {w.shape}")
    return conv2d(x, w[:, :, None, None])
