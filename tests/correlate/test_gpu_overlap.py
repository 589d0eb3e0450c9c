"""The overlap-wise baseline kernel against the float64 reference (GPU only)."""

import numpy as np
import pytest

from xcorr_app.correlate import _direct as reference
from xcorr_app.correlate import FORMS, output_shape

from conftest import poisoned, rel_error

pytestmark = pytest.mark.gpu

SIZES = [(1, 1), (7, 13), (31, 33), (100, 37)]
COUNTS = [1, 3, 33]


def inputs(rng, form, shape, count, rshape=None):
    rshape = rshape or shape
    n = m = count
    if form == "one_to_one":
        return rng.standard_normal(shape), rng.standard_normal(rshape)
    if form == "one_to_many":
        return rng.standard_normal(shape), rng.standard_normal((m,) + rshape)
    if form == "n_to_mn":
        return rng.standard_normal((n,) + shape), rng.standard_normal((n, 2) + rshape)
    return rng.standard_normal((n,) + shape), rng.standard_normal((2,) + rshape)


def run_and_check(rng, form, shape, count, max_shift, rshape=None):
    import cupy as cp

    from xcorr_app.correlate import overlap_xcorr

    left, right = inputs(rng, form, shape, count, rshape)
    want = reference.xcorr(left, right, form, max_shift)
    out = poisoned(cp, want.shape)
    got = overlap_xcorr(cp.asarray(left, cp.float32), cp.asarray(right, cp.float32), form,
                        max_shift, out=out)
    assert got is out
    # Scale: the correlation of the magnitudes (the size of the summed terms), so that a lone
    # output whose terms cancel (max_shift 0 on random data) is judged by float32's real bound.
    scale = reference.xcorr(np.abs(left), np.abs(right), form, max_shift)
    err = np.abs(got.get() - want).max() / max(np.abs(scale).max(), 1e-30)
    assert np.isfinite(got.get()).all() and err <= 1e-5


FORM_COUNTS = [(f, c) for f in FORMS for c in COUNTS if f != "one_to_one" or c == 1]


@pytest.mark.parametrize("form,count", FORM_COUNTS)
@pytest.mark.parametrize("shape", SIZES)
def test_full_range(rng, form, count, shape):
    run_and_check(rng, form, shape, count, None)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("max_shift", [0, 3, (2, 40)])
def test_bounded(rng, form, shape, max_shift):
    run_and_check(rng, form, shape, 3, max_shift)


@pytest.mark.parametrize("lshape,rshape", [((31, 33), (7, 13)), ((7, 13), (31, 33)), ((1, 1), (5, 3))])
def test_left_and_right_of_different_sizes(rng, lshape, rshape):
    for form in FORMS:
        run_and_check(rng, form, lshape, 3, None, rshape)
        run_and_check(rng, form, lshape, 3, 4, rshape)


def test_converts_integer_and_half_inputs(rng):
    import cupy as cp

    from xcorr_app.correlate import overlap_xcorr

    left = rng.integers(0, 4000, (20, 17)).astype(np.uint16)
    right = rng.integers(0, 255, (3, 20, 17)).astype(np.uint8)
    want = reference.xcorr(left, right, "one_to_many", 5)
    got = overlap_xcorr(cp.asarray(left), cp.asarray(right), "one_to_many", 5)
    assert rel_error(got.get(), want) <= 1e-5
    h = rng.standard_normal((9, 11)).astype(np.float16)
    got = overlap_xcorr(cp.asarray(h), cp.asarray(h))
    assert rel_error(got.get(), reference.xcorr(h, h)) <= 1e-5


def test_repeated_runs_identical(rng):
    import cupy as cp

    from xcorr_app.correlate import overlap_xcorr

    left, right = (cp.asarray(rng.standard_normal((3, 31, 33)), cp.float32) for _ in range(2))
    a = overlap_xcorr(left, right, "n_to_m")
    b = overlap_xcorr(left, right, "n_to_m")
    assert bool((a == b).all())


def test_cross_correlate_api_types(rng):
    import cupy as cp

    from xcorr_app import cross_correlate

    a, b = rng.random((16, 20)), rng.random((4, 16, 20))
    want = reference.xcorr(a, b, "one_to_many", 3)
    for method in ("overlap", "fft", "direct", "auto"):
        got_np = cross_correlate(a, b, "one_to_many", 3, method=method, device="gpu")
        assert isinstance(got_np, np.ndarray) and rel_error(got_np, want) <= 1e-5
        got_cp = cross_correlate(cp.asarray(a), cp.asarray(b), "one_to_many", 3, method=method)
        assert isinstance(got_cp, cp.ndarray) and rel_error(got_cp.get(), want) <= 1e-5
    assert output_shape(a.shape, b.shape, 3) == got_np.shape[-2:]
