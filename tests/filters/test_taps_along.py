"""``taps_along``, a correlation along one axis: on CuPy arrays xcorr's kernel
(kernels/filters/axis_taps.cu) against the slices' NumPy numbers, bit for bit, on sizes below a
warp and past one grid of blocks, every axis (negative too), into poisoned buffers; the cases
the kernel does not take keep the slices' way."""

import numpy as np
import pytest

from xcorr_app.filters import taps_along
from xcorr_app.filters._axis_taps import kernel_takes

TAPS = [0.1, -0.25, 0.7, 0.33]


def test_what_the_kernel_takes():
    a = np.zeros((3, 9, 10), np.float32)
    assert kernel_takes(a, TAPS, -1, 0, 7) and kernel_takes(a, TAPS, 1, 1, 5)
    assert not kernel_takes(a, TAPS, 2, 0, 8)  # (past the axis's end)
    assert not kernel_takes(a, TAPS, 3, 0, 1) and not kernel_takes(a, [], 0, 0, 1)
    assert not kernel_takes(a, TAPS, 0, -1, 1) and not kernel_takes(a.astype(np.int32), TAPS,
                                                                      0, 0, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7,), (5, 33), (3, 9, 300), (2, 3, 5, 7)])
def test_gpu_taps_along_equals_numpys_numbers(shape, dtype, poisoned_empty):
    import cupy as cp

    a = np.random.default_rng(len(shape)).normal(size=shape).astype(dtype)
    taps = TAPS
    for axis in [*range(len(shape)), -1]:
        n = shape[axis]
        for start, length in [(0, n - 3), (1, max(0, n - 4))]:
            if length <= 0:
                continue
            want = taps_along(a, taps, axis, start, length)
            got = taps_along(cp.asarray(a), taps, axis, start, length)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got.get(), want)  # (bit for bit: no fused multiply-add)


@pytest.mark.gpu
def test_gpu_taps_along_past_one_grid(poisoned_empty):
    import cupy as cp

    a = np.random.default_rng(9).normal(size=(2, 4100, 2100)).astype(np.float32)  # (> 65535 x 256)
    got = taps_along(cp.asarray(a), TAPS, 1, 0, a.shape[1] - 3)
    np.testing.assert_array_equal(got.get(), taps_along(a, TAPS, 1, 0, a.shape[1] - 3))
