"""Reference implementations of cross-correlation, for tests and the CPU backend.

Both functions compute the same thing in the layout of :mod:`xcorr_app.correlate._shifts` for every form
of :mod:`xcorr_app.correlate._forms`:

* :func:`xcorr_direct`: the definition, ``out[k] = sum_n left[n + k] * right[n]`` over the
  overlap, one vectorised sum per shift (float64 by default);
* :func:`xcorr_fft`: zero-padded FFT correlation (linear, not circular), same output.

They accept NumPy or CuPy arrays (the GPU FFT peer of the benchmark is :func:`xcorr_fft` on
CuPy arrays) and return the input's array type.

Examples
--------
>>> import numpy as np
>>> a = np.arange(6.0).reshape(2, 3)
>>> bool(xcorr_direct(a, a)[1, 2] == (a * a).sum())
True
>>> np.allclose(xcorr_fft(a, a, max_shift=1), xcorr_direct(a, a, max_shift=1))
True
"""

from __future__ import annotations

import numpy as np

from ..backend import array_module_of
from ._forms import form_layout
from ._shifts import axis_overlaps, first_shift, output_shape

#: size above which :func:`xcorr` switches from the direct sum to the FFT (multiply-adds)
DIRECT_LIMIT = 2e7


def _flat_inputs(left, right, form):
    lay = form_layout(form, left.shape, right.shape)
    lh, lw = lay.left_shape
    rh, rw = lay.right_shape
    return lay, left.reshape(lay.n_left, lh, lw), right.reshape(lay.n_right, rh, rw)


def _overlap(k, n_left, n_right):
    """Right-matrix index range [a, b) that overlaps the left one at shift k (empty if a >= b)."""
    return max(0, -k), min(n_right, n_left - k)


def xcorr_direct(left, right, form="one_to_one", max_shift=None, dtype=np.float64):
    """Definition-based cross-correlation (the thesis' ``out[k] = sum left[n+k] right[n]``).

    Parameters
    ----------
    left, right : ndarray
        Reference and moving matrices, shaped as ``form`` requires (see :mod:`xcorr_app.correlate._forms`).
    form : str
        ``one_to_one``, ``one_to_many``, ``n_to_mn`` or ``n_to_m``.
    max_shift : int or (int, int), optional
        Bound the shifts to ``-max_shift..max_shift``; default: every overlapping shift.
    dtype : dtype
        Accumulation and output dtype.

    Returns
    -------
    ndarray
        ``batch_shape + output_shape(...)``.
    """
    xp = array_module_of(left, right)
    lay, L, R = _flat_inputs(left, right, form)
    L, R = L.astype(dtype, copy=False), R.astype(dtype, copy=False)
    li, ri = lay.pairs()
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, kx0 = first_shift(lay.left_shape, lay.right_shape, max_shift)
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    out = xp.zeros((lay.n_results, ho, wo), dtype=dtype)
    # Group pairs by left matrix so each shift is one batched multiply-sum.
    Lp, Rp = L[xp.asarray(li)], R[xp.asarray(ri)]
    for iy in range(ho):
        ya, yb = _overlap(ky0 + iy, lh, rh)
        if ya >= yb:
            continue
        ky = ky0 + iy
        for ix in range(wo):
            xa, xb = _overlap(kx0 + ix, lw, rw)
            if xa >= xb:
                continue
            kx = kx0 + ix
            prod = Lp[:, ya + ky:yb + ky, xa + kx:xb + kx] * Rp[:, ya:yb, xa:xb]
            out[:, iy, ix] = prod.sum(axis=(1, 2))
    return out.reshape(lay.batch_shape + (ho, wo))


def fft_length(n_left: int, n_right: int, k_first: int, count: int) -> int:
    """Circular FFT length along one axis that gives the wanted shifts without wrap-around.

    The valid shifts are ``-(n_right - 1) .. n_left - 1``; a wanted valid shift ``k`` must not
    alias another valid one, which needs ``f >= n_left - k`` and ``f >= k + n_right`` for every
    wanted valid ``k``.  The full range needs ``n_left + n_right - 1``; a bounded range
    ``-s..s`` only ``max(n_left, n_right) + s`` (for ``s`` below both lengths).  Rounded up to
    a fast (5-smooth) FFT size.
    """
    lo = max(k_first, -(n_right - 1))
    hi = min(k_first + count - 1, n_left - 1)
    need = max(n_left, n_right, n_left - lo, hi + n_right)
    return next_smooth(need)


