"""Reference implementations of cross-correlation, for tests and the CPU backend.

Both functions compute the same thing in the layout of :mod:`xcorr_app.shifts` for every form
of :mod:`xcorr_app.forms`:

* :func:`xcorr_direct`: the definition, ``out[k] = sum_n left[n + k] * right[n]`` over the
  overlap, one vectorised sum per shift (float64 by default);
* :func:`xcorr_fft`: zero-padded FFT correlation (linear, not circular), same output.

They accept NumPy or CuPy arrays (the GPU FFT peer of the benchmark is :func:`xcorr_fft` on
CuPy arrays) and return the input's array type.

Examples
--------
>>> import numpy as np
>>> a = np.arange(6.0).reshape(2, 3)
>>> xcorr_direct(a, a)[1, 2] == (a * a).sum()
True
>>> np.allclose(xcorr_fft(a, a, max_shift=1), xcorr_direct(a, a, max_shift=1))
True
"""

from __future__ import annotations

import numpy as np

from .backend import array_module_of
from .forms import form_layout
from .shifts import first_shift, output_shape

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
        Reference and moving matrices, shaped as ``form`` requires (see :mod:`xcorr_app.forms`).
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


def xcorr_fft(left, right, form="one_to_one", max_shift=None, dtype=np.float64):
    """Cross-correlation by zero-padded real FFTs, in the layout of :func:`xcorr_direct`.

    The left FFTs are computed once per left matrix and broadcast over its pairs.
    """
    xp = array_module_of(left, right)
    lay, L, R = _flat_inputs(left, right, form)
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    fy, fx = lh + rh - 1, lw + rw - 1  # linear correlation needs no wrap-around
    ctype = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    FL = xp.fft.rfft2(L.astype(ctype, copy=False), s=(fy, fx))
    FR = xp.fft.rfft2(R.astype(ctype, copy=False), s=(fy, fx))
    li, ri = lay.pairs()
    if lay.n_left == 1:
        prod = FL[0] * xp.conj(FR[xp.asarray(ri)])
    else:
        prod = FL[xp.asarray(li)] * xp.conj(FR[xp.asarray(ri)])
    circ = xp.fft.irfft2(prod, s=(fy, fx))  # circ[c] = sum_n left[n + c] right[n], c mod (fy, fx)
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, kx0 = first_shift(lay.left_shape, lay.right_shape, max_shift)
    ky = np.arange(ky0, ky0 + ho)
    kx = np.arange(kx0, kx0 + wo)
    ry = xp.asarray(np.mod(ky, fy))
    rx = xp.asarray(np.mod(kx, fx))
    out = circ[:, ry[:, None], rx[None, :]]
    valid = ((ky > -rh) & (ky < lh))[:, None] & ((kx > -rw) & (kx < lw))[None, :]
    if not valid.all():
        out = out * xp.asarray(valid)
    return out.astype(dtype, copy=False).reshape(lay.batch_shape + (ho, wo))


def xcorr(left, right, form="one_to_one", max_shift=None, dtype=np.float64):
    """Reference correlation: :func:`xcorr_direct` for small problems, :func:`xcorr_fft` else."""
    lay = form_layout(form, left.shape, right.shape)
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    work = lay.n_results * ho * wo * min(lay.right_shape[0] * lay.right_shape[1],
                                         lay.left_shape[0] * lay.left_shape[1])
    if work <= DIRECT_LIMIT:
        return xcorr_direct(left, right, form, max_shift, dtype)
    return xcorr_fft(left, right, form, max_shift, dtype)
