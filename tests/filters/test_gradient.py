"""``filters.gradient``: numpy.gradient's numbers on the CPU and the GPU."""

import numpy as np
import pytest

from xcorr_app import filters
from xcorr_app.errors import XcorrError


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradient_is_numpys(rng, dtype):
    """The same numbers as ``numpy.gradient`` on every axis choice, sizes down to 2."""
    for shape, axes in [((2, 3), [None, 0, -1, (1,), (0, 1)]), ((5, 2, 7), [None, 2, (1, 2)]),
                        ((1, 9, 4), [1, (1, 2), (2, 1)]), ((6,), [None, 0])]:
        a = (rng.standard_normal(shape) * 100).astype(dtype)
        for axis in axes:
            got, want = filters.gradient(a, axis=axis), np.gradient(a, axis=axis)
            assert type(got) is type(want)
            got, want = (got, want) if isinstance(want, (list, tuple)) else ([got], [want])
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype
                np.testing.assert_array_equal(g, w)


def test_gradient_refuses_a_single_element_axis():
    with pytest.raises(XcorrError, match="axis 0 has 1 element\\(s\\); it needs 2"):
        filters.gradient(np.ones((1, 4)))


@pytest.mark.gpu
def test_gradient_on_the_gpu_is_numpys(rng):
    import cupy as cp

    for shape, dtype in [((3, 17, 40), np.float32), ((2, 5), np.float64), ((7,), np.float32),
                         ((4, 2, 3), np.float64)]:
        a = (rng.standard_normal(shape) * 100).astype(dtype)
        c = cp.asarray(a)
        views = [(a, c)] + ([(a[:, ::2], c[:, ::2])] if a.ndim > 1 and a.shape[1] > 3 else [])
        for v, cv in views:  # (strided too)
            for axis in [None, -1, 0] + ([(1, 2), (2, 1)] if v.ndim == 3 else []):
                got = filters.gradient(cv, axis=axis)
                want = np.gradient(v, axis=axis)
                got, want = (got, want) if isinstance(want, (list, tuple)) else ([got], [want])
                for g, w in zip(got, want):
                    assert isinstance(g, cp.ndarray) and g.dtype == w.dtype
                    np.testing.assert_array_equal(g.get(), w)
