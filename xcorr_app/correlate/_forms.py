"""The four forms of cross-correlation between many matrices (thesis, "Many matrices").

============  ======================  =========================  ==========================
form          left (reference)        right (moving)             output
============  ======================  =========================  ==========================
one_to_one    ``(H, W)``              ``(H', W')``               ``(Ho, Wo)``
one_to_many   ``(H, W)``              ``(M, H', W')``            ``(M, Ho, Wo)``
n_to_mn       ``(N, H, W)``           ``(N, M, H', W')``         ``(N, M, Ho, Wo)``
n_to_m        ``(N, H, W)``           ``(M, H', W')``            ``(N, M, Ho, Wo)``
============  ======================  =========================  ==========================

In ``n_to_mn`` each left matrix has its own group of ``M`` right matrices; in ``n_to_m`` every
left is correlated with every right.  All forms are a list of (left, right) pairs: result ``z``
of the flattened batch correlates left ``left_of(z)`` with right ``right_of(z)``.  The CUDA
kernels use the same mapping (``kernels/include/xcorr_forms.cuh``; the integer ids must match).

Examples
--------
>>> lay = form_layout("n_to_m", (2, 8, 8), (3, 8, 8))
>>> lay.batch_shape, lay.n_results
((2, 3), 6)
>>> [(int(a), int(b)) for a, b in zip(*lay.pairs())][:4]
[(0, 0), (0, 1), (0, 2), (1, 0)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

FORMS = ("one_to_one", "one_to_many", "n_to_mn", "n_to_m")
FORM_IDS = {name: i for i, name in enumerate(FORMS)}  # must match kernels/include/xcorr_forms.cuh

_NDIMS = {"one_to_one": (2, 2), "one_to_many": (2, 3), "n_to_mn": (3, 4), "n_to_m": (3, 3)}


@dataclass(frozen=True)
class FormLayout:
    """How a form maps results to (left, right) pairs.

    ``n_left`` and ``n_right`` count matrices after flattening the batch axes, ``m`` is the
    number of right matrices per left (the ``M`` above), ``batch_shape`` the leading output axes.
    """

    form: str
    n_left: int
    n_right: int
    m: int
    batch_shape: tuple
    left_shape: tuple  # (H, W) of one left matrix
    right_shape: tuple  # (H', W') of one right matrix

    @property
    def form_id(self) -> int:
        return FORM_IDS[self.form]

    @property
    def n_results(self) -> int:
        return int(np.prod(self.batch_shape, dtype=np.int64))

    def pairs(self):
        """Arrays ``(left_index, right_index)`` of every result, in output order."""
        z = np.arange(self.n_results)
        if self.form == "one_to_one":
            return np.zeros(1, np.int64), np.zeros(1, np.int64)
        if self.form == "one_to_many":
            return np.zeros_like(z), z
        if self.form == "n_to_mn":
            return z // self.m, z
        return z // self.m, z % self.m


def form_layout(form: str, left_shape, right_shape) -> FormLayout:
    """Check the input shapes against ``form`` and describe its pairs."""
    if form not in FORMS:
        raise InputError(f"unknown form {form!r}; use one of {', '.join(FORMS)}")
    want_l, want_r = _NDIMS[form]
    left_shape, right_shape = tuple(left_shape), tuple(right_shape)
    if len(left_shape) != want_l or len(right_shape) != want_r:
        raise InputError(
            f"form {form!r} needs a {want_l}-D left and a {want_r}-D right array, "
            f"got shapes {left_shape} and {right_shape}")
    if 0 in left_shape[-2:] or 0 in right_shape[-2:]:
        raise InputError(f"cannot correlate empty images (shapes {left_shape} and {right_shape})")
    if form == "one_to_one":
        n_left, n_right, m, batch = 1, 1, 1, ()
    elif form == "one_to_many":
        n_left, m = 1, right_shape[0]
        n_right, batch = m, (m,)
    elif form == "n_to_mn":
        if right_shape[0] != left_shape[0]:
            raise InputError(f"n_to_mn needs right of shape (N, M, H, W) with N = {left_shape[0]} "
                             f"left matrices, got {right_shape}")
        n_left, m = left_shape[0], right_shape[1]
        n_right, batch = n_left * m, (n_left, m)
    else:
        n_left, m = left_shape[0], right_shape[0]
        n_right, batch = m, (n_left, m)
    return FormLayout(form, int(n_left), int(n_right), int(m), tuple(int(b) for b in batch),
                      left_shape[-2:], right_shape[-2:])
