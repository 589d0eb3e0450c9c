"""``correlation_plan``'s shapes and bound refused with one line (issue 48's option list):
a negative size or a fraction was taken by ``int()`` (``(-8, 8)`` planned a ``(-1, 15)``
output, ``(8, 8.5)`` one of 8 rows), and a bound beyond the frames planned a surface of
billions of samples."""

import numpy as np
import pytest

from xcorr_app.correlate import correlation_plan
from xcorr_app.errors import InputError


@pytest.mark.parametrize("left,right,match", [
    ((-8, 8), (8, 8), r"left_shape must not have a negative size, got \(-8, 8\)"),
    ((8, 8), (8, -1), r"right_shape must not have a negative size"),
    ((8, 8.5), (8, 8), r"left_shape must be a tuple of ints, got \(8, 8.5\)"),
    ((8, 8), (8.0, 8), r"right_shape must be a tuple of ints"),
    ((True, 8), (8, 8), r"left_shape must be a tuple of ints"),
    (("8", 8), (8, 8), r"left_shape must be a tuple of ints"),
])
def test_a_shape_that_is_not_sizes_is_refused(left, right, match):
    with pytest.raises(InputError, match=match):
        correlation_plan(left, right, device="cpu")


def test_a_bound_beyond_the_frames_is_refused():
    with pytest.raises(InputError, match=r"max_shift .* at most \(8, 8\)"):
        correlation_plan((8, 8), (8, 8), max_shift=10**9, device="cpu")


def test_numpy_ints_and_lists_still_plan():
    plan = correlation_plan([np.int64(8), 8], (np.int32(8), 8), max_shift=(8, 8), device="cpu")
    assert plan.out_shape == (17, 17)
