"""The one home of FFT cross-correlation, for NumPy and CuPy.

Cross-correlation by FFT is the product of one side's spectrum with the conjugate of the
other's, transformed back.  Its parts live here, and every FFT correlation of the package
uses them:

* :func:`next_smooth` and :func:`fft_length`: the smallest fast FFT length that gives the wanted
  linear shifts without wrap-around;
* :func:`fft_geometry`: a problem's FFT size, output shape and the crop of the circular result
  into the linear shift range (with the shifts that have no overlap);
* :func:`padded_spectra`: ``rfft2`` of zero-padded matrices (on the GPU, the padding is one
  fused pass: CuPy's ``rfft2(s=...)`` pads one axis at a time, two zero-filled copies);
* :func:`conj_product`: ``left * conj(right)``, with the pairing of a form (:data:`PAIRING`)
  by broadcasting (on the GPU one fused kernel, instead of ``conj`` then ``*``).

Two correlations are built from them: :func:`xcorr_fft` writes each step with the array
library's own calls (the NumPy ``fft`` plan, and on CuPy arrays the benchmark's "CuPy FFT" peer,
which must stay what a CuPy user would write), and :func:`fft_xcorr`, the GPU ``fft`` plan, the
same algorithm with the elementwise steps fused (the peer's padding, product and crop were half
its time: docs/kernels.md, measurements); the transforms are cuFFT's either way.  The GPU measurement of the
align pipeline (:class:`xcorr_app.registration._surfaces.GpuSurfaces`) uses the padded spectra
and the product and leaves the circular result un-cropped (its peak kernel crops).

Phase correlation (:mod:`xcorr_app.registration._fft_register`) is *circular* (no padding: the
shift is known modulo the image size, as in scikit-image), whitens the product (fused with it
on the GPU) and may correlate periodic components; it shares :func:`conj_product` for plain
cross-correlation only.

Examples
--------
>>> import numpy as np
>>> a = np.arange(6.0).reshape(2, 3)
>>> fft_geometry((2, 3), (2, 3)).size  # the 3 x 5 shifts without wrap-around
(3, 5)
>>> bool(np.isclose(xcorr_fft(a, a)[1, 2], (a * a).sum()))  # the zero shift
True
>>> import cupy as cp  # doctest: +SKIP
>>> ref, frames = cp.random.rand(64, 64), cp.random.rand(4000, 64, 64)  # doctest: +SKIP
>>> fft_xcorr(ref, frames, "one_to_many").shape  # doctest: +SKIP
(4000, 127, 127)
"""

from __future__ import annotations

import functools
import threading
from typing import NamedTuple

import numpy as np

from .._cuda import KernelFamily, stride_blocks, upload_shared
from ..backend import array_module_of
from ..errors import InputError
from ._forms import form_layout
from ._overlap import as_float32, check_out
from ._shifts import as_bound, first_shift, output_shape

__all__ = ["fft_of", "next_smooth", "fft_length", "FftGeometry", "fft_geometry", "PAIRING",
           "crop_indices", "padded_spectra", "conj_product", "irfftn_unnormalized", "xcorr_fft",
           "fft_xcorr"]


# ------------------------------------------------------------------------ the library

def fft_of(xp):
    """The FFT functions for arrays of ``xp``: ``cupy.fft`` on the GPU; on the CPU
    ``scipy.fft``, not ``numpy.fft``.

    Why SciPy: its pocketfft (C++) keeps float32 in single precision, about twice as fast as
    NumPy's on float32 frames (docs/how-align-works.md, measurements); the CPU
    pipeline runs one frame per thread, so it uses SciPy's one worker per call.  The names and
    arguments used here are the same in both.

    On the GPU the transforms are :func:`fft_in_turn`'s: ``cupy.fft``'s, each ordered after
    the last one this thread queued on another stream.

    >>> import numpy as np
    >>> fft_of(np).rfft2(np.ones((2, 4), np.float32)).dtype
    dtype('complex64')
    """
    if xp is np:
        import scipy.fft

        return scipy.fft
    return _IN_TURN


