"""The FFT plan's correlation at a small window of shifts, without the whole inverse transform.

An aligner searching ``+-14`` px of 512x512 frames pads them to 540x540 (alias-free), and the
GPU fft plan then spends two passes over every spectrum after the forward transform: the
conjugate product and the inverse ``irfft2``, whose 540x540 result it reads 29x29 values of.
:func:`correlation_window` makes those values alone from the spectra: the product as the
spectra are read, then the inverse as two small DFTs: along the half spectrum's columns for
the window's ``2 xmax + 1`` shifts ``x`` (both ``x`` and ``-x`` from four sums a term, float32
summed from the highest frequency down) and down the rows for its shifts ``y`` (float64; the
kernels: ``kernels/correlate/fft_window.cu``).  The same numbers as ``irfft2`` up to float32
rounding (as close to the float64 definition, tested), in the dense layout of the direct plans.

It applies where the window is narrow (:func:`window_applies`: no shift beyond 19 px along
either axis); wider ones take the whole inverse, whose cost does not grow with
the window.

Examples
--------
>>> window_applies((540, 540), (-14, -14), (29, 29))
True
>>> window_applies((540, 540), (-20, -14), (41, 29))
False
>>> import cupy as cp  # doctest: +SKIP
>>> from xcorr_app.correlate._fft import padded_spectra  # doctest: +SKIP
>>> a = cp.random.default_rng(0).random((3, 50, 60), dtype=cp.float32)  # doctest: +SKIP
>>> f = padded_spectra(a, (64, 72))  # doctest: +SKIP
>>> correlation_window(f[0], f, (64, 72), (-4, -5), (9, 11)).shape  # doctest: +SKIP
(3, 9, 11)
"""

from __future__ import annotations

import functools

import numpy as np

from .._cuda import KernelFamily, upload_shared
from ..errors import InputError

SOURCE = "fft_window.cu"
#: rows a lane, values of x a warp, spectrum columns a shared-memory stage (window_rows: 110
#: registers; the fastest of the variants tried: docs/kernels.md)
ROWS_PER_LANE, PAIRS, STAGE = 2, 8, 8
#: the window's largest |x| and |y| (window_rows: at most WINDOW_GROUPS warps of PAIRS values
#: of x; window_columns: 2 (MAX_HALF_WIDTH + 1) float64 sums a lane)
MAX_HALF_WIDTH = 19
#: warps a plane in window_columns
COLUMN_WARPS = 4
WINDOW_ROWS = KernelFamily(SOURCE, "window_rows", [(ROWS_PER_LANE, PAIRS, STAGE)])
WINDOW_COLUMNS = KernelFamily(SOURCE, "window_columns", [(COLUMN_WARPS, MAX_HALF_WIDTH + 1)])
_TOGETHER = [(WINDOW_ROWS, (ROWS_PER_LANE, PAIRS, STAGE)),
             (WINDOW_COLUMNS, (COLUMN_WARPS, MAX_HALF_WIDTH + 1))]


def _half_width(first_shift, shape, axis=1) -> int:
    k0, n = int(first_shift[axis]), int(shape[axis])
    return max(abs(k0), abs(k0 + n - 1))


def window_applies(size, first_shift, shape) -> bool:
    """Whether :func:`correlation_window` takes the window of ``shape`` from ``first_shift`` of
    a correlation padded to ``size`` (narrow enough, and within one period of the padding)."""
    (fy, fx), (ho, wo) = size, shape
    if ho <= 0 or wo <= 0:
        return False
    xmax, ymax = _half_width(first_shift, shape), _half_width(first_shift, shape, 0)
    return max(xmax, ymax) <= MAX_HALF_WIDTH and 2 * xmax < fx and 2 * ymax < fy


