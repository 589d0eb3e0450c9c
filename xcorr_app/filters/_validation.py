"""The argument checks of the filters: each bad argument raises
:class:`~xcorr_app.errors.InputError` (a :class:`ValueError`) with a message that says what was
expected.

Examples
--------
>>> positive(1.5, "gaussian sigma")
1.5
>>> origin_pair(-1, (3, 3))
(-1, -1)
>>> box_size(2.5)
Traceback (most recent call last):
    ...
xcorr_app.errors.InputError: box size must be a positive integer, got 2.5
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..backend import is_cupy_array
from ..conv import REAL_KINDS
from ..errors import InputError
from ._modes import MODES


def checked_stack(stack, mode, cval=0.0):
    """``stack`` as an array (NumPy for anything but CuPy): an ``(H, W)`` image or an
    ``(N, H, W)`` stack of real numbers, not empty; ``mode`` one of
    :data:`~xcorr_app.filters.MODES` and ``cval`` a real number.  Else :class:`InputError`."""
    if not isinstance(mode, str) or mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if not is_real_number(cval):
        raise InputError(f"cval must be a real number, got {cval!r}")
    if not is_cupy_array(stack):
        stack = np.asarray(stack)
    if stack.ndim not in (2, 3):
        raise InputError(f"filters take an (H, W) image or an (N, H, W) stack, got shape "
                         f"{stack.shape}")
    if 0 in stack.shape:
        raise InputError(f"cannot filter an empty image of shape {stack.shape}")
    if stack.dtype.kind not in REAL_KINDS:
        raise InputError(f"filters take real numbers, got dtype {stack.dtype}")
    return stack


def is_real_number(value) -> bool:
    """Whether ``value`` is a real number (a Python or NumPy scalar; not complex, not text).

    >>> is_real_number(np.float32(0.5)), is_real_number("1"), is_real_number(1j)
    (True, False, False)
    """
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, (complex, np.complexfloating, str, bytes))


def positive(value, what: str, zero_ok: bool = False) -> float:
    """``value`` as a finite float > 0 (>= 0 with ``zero_ok``), else :class:`InputError`.

    >>> positive("2", "gaussian sigma")
    Traceback (most recent call last):
        ...
    xcorr_app.errors.InputError: gaussian sigma must be a number, got '2' (a str)
    """
    if not is_real_number(value) or isinstance(value, (bool, np.bool_)):
        raise InputError(f"{what} must be a number, got {value!r} (a {type(value).__name__})")
    if not math.isfinite(float(value)):
        raise InputError(f"{what} must be a finite number, got {value}")
    if not is_real_number(value) or float(value) < 0 or (float(value) == 0 and not zero_ok):
        raise InputError(f"{what} must be {'>= 0' if zero_ok else '> 0'}, got {value}")
    return float(value)


#: a filter's radius may reach this many times the frame's larger side (a gaussian's sigma up
#: to the frame's side at the default truncate): beyond, its taps only read the frame's
#: reflections again, while the time (and a gaussian's taps) grow with it
RADIUS_FRAMES = 4
#: the limit of a small frame's radius (its taps are few whatever the frame)
MIN_RADIUS_LIMIT = 256


def check_radius(radius: float, frame_shape, what: str) -> int:
    """``radius`` as an int, or :class:`InputError` naming ``what`` (the option or argument)
    when it exceeds :data:`RADIUS_FRAMES` times the larger side of frames of ``frame_shape``
    (and :data:`MIN_RADIUS_LIMIT`; checked before any tap is made).

    >>> check_radius(4000000.5, (64, 64), "--kernel gaussian:1e6")
    Traceback (most recent call last):
        ...
    xcorr_app.errors.InputError: --kernel gaussian:1e6 makes a filter of radius 4000000 px, far beyond the 64x64 frame: the radius may be at most 256 px (4 times the frame's larger side, at least 256)
    """
    h, w = (int(n) for n in tuple(frame_shape)[-2:])
    limit = max(RADIUS_FRAMES * max(h, w), MIN_RADIUS_LIMIT)
    if not math.isfinite(radius) or int(radius) > limit:
        shown = f"{radius:.6g}" if not radius < 1e15 else str(int(radius))
        raise InputError(f"{what} makes a filter of radius {shown} px, far beyond the {h}x{w} "
                         f"frame: the radius may be at most {limit} px ({RADIUS_FRAMES} times "
                         f"the frame's larger side, at least {MIN_RADIUS_LIMIT})")
    return int(radius)


def with_radius(fn, radius: int, sigmas=()):
    """``fn`` (a filter of a kernel spec) with its filter's ``radius`` as ``fn.radius``,
    checked against the frames before a run (:func:`check_radius`), and its gaussians'
    ``sigmas`` as ``fn.sigmas`` (a gaussian's one, a dog's two; else none)."""
    fn.radius, fn.sigmas = radius, tuple(sigmas)
    return fn


def box_size(size) -> int:
    """``size`` as an int >= 1 (an integral float is taken), else :class:`InputError`."""
    try:
        ok = int(size) == size and size >= 1
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InputError(f"box size must be a positive integer, got {size}")
    return int(size)


def sobel_axis(axis):
    """``axis`` if it is ``None``, 0 or 1, else :class:`InputError`."""
    if axis is not None and axis not in (0, 1):
        raise InputError(f"sobel axis must be 0 (rows) or 1 (columns), got {axis}")
    return axis


def dog_sigmas(sigma_low, sigma_high) -> tuple:
    """The sigmas of a difference of gaussians as floats, ``0 < sigma_low < sigma_high``."""
    lo, hi = positive(sigma_low, "gaussian sigma"), positive(sigma_high, "gaussian sigma")
    if not lo < hi:
        raise InputError(f"dog needs sigma_low < sigma_high, got {sigma_low}, {sigma_high}")
    return lo, hi


def load_npy(path, what: str = "kernel file") -> np.ndarray:
    """The array in the ``.npy`` file ``path``: a regular file in NumPy's format holding real
    numbers (never unpickled), else :class:`InputError` naming ``what`` and the file.

    >>> load_npy("no/such.npy")
    Traceback (most recent call last):
        ...
    xcorr_app.errors.InputError: kernel file no/such.npy does not exist
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} {path} does not exist")
    if not p.is_file():
        raise InputError(f"{what} {path} is not a regular file; give a .npy file")
    try:
        with open(p, "rb") as fh:
            magic = fh.read(6)
            fh.seek(0)
            if magic != b"\x93NUMPY":
                raise InputError(f"{what} {path} is not a NumPy .npy file (save the array "
                                 "with numpy.save)")
            try:
                w = np.load(fh, allow_pickle=False)
            except ValueError as exc:
                if "pickle" in str(exc):  # an object array: refused, never unpickled
                    raise InputError(f"{what} {path} holds Python objects, not numbers") from None
                raise InputError(f"{what} {path} is not a valid .npy file ({exc})") from None
    except PermissionError:
        raise InputError(f"{what} {path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {path} ({exc.strerror or exc})") from None
    if w.dtype.kind == "c":
        raise InputError(f"{what} {path} holds complex numbers ({w.dtype}); filters take real "
                         "numbers")
    if w.dtype.kind not in REAL_KINDS:
        raise InputError(f"{what} {path} must hold real numbers, got dtype {w.dtype}")
    if not np.all(np.isfinite(w)):
        raise InputError(f"{what} {path} contains NaN or Inf")
    return w


