"""The element-wise kernels of the GPU fft plan (kernels/correlate/fft_steps.cu) against NumPy."""

import numpy as np
import pytest

from xcorr_app.correlate import conj_product, irfftn_unnormalized
from xcorr_app.correlate._fft import zero_padded
from xcorr_app.errors import InputError

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


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("scale", [1.0, 1 / 3.0])
def test_conj_product_scales(rng, dtype, scale):
    """``scale`` in the kernel and in the fallback (a transposed view)."""
    import cupy as cp

    left, right = spectra(rng, (4, 6, 5), dtype), spectra(rng, (4, 6, 5), dtype)
    want = scale * left * np.conj(right)
    rtol = 1e-6 if dtype == np.complex64 else 1e-14
    out = cp.full(want.shape, np.nan + 1j * np.nan, dtype)
    conj_product(cp.asarray(left), cp.asarray(right), out=out, scale=scale)
    np.testing.assert_allclose(out.get(), want, rtol=rtol, atol=rtol)
    t = conj_product(cp.asarray(left.transpose(0, 2, 1)).transpose(0, 2, 1),
                     cp.asarray(right), scale=scale)
    np.testing.assert_allclose(t.get(), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("size", [(7, 9), (12, 10), (31, 33), (5, 12, 9), (8, 7, 16)])
def test_irfftn_unnormalized_is_n_times_the_inverse(rng, size):
    """The unnormalized inverse of spectra of odd and even sizes, planes and volumes, against
    float64 NumPy: n times ``irfftn``; its input may be overwritten."""
    import cupy as cp

    planes = rng.standard_normal((3, *size))
    axes = tuple(range(-len(size), 0))
    spec = np.fft.rfftn(planes, axes=axes)
    got = irfftn_unnormalized(cp.asarray(spec.astype(np.complex64)), size).get()
    n = float(np.prod(size))
    assert got.shape == (3, *size) and got.dtype == np.float32
    np.testing.assert_allclose(got, planes * n, rtol=0, atol=1e-4 * n)


def test_irfftn_unnormalized_without_the_overwriting_transform(rng, monkeypatch):
    """Where CuPy has no ``_fftn`` of the expected signature, ``cupy.fft.irfftn``: the same
    numbers as the overwriting transform."""
    import cupy as cp

    from xcorr_app.correlate import _fft

    size = (12, 10)
    spec = np.fft.rfft2(rng.standard_normal((2, *size))).astype(np.complex64)
    fast = irfftn_unnormalized(cp.asarray(spec), size).get()
    assert _fft._overwriting_c2r() is not None  # CuPy 13-14: the private function is there
    monkeypatch.setattr(_fft, "_overwriting_c2r", lambda: None)
    slow = irfftn_unnormalized(cp.asarray(spec), size).get()
    np.testing.assert_allclose(fast, slow, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("shape,size", [
    ((3, 512, 512), (540, 540)),   # the bench's planes: four elements a thread
    ((2, 7, 9), (11, 16)),         # odd widths: one element a thread
    ((5, 8), (8, 12)),             # one plane, no rows added
    ((2, 1, 37, 44), (40, 48)),    # two batch axes, widths of 4
    ((4, 3, 4), (3, 5)),           # an odd padded width
])
def test_zero_padded_matches_numpy(rng, shape, size):
    """fft_pad (both vector widths) against np.pad, into a poisoned output and a new one."""
    import cupy as cp

    a = rng.standard_normal(shape).astype(np.float32)
    pad = [(0, 0)] * (a.ndim - 2) + [(0, size[0] - shape[-2]), (0, size[1] - shape[-1])]
    want = np.pad(a, pad)
    out = cp.full(want.shape, np.nan, cp.float32)
    assert zero_padded(cp.asarray(a), size, out=out) is out
    np.testing.assert_array_equal(out.get(), want)
    np.testing.assert_array_equal(zero_padded(cp.asarray(a), size).get(), want)


def test_zero_padded_misaligned_view_and_errors(rng):
    """A view one element into its buffer (not 16-byte aligned: one element a thread), a
    strided view (made contiguous), and sizes smaller than the matrices."""
    import cupy as cp

    a = rng.standard_normal((2, 9, 13)).astype(np.float32)
    flat = cp.asarray(np.concatenate([[np.float32(7)], a.ravel()]))
    view = flat[1:].reshape(a.shape)[..., :12]  # (strided: made contiguous)
    np.testing.assert_array_equal(zero_padded(view, (10, 16)).get(),
                                  np.pad(a[..., :12], [(0, 0), (0, 1), (0, 4)]))
    shifted = flat[1:1 + 2 * 9 * 12].reshape(2, 9, 12)  # contiguous, 4 bytes past alignment
    np.testing.assert_array_equal(zero_padded(shifted, (9, 12)).get(), shifted.get())
    with pytest.raises(InputError, match="cannot pad"):
        zero_padded(cp.asarray(a), (8, 16))
    with pytest.raises(InputError, match="cannot pad"):
        zero_padded(cp.asarray(a), (9, 16), out=cp.empty((2, 9, 15), cp.float32))
