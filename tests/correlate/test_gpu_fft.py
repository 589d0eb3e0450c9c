"""The GPU ``fft`` plan (``xcorr_app.correlate._fft``) against the float64 reference, every form."""

import numpy as np
import pytest

from xcorr_app.correlate import FORMS

from conftest import poisoned, rel_error
from test_gpu_warp_shuffle import bounded_and_unequal, counts_for
from test_gpu_warp_shuffle import check as shuffle_check

pytestmark = pytest.mark.gpu

SIZES = [(1, 1), (5, 3), (16, 16), (31, 33), (64, 64), (100, 37), (257, 129)]


def check(form, lshape, count, max_shift, rshape=None, **params):
    from xcorr_app.correlate._fft import fft_xcorr

    shuffle_check(form, lshape, count, max_shift, rshape, kernel=fft_xcorr, **params)


@pytest.mark.parametrize("form", FORMS)
def test_every_form_full_bounded_and_unequal(form):
    for lshape in SIZES:
        for count in counts_for(form):
            check(form, lshape, count, None)
    bounded_and_unequal(check, form)


def test_through_the_plan_with_and_without_out(rng):
    import cupy as cp

    from xcorr_app.correlate import _direct as reference
    from xcorr_app.errors import XcorrError
    from xcorr_app.correlate import run_plan

    left = rng.integers(0, 4000, (20, 17)).astype(np.uint16)
    right = rng.integers(0, 255, (5, 20, 17)).astype(np.uint8)
    want = reference.xcorr(left, right, "one_to_many", (3, 30))
    got = run_plan("fft", cp.asarray(left), cp.asarray(right), "one_to_many", (3, 30))
    assert isinstance(got, cp.ndarray) and rel_error(got.get(), want) <= 1e-5
    out = poisoned(cp, want.shape)
    assert run_plan("fft", cp.asarray(left), cp.asarray(right), "one_to_many", (3, 30),
                    out=out) is out
    assert rel_error(out.get(), want) <= 1e-5
    with pytest.raises(XcorrError, match="out must be"):
        run_plan("fft", cp.asarray(left), cp.asarray(right), "one_to_many", (3, 30),
                 out=cp.empty((5, 7, 60), cp.float32))


def test_inputs_unchanged(rng):
    import cupy as cp

    from xcorr_app.correlate._fft import fft_xcorr

    left = cp.asarray(rng.standard_normal((3, 24, 31)), cp.float32)
    right = cp.asarray(rng.standard_normal((3, 4, 24, 31)), cp.float32)
    before = (left.copy(), right.copy())
    a = fft_xcorr(left, right, "n_to_mn")
    b = fft_xcorr(left, right, "n_to_mn")
    assert cp.array_equal(a, b)
    assert cp.array_equal(left, before[0]) and cp.array_equal(right, before[1])