#: the transforms of ``cupy.fft`` (the rest, ``fftfreq`` and the like, pass through)
TRANSFORMS = frozenset(f"{p}{k}" for p in ("", "i", "r", "ir") for k in ("fft", "fft2", "fftn"))
_LAST_FFT = threading.local()


def fft_in_turn(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a cuFFT transform of CuPy's), queued on the current stream
    after the last transform this thread queued on another stream of the device.

    CuPy caches one plan per shape, per thread and device, with one work area, and a plan run
    on two streams at once can overwrite its own work area (cupy/cupy#8079, open): the chunk
    loops queue chunks on two streams in turn, so two chunks' transforms of one shape could
    overlap on the GPU.  An event orders them; the other kernels of the chunks still overlap.
    Transforms captured into a CUDA graph are left to the graph's order.
    """
    import cupy

    stream = cupy.cuda.get_current_stream()
    if stream.is_capturing():  # a graph's capture: its nodes are ordered by the graph, and an
        return fn(*args, **kwargs)  # event from outside it may not be waited on (nor one kept)
    key = cupy.cuda.Device().id
    last = getattr(_LAST_FFT, "by_device", None)
    if last is None:
        last = _LAST_FFT.by_device = {}
    previous = last.get(key)
    if previous is not None and previous[0] != stream.ptr:
        stream.wait_event(previous[1])
    out = fn(*args, **kwargs)
    last[key] = (stream.ptr, stream.record())
    return out


class _InTurn:
    """``cupy.fft`` with its transforms through :func:`fft_in_turn`."""

    def __getattr__(self, name):
        if name.startswith("__"):  # (introspection: doctest, pickle, inspect.unwrap)
            raise AttributeError(name)
        import cupy

        fn = getattr(cupy.fft, name)
        return functools.partial(fft_in_turn, fn) if name in TRANSFORMS else fn


_IN_TURN = _InTurn()


# ------------------------------------------------------------------------ geometry

def next_smooth(n: int) -> int:
    """The smallest 5-smooth number (2^a 3^b 5^c) >= ``n``.

    This is ``scipy.fft.next_fast_len(n, real=True)`` (a test checks it), written out because
    importing ``scipy.fft`` costs about 0.6 s, a large share of a one-shot GPU run that never
    needs SciPy otherwise.

    >>> [next_smooth(n) for n in (1, 7, 97, 1025, 3000)]
    [1, 8, 100, 1080, 3000]
    """
    n = max(1, int(n))
    best = 1 << max(0, (n - 1).bit_length())  # a power of two >= n
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35 * (1 << max(0, (-(-n // p35) - 1).bit_length()))  # times a power of two
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def fft_length(n_left: int, n_right: int, k_first: int, count: int) -> int:
    """Circular FFT length along one axis that gives the wanted shifts without wrap-around.

    The valid shifts are ``-(n_right - 1) .. n_left - 1``; a wanted valid shift ``k`` must not
    alias another valid one, which needs ``f >= n_left - k`` and ``f >= k + n_right`` for every
    wanted valid ``k``.  The full range needs ``n_left + n_right - 1``; a bounded range
    ``-s..s`` only ``max(n_left, n_right) + s`` (for ``s`` below both lengths).  Rounded up to
    a fast (5-smooth) FFT size.

    >>> fft_length(1024, 1024, -8, 17)  # needs 1032, not 2047
    1080
    """
    lo = max(k_first, -(n_right - 1))
    hi = min(k_first + count - 1, n_left - 1)
    need = max(n_left, n_right, n_left - lo, hi + n_right)
    return next_smooth(need)


class FftGeometry(NamedTuple):
    """The FFT view of one problem (left and right matrix shapes, shift bound)."""

    size: tuple  #: (fy, fx), the padded FFT size
    shape: tuple  #: (ho, wo), the output shape
    first: tuple  #: (ky0, kx0), the shift of output element (0, 0)
    #: output rows ``y_lo <= y < y_hi`` and columns ``x_lo <= x < x_hi`` have an overlap
    valid: tuple

    @property
    def offset(self) -> tuple:
        """Output element ``(y, x)`` is the circular result at ``((y, x) + offset) mod size``."""
        return self.first[0] % self.size[0], self.first[1] % self.size[1]


@functools.lru_cache(maxsize=256)
def _geometry(left_shape, right_shape, bound):
    (lh, lw), (rh, rw) = left_shape, right_shape
    ho, wo = output_shape(left_shape, right_shape, bound)
    ky0, kx0 = first_shift(left_shape, right_shape, bound)
    fy, fx = fft_length(lh, rh, ky0, ho), fft_length(lw, rw, kx0, wo)
    # shifts with an overlap: -(rh - 1) <= ky0 + y <= lh - 1 (and likewise along x)
    y_lo, y_hi = max(0, -(rh - 1) - ky0), max(0, min(ho, lh - ky0))
    x_lo, x_hi = max(0, -(rw - 1) - kx0), max(0, min(wo, lw - kx0))
    return FftGeometry((fy, fx), (ho, wo), (ky0, kx0), (y_lo, y_hi, x_lo, x_hi))


def fft_geometry(left_shape, right_shape, max_shift=None) -> FftGeometry:
    """The :class:`FftGeometry` of correlating ``left_shape`` with ``right_shape`` matrices
    over ``max_shift`` (as :func:`xcorr_app.cross_correlate`; cached)."""
    return _geometry(tuple(left_shape), tuple(right_shape), as_bound(max_shift))


#: how each form pairs the batch axes of the left and right spectra (indices that broadcast)
PAIRING = {
    "one_to_one": ((), ()),
    "one_to_many": ((), ()),
    "n_to_mn": ((slice(None), None), ()),
    "n_to_m": ((slice(None), None), (None,)),
}
_CROPS: dict = {}


def crop_indices(xp, geometry: FftGeometry):
    """``(rows, cols, mask)``: the output is ``circular[..., rows, cols] * mask`` (``mask`` None
    when every shift overlaps), as arrays of ``xp`` (cached per module and device)."""
    dev = getattr(getattr(xp, "cuda", None), "Device", lambda: None)()
    key = (xp.__name__, getattr(dev, "id", None), geometry)
    crop = _CROPS.get(key)
    if crop is None:
        (fy, fx), (ho, wo), (oy, ox) = geometry.size, geometry.shape, geometry.offset
        y_lo, y_hi, x_lo, x_hi = geometry.valid
        y, x = np.arange(ho), np.arange(wo)
        # (kept: read by other streams and threads once made)
        up = np.asarray if dev is None else upload_shared
        rows = up((y + oy) % fy)[:, None]
        cols = up((x + ox) % fx)[None, :]
        valid_rows, valid_cols = (y >= y_lo) & (y < y_hi), (x >= x_lo) & (x < x_hi)
        mask = None if (valid_rows.all() and valid_cols.all()) else \
            up(valid_rows[:, None] & valid_cols[None, :])
        if len(_CROPS) > 64:
            _CROPS.clear()
        crop = _CROPS[key] = (rows, cols, mask)
    return crop


# ------------------------------------------------------------------------ GPU kernels

#: the element index of the kernels of ``kernels/correlate/fft_steps.cu``: 32-bit while the arrays
#: allow (a 64-bit division per element is an emulated subroutine: these should be bound by memory)
_INDEX = {False: ("unsigned int", np.uint32), True: ("unsigned long long", np.uint64)}
_REAL = {np.dtype(np.complex64): "float", np.dtype(np.complex128): "double"}
FFT_STEPS = "fft_steps.cu"
CONJ_PRODUCT = KernelFamily(FFT_STEPS, "conj_product",
                            [(r, i) for r in _REAL.values() for i, _ in _INDEX.values()])
FFT_PAD = KernelFamily(FFT_STEPS, "fft_pad", [(i, v) for i, _ in _INDEX.values()
                                              for v in (1, 4)])
FFT_CROP = KernelFamily(FFT_STEPS, "fft_crop", [(i,) for i, _ in _INDEX.values()])
#: compiled together on first use (what the single-precision plan launches), where they do not
#: ship built
_FIRST = [(CONJ_PRODUCT, ("float", "unsigned int")), (FFT_PAD, ("unsigned int", 4)),
          (FFT_CROP, ("unsigned int",))]
_THREADS = 256
_MAX_BLOCKS = 65535


def _launch(family, type_args, total, args):
    """Launch a grid-stride kernel of ``fft_steps.cu`` over ``total`` elements; the index
    type (32 or 64 bits) follows ``total``, and is passed after ``args``' leading part."""
    fn = family.get(*type_args, together=_FIRST)
    fn((stride_blocks(total, _THREADS, _MAX_BLOCKS),), (_THREADS,), args)


def _wide(*sizes) -> bool:
    """64-bit element indices from 2**31 elements on: a 32-bit grid-stride loop over more
    would wrap past 2**32 on its last step (CuPy switches at 2**31 too)."""
    return max(int(n) for n in sizes) >= 2**31


def _plane_strides(a, shape):
    """The element strides of ``a``'s two batch axes when broadcast to ``shape`` (2 to 4 axes,
    the last two its contiguous planes), 0 where it broadcasts; None where the kernel cannot
    read ``a`` so."""
    item = a.dtype.itemsize
    if a.ndim < 2 or a.ndim > len(shape) or a.shape[-2:] != tuple(shape[-2:]) \
            or a.strides[-1] != item or a.strides[-2] != shape[-1] * item \
            or any(st < 0 for st in a.strides):
        return None
    full = (1,) * (len(shape) - a.ndim) + tuple(a.shape)
    steps = (0,) * (len(shape) - a.ndim) + tuple(st // item for st in a.strides)
    batch = [0 if n == 1 else step for n, step in zip(full[:-2], steps[:-2])]
    return [0] * (2 - len(batch)) + batch


def _conj_product_kernel(left, right, out, scale=1.0) -> bool:
    """``out = scale * left * conj(right)`` by the ``conj_product`` kernel; False where it does
    not apply (other types, more than two batch axes, planes not contiguous)."""
    shape = out.shape
    real = _REAL.get(np.dtype(right.dtype))
    if real is None or not 2 <= len(shape) <= 4 or not out.flags.c_contiguous \
            or left.dtype != right.dtype or out.dtype != right.dtype \
            or np.broadcast_shapes(left.shape, right.shape) != tuple(shape):
        return False
    ls, rs = _plane_strides(left, shape), _plane_strides(right, shape)
    if ls is None or rs is None:
        return False
    batch = (1,) * (4 - len(shape)) + tuple(shape[:-2])
    n1, p = batch[1], shape[-2] * shape[-1]
    wide = _wide(out.size, *(a.data.mem.size // a.itemsize for a in (left, right)))
    idx, scalar = _INDEX[wide]
    _launch(CONJ_PRODUCT, (real, idx), out.size,
            (left, right, out, scalar(n1), scalar(p), scalar(out.size),
             *(scalar(v) for v in (*ls, *rs)),
             (np.float32 if real == "float" else np.float64)(scale)))
    return True


# ------------------------------------------------------------------------ shared steps

def padded_spectra(a, size):
    """``rfft2`` of the real matrices ``a`` (..., h, w) zero-padded to ``size`` (NumPy or CuPy):
    on CuPy, float32 matrices padded by one kernel (:func:`zero_padded`; ``rfft2(s=...)`` pads
    one axis at a time), other types through ``rfft2(s=...)`` (the same spectrum)."""
    xp = array_module_of(a)
    if xp is np or a.dtype != np.float32:
        return fft_of(xp).rfft2(a, s=size)
    import cupy as cp

    return fft_of(cp).rfft2(zero_padded(a, size))


def zero_padded(a, size, out=None):
    """CuPy matrices ``a`` (..., h, w; made float32) zero-padded at the end of each axis to
    ``size`` ``(fy, fx)`` by one kernel (``fft_pad``, four elements a thread where both widths
    are multiples of 4), into ``out`` (C-contiguous float32 ``(..., fy, fx)``) if given."""
    import cupy as cp

    a = cp.ascontiguousarray(a, cp.float32)
    (h, w), (fy, fx) = a.shape[-2:], (int(v) for v in size)
    shape = a.shape[:-2] + (fy, fx)
    out = cp.empty(shape, cp.float32) if out is None else out
    if fy < h or fx < w or out.shape != shape or out.dtype != cp.float32 \
            or not out.flags.c_contiguous:
        raise InputError(f"cannot pad matrices of {h}x{w} to {fy}x{fx} into {out.shape}")
    v = 1 if w % 4 or fx % 4 or a.data.ptr % 16 or out.data.ptr % 16 else 4
    idx, scalar = _INDEX[_wide(out.size, a.size)]
    _launch(FFT_PAD, (idx, v), out.size // v, (a, np.int32(h), np.int32(w), np.int32(fy),
                                               np.int32(fx), scalar(out.size // v), out))
    return out


def conj_product(left, right, out=None, scale=1.0):
    """``left * conj(right)`` (spectra that broadcast; NumPy or CuPy), into ``out`` if given
    (``out`` may be ``right``: the product then replaces the right spectra), times ``scale``
    (the 1/n of :func:`irfftn_unnormalized`'s inverse).

    On CuPy one fused kernel (``left`` cast to the type of ``right``); on NumPy, in place of
    ``right`` it is ``conj`` then ``*=`` (no temporary), else ``left * conj(right)``.
    """
    xp = array_module_of(left, right)
    if xp is np:
        if out is None:
            out = left * np.conj(right)
        else:
            if out is not right:
                out[...] = right
            np.conjugate(out, out=out)
            out *= left
        if scale != 1.0:
            out *= scale
        return out
    import cupy as cp

    left = left.astype(right.dtype, copy=False)
    shape = np.broadcast_shapes(left.shape, right.shape)  # raises for shapes that do not
    if out is None:
        out = cp.empty(shape, right.dtype)
    elif out.shape != shape:
        raise ValueError(f"out of shape {out.shape} cannot hold the product of {left.shape} "
                         f"and {right.shape}")
    if not _conj_product_kernel(left, right, out, scale):  # other layouts: CuPy's own
        cp.multiply(left, cp.conj(right), out=out)
        if scale != 1.0:
            out *= scale
    return out


def irfftn_unnormalized(product, size):
    """The inverse real FFT (CuPy) of spectra ``product`` to real arrays of ``size`` (over the
    last 2 or 3 axes: planes, or the 3-D path's volumes) without its 1/n (``norm="forward"``),
    which the callers apply elsewhere (:func:`conj_product`'s ``scale``, the host):
    ``cupy.fft.irfftn`` divides by n, one more pass (and a kernel compiled at first use).
    ``product`` is overwritten (the callers' temporary): cuFFT's C2R overwrites its input, so
    ``cupy.fft.irfftn`` copies it first; CuPy's own ``_fftn(overwrite_x=True)`` (what
    ``cupyx.scipy.fft`` calls, without that module's slow import) does not.  Where that
    private function is missing or differs (another CuPy), ``cupy.fft.irfftn``."""
    import cupy

    size = tuple(int(n) for n in size)
    axes = tuple(range(-len(size), 0))
    fn = _overwriting_c2r()
    if fn is None:
        return fft_in_turn(cupy.fft.irfftn, product, s=size, axes=axes, norm="forward")
    return fft_in_turn(fn, product, size, axes)


@functools.lru_cache(maxsize=None)
def _overwriting_c2r():
    """``f(a, size, axes)``: CuPy's ``_fftn`` C2R over ``axes`` (the last ones),
    ``norm="forward"``, overwriting ``a``; None where CuPy has no such function of that
    signature (looked up once)."""
    try:
        import inspect

        import cupy
        from cupy.fft import _fft

        params = list(inspect.signature(_fft._fftn).parameters)
        if params[:6] == ["a", "s", "axes", "norm", "direction", "value_type"] \
                and "overwrite_x" in params:
            inverse = cupy.cuda.cufft.CUFFT_INVERSE

            def fn(a, size, axes, _f=_fft._fftn, _inv=inverse):
                return _f(a, size, axes, "forward", _inv, "C2R", overwrite_x=True)
            return fn
    except (ImportError, AttributeError, TypeError, ValueError):
        pass
    return None


# ------------------------------------------------------------------------ correlations

def xcorr_fft(left, right, form="one_to_one", max_shift=None, dtype=np.float64,
              left_spectrum=None):
    """Cross-correlation by zero-padded real FFTs, in the layout of
    :func:`xcorr_app.correlate._direct.xcorr_direct`, with the array library's own calls.

    Both sides are padded to an alias-free fast size (:func:`fft_length`: the full range needs
    ``H + H' - 1``, a bounded one less), transformed with ``rfft2``, conj-multiplied with the
    pairing of ``form`` by broadcasting (each left FFT once), transformed back and cropped;
    shifts without any overlap are 0.  ``left_spectrum``: the left side's padded spectrum
    (:func:`padded_spectra` at ``fft_geometry(...).size``, of the precision of ``dtype``), when
    the caller keeps it from call to call.  The NumPy ``fft`` plan and, on CuPy arrays, the
    benchmark's CuPy FFT peer (left unfused on purpose: :func:`fft_xcorr` is the GPU plan).

    >>> import numpy as np
    >>> a = np.arange(6.0).reshape(2, 3)
    >>> bool(np.isclose(xcorr_fft(a, a, max_shift=1)[1, 1], (a * a).sum()))
    True
    """
    xp = array_module_of(left, right)
    lay = form_layout(form, left.shape, right.shape)
    geo = fft_geometry(lay.left_shape, lay.right_shape, as_bound(max_shift))
    rows, cols, mask = crop_indices(xp, geo)
    size = geo.size
    ctype = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    fft = fft_of(xp)
    fl = fft.rfft2(left.astype(ctype, copy=False), s=size) if left_spectrum is None \
        else left_spectrum
    fr = fft.rfft2(right.astype(ctype, copy=False), s=size)
    lsel, rsel = (s + (Ellipsis,) for s in PAIRING[form])
    circ = fft.irfft2(fl[lsel] * xp.conj(fr[rsel]), s=size)  # sum_n left[n + c] right[n]
    if xp is np:  # two takes keep C order (the indexing below puts the batch axis innermost,
        # which made every later reduction over a surface 100x slower on the CPU)
        out = np.take(np.take(circ, rows[:, 0], axis=-2), cols[0], axis=-1)
    else:
        out = circ[..., rows, cols]
    if mask is not None:
        out = out * mask
    return out.astype(dtype, copy=False).reshape(lay.batch_shape + geo.shape)


@functools.lru_cache(maxsize=256)
def _crop_scalars(geo: FftGeometry) -> tuple:
    """The crop kernel's int32 scalars (made once per problem: host time counts here)."""
    return tuple(np.int32(v) for v in (*geo.size, *geo.shape, *geo.offset, *geo.valid))


def fft_xcorr(left, right, form="one_to_one", max_shift=None, out=None):
    """Cross-correlate CuPy arrays by zero-padded real FFTs (float32 result): the GPU ``fft``
    plan, :func:`xcorr_fft` with fused padding, product and crop.

    Parameters and output layout as :func:`xcorr_app.cross_correlate`; ``out`` (optional) is a
    C-contiguous float32 CuPy array of the output shape that receives the result.
    """
    import cupy as cp

    lay = form_layout(form, left.shape, right.shape)
    geo = fft_geometry(lay.left_shape, lay.right_shape, max_shift)
    size, (ho, wo) = geo.size, geo.shape
    out = check_out(out, lay.batch_shape + (ho, wo), cp)
    planes = max(int(np.prod(a.shape[:-2])) for a in (left, right, out))
    idx, scalar = _INDEX[_wide(planes * max(size[0] * size[1], ho * wo))]
    f_left = padded_spectra(as_float32(left, cp), size)
    f_right = padded_spectra(as_float32(right, cp), size)
    lsel, rsel = (s + (Ellipsis,) for s in PAIRING[form])
    a, b = f_left[lsel], f_right[rsel]
    # the product in place of the right spectra where it has their shape (all forms but n_to_m)
    inplace = np.broadcast_shapes(a.shape, b.shape) == f_right.shape
    scale = 1.0 / (size[0] * size[1])
    product = conj_product(a, b, f_right, scale) if inplace else conj_product(a, b, None, scale)
    circ = irfftn_unnormalized(product, size)  # sum_n left[n + c] right[n], c circular
    _launch(FFT_CROP, (idx,), out.size, (circ, *_crop_scalars(geo), scalar(out.size), out))
    return out
