"""GPU launcher of the overlap-wise baseline kernel (``kernels/correlate/overlap_xcorr.cu``).

One thread computes one output element (one shift) by summing the whole overlap.  It is the
baseline the warp-shuffle kernels must beat and the simplest correct GPU path.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> out = overlap_xcorr(cp.ones((4, 5), cp.float32), cp.ones((4, 5), cp.float32))  # doctest: +SKIP
>>> float(out[3, 4])  # doctest: +SKIP
20.0
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._forms import FORMS, FORM_IDS, form_layout
from .._cuda import KernelFamily
from ._shifts import first_shift, output_shape

OVERLAP = KernelFamily("overlap_xcorr.cu", "overlap_xcorr", [(FORM_IDS[f],) for f in FORMS])
BLOCK = (32, 8, 1)
MAX_GRID_Z = 65535


def check_out(out, shape, xp):
    """Validate a caller-supplied output (C-contiguous float32 of ``shape``) or allocate one."""
    if out is None:
        return xp.empty(shape, dtype=xp.float32)
    if not isinstance(out, xp.ndarray):
        raise InputError(f"out must be a {xp.__name__} array, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape) or out.dtype != np.float32 or not c_contiguous(out):
        raise InputError(f"out must be a C-contiguous float32 array of shape {shape}, "
                         f"got {out.dtype} {out.shape}")
    return out


def c_contiguous(a) -> bool:
    """``a.flags.c_contiguous``, read from CuPy's own field where there is one (``flags``
    builds a new object on every access: a fair share of a small problem's host time)."""
    flag = getattr(a, "_c_contiguous", None)
    return a.flags.c_contiguous if flag is None else bool(flag)


def as_float32(a, xp):
    """A C-contiguous float32 device array (uint8/uint16/float16/... converted)."""
    if isinstance(a, xp.ndarray) and a.dtype.char == "f" and c_contiguous(a):
        return a  # the common case, without the two calls below (a microsecond each)
    return xp.ascontiguousarray(xp.asarray(a), dtype=xp.float32)


def overlap_xcorr(left, right, form="one_to_one", max_shift=None, out=None):
    """Cross-correlate CuPy arrays with the overlap-wise baseline kernel.

    Parameters and output layout as :func:`xcorr_app.correlate._direct.xcorr_direct`; float32 result.
    ``out`` (optional) receives the result and must have the output shape.
    """
    import cupy as cp

    lay = form_layout(form, left.shape, right.shape)
    left, right = as_float32(left, cp), as_float32(right, cp)
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, kx0 = first_shift(lay.left_shape, lay.right_shape, max_shift)
    shape = lay.batch_shape + (ho, wo)
    out = check_out(out, shape, cp)
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    grid = (-(-wo // BLOCK[0]), -(-ho // BLOCK[1]), min(lay.n_results, MAX_GRID_Z))
    i32 = np.int32
    OVERLAP.get(lay.form_id)(grid, BLOCK, (left, right, out, i32(lh), i32(lw), i32(rh), i32(rw),
                                           i32(ho), i32(wo), i32(ky0), i32(kx0), i32(lay.m),
                                           i32(lay.n_results)))
    return out
