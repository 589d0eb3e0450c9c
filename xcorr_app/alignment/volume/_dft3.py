"""The 3-D correlation of volumes against one reference: cross-power spectra by ``rfftn`` over
the last three axes, the bounded integer peak, and the subvoxel peak by a 3-D upsampled
matrix DFT (the 2-D idea of :mod:`xcorr_app.registration._upsampled`, one axis more).

The half spectrum (``rfftn`` layout) is enough for the upsampled samples: the correlation is
real, so ``c(s) = Re(sum_k w(k) P(k) exp(2j*pi*k.s)) / N`` with ``w = 2`` on the columns whose
mirror is missing and ``1`` on the zero column.  The Nyquist bins of even axes are left out
between samples: whether they stand for ``+1/2`` or ``-1/2`` cycle is undefined, and either
choice biases a peak between samples (by 0.01 voxel on the example below).

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> ref = ndi.gaussian_filter(np.random.default_rng(0).random((16, 24, 20)), 2)
>>> moved = np.fft.ifftn(ndi.fourier_shift(np.fft.fftn(ref), (0.4, -1.3, 2.25))).real
>>> product = cross_spectra(np.fft.rfftn(ref - ref.mean()), moved[None])
>>> coarse, _, _ = bounded_peak(correlate(product, moved.shape), None)
>>> np.round(refine3d(product, coarse, moved.shape, 20), 2).tolist()
[[-0.4, 1.3, -2.25]]
"""

from __future__ import annotations

import numpy as np

from ..._cuda import KernelFamily, stride_blocks
from ...backend import array_module_of, device_copy
from ...correlate import conj_product, fft_of, irfftn_unnormalized
from ._rows import item_sums, knock_out, row_first_max

AXES = (-3, -2, -1)
#: kernels/alignment/dft3.cu (the GPU's subvoxel samples): threads a block
DFT_THREADS = 256
DFT_AXIS = KernelFamily("dft3.cu", "dft_axis",
                        [(c, t) for c in ("float2", "double2") for t in (False, True)])
CONTRACT_Y = KernelFamily("dft3.cu", "contract_y", [()])
CONTRACT_Z = KernelFamily("dft3.cu", "contract_z", [()])
#: bytes the batched subvoxel samples of one call hold at most (:func:`samples3d`)
SAMPLE_BYTES = 2 ** 28


def spectrum(volumes, xp, norms=False):
    """``rfftn`` over the last three axes of mean-subtracted float32 ``volumes`` (the mean
    summed in float64, subtracted in float32); with ``norms``, also their root sums of squares
    (NumPy float64), exactly 0 for a constant volume.  The volumes come scaled (largest
    magnitude about 1: :meth:`~._source.Volumes.read`), so that neither the squares nor the
    spectra's products leave float32's range.  On the GPU the centred copy is the 2-D path's
    (``demeaned``: each volume a frame of its rows), the sums xcorr's kernels (CuPy's
    operations compiled six kernels at first use)."""
    constant = None
    if xp is np:
        # (a copy, centred in place; a constant volume's float64 mean is exact: all zeros)
        v = np.array(volumes, dtype=np.float32)
        v -= (item_sums(v) / v[0].size).astype(np.float32)[:, None, None, None]
    else:
        from ..rigid import demeaned

        b, x = volumes.shape[0], volumes.shape[-1]
        v, _, _, constant, _ = demeaned(volumes.reshape(b, -1, x))
        v = v.reshape(volumes.shape)
    spec = fft_of(xp).rfftn(v, axes=AXES)
    if not norms:
        return spec
    n = np.sqrt(_np(item_sums(v, squares=True))).reshape(-1)
    if constant is not None:  # (the kernel's flags: its float32 mean need not be exact)
        n[_np(constant).astype(bool)] = 0.0
    return spec, n


def cross_spectra(reference_spectrum, volumes, norms=False):
    """``R * conj(M)`` for each of ``volumes`` (B, Z, Y, X): its inverse transform peaks at
    the shift that moves a volume back onto the reference (scikit-image's convention).  With
    ``norms``, also the volumes' (:func:`spectrum`)."""
    xp = array_module_of(reference_spectrum, volumes)
    product, n = spectrum(volumes, xp, norms=True)
    conj_product(reference_spectrum.astype(product.dtype, copy=False), product, out=product)
    return (product, n) if norms else product