def filter_weights(weights):
    """The filter as a NumPy array: 2-D, not empty, finite real numbers."""
    w = np.asarray(weights.get() if hasattr(weights, "get") else weights)
    if w.ndim != 2 or 0 in w.shape:
        raise InputError(f"weights must be a non-empty 2-D array, got shape {w.shape}")
    if w.dtype.kind not in REAL_KINDS:
        raise InputError(f"weights must be real numbers, got dtype {w.dtype}")
    if not np.all(np.isfinite(w)):
        raise InputError("weights contain NaN or Inf")
    return w


def fitting_weights(weights, stack):
    """:func:`filter_weights`, no larger than a frame of ``stack``."""
    w = filter_weights(weights)
    if w.shape[0] > stack.shape[-2] or w.shape[1] > stack.shape[-1]:
        raise InputError(f"filter {w.shape[0]}x{w.shape[1]} is larger than the image "
                         f"{stack.shape[-2]}x{stack.shape[-1]}; give a filter no larger than a "
                         "frame")
    return w


def origin_pair(origin, shape):
    """``origin`` (an int or a pair of ints) as a pair, each within the filter's ``shape``
    as ``scipy.ndimage`` allows."""
    try:
        org = (origin, origin) if np.isscalar(origin) else tuple(origin)
        whole = len(org) == 2 and all(int(o) == o for o in org)
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole:
        raise InputError(f"origin must be an int or a pair, got {origin!r}")
    for o, n in zip(org, shape):
        if not (-(n // 2) <= o <= (n - 1) // 2):
            raise InputError(f"origin {o} is invalid for a filter of length {n}: it must lie in "
                             f"[{-(n // 2)}, {(n - 1) // 2}]")
    return org
