"""GPU launchers of ``kernels/registration/peak_math.cu``: the per-frame arithmetic of peak
refinement in a few kernels compiled together.

The NumPy code of :mod:`xcorr_app.registration._peaks` and
:mod:`xcorr_app.registration._fft_register` is the definition; on CuPy arrays those modules call
these launchers instead of chains of CuPy operations on N or N x 2 values, each of which
compiled a kernel of its own on a fresh machine (seconds of NVRTC before a first ``xcorr align
--device gpu`` measured anything: docs/how-align-works.md, measurements).  The source's single-precision kernels (all the align pipeline launches) compile
in one NVRTC call (:func:`xcorr_app._cuda.loader.compile_together`), its double-precision ones
in another when first needed; they give the same numbers: float64 in the
same order of operations, the same NaN, inf and border rules (see the source's comments).

- :func:`subpixel_shifts`: ``refined_shifts`` and the ``subpixel_*`` fits;
- :func:`border_flags`: ``on_border``;
- :func:`surface_argmax`: ``peak_index``, and the circular peak of ``fft_shifts`` (``|x|``,
  the value, ``signed_shifts``);
- :func:`upsampled_peaks`: ``refine_peak`` (``upsampled_dft``'s matrices, its peak and the
  shift arithmetic) around cuBLAS products;
- :func:`wrapped_correlations`: the two correlations of
  :func:`xcorr_app.alignment.refine._template.periodic_frames` (its ``_correlation`` over the pixels
  that did not and did wrap around), without the rolled copy and the masks;
  :func:`phase_ramps`: its references' spectra moved by a fraction of a pixel;
- :func:`edge_differences`, :func:`subtract_smooth`: ``periodic_spectrum``'s edge differences
  and its subtraction of the smooth component;
- :func:`phase_cross_power`: ``cross_power`` with ``phase``.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> corr = cp.zeros((2, 5, 7), cp.float32); corr[0, 3, 2] = 1; corr[1, 0, 6] = 2  # doctest: +SKIP
>>> iy, ix, value, _ = surface_argmax(corr)  # doctest: +SKIP
>>> iy.tolist(), ix.tolist(), value.tolist()  # doctest: +SKIP
([3, 0], [2, 6], [1.0, 2.0])
"""

from __future__ import annotations

import numpy as np

from .._cuda import KernelFamily, device_limits, stream_counters
from ..errors import InputError

SOURCE = "peak_math.cu"
THREADS = 256
#: the most frames of one launch of :func:`wrapped_correlations` or :func:`surface_argmax`
#: (the grid's y)
MAX_GRID_Y = 65535
#: the ``method`` argument of ``subpixel_shifts`` in the source
SUBPIXEL_CODES = {"none": 0, "parabolic3": 1, "gaussian3": 2, "parabolic": 3, "gaussian": 4}
REAL = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
COMPLEX = {np.dtype(np.complex64): "float2", np.dtype(np.complex128): "double2"}
SUBPIXEL = KernelFamily(SOURCE, "subpixel_shifts", [(t,) for t in REAL.values()])
ON_BORDER = KernelFamily(SOURCE, "peaks_on_border", [()])
ARGMAX = KernelFamily(SOURCE, "surface_argmax",
                      [(t, a, THREADS) for t in REAL.values() for a in (False, True)]
                      + [(t, False, THREADS) for t in COMPLEX.values()])
DFT_MATRICES = KernelFamily(SOURCE, "dft_matrices", [(t,) for t in COMPLEX.values()])
UPSAMPLED_PEAKS = KernelFamily(SOURCE, "upsampled_peaks",
                               [(t, THREADS) for t in COMPLEX.values()])
WRAP_ROWS = KernelFamily(SOURCE, "wrap_row_sums", [(THREADS,)])
WRAP_TOTALS = KernelFamily(SOURCE, "wrap_totals", [()])
RAMPS = KernelFamily(SOURCE, "phase_ramps", [()])
EDGES = KernelFamily(SOURCE, "edge_differences", [(t,) for t in REAL.values()])
_PAIRS = [(COMPLEX[np.dtype(c)], REAL[np.dtype(r)])
          for c, r in ((np.complex64, np.float32), (np.complex128, np.float64))]
