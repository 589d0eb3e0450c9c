"""The 3-D path's reductions along the last axis: each item's sum (or of squares) and each row's
first maximum, and the knock-out of the peaks' boxes.  On the GPU xcorr's kernels
(kernels/alignment/row_reduce.cu) against a float64 reference on odd sizes below a warp and
above a block, NaN, ties and -inf, into poisoned outputs; on the CPU (NumPy's own reductions)
only that the fallback answers the same."""

import numpy as np
import pytest

from xcorr_app.alignment.volume._rows import item_sums, knock_out, row_first_max, total64


def _rows(shape, seed):
    """float32 rows with ties (values on a coarse grid), -inf and NaN in some rows."""
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(size=shape) * 4).astype(np.float32)
    a[::7, ::3] = -np.inf
    a[1::11, rng.integers(0, shape[1], size=a[1::11].shape[0])] = np.nan
    a[2::13] = -np.inf  # whole rows
    return a


def _first_max_reference(a):
    a = np.asarray(a, np.float64)
    col = np.argmax(a, axis=1)  # (NumPy: the first NaN, else the first of the maxima)
    return col, a[np.arange(len(a)), col]


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (37, 31), (300, 33), (1029, 517)])
def test_row_first_max_cpu(shape):
    a = _rows(shape, seed=shape[0])
    col, value = row_first_max(a)
    ref_col, ref_value = _first_max_reference(a)
    np.testing.assert_array_equal(col, ref_col)
    np.testing.assert_array_equal(value, ref_value)


def test_item_sums_cpu():
    a = np.random.default_rng(1).normal(size=(3, 5, 7, 9)).astype(np.float32)
    np.testing.assert_allclose(item_sums(a), a.astype(np.float64).sum(axis=(1, 2, 3)),
                               rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (37, 31), (300, 33), (1029, 517),
                                   (9, 4099)])
def test_row_first_max_gpu(shape, monkeypatch):
    import cupy as cp

    a = _rows(shape, seed=shape[1])
    poison = {"int32": lambda n, t: cp.full(n, -7, t), "float32": lambda n, t: cp.full(n, 5e30, t)}
    empty = cp.empty
    monkeypatch.setattr(cp, "empty", lambda n, t: poison[np.dtype(t).name](n, t)
                        if np.dtype(t).name in poison else empty(n, t))
    col, value = row_first_max(cp.asarray(a))
    ref_col, ref_value = _first_max_reference(a)
    assert col.dtype == cp.int32 and value.dtype == cp.float32
    np.testing.assert_array_equal(col.get(), ref_col)
    np.testing.assert_array_equal(value.get(), ref_value)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, dtype", [((2, 3, 5, 7), np.float32), ((3, 1, 1, 31), np.float64),
                                          ((2, 17, 33, 513), np.float32), ((1, 1, 1, 1), np.float32)])
def test_item_sums_gpu(shape, dtype, monkeypatch):
    import cupy as cp

    a = (np.random.default_rng(2).normal(size=shape) * 1e3 + 7).astype(dtype)
    empty = cp.empty
    monkeypatch.setattr(cp, "empty", lambda n, t: cp.full(n, np.nan, t)
                        if np.dtype(t) == np.float64 else empty(n, t))
    got = item_sums(cp.asarray(a))
    assert got.dtype == cp.float64
    ref = a.astype(np.float64).sum(axis=tuple(range(1, a.ndim)))
    np.testing.assert_allclose(got.get(), ref, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("xp_name", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_item_sums_of_squares(xp_name, dtype):
    """The sums of the squares, each squared in the items' type (as ``square``), summed in
    float64, on odd sizes under a warp and over a block."""
    import importlib

    xp = importlib.import_module(xp_name)
    for shape in [(2, 3, 5, 7), (3, 4, 9, 301)]:
        a = np.random.default_rng(shape[-1]).normal(size=shape).astype(dtype) * 30
        want = np.square(a).astype(np.float64).sum(axis=(1, 2, 3))
        got = item_sums(xp.asarray(a), squares=True)
        np.testing.assert_allclose(got.get() if hasattr(got, "get") else got, want, rtol=1e-12)


@pytest.mark.parametrize("xp_name", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("squares", [False, True])
def test_total64_is_the_float64_sum(xp_name, squares):
    """``total64``: every item's (or square's) float64 sum, of a contiguous volume and of a
    strided plane (as the seam terms pass), sizes under a warp and over a block."""
    import importlib

    xp = importlib.import_module(xp_name)
    for shape in [(3, 5, 7), (4, 9, 301)]:
        a = np.random.default_rng(shape[-1]).normal(size=shape).astype(np.float32) * 30
        on = xp.asarray(a)
        for part, there in ((a, on), (a[..., -1], on[..., -1])):
            want = (np.square(part) if squares else part).astype(np.float64).sum()
            got = float(total64(there, squares))
            assert got == pytest.approx(float(want), rel=1e-12, abs=1e-9)


def _knocked_reference(win, at, e, whole):
    """bounded_peak's CuPy knock-out, in NumPy: fancy indexing of the wrapped (np.unique) or
    clipped ranges."""
    out = win.copy()
    for k, a in enumerate(at):
        near = [np.unique((i + np.arange(-e, e + 1)) % n) if w
                else np.arange(max(i - e, 0), min(i + e + 1, n))
                for i, n, w in zip(a, win.shape[1:], whole)]
        out[k][np.ix_(*near)] = -np.inf
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (3, 9, 40, 37)])
@pytest.mark.parametrize("whole", [(True, True, True), (False, True, False),
                                   (False, False, False)])
@pytest.mark.parametrize("e", [2, 3])  # (3: a box of 343 voxels, more than a block's threads)
def test_gpu_knock_out_is_the_fancy_indexing(shape, whole, e):
    """``knock_out`` against the fancy indexing it replaces: boxes across the edges (wrapped
    around the circle on whole axes, clipped on bounded ones), an axis shorter than the box
    (its voxels set once each), and the voxels outside the boxes untouched."""
    import cupy as cp

    rng = np.random.default_rng(shape[-1])
    win = rng.normal(size=shape).astype(np.float32)
    at = np.stack([rng.integers(0, n, shape[0]) for n in shape[1:]], axis=1)
    at[0] = (0, shape[2] - 1, 1)  # at the edges
    got = knock_out(cp.asarray(win), at, e, whole).get()
    np.testing.assert_array_equal(got, _knocked_reference(win, at, e, whole))
