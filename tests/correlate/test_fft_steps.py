"""The element-wise kernels of the GPU fft plan (correlate/cuda/fft_steps.cu) against NumPy."""

import numpy as np
import pytest

from xcorr_app.correlate._fft import conj_product

pytestmark = pytest.mark.gpu


def spectra(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("left_shape,right_shape", [
    ((5, 7), (5, 7)),              # one_to_one
    ((1, 5, 7), (3, 5, 7)),        # one_to_many, the left spectrum kept with a batch axis
    ((9, 4), (6, 9, 4)),           # a reference against frames
    ((4, 1, 3, 33), (4, 5, 3, 33)),  # n_to_mn
    ((2, 1, 31, 17), (1, 3, 31, 17)),  # n_to_m
    ((1, 1), (40, 1, 1)),          # planes of one element
])
def test_conj_product_matches_numpy(rng, dtype, left_shape, right_shape):
    import cupy as cp

    left, right = spectra(rng, left_shape, dtype), spectra(rng, right_shape, dtype)
    want = left * np.conj(right)
    out = cp.full(want.shape, np.nan + 1j * np.nan, dtype)  # poisoned
    got = conj_product(cp.asarray(left), cp.asarray(right), out=out)
    assert got is out
    rtol = 1e-6 if dtype == np.complex64 else 1e-14
    np.testing.assert_allclose(got.get(), want, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(conj_product(cp.asarray(left), cp.asarray(right)).get(), want,
                               rtol=rtol, atol=rtol)
    if want.shape == right.shape:  # in place of the right spectra
        r = cp.asarray(right)
        conj_product(cp.asarray(left), r, out=r)
        np.testing.assert_allclose(r.get(), want, rtol=rtol, atol=rtol)


def test_conj_product_other_layouts_fall_back(rng):
    """Planes that are not contiguous (a transposed view) and mixed precision still give the
    product (through CuPy's operations or a cast)."""
    import cupy as cp

    left, right = spectra(rng, (6, 5), np.complex128), spectra(rng, (3, 5, 6), np.complex64)
    want = left.T[None].astype(np.complex64) * np.conj(right)
    got = conj_product(cp.asarray(left).T, cp.asarray(right))
    np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)
