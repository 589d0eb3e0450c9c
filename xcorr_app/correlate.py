"""``cross_correlate``: the public entry point for correlating many matrices.

Examples
--------
>>> import numpy as np
>>> from xcorr_app import cross_correlate
>>> ref = np.random.default_rng(0).random((32, 40))
>>> mov = np.roll(ref, (2, -3), axis=(0, 1))
>>> c = cross_correlate(ref, mov, max_shift=5, device="cpu")
>>> np.unravel_index(int(c.argmax()), c.shape)  # origin (5, 5) -> shift (-2, 3)
(np.int64(3), np.int64(8))
"""

from __future__ import annotations

import numpy as np

from .backend import compute_device, like_input, to_xp, xp_for
from .errors import XcorrError
from .forms import form_layout

#: methods that name a concrete path (``"auto"`` picks one of them)
METHODS = ("direct", "fft", "overlap")


def choose_method(layout, max_shift, device: str) -> str:
    """The path ``method="auto"`` takes (the planner of the warp-shuffle issue replaces this).

    Bounded searches run the definition-based kernels (on the CPU: the direct reference while
    its work is small); unbounded ones run the FFT.
    """
    if max_shift is None:
        return "fft"
    if device == "gpu":
        return "overlap"
    return "direct"


def cross_correlate(left, right, form="one_to_one", max_shift=None, method="auto",
                    device="auto", out=None):
    """Cross-correlate reference (left) and moving (right) matrices.

    Parameters
    ----------
    left, right : ndarray (NumPy or CuPy)
        Shaped as ``form`` requires: see :mod:`xcorr_app.forms`.
    form : {"one_to_one", "one_to_many", "n_to_mn", "n_to_m"}
    max_shift : int or (int, int), optional
        Bound the shift range; default every overlapping shift (layout in :mod:`xcorr_app.shifts`).
    method : {"auto", "direct", "fft", "overlap"}
        ``direct`` is the definition on the CPU/GPU array module, ``fft`` zero-padded FFTs,
        ``overlap`` the overlap-wise GPU kernel.
    device : {"auto", "gpu", "cpu"}
        Where NumPy inputs are computed; CuPy inputs are always computed on the GPU.
    out : ndarray, optional
        GPU kernels only: a float32 CuPy array of the output shape to write into.

    Returns
    -------
    ndarray
        float32 correlation surfaces, ``batch_shape + (Ho, Wo)``; NumPy for NumPy input, CuPy for
        CuPy input.
    """
    lay = form_layout(form, np.shape(left), np.shape(right))
    dev = compute_device(left, right, device=device)
    if method == "auto":
        method = choose_method(lay, max_shift, dev)
    if method not in METHODS:
        raise XcorrError(f"unknown method {method!r}; use 'auto' or one of {', '.join(METHODS)}")
    if method == "overlap" and dev != "gpu":
        raise XcorrError("method 'overlap' is a GPU kernel; use device='gpu' or method 'direct'")
    xp = xp_for(dev)
    L, R = to_xp(left, xp), to_xp(right, xp)
    if method == "overlap":
        from .gpu_overlap import overlap_xcorr

        res = overlap_xcorr(L, R, form, max_shift, out=out)
    else:
        from . import reference

        fn = reference.xcorr_fft if method == "fft" else reference.xcorr_direct
        res = fn(L.astype(xp.float32, copy=False), R.astype(xp.float32, copy=False), form,
                 max_shift, dtype=np.float32)
    return like_input(res, left, right)
