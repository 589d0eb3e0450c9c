"""``cross_correlate``'s ``max_shift`` beyond what the frames can tell apart
(correlate/_shifts.py ``check_max_shift``): refused before any allocation (``10**9`` on 64x64
asked for 15 GiB), the frame's own size still taken."""

import time

import numpy as np
import pytest

from xcorr_app import cross_correlate
from xcorr_app.errors import InputError


@pytest.mark.parametrize("max_shift", [10**9, (3, 10**9), (65, 0)])
def test_a_bound_beyond_the_frames_is_refused_at_once(rng, max_shift):
    a = rng.random((64, 64)).astype(np.float32)
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=r"max_shift .* at most \(64, 64\)"):
        cross_correlate(a, a, max_shift=max_shift, device="cpu")
    assert time.perf_counter() - t0 < 1.0


def test_a_bound_of_the_frame_size_still_correlates(rng):
    a = rng.random((16, 20)).astype(np.float32)
    c = cross_correlate(a, a, max_shift=(16, 20), device="cpu")
    assert c.shape == (33, 41)
    assert np.unravel_index(int(c.argmax()), c.shape) == (16, 20)
    assert not c[0].any() and not c[:, 0].any()  # (no overlap: 0)


def test_the_larger_of_two_shapes_is_the_limit(rng):
    left, right = rng.random((8, 30)), rng.random((8, 12))
    assert cross_correlate(left, right, max_shift=(8, 30), device="cpu").shape == (17, 61)
    with pytest.raises(InputError, match=r"at most \(8, 30\)"):
        cross_correlate(left, right, max_shift=(9, 30), device="cpu")


@pytest.mark.parametrize("max_shift", [True, (True, 2), np.bool_(False)])
def test_a_bool_is_not_a_bound(rng, max_shift):
    a = rng.random((8, 8))
    with pytest.raises(InputError, match="max_shift must be an int or a pair of ints"):
        cross_correlate(a, a, max_shift=max_shift, device="cpu")
