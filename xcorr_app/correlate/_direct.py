"""Cross-correlation by its definition (direct sums), the float64 yardstick of the kernels and
the CPU backend, and the CPU choice between it and the FFT.

Both functions compute the same thing in the layout of :mod:`xcorr_app.correlate._shifts` for every form
of :mod:`xcorr_app.correlate._forms`:

* :func:`xcorr_direct`: the definition, ``out[k] = sum_n left[n + k] * right[n]`` over the
  overlap, one vectorised sum per shift (float64 by default);
* :func:`~xcorr_app.correlate._fft.xcorr_fft` (in the FFT home, :mod:`xcorr_app.correlate._fft`):
  zero-padded FFT correlation (linear, not circular), same output.

They accept NumPy or CuPy arrays and return the input's array type; :func:`xcorr` picks one by
the size of the direct sum.

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
from ._fft import xcorr_fft
from ._forms import form_layout
from ._shifts import as_bound, first_shift, output_shape

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
    max_shift = as_bound(max_shift)
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