@functools.lru_cache(maxsize=32)
def _row_twiddles(fx, xmax, device):
    """``(wh, groups * PAIRS)`` complex64: ``w_v e^{2 pi i v x / fx}``, x beyond xmax 0."""
    import cupy as cp

    groups = -(-(xmax + 1) // PAIRS)
    wh = fx // 2 + 1
    v = np.arange(wh)[:, None]
    x = np.arange(groups * PAIRS)[None, :]
    weight = np.full((wh, 1), 2.0)
    weight[0] = 1.0
    if fx % 2 == 0:
        weight[-1] = 1.0
    tw = weight * np.exp(2j * np.pi * ((v * x) % fx) / fx)
    tw[:, xmax + 1:] = 0.0
    with cp.cuda.Device(device):
        return upload_shared(tw.astype(np.complex64)), groups


@functools.lru_cache(maxsize=32)
def _column_steps(fy, device):
    """``(fy,)`` complex128: ``e^{2 pi i u / fy}``, the twiddle steps of the rows ``u``."""
    import cupy as cp

    with cp.cuda.Device(device):
        return upload_shared(np.exp(2j * np.pi * np.arange(fy) / fy))


def correlation_window(left_spectrum, right_spectra, size, first_shift, shape, scale=None,
                       out=None):
    """The circular correlation ``irfft2(left * conj(right))`` at the window of ``shape``
    shifts from ``first_shift`` (CuPy, float32 out).

    Parameters
    ----------
    left_spectrum : (fy, fx // 2 + 1) or (1 or N, fy, fx // 2 + 1) complex64 CuPy array
        ``rfft2`` of the zero-padded left matrix (or one per right matrix).
    right_spectra : (N, fy, fx // 2 + 1) complex64 CuPy array
        ``rfft2`` of the zero-padded right matrices (:func:`~xcorr_app.correlate._fft.padded_spectra`).
    size : (fy, fx)
        The padded planes' shape.
    first_shift : (y0, x0)
        The window's first shift; ``shape`` : (ho, wo) its size (:func:`window_applies`).
    scale : float, optional
        Times the product; default ``1 / (fy fx)``, the inverse transform's normalization.
    out : (N, ho, wo) float32 CuPy array, optional

    Returns
    -------
    (N, ho, wo) float32: ``out[n, i, j] = c_n[y0 + i, x0 + j]``, ``c_n[k]`` the circular
    correlation ``sum_q left[q + k] right_n[q]`` at ``k mod size``.
    """
    import cupy as cp

    (fy, fx), (y0, x0), (ho, wo) = (tuple(int(v) for v in t) for t in (size, first_shift, shape))
    if not window_applies((fy, fx), (y0, x0), (ho, wo)):
        raise InputError(f"a window of {ho}x{wo} shifts from ({y0}, {x0}) is not one "
                         f"correlation_window takes (window_applies) for planes of {fy}x{fx}")
    wh = fx // 2 + 1
    right = cp.ascontiguousarray(right_spectra, dtype=cp.complex64)
    left = cp.ascontiguousarray(left_spectrum, dtype=cp.complex64)
    if right.ndim != 3 or right.shape[1:] != (fy, wh) or left.shape[-2:] != (fy, wh):
        raise InputError(f"spectra of {fy}x{wh} expected, got {left.shape} and {right.shape}")
    n = right.shape[0]
    lefts = 1 if left.ndim == 2 else left.shape[0]
    if lefts not in (1, n):
        raise InputError(f"{lefts} left spectra for {n} right ones: give 1 or {n}")
    if out is None:
        out = cp.empty((n, ho, wo), cp.float32)
    elif out.shape != (n, ho, wo) or out.dtype != cp.float32 or not out.flags.c_contiguous:
        raise InputError(f"out must be a C-contiguous float32 array of shape {(n, ho, wo)}")
    if n == 0:
        return out
    xmax = _half_width((y0, x0), (ho, wo))
    device = cp.cuda.Device().id
    tw, groups = _row_twiddles(fx, xmax, device)
    steps = _column_steps(fy, device)
    ymax = _half_width((y0, x0), (ho, wo), 0)
    h = cp.empty((n * fy, 2 * (2 * xmax + 1)), cp.float64)
    rows = n * fy
    lane_rows = 32 * ROWS_PER_LANE
    scale = 1.0 / (fy * fx) if scale is None else float(scale)
    WINDOW_ROWS.get(ROWS_PER_LANE, PAIRS, STAGE, together=_TOGETHER)(
        (-(-rows // lane_rows),), (32, groups),
        (left, np.int64(0 if lefts == 1 else fy * wh), right, tw, h, np.int64(rows),
         np.int32(fy), np.int32(wh), np.int32(xmax), np.float32(scale)))
    WINDOW_COLUMNS.get(COLUMN_WARPS, MAX_HALF_WIDTH + 1, together=_TOGETHER)(
        (n,), (32 * COLUMN_WARPS,),
        (h, steps, out, np.int32(fy), np.int32(ho), np.int32(wo), np.int32(xmax), np.int32(x0),
         np.int32(y0), np.int32(ymax)))
    return out
