"""Every bad argument of the filters raises InputError, which ``except ValueError`` catches (as
scikit-image's and SciPy's do), and the CPU results are SciPy's, bit for bit."""

import numpy as np
import pytest
import scipy.ndimage as ndi

from xcorr_app import filters
from xcorr_app.errors import InputError
from xcorr_app.filters import bank_weights, channel_filter
from xcorr_app.filters._banks import mix_weights

STACK = np.ones((2, 10, 12), np.float32)
W = np.ones((3, 3))

BAD_CALLS = {
    # the stack
    "1-D stack": lambda: filters.gaussian(np.ones(12), 1.0),
    "4-D stack": lambda: filters.box(np.ones((1, 2, 10, 12)), 3),
    "empty stack": lambda: filters.sobel(np.ones((2, 0, 12)), 0),
    "complex stack": lambda: filters.gaussian(STACK.astype(np.complex64), 1.0),
    "text stack": lambda: filters.laplace(np.full((4, 4), "a")),
    "object stack": lambda: filters.correlate2d(np.full((4, 4), None), W),
    # mode and cval
    "unknown mode": lambda: filters.gaussian(STACK, 1.0, mode="bogus"),
    "mode None": lambda: filters.box(STACK, 3, mode=None),
    "mode list": lambda: filters.laplace(STACK, mode=["reflect"]),
    "cval text": lambda: filters.sobel(STACK, 0, mode="constant", cval="x"),
    "cval complex": lambda: filters.correlate2d(STACK, W, cval=1j),
    "cval None": lambda: filters.dog(STACK, 1.0, 2.0, cval=None),
    # gaussian sigma and truncate
    "sigma < 0": lambda: filters.gaussian(STACK, -1.0),
    "sigma 0": lambda: filters.gaussian(STACK, 0),
    "sigma NaN": lambda: filters.gaussian(STACK, float("nan")),
    "sigma Inf": lambda: filters.gaussian(STACK, np.inf),
    "sigma text": lambda: filters.gaussian(STACK, "2"),
    "sigma None": lambda: filters.gaussian(STACK, None),
    "truncate < 0": lambda: filters.gaussian(STACK, 1.0, truncate=-1.0),
    "truncate NaN": lambda: filters.gaussian(STACK, 1.0, truncate=np.nan),
    "taps sigma 0": lambda: filters.gaussian_taps(0.0),
    "taps truncate text": lambda: filters.gaussian_taps(1.0, "4"),
    # box, sobel, dog
    "box 0": lambda: filters.box(STACK, 0),
    "box fraction": lambda: filters.box(STACK, 2.5),
    "box text": lambda: filters.box(STACK, "3"),
    "box None": lambda: filters.box(STACK, None),
    "sobel axis 2": lambda: filters.sobel(STACK, 2),
    "sobel axis -1": lambda: filters.sobel(STACK, -1),
    "sobel axis text": lambda: filters.sobel(STACK, "0"),
    "dog out of order": lambda: filters.dog(STACK, 3.0, 1.0),
    "dog equal": lambda: filters.dog(STACK, 2.0, 2.0),
    "dog sigma 0": lambda: filters.dog(STACK, 0.0, 1.0),
    "dog NaN": lambda: filters.dog(STACK, np.nan, 2.0),
    "dog text": lambda: filters.dog(STACK, "a", 2.0),
    # weights and origin
    "weights 1-D": lambda: filters.correlate2d(STACK, np.ones(3)),
    "weights empty": lambda: filters.convolve2d(STACK, np.ones((0, 3))),
    "weights NaN": lambda: filters.correlate2d(STACK, np.full((3, 3), np.nan)),
    "weights Inf": lambda: filters.convolve2d(STACK, np.full((3, 3), np.inf)),
    "weights complex": lambda: filters.correlate2d(STACK, W * 1j),
    "weights text": lambda: filters.convolve2d(STACK, [["a"]]),
    "weights too large": lambda: filters.correlate2d(STACK, np.ones((11, 3))),
    "weights too wide": lambda: filters.convolve2d(STACK, np.ones((3, 13))),
    "origin triple": lambda: filters.correlate2d(STACK, W, origin=(0, 0, 0)),
    "origin fraction": lambda: filters.correlate2d(STACK, W, origin=0.5),
    "origin text": lambda: filters.convolve2d(STACK, W, origin="a"),
    "origin outside": lambda: filters.correlate2d(STACK, np.ones((2, 4)), origin=(1, 0)),
    "convolve origin outside": lambda: filters.convolve2d(STACK, np.ones((4, 4)), origin=-3),
    # kernel specs
    "spec gaussian without sigma": lambda: filters.parse_kernel_spec("gaussian"),
    "spec gaussian text": lambda: filters.parse_kernel_spec("gaussian:x"),
    "spec gaussian < 0": lambda: filters.parse_kernel_spec("gaussian:-1"),
    "spec gaussian NaN": lambda: filters.parse_kernel_spec("gaussian:nan"),
    "spec box 0": lambda: filters.parse_kernel_spec("box:0"),
    "spec box text": lambda: filters.parse_kernel_spec("box:x"),
    "spec sobel 2": lambda: filters.parse_kernel_spec("sobel:2"),
    "spec laplace argument": lambda: filters.parse_kernel_spec("laplace:1"),
    "spec dog out of order": lambda: filters.parse_kernel_spec("dog:2,1"),
    "spec dog one sigma": lambda: filters.parse_kernel_spec("dog:1"),
    "spec unknown": lambda: filters.parse_kernel_spec("median:3"),
    "spec not text": lambda: filters.parse_kernel_spec(3),
    "spec None": lambda: filters.parse_kernel_spec(None),
    # banks and mixes
    "bank unknown": lambda: bank_weights("median:3", 1),
    "bank dog one sigma": lambda: bank_weights("dog:1", 1),
    # (a 31x31 window would cut these gaussians within 3 sigmas: another filter, refused)
    "bank dog wide": lambda: bank_weights("dog:4,20", 1, (64, 64)),
    "bank gabor wide": lambda: bank_weights("gabor:6,4", 1, (64, 64)),
    "mix unknown": lambda: mix_weights("gray", 3),
    "mix luma of 2": lambda: mix_weights("luma", 2),
    "bank and mix": lambda: channel_filter("dog:1,2", "luma", 3),
    "neither bank nor mix": lambda: channel_filter(None, None, 3),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_bad_arguments_raise_input_error_a_value_error(name):
    with pytest.raises(ValueError) as info:
        BAD_CALLS[name]()
    assert isinstance(info.value, InputError)


@pytest.mark.parametrize("content, words", [
    (np.ones(3), "2-D array"),
    (np.full((3, 3), np.nan), "NaN or Inf"),
    (np.array([["a"]]), "real numbers"),
])
def test_bad_kernel_files_raise_input_error(tmp_path, content, words):
    path = tmp_path / "w.npy"
    np.save(path, content)
    with pytest.raises(ValueError, match=words) as info:
        filters.parse_kernel_spec(str(path))
    assert isinstance(info.value, InputError)
    for missing in (str(tmp_path / "missing.npy"),):
        with pytest.raises(InputError, match="does not exist"):
            filters.parse_kernel_spec(missing)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cpu_results_are_scipys_bit_for_bit(rng, dtype):
    stack = rng.random((3, 17, 19)).astype(dtype)
    w = rng.standard_normal((3, 4))
    calls = [
        (filters.gaussian(stack, 1.5), ndi.gaussian_filter(stack, (0, 1.5, 1.5))),
        (filters.box(stack, 4, mode="wrap"), ndi.uniform_filter(stack, (1, 4, 4), mode="wrap")),
        (filters.correlate2d(stack, w, "constant", 0.5, (0, 1)),
         ndi.correlate(stack, w[None].astype(dtype), mode="constant", cval=0.5,
                       origin=(0, 0, 1))),
        (filters.laplace(stack[0], "nearest"),
         ndi.correlate(stack[0], np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype),
                       mode="nearest")),
    ]
    for got, want in calls:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_array_likes_and_numpy_scalars_are_taken(rng):
    stack = rng.random((9, 11))
    np.testing.assert_array_equal(filters.gaussian(stack.tolist(), np.float64(1.5)),
                                  filters.gaussian(stack, 1.5))
    np.testing.assert_array_equal(filters.box(stack, np.int64(3), cval=np.float32(0.0)),
                                  filters.box(stack, 3))
    np.testing.assert_array_equal(filters.sobel(stack, np.int64(1)), filters.sobel(stack, 1))
    np.testing.assert_array_equal(filters.correlate2d(stack, [[1, 2], [3, 4]], origin=(0, -1)),
                                  ndi.correlate(stack, np.array([[1.0, 2], [3, 4]]),
                                                origin=(0, -1)))
