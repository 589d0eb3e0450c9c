"""The argument checks that :func:`~xcorr_app.conv.conv2d`, :func:`~xcorr_app.conv.pointwise`
and the GPU launchers share; each bad argument raises :class:`~xcorr_app.errors.InputError`
(a :class:`ValueError`).

Examples
--------
>>> pair(2, "stride", 1), pair((0, 1), "padding", 0)
((2, 2), (0, 1))
>>> pair(0, "stride", 1)
Traceback (most recent call last):
    ...
xcorr_app.errors.InputError: stride must be an integer >= 1 (or a pair), got 0
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError

#: dtype kinds the convolutions take: booleans, integers and reals (complex, text and objects
#: are refused rather than cast)
REAL_KINDS = "biuf"


def pair(value, name: str, minimum: int) -> tuple:
    """``value`` (an integer or a pair of integers, each ``>= minimum``) as a ``(y, x)`` pair.

    Parameters
    ----------
    value : int or (int, int)
    name : str
        The argument's name, for the message.
    minimum : int

    Returns
    -------
    (int, int)

    Raises
    ------
    InputError
        For anything else (a float with a fraction, a number below ``minimum``, a triple...).

    Examples
    --------
    >>> pair(np.int64(3), "stride", 1)
    (3, 3)
    """
    try:
        v = (value, value) if np.isscalar(value) else tuple(value)
        ok = len(v) == 2 and all(int(a) == a and a >= minimum for a in v)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(f"{name} must be an integer >= {minimum} (or a pair), got {value!r}")
    return int(v[0]), int(v[1])


def check_arrays(x, w) -> None:
    """Check ``x`` (N, C, H, W) and the filter bank ``w`` (F, C, KH, KW): dimensions, matching
    channels, nothing empty, real numbers.

    Raises
    ------
    InputError

    Examples
    --------
    >>> check_arrays(np.ones((1, 2, 4, 4)), np.ones((3, 2, 1, 1)))
    >>> check_arrays(np.ones((1, 2, 4, 4)), np.ones((3, 1, 1, 1)))
    Traceback (most recent call last):
        ...
    xcorr_app.errors.InputError: w has 1 channels but x has 2
    """
    if x.ndim != 4:
        raise InputError(f"x must be (N, C, H, W), got shape {x.shape}")
    if w.ndim != 4:
        raise InputError(f"w must be (F, C, KH, KW), got shape {w.shape}")
    if w.shape[1] != x.shape[1]:
        raise InputError(f"w has {w.shape[1]} channels but x has {x.shape[1]}")
    if 0 in x.shape or 0 in w.shape:
        raise InputError(f"empty input: x {x.shape}, w {w.shape}")
    for name, a in (("x", x), ("w", w)):
        if a.dtype.kind not in REAL_KINDS:
            raise InputError(f"{name} must hold real numbers, got dtype {a.dtype}")


def output_shape(x_shape, w_shape, stride, padding) -> tuple:
    """``(HO, WO)`` of the convolution: ``(H + 2 pad - KH) // stride + 1`` per axis;
    ``stride`` and ``padding`` are (y, x) pairs.

    Raises
    ------
    InputError
        When the filter does not fit the padded image.

    Examples
    --------
    >>> output_shape((1, 2, 9, 11), (4, 2, 3, 2), (2, 1), (1, 0))
    (5, 10)
    """
    (sy, sx), (py, px) = stride, padding
    ho = (x_shape[2] + 2 * py - w_shape[2]) // sy + 1
    wo = (x_shape[3] + 2 * px - w_shape[3]) // sx + 1
    if ho < 1 or wo < 1:
        raise InputError(f"a {w_shape[2]}x{w_shape[3]} filter does not fit a {x_shape[2]}x"
                         f"{x_shape[3]} image with padding {(py, px)}")
    _check_memory(x_shape, w_shape, (py, px), (ho, wo))
    return ho, wo


def _check_memory(x_shape, w_shape, padding, out_hw):
    """:class:`InputError` where the padded input and the output (float32) do not fit the
    memory left (``padding=10**9`` made NumPy refuse an array of 10**18 pixels)."""
    from ..streaming import host_free_bytes, human

    n, c, h, w = (int(v) for v in x_shape)
    padded = n * c * (h + 2 * padding[0]) * (w + 2 * padding[1])
    need = 4 * (padded + n * int(w_shape[0]) * out_hw[0] * out_hw[1])
    free = host_free_bytes()
    if free is not None and need > free:
        raise InputError(f"padding {tuple(padding)} makes a {h + 2 * padding[0]}x"
                         f"{w + 2 * padding[1]} padded input and a {out_hw[0]}x{out_hw[1]} "
                         f"output ({human(need)} in all), and {human(free)} is available")

