"""Filtering image stacks with scipy.ndimage semantics (NumPy in, NumPy out; CuPy in, CuPy out).

Every function takes one ``(H, W)`` image or an ``(N, H, W)`` stack and filters each frame in
2-D, the whole stack in one launch on the GPU.  The CPU path (NumPy arrays) is
:mod:`scipy.ndimage`.  CuPy arrays of float32, float16, uint16 or uint8 run on the column/row
reuse kernels (:mod:`xcorr_app.filters._reuse`) and give float32; separable filters (gaussian,
box, sobel, dog) run as two 1-D passes of the same kernels.  float64 CuPy arrays and filters
longer than 31 taps use :mod:`cupyx.scipy.ndimage`, which keeps their precision and size.
Boundary modes have SciPy's names and meaning: ``reflect`` (default), ``constant`` (with
``cval``), ``nearest``, ``mirror``, ``wrap``.

Examples
--------
>>> import numpy as np
>>> img = np.zeros((5, 5)); img[2, 2] = 1.0
>>> box(img, 3)[1:4, 1:4].round(3).tolist()[0]
[0.111, 0.111, 0.111]
"""

from __future__ import annotations

import numpy as np

from ..backend import array_module_of
from ..errors import XcorrError

MODES = ("reflect", "constant", "nearest", "mirror", "wrap")


def _ndimage(xp):
    if xp is np:
        import scipy.ndimage as ndi
    else:
        import cupyx.scipy.ndimage as ndi
    return ndi


def _check(stack, mode):
    if mode not in MODES:
        raise XcorrError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if stack.ndim not in (2, 3):
        raise XcorrError(f"filters take an (H, W) image or an (N, H, W) stack, got shape {stack.shape}")
    if 0 in stack.shape:
        raise XcorrError(f"cannot filter an empty image of shape {stack.shape}")


def _as_float(stack, xp):
    return stack if stack.dtype in (np.float32, np.float64) else stack.astype(xp.float32)


def _on_reuse_kernels(stack, *extents) -> bool:
    """True when the reuse kernels filter this stack (CuPy, not float64, taps that fit)."""
    from ._reuse import MAX_TAPS

    return (not isinstance(stack, np.ndarray) and stack.dtype != np.float64
            and max(extents) <= MAX_TAPS)


def _reuse(stack, weights, mode, cval, origin):
    from ._reuse import reuse_correlate

    # reuse_correlate reads the dtypes it compiles for and converts any other to float32
    return reuse_correlate(stack, weights, mode=mode, cval=cval, origin=origin)


def _separable(stack, taps_y, taps_x, mode, cval):
    """Correlate with the outer product ``taps_y x taps_x`` as two 1-D passes of the reuse
    kernels (rows, then columns; each is ``scipy.ndimage.correlate1d`` along one axis)."""
    tmp = _reuse(stack, np.asarray(taps_y, np.float64)[:, None], mode, cval, (0, 0))
    return _reuse(tmp, np.asarray(taps_x, np.float64)[None, :], mode, cval, (0, 0))