PERIODIC = KernelFamily(SOURCE, "periodic_smooth", _PAIRS)
PHASE = KernelFamily(SOURCE, "phase_cross_power", _PAIRS)
WEIGHTED = KernelFamily(SOURCE, "weighted_spectrum", _PAIRS)
_ALL = [(fam, args) for fam in (SUBPIXEL, ON_BORDER, ARGMAX, DFT_MATRICES, UPSAMPLED_PEAKS,
                                WRAP_ROWS, WRAP_TOTALS, RAMPS, EDGES, PERIODIC, PHASE, WEIGHTED)
        for args in fam.instantiations]
#: the kernels compiled together on first use, in two groups: those of single precision (what
#: the align pipeline launches), and those of double precision (float64 surfaces, complex128
#: spectra), whose double-precision math would double the first compilation of the others
GROUPS = ([r for r in _ALL if not any("double" in str(a) for a in r[1])],
          [r for r in _ALL if any("double" in str(a) for a in r[1])])
#: blocks of the grid-stride element-wise kernel
MAX_BLOCKS = 4096


#: each kernel's group
_GROUP_OF = {request: group for group in GROUPS for request in group}


def _kernel(family, *args):
    """The compiled kernel (its group compiled together on first use)."""
    return family.get(*args, together=_GROUP_OF[(family, tuple(args))])


