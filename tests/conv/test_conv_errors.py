"""Every bad argument of conv2d and pointwise (and the checks the GPU launchers share) raises
InputError, which ``except ValueError`` catches, and the CPU results are the reference's."""

import numpy as np
import pytest

from xcorr_app import conv2d, pointwise
from xcorr_app.conv._im2win import window_offsets
from xcorr_app.conv._dynamic_blocking import plan
from xcorr_app.conv._validation import check_arrays, output_shape, pair
from xcorr_app.conv._reference import conv2d_reference
from xcorr_app.errors import InputError

X = np.ones((1, 3, 6, 6), np.float32)
W = np.ones((2, 3, 3, 3), np.float32)

BAD_CALLS = {
    "method unknown": lambda: conv2d(X, W, method="fft"),
    "method None": lambda: conv2d(X, W, method=None),
    "method list": lambda: conv2d(X, W, method=["auto"]),
    "winograd on 5x5": lambda: conv2d(X, np.ones((2, 3, 5, 5)), method="winograd"),
    "winograd at stride 2": lambda: conv2d(X, W, stride=2, method="winograd"),
    "stride 0": lambda: conv2d(X, W, stride=0),
    "stride < 0": lambda: conv2d(X, W, stride=-1),
    "stride fraction": lambda: conv2d(X, W, stride=1.5),
    "stride text": lambda: conv2d(X, W, stride="a"),
    "stride None": lambda: conv2d(X, W, stride=None),
    "stride triple": lambda: conv2d(X, W, stride=(1, 1, 1)),
    "padding < 0": lambda: conv2d(X, W, padding=-1),
    "padding fraction": lambda: conv2d(X, W, padding=(0, 0.5)),
    "padding text": lambda: conv2d(X, W, padding="1"),
    "x 3-D": lambda: conv2d(X[0], W),
    "w 3-D": lambda: conv2d(X, W[0]),
    "channels differ": lambda: conv2d(X, W[:, :2]),
    "x empty": lambda: conv2d(X[:0], W),
    "w empty": lambda: conv2d(X, W[:0]),
    "filter larger than the image": lambda: conv2d(X, np.ones((2, 3, 7, 3))),
    "x complex": lambda: conv2d(X.astype(np.complex64), W),
    "w complex": lambda: conv2d(X, W * 1j),
    "x text": lambda: conv2d(np.full((1, 1, 3, 3), "a"), np.ones((1, 1, 1, 1))),
    "x objects": lambda: conv2d(np.full((1, 1, 3, 3), None), np.ones((1, 1, 1, 1))),
    "pointwise w 3-D": lambda: pointwise(X, np.ones((2, 3, 2))),
    "pointwise w 1-D": lambda: pointwise(X, np.ones(3)),
    "pointwise channels differ": lambda: pointwise(X, np.ones((2, 2))),
    "pointwise x 3-D": lambda: pointwise(X[0], np.ones((2, 3))),
    "plan of nothing": lambda: plan(0, 3, 10),
    "filter too large for the GPU tables": lambda: window_offsets(1, 1, 2**15, 1, 1, 1),
    "windows past 2**31": lambda: window_offsets(2, 1, 1, 2**31, 1, 1),
    "pair of three": lambda: pair((1, 2, 3), "stride", 1),
    "check_arrays channels": lambda: check_arrays(X, W[:, :1]),
    "output_shape no output": lambda: output_shape((1, 1, 2, 2), (1, 1, 3, 3), (1, 1), (0, 0)),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_bad_arguments_raise_input_error_a_value_error(name):
    with pytest.raises(ValueError) as info:
        BAD_CALLS[name]()
    assert isinstance(info.value, InputError)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.uint8])
def test_cpu_results_are_the_reference(rng, dtype):
    x = (rng.random((2, 3, 11, 9)) * 200).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 2))
    out = np.float32 if dtype == np.uint8 else dtype
    for stride, padding in [(1, 0), ((2, 1), (1, 0)), (np.int64(2), np.int64(1)), ([1, 2], [2, 1])]:
        got = conv2d(x, w, stride, padding)
        sy, sx = (stride, stride) if np.isscalar(stride) else stride
        py, px = (padding, padding) if np.isscalar(padding) else padding
        want = conv2d_reference(x, w, (int(sy), int(sx)), (int(py), int(px))).astype(out)
        assert got.dtype == out
        np.testing.assert_array_equal(got, want)
    mix = rng.standard_normal((2, 3))
    np.testing.assert_array_equal(pointwise(x, mix), conv2d(x, mix[:, :, None, None]))
    np.testing.assert_array_equal(pointwise(x, mix[:, :, None, None]), pointwise(x, mix.tolist()))


def test_validation_helpers():
    assert pair(np.int64(3), "stride", 1) == (3, 3) and pair([0, 2], "padding", 0) == (0, 2)
    assert pair(2.0, "stride", 1) == (2, 2)  # an integral float is an integer
    assert output_shape((1, 2, 9, 11), (4, 2, 3, 2), (2, 1), (1, 0)) == (5, 10)
    check_arrays(X, W)