def next_smooth(n: int) -> int:
    """The smallest 5-smooth number (2^a 3^b 5^c) >= ``n``: ``scipy.fft.next_fast_len(n,
    real=True)`` without importing scipy.fft (about 0.6 s of a one-shot GPU run).

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


#: how each form pairs the batch axes of the left and right FFTs (indices that broadcast)
_FFT_PAIRING = {
    "one_to_one": ((), ()),
    "one_to_many": ((), ()),
    "n_to_mn": ((slice(None), None), ()),
    "n_to_m": ((slice(None), None), (None,)),
}
_FFT_SETUPS: dict = {}


def _fft_setup(xp, left_shape, right_shape, max_shift):
    """FFT sizes, crop indices and validity mask of a problem, cached per array module/device."""
    dev = getattr(getattr(xp, "cuda", None), "Device", lambda: None)()
    key = (xp.__name__, getattr(dev, "id", None), left_shape, right_shape,
           None if max_shift is None else tuple(np.broadcast_to(max_shift, 2).tolist()))
    setup = _FFT_SETUPS.get(key)
    if setup is None:
        (lh, lw), (rh, rw) = left_shape, right_shape
        ho, wo = output_shape(left_shape, right_shape, max_shift)
        ky0, kx0 = first_shift(left_shape, right_shape, max_shift)
        fy, fx = fft_length(lh, rh, ky0, ho), fft_length(lw, rw, kx0, wo)
        vy, vx = axis_overlaps(lh, rh, ky0, ho) > 0, axis_overlaps(lw, rw, kx0, wo) > 0
        iy = xp.asarray(np.mod(np.arange(ky0, ky0 + ho), fy))[:, None]
        ix = xp.asarray(np.mod(np.arange(kx0, kx0 + wo), fx))[None, :]
        mask = None if (vy.all() and vx.all()) else xp.asarray(vy[:, None] & vx[None, :])
        if len(_FFT_SETUPS) > 64:
            _FFT_SETUPS.clear()
        setup = _FFT_SETUPS[key] = ((fy, fx), iy, ix, mask, (ho, wo))
    return setup


def xcorr_fft(left, right, form="one_to_one", max_shift=None, dtype=np.float64):
    """Cross-correlation by zero-padded real FFTs, in the layout of :func:`xcorr_direct`.

    Both sides are padded to an alias-free fast size (:func:`fft_length`: the full range needs
    ``H + H' - 1``, a bounded one less), transformed with ``rfft2``, conj-multiplied with the
    pairing of ``form`` by broadcasting (each left FFT once), transformed back and cropped;
    shifts without any overlap are 0.  The GPU FFT path and the benchmark's CuPy FFT peer.
    """
    xp = array_module_of(left, right)
    lay = form_layout(form, left.shape, right.shape)
    size, iy, ix, mask, (ho, wo) = _fft_setup(xp, lay.left_shape, lay.right_shape, max_shift)
    ctype = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    fl = xp.fft.rfft2(left.astype(ctype, copy=False), s=size)
    fr = xp.fft.rfft2(right.astype(ctype, copy=False), s=size)
    lsel, rsel = (s + (Ellipsis,) for s in _FFT_PAIRING[form])
    circ = xp.fft.irfft2(fl[lsel] * xp.conj(fr[rsel]), s=size)  # sum_n left[n + c] right[n]
    out = circ[..., iy, ix]
    if mask is not None:
        out = out * mask
    return out.astype(dtype, copy=False).reshape(lay.batch_shape + (ho, wo))


def direct_is_small(lay, max_shift) -> bool:
    """Whether the direct sum's work (multiply-adds, bounded) stays under :data:`DIRECT_LIMIT`."""
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    work = lay.n_results * ho * wo * min(lay.right_shape[0] * lay.right_shape[1],
                                         lay.left_shape[0] * lay.left_shape[1])
    return work <= DIRECT_LIMIT


def xcorr(left, right, form="one_to_one", max_shift=None, dtype=np.float64):
    """Reference correlation: :func:`xcorr_direct` for small problems, :func:`xcorr_fft` else."""
    lay = form_layout(form, left.shape, right.shape)
    if direct_is_small(lay, max_shift):
        return xcorr_direct(left, right, form, max_shift, dtype)
    return xcorr_fft(left, right, form, max_shift, dtype)


def correlate_reference(stack, weights, mode="reflect", cval=0.0, origin=(0, 0)):
    """float64 ``scipy.ndimage.correlate`` of every frame of an ``(H, W)`` or ``(N, H, W)``
    NumPy stack: the reference of the filter kernels.

    >>> float(correlate_reference(np.ones((2, 4, 5)), np.ones((3, 3)))[1, 0, 0])
    9.0
    """
    import scipy.ndimage as ndi

    s = np.asarray(stack, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    frames = s if s.ndim == 3 else s[None]
    out = np.stack([ndi.correlate(f, w, mode=mode, cval=cval, origin=tuple(origin))
                    for f in frames])
    return out if s.ndim == 3 else out[0]


def conv2d_reference(x, w, stride=1, padding=0):
    """float64 NCHW convolution (cross-correlation, as in deep learning) of ``x`` (N, C, H, W)
    with ``w`` (F, C, KH, KW), zero padding and a stride: the reference of the im2win and
    pointwise kernels.  Sums over the filter taps with one matrix product each.

    >>> conv2d_reference(np.ones((1, 2, 4, 4)), np.ones((3, 2, 3, 3)), stride=1, padding=1)[0, 0]
    array([[ 8., 12., 12.,  8.],
           [12., 18., 18., 12.],
           [12., 18., 18., 12.],
           [ 8., 12., 12.,  8.]])
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    sy, sx = (stride, stride) if np.isscalar(stride) else stride
    py, px = (padding, padding) if np.isscalar(padding) else padding
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp_ = np.pad(x, ((0, 0), (0, 0), (py, py), (px, px)))
    ho, wo = (h + 2 * py - kh) // sy + 1, (wd + 2 * px - kw) // sx + 1
    out = np.zeros((n, f, ho, wo))
    for i in range(kh):
        for j in range(kw):
            patch = xp_[:, :, i:i + sy * (ho - 1) + 1:sy, j:j + sx * (wo - 1) + 1:sx]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j], optimize=True)
    return out
