"""The shift convention, defined once.

A *shift* is the displacement to apply to the **moving** image so that it lines up with the
**reference**, in ``(dy, dx)`` = (row, column) order; the same convention as
:func:`skimage.registration.phase_cross_correlation`.  If ``moving[n] = reference[n - s]``
(the moving image is the reference displaced by ``s``), the shift is ``-s``.

Correlation outputs (see :mod:`xcorr_app.correlate._direct`) are laid out so that
``corr[iy, ix] = sum_n reference[n + k] * moving[n]`` with ``k = (iy, ix) - origin``, and ``k`` is
exactly that shift.  Two layouts exist:

* **full** (``max_shift=None``): every shift with any overlap, ``k_y`` from ``-(H_moving - 1)``
  to ``H_reference - 1``; output shape ``(H_ref + H_mov - 1, W_ref + W_mov - 1)``, origin
  ``(H_mov - 1, W_mov - 1)`` (the layout of ``scipy.signal.correlate(ref, mov, mode="full")``).
* **bounded** (``max_shift=(sy, sx)``): shifts ``-sy..sy`` by ``-sx..sx``; output shape
  ``(2 sy + 1, 2 sx + 1)``, origin ``(sy, sx)``.  Shifts without overlap read 0.

Examples
--------
>>> output_shape((5, 7), (5, 7))
(9, 13)
>>> index_to_shift((4, 6), (5, 7), (5, 7))
(0, 0)
>>> index_to_shift((0, 2), (64, 64), (64, 64), max_shift=3)
(-3, -1)
"""

from __future__ import annotations

import numpy as np

import numbers

from ..errors import InputError


def normalize_max_shift(max_shift) -> tuple[int, int] | None:
    """``None``, an int, or a pair of ints -> ``None`` or ``(sy, sx)``; negative values are errors."""
    if max_shift is None:
        return None
    if isinstance(max_shift, (bool, np.bool_)) or (
            isinstance(max_shift, (tuple, list)) and any(isinstance(v, (bool, np.bool_))
                                                         for v in max_shift)):
        raise InputError(f"max_shift must be an int or a pair of ints, got {max_shift!r}")
    if isinstance(max_shift, numbers.Integral):
        pair = (int(max_shift), int(max_shift))
    else:
        try:
            pair = tuple(int(v) for v in max_shift)
        except (TypeError, ValueError):
            raise InputError(f"max_shift must be an int or a pair of ints, got {max_shift!r}") from None
        if len(pair) != 2 or any(float(v) != int(v) for v in max_shift):
            raise InputError(f"max_shift must be an int or a pair of ints, got {max_shift!r}")
    if min(pair) < 0:
        raise InputError(f"max_shift must be >= 0, got {max_shift!r}")
    return pair


def as_bound(max_shift):
    """``max_shift`` as a bound of :func:`normalize_max_shift`: a bound already normalized
    (``None``, or a tuple of two ints >= 0, as the entry points make it once) passes as it is;
    another form (an int, as a test or a user of the reference functions writes it; a pair of
    floats, a negative one) goes through :func:`normalize_max_shift`, which says what is
    wrong."""
    if max_shift is None or (type(max_shift) is tuple and len(max_shift) == 2
                             and all(type(v) is int and v >= 0 for v in max_shift)):
        return max_shift
    return normalize_max_shift(max_shift)


def check_max_shift(max_shift, reference_shape, moving_shape) -> None:
    """InputError when a bound ``(sy, sx)`` (of :func:`normalize_max_shift`) reaches past
    what matrices of these shapes can tell apart: a shift of more than the larger of their
    heights (widths) leaves no overlap, so its surface is all zeros (and a huge bound would
    allocate it).

    >>> check_max_shift((64, 64), (64, 64), (64, 64))
    >>> check_max_shift((10**9, 3), (64, 64), (64, 64))
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: max_shift (1000000000, 3) reaches past what 64x64 and 64x64 matrices can tell apart: a shift beyond 64 rows or 64 columns leaves no overlap; use at most (64, 64), or None for every overlapping shift
    """
    if max_shift is None:
        return
    limit = tuple(max(int(reference_shape[a]), int(moving_shape[a])) for a in (-2, -1))
    if max_shift[0] > limit[0] or max_shift[1] > limit[1]:
        ref = "x".join(str(int(n)) for n in reference_shape[-2:])
        mov = "x".join(str(int(n)) for n in moving_shape[-2:])
        raise InputError(f"max_shift {tuple(max_shift)} reaches past what {ref} and {mov} "
                         f"matrices can tell apart: a shift beyond {limit[0]} rows or "
                         f"{limit[1]} columns leaves no overlap; use at most {limit}, or None "
                         "for every overlapping shift")


def shift_origin(reference_shape, moving_shape, max_shift=None) -> tuple[int, int]:
    """Index of the zero shift in the correlation output.  ``max_shift`` here and in the
    layout functions below: a bound as :func:`normalize_max_shift` returns it (``None`` or
    ``(sy, sx)``), which the entry points make once and these trust (:func:`as_bound`)."""
    ms = as_bound(max_shift)
    if ms is None:
        return (int(moving_shape[-2]) - 1, int(moving_shape[-1]) - 1)
    return (int(ms[0]), int(ms[1]))


def output_shape(reference_shape, moving_shape, max_shift=None) -> tuple[int, int]:
    """Shape ``(Ho, Wo)`` of one correlation surface."""
    ms = as_bound(max_shift)
    if ms is None:
        return (int(reference_shape[-2]) + int(moving_shape[-2]) - 1,
                int(reference_shape[-1]) + int(moving_shape[-1]) - 1)
    return (2 * ms[0] + 1, 2 * ms[1] + 1)


def first_shift(reference_shape, moving_shape, max_shift=None) -> tuple[int, int]:
    """The shift ``k`` of output index ``(0, 0)`` (the negated origin)."""
    oy, ox = shift_origin(reference_shape, moving_shape, max_shift)
    return (-oy, -ox)


def index_to_shift(index, reference_shape, moving_shape, max_shift=None):
    """Map a correlation-output index ``(iy, ix)`` (ints or arrays) to the shift ``(dy, dx)``."""
    oy, ox = shift_origin(reference_shape, moving_shape, max_shift)
    return (index[0] - oy, index[1] - ox)


def shift_to_index(shift, reference_shape, moving_shape, max_shift=None):
    """Inverse of :func:`index_to_shift`."""
    oy, ox = shift_origin(reference_shape, moving_shape, max_shift)
    return (shift[0] + oy, shift[1] + ox)


def axis_overlaps(n_left: int, n_right: int, k_first: int, count: int) -> np.ndarray:
    """Overlap lengths along one axis of the shifts ``k_first .. k_first + count - 1``.

    The overlap of shift ``k`` between a left of length ``n_left`` and a right of length
    ``n_right`` is ``max(0, min(n_right, n_left - k) - max(0, -k))`` (0 without overlap).
    """
    k = np.arange(k_first, k_first + count, dtype=np.int64)
    return np.maximum(0, np.minimum(n_right, n_left - k) - np.maximum(0, -k))
