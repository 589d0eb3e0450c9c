"""Filtering image stacks with scipy.ndimage semantics (NumPy in, NumPy out; CuPy in, CuPy out).

Every function takes one ``(H, W)`` image or an ``(N, H, W)`` stack and filters each frame in
2-D, the whole stack in one launch on the GPU.  The CPU path (NumPy arrays) is
:mod:`scipy.ndimage`.  CuPy arrays of float32, float16, uint16 or uint8 run on the column/row
reuse kernels (:mod:`xcorr_app.filters._reuse`) and give float32; separable filters (gaussian,
box, sobel, dog) run as two 1-D passes of the same kernels (one fused kernel for float32
stacks and equal odd tap counts up to 11: :mod:`xcorr_app.filters._separable`).  float64
CuPy arrays, 2-D filters longer than 31 taps and 1-D ones (the passes of separable filters, a
filter of one row or one column) longer than 63 use :mod:`cupyx.scipy.ndimage`, which keeps
their precision and size.
Boundary modes have SciPy's names and meaning (:data:`~xcorr_app.filters.MODES`): ``reflect``
(default), ``constant`` (with ``cval``), ``nearest``, ``mirror``, ``wrap``.  Bad arguments raise
:class:`~xcorr_app.errors.InputError`, a :class:`ValueError`.

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
from ..errors import InputError
from ._validation import (box_size, check_radius, checked_stack, dog_sigmas, filter_weights,
                          fitting_weights, load_npy, origin_pair, positive, sobel_axis,
                          with_radius)


def _ndimage(xp):
    if xp is np:
        import scipy.ndimage as ndi
    else:
        import cupyx.scipy.ndimage as ndi
    return ndi


def _as_float(stack, xp):
    return stack if stack.dtype in (np.float32, np.float64) else stack.astype(xp.float32)


def _on_reuse_kernels(stack, *extents, line=False) -> bool:
    """True when the reuse kernels filter this stack (CuPy, not float64, taps that fit: up to
    ``MAX_TAPS`` of a 2-D filter, ``LINE_MAX_TAPS`` with ``line``, a 1-D filter: the passes of
    a separable one, or one row or one column)."""
    from ._reuse import LINE_MAX_TAPS, MAX_TAPS

    return (not isinstance(stack, np.ndarray) and stack.dtype != np.float64
            and max(extents) <= (LINE_MAX_TAPS if line else MAX_TAPS))


def _reuse(stack, weights, mode, cval, origin):
    from ._reuse import reuse_correlate

    # reuse_correlate reads the dtypes it compiles for and converts any other to float32
    return reuse_correlate(stack, weights, mode=mode, cval=cval, origin=origin)


def _separable(stack, taps_y, taps_x, mode, cval):
    """Correlate with the outer product ``taps_y x taps_x`` as two 1-D passes (rows, then
    columns; each is ``scipy.ndimage.correlate1d`` along one axis): in one kernel for float32
    stacks and equal odd tap counts up to 11 (:mod:`xcorr_app.filters._separable`), else two
    passes of the reuse kernels."""
    from ._separable import fused_fits, separable_correlate

    if fused_fits(stack, taps_y, taps_x):
        return separable_correlate(stack, taps_y, taps_x, mode, cval)
    tmp = _reuse(stack, np.asarray(taps_y, np.float64)[:, None], mode, cval, (0, 0))
    return _reuse(tmp, np.asarray(taps_x, np.float64)[None, :], mode, cval, (0, 0))


def correlate2d(stack, weights, mode="reflect", cval=0.0, origin=0):
    """2-D correlation of every frame with ``weights`` (``scipy.ndimage.correlate`` per frame).

    Parameters
    ----------
    stack : ndarray (NumPy or CuPy)
        An ``(H, W)`` image or an ``(N, H, W)`` stack of real numbers.
    weights : array_like
        A 2-D filter of finite numbers, no larger than a frame.
    mode : {"reflect", "constant", "nearest", "mirror", "wrap"}
        The boundary mode (:data:`~xcorr_app.filters.MODES`), as ``scipy.ndimage``.
    cval : float
        The value outside the frame for ``mode="constant"``.
    origin : int or (int, int)
        The filter's placement, as ``scipy.ndimage``.

    Returns
    -------
    ndarray
        Of the input's module and shape: float32 or float64 input keeps its type on the CPU;
        other types give float32, as does the GPU's reuse kernels.

    Raises
    ------
    InputError
        For a bad mode, cval, origin, weights (not 2-D, empty, NaN or Inf, larger than a
        frame) or stack (not 2-D or 3-D, empty, not real numbers).

    Examples
    --------
    >>> import numpy as np
    >>> img = np.arange(9.0).reshape(3, 3)
    >>> correlate2d(img, [[0, 0, 1]], mode="constant").tolist()
    [[1.0, 2.0, 0.0], [4.0, 5.0, 0.0], [7.0, 8.0, 0.0]]
    """
    stack = checked_stack(stack, mode, cval)
    xp = array_module_of(stack)
    w = fitting_weights(weights, stack)
    org = origin_pair(origin, w.shape)
    if _on_reuse_kernels(stack, *w.shape, line=min(w.shape) == 1):
        return _reuse(stack, w, mode, cval, org)
    stack = _as_float(stack, xp)
    w = xp.asarray(w, dtype=stack.dtype)
    ndi = _ndimage(xp)
    if stack.ndim == 2:
        return ndi.correlate(stack, w, mode=mode, cval=cval, origin=org)
    return ndi.correlate(stack, w[None], mode=mode, cval=cval, origin=(0,) + org)


def convolve2d(stack, weights, mode="reflect", cval=0.0, origin=0):
    """2-D convolution of every frame (``scipy.ndimage.convolve`` per frame).

    Parameters
    ----------
    stack, weights, mode, cval, origin
        As for :func:`correlate2d`.

    Returns
    -------
    ndarray
        As for :func:`correlate2d`.

    Raises
    ------
    InputError
        As for :func:`correlate2d`.

    Examples
    --------
    >>> import numpy as np
    >>> img = np.arange(9.0).reshape(3, 3)
    >>> convolve2d(img, [[0, 0, 1]], mode="constant").tolist()
    [[0.0, 0.0, 1.0], [0.0, 3.0, 4.0], [0.0, 6.0, 7.0]]
    """
    w = filter_weights(weights)
    org = origin_pair(origin, w.shape)
    # convolve == correlate with the flipped filter and the origin mirrored (scipy's rule).
    flipped = w[::-1, ::-1]
    org = tuple(-o - (1 - n % 2) for o, n in zip(org, w.shape))
    return correlate2d(stack, flipped, mode, cval, org)


def _per_frame(value, stack, none_value):
    """A per-axis parameter that leaves the frame axis of a stack alone (scalar for 2-D)."""
    return value if stack.ndim == 2 else (none_value, value, value)


def gaussian_radius(sigma, truncate=4.0, frame_shape=None) -> float:
    """scipy.ndimage's radius ``int(truncate * sigma + 0.5)`` of a checked ``sigma`` and
    ``truncate``; with ``frame_shape``, refused beyond the frame (:func:`check_radius`)."""
    positive(sigma, "gaussian sigma")
    positive(truncate, "gaussian truncate", zero_ok=True)
    radius = float(truncate) * float(sigma) + 0.5  # (a float: no int of an overflow)
    if frame_shape is not None:
        check_radius(radius, frame_shape, f"gaussian sigma {sigma} (truncate {truncate})")
    return int(radius)


def gaussian_taps(sigma: float, truncate: float = 4.0) -> np.ndarray:
    """scipy.ndimage's 1-D gaussian: radius ``int(truncate * sigma + 0.5)``, normalised.

    Parameters
    ----------
    sigma : float
        The standard deviation, > 0.
    truncate : float
        The radius in standard deviations, >= 0.

    Returns
    -------
    ndarray
        float64 taps, ``2 * radius + 1`` of them, summing to 1.

    Raises
    ------
    InputError
        For a ``sigma`` or ``truncate`` out of range, NaN or not a number.

    Examples
    --------
    >>> gaussian_taps(1.0, truncate=1.0).round(4).tolist()
    [0.2741, 0.4519, 0.2741]
    """
    radius = gaussian_radius(sigma, truncate)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    s2 = float(sigma) ** 2
    if s2 < 1e-300:  # (-0.5 / s2 overflows, or divides by 0: every tap but the centre is 0)
        return (x == 0).astype(np.float64)
    phi = np.exp(-0.5 / s2 * x * x)
    return phi / phi.sum()


def gaussian_light(image, sigma, truncate=4.0, dtype=np.float64):
    """:func:`gaussian` of an image or a volume (every axis) in ``reflect`` mode, without SciPy,
    on the array's device (NumPy or CuPy), as ``dtype``: a weighted sum of padded slices an
    axis.

    For the few small frames a GPU run judges on the CPU before it starts (the Lucas-Kanade
    decision): importing ``scipy.ndimage`` costs such a process about a second, more than the
    decision itself; and for the 3-D refinement's volumes on either device (cupyx's filters
    import cupyx).  Equals ``scipy.ndimage.gaussian_filter`` within rounding.

    Examples
    --------
    >>> import numpy as np
    >>> img = np.zeros((5, 6)); img[2, 2] = 1.0
    >>> float(gaussian_light(img, 1.0).sum().round(6))
    1.0
    """
    xp = array_module_of(image)
    gaussian_radius(sigma, truncate, np.shape(image))
    taps = gaussian_taps(sigma, truncate)
    r = taps.size // 2
    out = xp.asarray(image, dtype)
    for axis in range(out.ndim):
        pad = [(0, 0)] * out.ndim
        pad[axis] = (r, r)
        # scipy's "reflect" (d c b a | a b c d | d c b a) is NumPy's "symmetric"
        out = taps_along(xp.pad(out, pad, mode="symmetric"), taps, axis, 0, out.shape[axis])
    return out


def taps_along(array, taps, axis, start, length):
    """``sum_k taps[k] * array[start + k : start + k + length]`` along ``axis``, on the array's
    device, in its type (each tap a product and a sum, in order): a correlation of the slices
    an axis holds, without padding or SciPy.

    >>> taps_along(np.arange(6.0), [0.5, 0.5], 0, 1, 3).tolist()
    [1.5, 2.5, 3.5]
    """
    xp = array_module_of(array)
    if xp is not np:
        from ._axis_taps import axis_taps, kernel_takes

        if kernel_takes(array, taps, axis, start, length):
            return axis_taps(array, taps, axis % array.ndim, start, length)
    acc = None
    for k, w in enumerate(taps):
        cut = [slice(None)] * array.ndim
        cut[axis] = slice(start + k, start + k + length)
        # (ufuncs called by name: CuPy hands ``array * number`` to NumPy's ufunc protocol,
        # whose first use imports cupyx)
        term = xp.multiply(array[tuple(cut)], array.dtype.type(w))
        acc = term if acc is None else xp.add(acc, term)
    return acc


def gaussian(stack, sigma, truncate=4.0, mode="reflect", cval=0.0):
    """Gaussian blur of every frame (separable: two 1-D passes).

    Parameters
    ----------
    stack : ndarray (NumPy or CuPy)
        An ``(H, W)`` image or an ``(N, H, W)`` stack of real numbers.
    sigma : float
        The standard deviation in pixels, > 0 (both axes).
    truncate : float
        The filter's radius in standard deviations (``scipy.ndimage.gaussian_filter``'s).
    mode, cval
        As for :func:`correlate2d`.

    Returns
    -------
    ndarray
        As for :func:`correlate2d`.

    Raises
    ------
    InputError
        For a ``sigma`` that is not a finite number > 0, a bad ``truncate``, ``mode``,
        ``cval`` or stack, or a radius ``truncate * sigma`` far beyond the frame
        (:func:`~._validation.check_radius`).

    Examples
    --------
    >>> import numpy as np
    >>> img = np.zeros((5, 5)); img[2, 2] = 1.0
    >>> float(gaussian(img, 1.0).sum().round(6))
    1.0
    """
    stack = checked_stack(stack, mode, cval)
    xp = array_module_of(stack)
    gaussian_radius(sigma, truncate, stack.shape)  # (before the taps are made)
    taps = gaussian_taps(sigma, truncate)
    if _on_reuse_kernels(stack, taps.size, line=True):
        return _separable(stack, taps, taps, mode, cval)
    stack = _as_float(stack, xp)
    return _ndimage(xp).gaussian_filter(stack, _per_frame(sigma, stack, 0), truncate=truncate,
                                        mode=mode, cval=cval)


def box(stack, size, mode="reflect", cval=0.0):
    """Mean over a ``size x size`` window of every frame (separable).

    Parameters
    ----------
    stack : ndarray (NumPy or CuPy)
        An ``(H, W)`` image or an ``(N, H, W)`` stack of real numbers.
    size : int
        The window's side, >= 1 (``scipy.ndimage.uniform_filter``'s).
    mode, cval
        As for :func:`correlate2d`.

    Returns
    -------
    ndarray
        As for :func:`correlate2d`.

    Raises
    ------
    InputError
        For a ``size`` that is not a positive integer, a bad ``mode``, ``cval`` or stack.

    Examples
    --------
    >>> import numpy as np
    >>> box(np.arange(6.0).reshape(2, 3), 2, mode="nearest").tolist()
    [[0.0, 0.5, 1.5], [1.5, 2.0, 3.0]]
    """
    stack = checked_stack(stack, mode, cval)
    xp = array_module_of(stack)
    size = box_size(size)
    check_radius(size // 2, stack.shape, f"box size {size}")
    if _on_reuse_kernels(stack, size, line=True):
        taps = np.full(size, 1.0 / size)
        return _separable(stack, taps, taps, mode, cval)
    stack = _as_float(stack, xp)
    return _ndimage(xp).uniform_filter(stack, _per_frame(size, stack, 1), mode=mode, cval=cval)


SOBEL_DERIVATIVE = np.array([-1.0, 0.0, 1.0])
SOBEL_SMOOTHING = np.array([1.0, 2.0, 1.0])


def sobel(stack, axis=None, mode="reflect", cval=0.0):
    """Sobel derivative along ``axis`` of every frame, or the gradient magnitude.

    Parameters
    ----------
    stack : ndarray (NumPy or CuPy)
        An ``(H, W)`` image or an ``(N, H, W)`` stack of real numbers.
    axis : {None, 0, 1}
        0: along the rows (``scipy.ndimage.sobel(frame, axis=0)``), 1: along the columns;
        ``None``: ``hypot`` of both.
    mode, cval
        As for :func:`correlate2d`.

    Returns
    -------
    ndarray
        As for :func:`correlate2d`.

    Raises
    ------
    InputError
        For another ``axis``, a bad ``mode``, ``cval`` or stack.

    Examples
    --------
    >>> import numpy as np
    >>> ramp = np.tile(np.arange(4.0), (3, 1))
    >>> sobel(ramp, axis=1, mode="nearest")[1].tolist()
    [4.0, 8.0, 8.0, 4.0]
    """
    stack = checked_stack(stack, mode, cval)
    xp = array_module_of(stack)
    if sobel_axis(axis) is None:
        return xp.hypot(sobel(stack, 0, mode, cval), sobel(stack, 1, mode, cval))
    d, s = SOBEL_DERIVATIVE, SOBEL_SMOOTHING
    taps_y, taps_x = (d, s) if axis == 0 else (s, d)
    # (scipy's order, the derivative's axis first: with a constant border of cval != 0 the
    # second pass reads cval where the first wrote its own border, so the order shows)
    x_first = axis == 1 and mode == "constant"
    if _on_reuse_kernels(stack, 3, line=True):
        if not x_first:
            return _separable(stack, taps_y, taps_x, mode, cval)
        tmp = _reuse(stack, np.asarray(taps_x, np.float64)[None, :], mode, cval, (0, 0))
        return _reuse(tmp, np.asarray(taps_y, np.float64)[:, None], mode, cval, (0, 0))
    # Not ndimage.sobel on the stack: it would also smooth across frames.
    stack = _as_float(stack, xp)
    ndi, off = _ndimage(xp), stack.ndim - 2
    passes = [(taps_y, off), (taps_x, off + 1)]
    for taps, along in passes[::-1] if x_first else passes:
        stack = ndi.correlate1d(stack, xp.asarray(taps, stack.dtype), axis=along, mode=mode,
                                cval=cval)
    return stack


def laplace(stack, mode="reflect", cval=0.0):
    """Discrete Laplacian (3x3, 4-neighbour) of every frame.

    Parameters
    ----------
    stack, mode, cval
        As for :func:`correlate2d`.

    Returns
    -------
    ndarray
        As for :func:`correlate2d`.

    Raises
    ------
    InputError
        For a bad ``mode``, ``cval`` or stack (frames smaller than 3x3 included).

    Examples
    --------
    >>> import numpy as np
    >>> img = np.zeros((3, 3)); img[1, 1] = 1.0
    >>> laplace(img, mode="constant").tolist()
    [[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]
    """
    w = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=np.float32)
    return correlate2d(stack, w, mode=mode, cval=cval)


def dog(stack, sigma_low, sigma_high, truncate=4.0, mode="reflect", cval=0.0):
    """Difference of Gaussians: ``gaussian(sigma_low) - gaussian(sigma_high)``.

    Parameters
    ----------
    stack : ndarray (NumPy or CuPy)
        An ``(H, W)`` image or an ``(N, H, W)`` stack of real numbers.
    sigma_low, sigma_high : float
        Finite, ``0 < sigma_low < sigma_high``.
    truncate, mode, cval
        As for :func:`gaussian`.

    Returns
    -------
    ndarray
        As for :func:`correlate2d`.

    Raises
    ------
    InputError
        For sigmas out of order or range, or what :func:`gaussian` refuses.

    Examples
    --------
    >>> import numpy as np
    >>> abs(float(dog(np.ones((6, 6)), 1.0, 2.0).max())) < 1e-12  # flat: no band-pass signal
    True
    """
    dog_sigmas(sigma_low, sigma_high)
    low, high = (gaussian(stack, s, truncate, mode, cval) for s in (sigma_low, sigma_high))
    with np.errstate(invalid="ignore"):  # (around an Inf pixel: inf - inf, NaN, as it is)
        return low - high


def parse_kernel_spec(spec: str):
    """``gaussian:S | box:N | sobel[:AXIS] | laplace | dog:S1,S2 | FILE.npy`` -> a function.

    Parameters
    ----------
    spec : str
        A named filter with its arguments, or the path of a ``.npy`` file of a 2-D filter
        (applied with :func:`correlate2d`).

    Returns
    -------
    callable
        ``fn(stack, mode, cval)``, the filter applied to a stack; ``fn.radius`` (where known):
        the filter's radius in pixels; ``fn.sigmas`` (there): a gaussian's sigma, a dog's two.

    Raises
    ------
    InputError
        For a spec that does not parse, arguments the filter refuses (checked now), a
        missing or unreadable file, or a file that is not a 2-D array of finite numbers.

    Examples
    --------
    >>> import numpy as np
    >>> fn = parse_kernel_spec("box:3")
    >>> fn(np.ones((4, 4)), "reflect", 0.0).tolist()[0]
    [1.0, 1.0, 1.0, 1.0]
    >>> parse_kernel_spec("box:0")
    Traceback (most recent call last):
        ...
    xcorr_app.errors.InputError: box size must be a positive integer, got 0
    """
    if not isinstance(spec, str):
        raise InputError(f"a kernel spec is a string such as gaussian:2.0, got {spec!r}")
    name, _, arg = spec.partition(":")
    try:
        if name == "gaussian" and arg:
            s = float(arg)
            return with_radius(lambda st, mode, cval: gaussian(st, s, mode=mode, cval=cval),
                               gaussian_radius(s), (s,))
        if name == "box" and arg:
            n = box_size(int(arg))
            return with_radius(lambda st, mode, cval: box(st, n, mode=mode, cval=cval), n // 2)
        if name == "sobel":
            ax = sobel_axis(int(arg) if arg else None)
            return lambda st, mode, cval: sobel(st, ax, mode=mode, cval=cval)
        if name == "laplace" and not arg:
            return lambda st, mode, cval: laplace(st, mode=mode, cval=cval)
        if name == "dog" and arg:
            lo, hi = (float(v) for v in arg.split(","))
            dog_sigmas(lo, hi)
            return with_radius(lambda st, mode, cval: dog(st, lo, hi, mode=mode, cval=cval),
                               gaussian_radius(hi), (lo, hi))
    except InputError:
        raise
    except ValueError:
        raise InputError(f"cannot parse kernel {spec!r}: expected e.g. gaussian:2.0, box:5, "
                         "sobel, sobel:0, laplace, dog:1,4 or a FILE.npy") from None
    if spec.endswith(".npy"):
        w = load_npy(spec, "kernel file")
        try:
            w = filter_weights(w)
        except InputError as exc:
            raise InputError(f"kernel file {spec}: {exc}") from None
        return with_radius(lambda st, mode, cval: correlate2d(st, w, mode=mode, cval=cval),
                      max(w.shape) // 2)
    raise InputError(f"unknown kernel {spec!r}: use gaussian:SIGMA, box:N, sobel[:AXIS], laplace, "
                     "dog:S1,S2 or FILE.npy")