def correlate(product, shape, normalized=True):
    """The circular cross-correlations (B, Z, Y, X) of the cross-power spectra ``product``;
    without ``normalized``, times the volume's size (the inverse's 1/n left out: on the GPU
    then a copy's transform, CuPy's own copy and division compiled two kernels at first use)."""
    xp = array_module_of(product)
    if normalized:
        return fft_of(xp).irfftn(product, s=tuple(shape), axes=AXES)
    if xp is np:
        return fft_of(np).irfftn(product, s=tuple(shape), axes=AXES, norm="forward")
    return irfftn_unnormalized(device_copy(product), shape)


def window_lags(size, bound):
    """The lags ``-bound..bound`` searched along an axis of ``size`` (all lags for ``None`` or
    a bound past half the size), in ascending order."""
    half = size // 2
    if bound is None or 2 * int(bound) + 1 >= size:
        return np.arange(-half, size - half)
    return np.arange(-int(bound), int(bound) + 1)


def bounded_peak(corr, max_shift, exclusion=2):
    """Integer peak of each correlation within ``|lag| <= max_shift`` per axis.

    Returns ``(shifts (B, 3) float64, peak values (B,), second (B,))``: ``second`` is the
    largest value of the window farther than ``exclusion`` voxels from the peak (0 where the
    window has none), for the confidence; all NumPy.  ``corr`` is overwritten (the peaks are
    knocked out to find the runner-up).

    An axis searched whole is read in place, in the FFT's circular order (index ``i`` is lag
    ``i``, or ``i - n`` past the positive lags), and its knock-out wraps around; only bounded
    axes are gathered into a window (three copies of a 64x512x512 correlation took more time
    than its FFT).  Equal maxima: the first in that order (on a whole axis lag
    0 before the positive lags, then the negative ones; on a bounded axis the most negative)."""
    xp = array_module_of(corr)
    bounds = (None,) * 3 if max_shift is None else max_shift
    shape = corr.shape[1:]
    lags = [window_lags(n, b) for n, b in zip(shape, bounds)]
    whole = [len(lag) == n for lag, n in zip(lags, shape)]
    win = corr
    for axis, (lag, all_lags) in enumerate(zip(lags, whole), start=1):
        if not all_lags:
            win = xp.take(win, xp.asarray(lag % corr.shape[axis]), axis=axis)
    b = win.shape[0]
    win = xp.ascontiguousarray(win)
    idx, peak = _first_max(win)
    index = np.stack(np.unravel_index(idx, win.shape[1:]), axis=1)
    e = exclusion
    if xp is not np and win.dtype == np.float32:
        knock_out(win, index, e, whole)
    else:
        for k, at in enumerate(index):
            near = []
            for a, (i, n) in enumerate(zip(at, win.shape[1:])):
                if whole[a]:  # around the circle
                    near.append(xp.asarray(np.unique((i + np.arange(-e, e + 1)) % n)))
                else:
                    near.append(xp.arange(max(i - e, 0), min(i + e + 1, n)))
            win[k][xp.ix_(*near)] = -np.inf
    rest = row_first_max(row_first_max(win.reshape(-1, win.shape[-1]))[1].reshape(b, -1))[1]
    rest = _np(rest).astype(np.float64)
    rest = np.where(np.isfinite(rest), rest, 0.0)
    shifts = np.stack([np.where(index[:, a] < n - n // 2, index[:, a], index[:, a] - n)
                       if whole[a] else lag[index[:, a]]
                       for a, (lag, n) in enumerate(zip(lags, shape))], axis=1)
    return shifts.astype(np.float64), peak, rest


def _first_max(win):
    """The flat index (B,) of each volume's first maximum (row-major, as ``argmax``) and its
    value (NumPy float64): row by row, then over the rows' maxima (many rows reduce in
    parallel on a GPU, one volume's 16M voxels on a handful of blocks)."""
    b, x = win.shape[0], win.shape[-1]
    col, best = row_first_max(win.reshape(-1, x))
    row, value = row_first_max(best.reshape(b, -1))
    row = _np(row).astype(np.int64)
    col = _np(col.reshape(b, -1))[np.arange(b), row]
    return row * x + col, _np(value).astype(np.float64)


def _np(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _kernel(xp, n, positions, half_width=None, nyquist=False):
    """``exp(2j*pi * f * x)`` (B, r, n) for the frequencies ``f`` of an axis of ``n`` samples
    (its first ``half_width`` of the ``rfft`` layout, doubled where the mirror is missing) and
    the lags ``positions`` (B, r); the Nyquist bin of an even axis only with ``nyquist``
    (whole lags: there it is +-1)."""
    f, weight = _frequencies(n, half_width, nyquist)
    f, weight = xp.asarray(f), xp.asarray(weight)
    return weight * xp.exp(2j * np.pi * positions[..., None] * f)


def _frequencies(n, half_width=None, nyquist=False):
    """``(f, weight)`` of :func:`_kernel`, NumPy float64."""
    if half_width is None:
        f = np.fft.fftfreq(n)
        weight = np.ones(n)
    else:
        f = np.arange(half_width) / n
        weight = np.full(half_width, 2.0)
        weight[0] = 1.0
    if n % 2 == 0:
        # the Nyquist bin: +-1 at whole lags, its sign between them undefined
        weight[n // 2] = 1.0 if nyquist else 0.0
    return f, weight


def samples3d(product, shape, centres, step, count, nyquist=False):
    """The correlation (B, r, r, r) at the lags ``centres + (i - count // 2) * step`` per
    axis (``i = 0..count - 1``) from the half spectra ``product`` (B, Z, Y, X//2+1), by three
    batched matrix products over all volumes at once: the first (over x, the large one) in
    the spectrum's precision (no double copy of a volume's spectrum: sums of X/2 terms lose
    about 1e-6 relative in single precision), the others in double.
    ``nyquist``: with the Nyquist bins (whole lags only: the FFT's values)."""
    xp = array_module_of(product)
    b = product.shape[0]
    z, y, x = shape
    offs = (np.arange(count) - count // 2) * float(step)
    pos = np.asarray(centres, np.float64)[:, :, None] + offs  # (B, 3, r)
    # the first product's (B, Z*Y, r) complex128 at most SAMPLE_BYTES a batch (thin volumes)
    k = max(1, SAMPLE_BYTES // (24 * z * y * count))
    if xp is not np and product.dtype == np.complex64:
        out = xp.empty((b, count, count, count), xp.float64)
        for i in range(0, b, k):  # (slices written in place: concatenate would compile)
            _samples_gpu(product[i:i + k], shape, pos[i:i + k], nyquist, out[i:i + k])
        return out
    if b > k:
        return xp.concatenate([samples3d(product[i:i + k], shape, centres[i:i + k], step, count,
                                         nyquist) for i in range(0, b, k)])
    kx = _kernel(xp, x, xp.asarray(pos[:, 2]), product.shape[-1], nyquist)  # (B, r, Xh)
    a = xp.matmul(product.reshape(b, z * y, -1),
                  kx.transpose(0, 2, 1).astype(product.dtype)).astype(xp.complex128)
    ky = _kernel(xp, y, xp.asarray(pos[:, 1]), nyquist=nyquist)  # (B, r, Y)
    a = xp.matmul(ky[:, None], a.reshape(b, z, y, count))        # (B, Z, r, r)
    kz = _kernel(xp, z, xp.asarray(pos[:, 0]), nyquist=nyquist)  # (B, r, Z)
    a = xp.matmul(kz, a.reshape(b, z, count * count)).reshape(b, count, count, count)
    return xp.divide(a.real, z * y * x)  # (not "/": see spectrum)


def _samples_gpu(product, shape, pos, nyquist, out):
    """:func:`samples3d` of complex64 spectra on the GPU (``pos`` (B, 3, r) the lags) into
    ``out`` (B, r, r, r) float64: the matrices of the three axes by one kernel each, the
    product over x by cuBLAS a volume at a time (complex64, as CuPy's batched product, whose
    pointer arrays a kernel compiled at first use), the contractions over y and z in double
    by two kernels (``kernels/alignment/dft3.cu``)."""
    import cupy as cp

    b, r = pos.shape[0], pos.shape[2]
    z, y, x = shape
    xh = product.shape[-1]
    product = cp.ascontiguousarray(product).reshape(b, z * y, xh)
    kx = _axis_matrix(x, pos[:, 2], xh, nyquist, cp.complex64, transpose=True)  # (B, Xh, r)
    a = cp.empty((b, z * y, r), cp.complex64)
    for k in range(b):
        cp.matmul(product[k], kx[k], out=a[k])
    ky = _axis_matrix(y, pos[:, 1], None, nyquist, cp.complex128)  # (B, r, Y)
    kz = _axis_matrix(z, pos[:, 0], None, nyquist, cp.complex128)  # (B, r, Z)
    t = cp.empty((b, z, r, r), cp.complex128)
    _launch(CONTRACT_Y.get(), t.size,
            (a, ky, np.int32(b), np.int32(z), np.int32(y), np.int32(r), t))
    _launch(CONTRACT_Z.get(), out.size,
            (t, kz, np.int32(b), np.int32(z), np.int32(r), np.float64(z * y * x), out))
    return out


def _axis_matrix(n, positions, half_width, nyquist, dtype, transpose=False):
    """:func:`_kernel` of ``positions`` (B, r) on the GPU by ``dft_axis``, of ``dtype``;
    ``transpose``: (B, n', r)."""
    import cupy as cp

    f, weight = _frequencies(n, half_width, nyquist)
    b, r = positions.shape
    shape = (b, len(f), r) if transpose else (b, r, len(f))
    out = cp.empty(shape, dtype)
    kernel = DFT_AXIS.get("float2" if dtype == np.complex64 else "double2", bool(transpose))
    _launch(kernel, out.size, (cp.asarray(np.ascontiguousarray(positions, np.float64)),
                               np.int32(b), np.int32(r), np.int32(len(f)), cp.asarray(f),
                               cp.asarray(weight), out))
    return out


def _launch(kernel, total, args):
    """A grid-stride launch of a kernel of ``dft3.cu`` over ``total`` elements."""
    kernel((stride_blocks(total, DFT_THREADS),), (DFT_THREADS,), args)


def parabola_vertex(cm, c0, cp):
    """The vertex of the parabola through (-1, cm), (0, c0), (1, cp), clipped to +-0.5; 0
    where the three are not a maximum."""
    den = cm - 2.0 * c0 + cp
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(den < 0, 0.5 * (cm - cp) / den, 0.0)
    return np.clip(v, -0.5, 0.5)


def refine3d(product, coarse, shape, upsample):
    """Subvoxel shifts (B, 3) around the integer ``coarse`` ones: the correlation upsampled by
    ``upsample`` over +-0.75 voxel (:func:`samples3d`), its best sample moved to the vertex of
    a parabola through it and its two neighbours along each axis (over a few hundredths of a
    voxel the correlation is all but quadratic: the ``1 / upsample`` grid is no floor)."""
    coarse = np.asarray(coarse, np.float64)
    u = float(upsample)
    if u <= 1:
        return coarse
    count = int(np.ceil(1.5 * u)) | 1  # odd: the coarse peak is a sample
    grid = _np(samples3d(product, shape, coarse, 1.0 / u, count))
    out = np.empty_like(coarse)
    for b, s in enumerate(grid):
        i = np.array(np.unravel_index(int(np.argmax(s)), s.shape))
        i = np.clip(i, 1, count - 2)  # an edge sample: fit on the nearest full triple
        c0 = s[tuple(i)]
        step = []
        for a in range(3):
            lo, hi = i.copy(), i.copy()
            lo[a] -= 1
            hi[a] += 1
            step.append(parabola_vertex(s[tuple(lo)], c0, s[tuple(hi)]))
        out[b] = coarse[b] + (i - count // 2 + np.array(step)) / u
    return out
