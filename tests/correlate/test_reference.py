"""The reference correlations against brute-force loops, and FFT against direct."""

import itertools

import numpy as np
import pytest
import scipy.signal

from xcorr_app.correlate import _direct as reference
from xcorr_app.errors import XcorrError
from xcorr_app.correlate import FORMS, first_shift, form_layout, output_shape
from xcorr_app.correlate._shifts import index_to_shift


def brute_force(left, right, max_shift=None):
    """Four nested loops straight from the definition, one pair of 2-D matrices."""
    lh, lw = left.shape
    rh, rw = right.shape
    ho, wo = output_shape(left.shape, right.shape, max_shift)
    ky0, kx0 = first_shift(left.shape, right.shape, max_shift)
    out = np.zeros((ho, wo))
    for iy, ix in itertools.product(range(ho), range(wo)):
        ky, kx = ky0 + iy, kx0 + ix
        s = 0.0
        for y, x in itertools.product(range(rh), range(rw)):
            if 0 <= y + ky < lh and 0 <= x + kx < lw:
                s += left[y + ky, x + kx] * right[y, x]
        out[iy, ix] = s
    return out


def make_inputs(rng, form, lshape, rshape, n=3, m=2):
    if form == "one_to_one":
        return rng.standard_normal(lshape), rng.standard_normal(rshape)
    if form == "one_to_many":
        return rng.standard_normal(lshape), rng.standard_normal((m,) + rshape)
    if form == "n_to_mn":
        return rng.standard_normal((n,) + lshape), rng.standard_normal((n, m) + rshape)
    return rng.standard_normal((n,) + lshape), rng.standard_normal((m,) + rshape)


def brute_force_form(left, right, form, max_shift):
    lay = form_layout(form, left.shape, right.shape)
    L = left.reshape((lay.n_left,) + lay.left_shape)
    R = right.reshape((lay.n_right,) + lay.right_shape)
    outs = [brute_force(L[a], R[b], max_shift) for a, b in zip(*lay.pairs())]
    return np.stack(outs).reshape(lay.batch_shape + outs[0].shape)


SHAPES = [((1, 1), (1, 1)), ((5, 3), (5, 3)), ((4, 7), (3, 2)), ((3, 2), (6, 5))]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("max_shift", [None, 0, 2, (1, 4), (9, 1)])
def test_direct_and_fft_equal_brute_force(rng, form, shapes, max_shift):
    left, right = make_inputs(rng, form, *shapes)
    want = brute_force_form(left, right, form, max_shift)
    for fn in (reference.xcorr_direct, reference.xcorr_fft, reference.xcorr):
        got = fn(left, right, form, max_shift)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_full_layout_is_scipy_correlate(rng):
    a, b = rng.random((9, 14)), rng.random((5, 11))
    np.testing.assert_allclose(reference.xcorr_direct(a, b), scipy.signal.correlate(a, b, "full"),
                               atol=1e-12)


def test_fft_and_direct_agree_on_larger_inputs(rng):
    left, right = rng.standard_normal((3, 31, 33)), rng.standard_normal((4, 31, 33))
    for ms in (None, 7):
        d = reference.xcorr_direct(left, right, "n_to_m", ms)
        f = reference.xcorr_fft(left, right, "n_to_m", ms)
        assert np.abs(d - f).max() <= 1e-10 * np.abs(d).max()


def test_peak_maps_to_shift_convention(rng):
    """A moving image that is the reference displaced by s peaks at shift -s."""
    ref = rng.random((40, 50))
    moving = np.zeros_like(ref)
    moving[3:, :-5] = ref[:-3, 5:]  # moving[n] = ref[n - s] with s = (3, -5)
    for ms in (None, 8):
        c = reference.xcorr_direct(ref - ref.mean(), moving - moving.mean(), max_shift=ms)
        idx = np.unravel_index(np.argmax(c), c.shape)
        assert index_to_shift(idx, ref.shape, moving.shape, ms) == (-3, 5)


@pytest.mark.parametrize("form,ls,rs", [("one_to_one", (3,), (3, 3)), ("n_to_mn", (2, 3, 3), (3, 1, 3, 3)),
                                        ("nope", (3, 3), (3, 3)), ("one_to_one", (0, 3), (3, 3))])
def test_bad_shapes_are_clear_errors(form, ls, rs):
    with pytest.raises(XcorrError):
        reference.xcorr(np.zeros(ls), np.zeros(rs), form)