def _blocks(n):
    return (max(1, -(-int(n) // THREADS)),)


def fits(corr, *indices) -> bool:
    """Whether the kernels take these surfaces (float32/float64, at least one value, the batch
    shape ``corr.shape[:-2]``) and integer peak positions (int64 of the batch shape)."""
    return (corr.ndim >= 2 and corr.size > 0 and np.dtype(corr.dtype) in REAL
            and all(getattr(i, "dtype", None) == np.int64 and i.shape == corr.shape[:-2]
                    for i in indices))


def subpixel_shifts(corr, iy, ix, method, origin=None):
    """``(..., 2)`` float64: the shifts ``(iy - oy + fy, ix - ox + fx)`` of ``refined_shifts``
    (with ``origin``), or the offsets ``(fy, fx)`` of the ``subpixel_*`` functions (without),
    of the integer peaks ``iy, ix`` refined by ``method`` (a key of :data:`SUBPIXEL_CODES`).
    Inputs as :func:`fits` accepts."""
    import cupy as cp

    corr = cp.ascontiguousarray(corr)
    ho, wo = corr.shape[-2:]
    n = int(np.prod(iy.shape, dtype=np.int64))
    out = cp.empty(iy.shape + (2,), cp.float64)
    oy, ox = (0.0, 0.0) if origin is None else (float(origin[0]), float(origin[1]))
    _kernel(SUBPIXEL, REAL[np.dtype(corr.dtype)])(
        _blocks(n), (THREADS,),
        (corr, cp.ascontiguousarray(iy), cp.ascontiguousarray(ix), np.int64(n), np.int32(ho),
         np.int32(wo), np.int32(SUBPIXEL_CODES[method]), np.float64(oy), np.float64(ox),
         np.int32(origin is not None), out))
    return out


def border_flags(iy, ix, origin, bound):
    """``on_border`` of int64 ``iy, ix`` of one shape: a bool array of that shape."""
    import cupy as cp

    out = cp.empty(iy.shape, cp.bool_)
    n = out.size
    if n:
        _kernel(ON_BORDER)(_blocks(n), (THREADS,),
                           (cp.ascontiguousarray(iy), cp.ascontiguousarray(ix), np.int64(n),
                            np.int64(int(origin[0])), np.int64(int(origin[1])),
                            np.int64(int(bound[0])), np.int64(int(bound[1])), out))
    return out


def surface_argmax(corr, absolute=False, copies=0):
    """``(iy, ix, value, shifts)`` of the first maximum of each ``(..., H, W)`` surface:
    int64 and float64 arrays of shape ``corr.shape[:-2]``, as ``peak_index`` and
    ``corr[..., iy, ix]``; of ``|corr|`` with ``absolute`` (complex surfaces: always their
    magnitude).  ``shifts``: ``(copies, ..., 2)`` float64, each copy the signed circular shifts
    of ``signed_shifts`` (None for ``copies=0``)."""
    import cupy as cp

    corr = cp.ascontiguousarray(corr)
    h, w = corr.shape[-2:]
    batch = corr.shape[:-2]
    n = int(np.prod(batch, dtype=np.int64))
    dtype = np.dtype(corr.dtype)
    args = (COMPLEX[dtype], False) if dtype in COMPLEX else (REAL[dtype], bool(absolute))
    iy, ix = cp.empty(batch, cp.int64), cp.empty(batch, cp.int64)
    value = cp.empty(batch, cp.float64)
    shifts = cp.empty((copies,) + batch + (2,), cp.float64) if copies else value
    if n:
        slices = argmax_slices(n, h * w, device_limits().sms)
        done = stream_counters(min(n, MAX_GRID_Y))
        part = cp.empty(2 * min(n, MAX_GRID_Y) * slices, cp.int64) if slices > 1 else done
        kernel = _kernel(ARGMAX, *args, THREADS)
        for first in range(0, n, MAX_GRID_Y):  # (the grid's y limit)
            g = min(MAX_GRID_Y, n - first)
            kernel((slices, g), (THREADS,), (corr, np.int32(h), np.int32(w), iy, ix, value,
                                             shifts, np.int32(copies), np.int64(first),
                                             np.int64(n), part, done))
    return iy, ix, value, (shifts if copies else None)


#: blocks of :func:`surface_argmax` in flight per SM, and the fewest values a block scans
ARGMAX_BLOCKS_PER_SM = 4
ARGMAX_MIN_SLICE = 16384
ARGMAX_MAX_SLICES = 64


def argmax_slices(n, size, sms):
    """Blocks per surface of :func:`surface_argmax`: enough for :data:`ARGMAX_BLOCKS_PER_SM`
    blocks on every SM over the ``n`` surfaces, each scanning at least
    :data:`ARGMAX_MIN_SLICE` of its ``size`` values (one block for small surfaces).

    >>> argmax_slices(64, 1024 * 1024, 132), argmax_slices(1, 2048 * 2048, 132)
    (9, 64)
    >>> argmax_slices(2000, 1024 * 1024, 132), argmax_slices(4, 100 * 100, 132)
    (1, 1)
    """
    want = -(-ARGMAX_BLOCKS_PER_SM * sms // n)
    return int(max(1, min(want, ARGMAX_MAX_SLICES, size // ARGMAX_MIN_SLICE)))


def upsampled_peaks(product, shifts, upsample_factor, region, dftshift, full_width=None):
    """The last stage of ``refine_peak``: ``(shifts, peak)`` (float64 (N, 2) and (N,)) of the
    cross-power spectra ``product`` (N, H, WC) complex64/complex128 (half spectra of full width
    ``full_width`` when given) refined around ``shifts`` (N, 2) on a ``region`` x ``region``
    grid of ``1 / upsample_factor`` px centred at index ``dftshift``.

    ``upsampled_dft(conj(product))`` is ``conj(kyc @ product @ kxc) + (kyn @ product) @ kxm``
    (the second term: the mirrored columns of a half spectrum) with matrices that one kernel
    builds (see the source), so no pass conjugates the spectra; cuBLAS does the products.
    """
    import cupy as cp

    product = cp.ascontiguousarray(product)
    n, h, wc = product.shape
    w = wc if full_width is None else int(full_width)
    mirrored = w - wc if full_width is not None else 0
    c_type = COMPLEX[np.dtype(product.dtype)]
    r = int(region)
    shifts = cp.ascontiguousarray(shifts, dtype=cp.float64)
    kyc = cp.empty((n, r, h), product.dtype)
    kxc = cp.empty((n, wc, r), product.dtype)
    kyn = cp.empty((n, r, h), product.dtype) if mirrored else kyc
    kxm = cp.empty((n, wc, r), product.dtype) if mirrored else kxc
    rounded = cp.empty((n, 2), cp.float64)
    u = float(upsample_factor)
    total = n * (r * h + wc * r) * (2 if mirrored else 1)
    _kernel(DFT_MATRICES, c_type)(
        (min(_blocks(total)[0], MAX_BLOCKS),), (THREADS,),
        (shifts, np.int64(n), np.int32(h), np.int32(w), np.int32(wc), np.int32(r), np.int32(r),
         np.float64(u), np.int64(dftshift), np.int32(mirrored), kyc, kxc, kyn, kxm, rounded))
    a = (kyc @ product) @ kxc
    b = (kyn @ product) @ kxm if mirrored else a
    out = cp.empty((n, 2), cp.float64)
    peak = cp.empty(n, cp.float64)
    _kernel(UPSAMPLED_PEAKS, c_type, THREADS)(
        (n,), (THREADS,),
        (a, b, np.int32(bool(mirrored)), np.int32(r), np.int32(r), rounded, np.float64(u),
         np.int64(dftshift), np.float64(h * w), out, peak))
    return out, peak


def edge_differences(images):
    """``(a, b)``: ``images[..., -1, :] - images[..., 0, :]`` and ``images[..., :, -1] -
    images[..., :, 0]`` of float32/float64 ``images`` (..., H, W) with at least one value, in
    one kernel."""
    import cupy as cp

    images = cp.ascontiguousarray(images)
    h, w = images.shape[-2:]
    batch = images.shape[:-2]
    n = int(np.prod(batch, dtype=np.int64))
    a = cp.empty(batch + (w,), images.dtype)
    b = cp.empty(batch + (h,), images.dtype)
    _kernel(EDGES, REAL[np.dtype(images.dtype)])(
        (min(_blocks(n * (h + w))[0], MAX_BLOCKS),), (THREADS,),
        (images, np.int64(n), np.int32(h), np.int32(w), a, b))
    return a, b


def wrapped_correlations(frame, reference, shift, out=None):
    """``(inside, strips)``: the zero-normalized correlations of the float32 ``frame`` (H, W)
    and ``np.roll(reference, (-dy, -dx), axis=(0, 1))`` for ``shift = (dy, dx)`` (integers)
    over the pixels whose ``(y + dy, x + dx)`` lies inside the frame, and over those that
    wrapped around; 0 for fewer than 2 pixels or a flat part (as
    ``alignment._template._correlation``).  Python floats (the host waits for them); with
    ``out`` (a C-contiguous float64 CuPy array of 2) written there instead, not waited for.

    Frames ``(F, H, W)`` with shifts ``(F, 2)``: every frame's pair in the same launches, an
    ``(F, 2)`` float64 CuPy array (into ``out`` of that shape if given), not waited for; the
    ``reference`` is one (H, W) for all, or one per frame (F, H, W)."""
    import cupy as cp

    a = cp.ascontiguousarray(frame, dtype=cp.float32)
    b = cp.ascontiguousarray(reference, dtype=cp.float32)
    one = a.ndim == 2
    a = a[None] if one else a
    f, h, w = a.shape
    moves = np.asarray(shift.get() if hasattr(shift, "get") else shift, np.float64)
    moves = moves.reshape(-1, 2)
    given = out is not None
    want = (2,) if one else (f, 2)
    if len(moves) != f or b.shape not in ((h, w), (f, h, w)) or (one and b.ndim == 3):
        raise InputError(f"{f} frames of {h}x{w} take {f} shifts and a reference of their "
                         f"size (or one per frame), got {len(moves)} and {b.shape}")
    if not np.isfinite(moves).all() or f > MAX_GRID_Y:
        raise InputError(f"the shifts must be finite integers, at most {MAX_GRID_Y} frames "
                         f"a call; got {f} frames")
    if given and (out.shape != want or out.dtype != cp.float64 or not out.flags.c_contiguous):
        raise InputError(f"out must be a C-contiguous float64 CuPy array of shape {want}")
    out = out if given else cp.empty(want, cp.float64)
    rows = cp.empty((f, h, 6), cp.float64)
    first = cp.empty((f, 6), cp.float64)  # masked means and counts
    moves = cp.asarray(moves.astype(np.int32))  # (a copy from pageable memory: no wait)
    row_sums, totals = _kernel(WRAP_ROWS, THREADS), _kernel(WRAP_TOTALS)
    for stage, result in ((0, first), (1, out)):
        row_sums((h, f), (THREADS,), (a, b, np.int64(h * w if b.ndim == 3 else 0), np.int32(h),
                                      np.int32(w), moves, np.int32(stage), first, rows))
        totals((f,), (32,), (rows, np.int32(h), np.int32(stage), first, result))
    if given:
        return None
    if not one:
        return out
    inside, strips = out.get().tolist()
    return inside, strips


def phase_ramps(spectrum, width, fractions, scale=1.0):
    """The half spectrum ``spectrum`` (H, W // 2 + 1) complex64 of an image of width ``width``
    times ``scale * exp(2j pi (ky fy + kx fx))`` for each row ``(fy, fx)`` of ``fractions``
    (F, 2): ``(F, H, W // 2 + 1)`` complex64 CuPy array, the spectra of the image moved
    circularly by those fractions of a pixel (``alignment.refine._template.
    fractional_references``; ``scale``: an unnormalized inverse's 1/n)."""
    import cupy as cp

    spec = cp.ascontiguousarray(spectrum, dtype=cp.complex64)
    frac = np.ascontiguousarray(fractions, np.float64).reshape(-1, 2)
    h, w2 = spec.shape
    if w2 != int(width) // 2 + 1 or not np.isfinite(frac).all() or len(frac) > MAX_GRID_Y:
        raise InputError(f"phase_ramps: a half spectrum of width {int(width) // 2 + 1} and at "
                         f"most {MAX_GRID_Y} finite fractions, got {spec.shape} and {frac.shape}")
    out = cp.empty((len(frac), h, w2), cp.complex64)
    _kernel(RAMPS)((_blocks(h * w2)[0], len(frac)), (THREADS,),
                   (spec, np.int32(h), np.int32(width), np.int32(w2), cp.asarray(frac),
                    np.float64(scale), out))
    return out


def weighted_spectrum(spectrum, weights):
    """``spectrum * weights`` (a new array) for a complex CuPy ``spectrum`` and real
    ``weights`` of its trailing shape and real type, by one kernel (CuPy's product compiles
    at first use); None where the kernel does not take them."""
    import cupy as cp

    pair = _complex_pair(spectrum)
    if pair is None or spectrum.size == 0 or weights.size == 0 \
            or weights.dtype != np.dtype(spectrum.real.dtype) \
            or tuple(weights.shape) != tuple(spectrum.shape[spectrum.ndim - weights.ndim:]):
        return None
    spectrum, weights = cp.ascontiguousarray(spectrum), cp.ascontiguousarray(weights)
    out = cp.empty_like(spectrum)
    _kernel(WEIGHTED, *pair)((min(_blocks(out.size)[0], MAX_BLOCKS),), (THREADS,),
                             (spectrum, np.int64(out.size), weights, np.int64(weights.size),
                              out))
    return out


def _complex_pair(spectrum):
    dtype = np.dtype(spectrum.dtype)
    return (COMPLEX[dtype], REAL[np.dtype(spectrum.real.dtype)]) if dtype in COMPLEX else None


def subtract_smooth(a, b, shape, spectrum) -> bool:
    """``periodic_spectrum``'s last step on the GPU: ``spectrum`` (..., H, WK) C-contiguous
    complex64/complex128 less the smooth component of the edge differences of images of
    ``shape`` (H, W), given the half spectra (``rfft``) of those differences: ``a`` (...,
    W // 2 + 1) of the rows', ``b`` (..., H // 2 + 1) of the columns', in place.  False
    (nothing done) where the kernel does not take these arrays."""
    import cupy as cp

    pair = _complex_pair(spectrum)
    h, w = shape
    wk = spectrum.shape[-1]
    if pair is None or not spectrum.flags.c_contiguous or spectrum.size == 0 \
            or a.dtype != spectrum.dtype or b.dtype != spectrum.dtype \
            or a.shape[-1] != w // 2 + 1 or b.shape[-1] != h // 2 + 1 \
            or a.size // a.shape[-1] != b.size // b.shape[-1] \
            or a.size // a.shape[-1] != spectrum.size // (h * wk):
        return False
    a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
    total = spectrum.size
    _kernel(PERIODIC, *pair)((min(_blocks(total)[0], MAX_BLOCKS),), (THREADS,),
                             (a, b, np.int32(h), np.int32(w), np.int32(wk), np.int64(total),
                              spectrum))
    return True


def phase_cross_power(reference_spectrum, spectrum, floor, weights=None) -> bool:
    """``cross_power(..., phase=True)`` on the GPU: ``spectrum = reference_spectrum *
    conj(spectrum) / max(|.|, floor)`` in place, then times ``weights`` (real, the shape of
    ``reference_spectrum``) where given; ``reference_spectrum`` of the shape of ``spectrum``
    or of its trailing axes.  False where the kernel does not take them."""
    import cupy as cp

    pair = _complex_pair(spectrum)
    ref = reference_spectrum
    real = np.dtype(spectrum.real.dtype)
    if pair is None or not spectrum.flags.c_contiguous or spectrum.size == 0 \
            or ref.dtype != spectrum.dtype or ref.size == 0 \
            or tuple(ref.shape) != tuple(spectrum.shape[spectrum.ndim - ref.ndim:]) \
            or (weights is not None and (weights.dtype != real or weights.shape != ref.shape)):
        return False
    ref = cp.ascontiguousarray(ref)
    weights = None if weights is None else cp.ascontiguousarray(weights)
    total = spectrum.size
    _kernel(PHASE, *pair)((min(_blocks(total)[0], MAX_BLOCKS),), (THREADS,),
                          (ref, np.int64(ref.size), spectrum, np.int64(total), real.type(floor),
                           weights))
    return True
