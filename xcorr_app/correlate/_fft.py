"""The ``fft`` plan on the GPU: the CuPy FFT peer's algorithm with its elementwise steps fused.

The same zero-padded real FFTs as :func:`xcorr_app.correlate._reference.xcorr_fft` (alias-free fast sizes,
each left transformed once, the pairing of the form by broadcasting), but the padding is one
pass (CuPy's ``rfft2(s=...)`` pads one axis at a time), the conjugate product one kernel
instead of two (``conj`` then ``*``), written over the right spectra, and the crop of the
circular result, the zeroing of shifts without overlap and the store into the caller's output
one gather kernel instead of an advanced-indexing gather and a mask multiply.  On 1 x 4000
right matrices of 64x64 (H100, ``tools/fft_parts_probe.py``) the padding, the product and the
crop took 0.38, 0.39 and 0.44 ms of the peer's 2.61 ms; the transforms are cuFFT's either way.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> ref, frames = cp.random.rand(64, 64), cp.random.rand(4000, 64, 64)  # doctest: +SKIP
>>> fft_xcorr(ref, frames, "one_to_many").shape  # doctest: +SKIP
(4000, 127, 127)
"""

from __future__ import annotations

import functools

import numpy as np

from ._forms import form_layout
from ._overlap import as_float32, check_out
from ._reference import _FFT_PAIRING, fft_length
from ._shifts import first_shift, normalize_max_shift, output_shape


#: the pad and crop kernels' element index: 32-bit while the arrays allow (a 64-bit division
#: per element is an emulated subroutine; these kernels should be bound by memory alone)
_INDEX = {False: "unsigned int", True: "unsigned long long"}


def _position(idx: str, rows: str, cols: str) -> str:
    """CUDA lines that split the element index ``i`` of a (batch, rows, cols) array into
    ``b``, ``y`` and ``x``."""
    return f"""
        const {idx} k = ({idx})i;
        const int x = (int)(k % {cols});
        const {idx} t = k / {cols};
        const int y = (int)(t % {rows});
        const {idx} b = t / {rows};
        """


@functools.lru_cache(maxsize=None)
def _kernels(wide: bool):
    import cupy as cp

    idx = _INDEX[wide]
    conj_product = cp.ElementwiseKernel(
        "complex64 f_left, complex64 f_right", "complex64 product",
        "product = f_left * conj(f_right)", "xcorr_conj_product")
    # padded[b, y, x] = a[b, y, x] inside the (h, w) matrices, else 0: one pass, where CuPy's
    # rfft2(s=...) pads one axis at a time (two zero-filled copies)
    pad = cp.ElementwiseKernel(
        "raw float32 a, int32 h, int32 w, int32 fy, int32 fx", "float32 padded",
        _position(idx, "fy", "fx") + "padded = (y < h && x < w) ? a[(b * h + y) * w + x] : 0.0f;",
        f"xcorr_fft_pad_{int(wide)}")
    # out[b, y, x] = circ[b, (y + oy) mod fy, (x + ox) mod fx] where the shift has an overlap
    # (rows y_lo <= y < y_hi, columns x_lo <= x < x_hi), else 0
    crop = cp.ElementwiseKernel(
        "raw float32 circ, int32 fy, int32 fx, int32 ho, int32 wo, int32 oy, int32 ox, "
        "int32 y_lo, int32 y_hi, int32 x_lo, int32 x_hi", "float32 out",
        _position(idx, "ho", "wo") + """
        const int sy = (y + oy) % fy, sx = (x + ox) % fx;
        const bool valid = y >= y_lo && y < y_hi && x >= x_lo && x < x_hi;
        out = valid ? circ[(b * fy + sy) * fx + sx] : 0.0f;
        """, f"xcorr_fft_crop_{int(wide)}")
    return conj_product, pad, crop


def _padded_spectra(a, size, pad):
    """``rfft2`` of the float32 matrices ``a`` (..., h, w) zero-padded to ``size``."""
    import cupy as cp

    padded = cp.empty(a.shape[:-2] + tuple(size), cp.float32)
    pad(a, np.int32(a.shape[-2]), np.int32(a.shape[-1]), np.int32(size[0]),
        np.int32(size[1]), padded)
    return cp.fft.rfft2(padded)


@functools.lru_cache(maxsize=256)
def _setup(left_shape, right_shape, max_shift):
    """``(fft size, output shape, crop scalars)`` of one problem."""
    (lh, lw), (rh, rw) = left_shape, right_shape
    ho, wo = output_shape(left_shape, right_shape, max_shift)
    ky0, kx0 = first_shift(left_shape, right_shape, max_shift)
    fy, fx = fft_length(lh, rh, ky0, ho), fft_length(lw, rw, kx0, wo)
    # shifts with an overlap: -(rh - 1) <= ky0 + y <= lh - 1 (and likewise along x)
    y_lo, y_hi = max(0, -(rh - 1) - ky0), max(0, min(ho, lh - ky0))
    x_lo, x_hi = max(0, -(rw - 1) - kx0), max(0, min(wo, lw - kx0))
    i32 = np.int32
    scalars = tuple(i32(v) for v in (fy, fx, ho, wo, ky0 % fy, kx0 % fx, y_lo, y_hi, x_lo,
                                      x_hi))
    return (fy, fx), (ho, wo), scalars


def fft_xcorr(left, right, form="one_to_one", max_shift=None, out=None):
    """Cross-correlate CuPy arrays by zero-padded real FFTs (float32 result).

    Parameters and output layout as :func:`xcorr_app.cross_correlate`; ``out`` (optional) is a
    C-contiguous float32 CuPy array of the output shape that receives the result.
    """
    import cupy as cp

    lay = form_layout(form, left.shape, right.shape)
    bound = None if max_shift is None else normalize_max_shift(max_shift)
    size, (ho, wo), scalars = _setup(lay.left_shape, lay.right_shape, bound)
    out = check_out(out, lay.batch_shape + (ho, wo), cp)
    planes = max(int(np.prod(a.shape[:-2])) for a in (left, right, out))
    elements = planes * max(size[0] * size[1], ho * wo)
    conj_product, pad, crop = _kernels(elements >= 2**32)
    f_left = _padded_spectra(as_float32(left, cp), size, pad)
    f_right = _padded_spectra(as_float32(right, cp), size, pad)
    lsel, rsel = (s + (Ellipsis,) for s in _FFT_PAIRING[form])
    a, b = f_left[lsel], f_right[rsel]
    # the product in place of the right spectra where it has their shape (all forms but n_to_m)
    inplace = np.broadcast_shapes(a.shape, b.shape) == f_right.shape
    product = conj_product(a, b, f_right) if inplace else conj_product(a, b)
    circ = cp.fft.irfft2(product, s=size)  # sum_n left[n + c] right[n], c circular
    crop(circ, *scalars, out)
    return out