def _check_weights(weights, stack):
    w = np.asarray(weights.get() if hasattr(weights, "get") else weights)
    if w.ndim != 2 or 0 in w.shape:
        raise XcorrError(f"weights must be a non-empty 2-D array, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise XcorrError("weights contain NaN or Inf")
    if w.shape[0] > stack.shape[-2] or w.shape[1] > stack.shape[-1]:
        raise XcorrError(f"filter {w.shape[0]}x{w.shape[1]} is larger than the image "
                         f"{stack.shape[-2]}x{stack.shape[-1]}")
    return w


def _check_origin(origin, shape):
    org = (origin, origin) if np.isscalar(origin) else tuple(origin)
    if len(org) != 2:
        raise XcorrError(f"origin must be an int or a pair, got {origin!r}")
    for o, n in zip(org, shape):
        if not (-(n // 2) <= o <= (n - 1) // 2):
            raise XcorrError(f"origin {o} is invalid for a filter of length {n}: it must lie in "
                             f"[{-(n // 2)}, {(n - 1) // 2}]")
    return org


def correlate2d(stack, weights, mode="reflect", cval=0.0, origin=0):
    """2-D correlation of every frame with ``weights`` (``scipy.ndimage.correlate`` per frame)."""
    xp = array_module_of(stack)
    _check(stack, mode)
    w = _check_weights(weights, stack)
    org = _check_origin(origin, w.shape)
    if _on_reuse_kernels(stack, *w.shape):
        return _reuse(stack, w, mode, cval, org)
    stack = _as_float(stack, xp)
    w = xp.asarray(w, dtype=stack.dtype)
    ndi = _ndimage(xp)
    if stack.ndim == 2:
        return ndi.correlate(stack, w, mode=mode, cval=cval, origin=org)
    return ndi.correlate(stack, w[None], mode=mode, cval=cval, origin=(0,) + org)


def convolve2d(stack, weights, mode="reflect", cval=0.0, origin=0):
    """2-D convolution of every frame (``scipy.ndimage.convolve`` per frame)."""
    w = _check_weights(weights, stack)
    org = _check_origin(origin, w.shape)
    # convolve == correlate with the flipped filter and the origin mirrored (scipy's rule).
    flipped = w[::-1, ::-1]
    org = tuple(-o - (1 - n % 2) for o, n in zip(org, w.shape))
    return correlate2d(stack, flipped, mode, cval, org)


def _per_frame(value, stack, none_value):
    """A per-axis parameter that leaves the frame axis of a stack alone (scalar for 2-D)."""
    return value if stack.ndim == 2 else (none_value, value, value)


def gaussian_taps(sigma: float, truncate: float = 4.0) -> np.ndarray:
    """scipy.ndimage's 1-D gaussian: radius ``int(truncate * sigma + 0.5)``, normalised."""
    radius = int(truncate * float(sigma) + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / float(sigma) ** 2 * x * x)
    return phi / phi.sum()


def gaussian(stack, sigma, truncate=4.0, mode="reflect", cval=0.0):
    """Gaussian blur of every frame (separable: two 1-D passes)."""
    xp = array_module_of(stack)
    _check(stack, mode)
    if not np.isfinite(sigma) or sigma <= 0:
        raise XcorrError(f"gaussian sigma must be > 0, got {sigma}")
    taps = gaussian_taps(sigma, truncate)
    if _on_reuse_kernels(stack, taps.size):
        return _separable(stack, taps, taps, mode, cval)
    stack = _as_float(stack, xp)
    return _ndimage(xp).gaussian_filter(stack, _per_frame(sigma, stack, 0), truncate=truncate,
                                        mode=mode, cval=cval)


def box(stack, size, mode="reflect", cval=0.0):
    """Mean over a ``size x size`` window of every frame (separable)."""
    xp = array_module_of(stack)
    _check(stack, mode)
    if int(size) != size or size < 1:
        raise XcorrError(f"box size must be a positive integer, got {size}")
    size = int(size)
    if _on_reuse_kernels(stack, size):
        taps = np.full(size, 1.0 / size)
        return _separable(stack, taps, taps, mode, cval)
    stack = _as_float(stack, xp)
    return _ndimage(xp).uniform_filter(stack, _per_frame(size, stack, 1), mode=mode, cval=cval)


SOBEL_DERIVATIVE = np.array([-1.0, 0.0, 1.0])
SOBEL_SMOOTHING = np.array([1.0, 2.0, 1.0])


def sobel(stack, axis=None, mode="reflect", cval=0.0):
    """Sobel derivative along ``axis`` (0 rows, 1 columns) of every frame, or the gradient
    magnitude when ``axis`` is None."""
    xp = array_module_of(stack)
    _check(stack, mode)
    if axis is None:
        return xp.hypot(sobel(stack, 0, mode, cval), sobel(stack, 1, mode, cval))
    if axis not in (0, 1):
        raise XcorrError(f"sobel axis must be 0 (rows) or 1 (columns), got {axis}")
    d, s = SOBEL_DERIVATIVE, SOBEL_SMOOTHING
    taps_y, taps_x = (d, s) if axis == 0 else (s, d)
    if _on_reuse_kernels(stack, 3):
        return _separable(stack, taps_y, taps_x, mode, cval)
    # Not ndimage.sobel on the stack: it would also smooth across frames.
    stack = _as_float(stack, xp)
    ndi, off = _ndimage(xp), stack.ndim - 2
    tmp = ndi.correlate1d(stack, xp.asarray(taps_y, stack.dtype), axis=off, mode=mode, cval=cval)
    return ndi.correlate1d(tmp, xp.asarray(taps_x, stack.dtype), axis=off + 1, mode=mode,
                           cval=cval)


def laplace(stack, mode="reflect", cval=0.0):
    """Discrete Laplacian (3x3, 4-neighbour) of every frame."""
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=np.float32)
    return correlate2d(stack, w, mode=mode, cval=cval)


def dog(stack, sigma_low, sigma_high, truncate=4.0, mode="reflect", cval=0.0):
    """Difference of Gaussians: ``gaussian(sigma_low) - gaussian(sigma_high)``."""
    if not sigma_low < sigma_high:
        raise XcorrError(f"dog needs sigma_low < sigma_high, got {sigma_low}, {sigma_high}")
    return (gaussian(stack, sigma_low, truncate, mode, cval)
            - gaussian(stack, sigma_high, truncate, mode, cval))


def parse_kernel_spec(spec: str):
    """``gaussian:S | box:N | sobel[:AXIS] | laplace | dog:S1,S2 | FILE.npy`` -> a function of a stack.

    The returned callable takes ``(stack, mode, cval)``.
    """
    name, _, arg = spec.partition(":")
    try:
        if name == "gaussian" and arg:
            s = float(arg)
            return lambda st, mode, cval: gaussian(st, s, mode=mode, cval=cval)
        if name == "box" and arg:
            n = int(arg)
            return lambda st, mode, cval: box(st, n, mode=mode, cval=cval)
        if name == "sobel":
            ax = int(arg) if arg else None
            return lambda st, mode, cval: sobel(st, ax, mode=mode, cval=cval)
        if name == "laplace" and not arg:
            return lambda st, mode, cval: laplace(st, mode=mode, cval=cval)
        if name == "dog" and arg:
            lo, hi = (float(v) for v in arg.split(","))
            return lambda st, mode, cval: dog(st, lo, hi, mode=mode, cval=cval)
    except ValueError:
        raise XcorrError(f"cannot parse kernel {spec!r}: expected e.g. gaussian:2.0, box:5, sobel, "
                         "sobel:0, laplace, dog:1,4 or a FILE.npy") from None
    if spec.endswith(".npy"):
        try:
            w = np.load(spec, allow_pickle=False)
        except FileNotFoundError:
            raise XcorrError(f"kernel file {spec} does not exist") from None
        except Exception as exc:
            raise XcorrError(f"cannot read kernel file {spec}: {exc}") from None
        return lambda st, mode, cval: correlate2d(st, w, mode=mode, cval=cval)
    raise XcorrError(f"unknown kernel {spec!r}: use gaussian:SIGMA, box:N, sobel[:AXIS], laplace, "
                     "dog:S1,S2 or FILE.npy")
