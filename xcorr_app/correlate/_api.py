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

from ..backend import compute_device, like_input, to_xp, xp_for
from ..errors import InputError
from ._plan_arguments import check_method_device, choose_method
from ._plan_cache import cached_plan, kept_call, remember
from ._forms import form_layout
from ._plans import METHODS, Plan
from ._shifts import check_max_shift, normalize_max_shift

__all__ = ["cross_correlate", "correlate_checked", "choose_method", "METHODS"]


def cross_correlate(left, right, form="one_to_one", max_shift=None, method="auto",
                    device="auto", out=None):
    """Cross-correlate reference (left) and moving (right) matrices.

    Parameters
    ----------
    left, right : ndarray (NumPy or CuPy)
        Shaped as ``form`` requires: see :mod:`xcorr_app.correlate._forms`.
    form : {"one_to_one", "one_to_many", "n_to_mn", "n_to_m"}
    max_shift : int or (int, int), optional
        Bound the shift range; default every overlapping shift (layout in :mod:`xcorr_app.correlate._shifts`).
        At most the larger frame's height and width (:func:`~._shifts.check_max_shift`).
    method : str or Plan
        ``"auto"`` (the planner's choice), or a plan (:mod:`xcorr_app.correlate._plans`): ``"direct"`` (the
        definition), ``"fft"`` (zero-padded FFTs), ``"overlap"`` (overlap-wise GPU kernel),
        ``"warp_per_shift"``, ``"warp_shuffle"``, with parameters as in
        ``"warp_shuffle:rights=4,shifts=2,distribution=triangle,rows_per_worker=8"``.
    device : {"auto", "gpu", "cpu"}
        Where NumPy inputs are computed; CuPy inputs are always computed on the GPU.
    out : ndarray, optional
        GPU kernels only: a float32 CuPy array of the output shape to write into.

    Returns
    -------
    ndarray
        float32 correlation surfaces, ``batch_shape + (Ho, Wo)``; NumPy for NumPy input, CuPy for
        CuPy input.

    Raises
    ------
    xcorr_app.errors.InputError
        (a ``ValueError``) for an unknown form or method, shapes that do not fit the form, a bad
        ``max_shift`` (or one beyond the frames), or inputs that are not real numbers.

    Examples
    --------
    >>> left = np.arange(20.0).reshape(4, 5)
    >>> right = np.stack([left, np.roll(left, 1, axis=1)])
    >>> c = cross_correlate(left, right, "one_to_many", max_shift=1, device="cpu")
    >>> c.shape, bool(c[0, 1, 1] == (left * left).sum())  # (shift (0, 0) at the centre)
    ((2, 3, 3), True)
    """
    got, key = kept_call(left, right, form, max_shift, method, device, out)
    if got is not NotImplemented:  # a repeated call: the plan kept for these arguments
        return got
    lay = form_layout(form, np.shape(left), np.shape(right))
    for name, a in (("left", left), ("right", right)):
        kind = getattr(getattr(a, "dtype", None), "kind", None) or np.asarray(a).dtype.kind
        if kind not in "biuf":
            raise InputError(f"{name} must hold real numbers, got dtype "
                             f"{getattr(a, 'dtype', np.asarray(a).dtype)}")
    bound = normalize_max_shift(max_shift)
    check_max_shift(bound, lay.left_shape, lay.right_shape)  # (before any allocation)
    dev = compute_device(left, right, device=device)
    plan = None if isinstance(method, str) and method == "auto" else Plan.parse(method)
    check_method_device(plan, dev)
    return _planned(lay, left, right, bound, dev, plan, out, key, method)



def correlate_checked(left, right, form, bound, plan, device, out=None):
    """:func:`cross_correlate` for a caller that checked its arguments once already (the
    alignment pipeline: ``bound`` as :func:`~._shifts.normalize_max_shift` returns it and
    within the frames, ``plan`` a :class:`Plan`, ``device`` ``"gpu"`` or ``"cpu"`` decided):
    the same plans and the same fast path, without checking them again for every chunk."""
    got, key = kept_call(left, right, form, bound, plan, device, out)
    if got is not NotImplemented:
        return got
    lay = form_layout(form, np.shape(left), np.shape(right))
    return _planned(lay, left, right, bound, device, plan, out, key, plan)


def _planned(lay, left, right, bound, dev, plan, out, key, method):
    """The call run by the problem's plan (planned, configured and its launches prepared once:
    a repeated problem goes straight to its launch), kept for the fast path under ``key``."""
    xp = xp_for(dev)
    L, R = to_xp(left, xp), to_xp(right, xp)
    cplan = cached_plan(lay, bound, dev, plan, L, R)
    res = cplan.execute(L, R, out=out)
    if key is not None:
        remember(key, cplan, left, right, method)
    return like_input(res, left, right)
