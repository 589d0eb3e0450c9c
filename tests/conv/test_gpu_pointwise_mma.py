"""conv/_pointwise_mma.py: the tensor cores' 3xTF32 pointwise kernel against the float64
reference, outputs poisoned: every tile and split on sizes smaller than a warp's tile and
larger than a block's, in every dimension, positive-biased inputs (images: the sums a
truncating adder would drift on), batches in several launches, repeated runs equal."""

import numpy as np
import pytest

from conftest import poisoned, rel_error
from xcorr_app.conv._pointwise_mma import MMA_TILES, SPLITS
from xcorr_app.conv._reference import conv2d_reference

pytestmark = pytest.mark.gpu

#: (N, C, H, W, F): under a warp's tile, over a block's in each of F, C (K) and N*H*W
SHAPES = [(1, 1, 3, 3, 1), (2, 13, 7, 7, 17), (3, 33, 9, 11, 70), (2, 150, 5, 13, 129),
          (4, 576, 7, 7, 160)]


def _data(rng, n, c, h, w, f):
    x = (rng.standard_normal((n, c, h, w)) + 2.0).astype(np.float32)
    wt = (rng.standard_normal((f, c, 1, 1)) * 0.1 + 0.05).astype(np.float32)
    return x, wt


@pytest.mark.parametrize("shape", SHAPES)
def test_every_tile_and_split_is_the_reference(rng, shape):
    import cupy as cp

    from xcorr_app.conv._pointwise_mma import pointwise_mma_conv2d

    x, wt = _data(rng, *shape)
    ref = conv2d_reference(x, wt)
    xg, wg = cp.asarray(x), cp.asarray(wt)
    for tiles in MMA_TILES:
        for splits in SPLITS:
            out = poisoned(cp, ref.shape)
            got = pointwise_mma_conv2d(xg, wg, out=out, tiles=tiles, splits=splits)
            assert got is out
            assert rel_error(cp.asnumpy(got), ref) <= 1e-5, (tiles, splits)


def test_tuned_choice_batches_in_several_launches_and_repeats(rng, monkeypatch, tmp_path):
    """The tuned call (measured once, remembered), a batch cut into launches of few columns
    (the last one shorter), and the same bits on every run (split-K adds in order)."""
    import cupy as cp

    from xcorr_app._cuda import tuning
    from xcorr_app.conv import _pointwise_mma as pm

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    tuning.forget_memory()
    x, wt = _data(rng, 5, 200, 6, 7, 40)
    ref = conv2d_reference(x, wt)
    xg, wg = cp.asarray(x), cp.asarray(wt)
    first = pm.pointwise_mma_conv2d(xg, wg)
    assert rel_error(cp.asnumpy(first), ref) <= 1e-5
    for _ in range(3):
        cp.testing.assert_array_equal(pm.pointwise_mma_conv2d(xg, wg), first)
    split = pm.pointwise_mma_conv2d(xg, wg, tiles=MMA_TILES[0], splits=4)
    for _ in range(3):  # the splits add in order
        cp.testing.assert_array_equal(
            pm.pointwise_mma_conv2d(xg, wg, tiles=MMA_TILES[0], splits=4), split)
    monkeypatch.setattr(pm, "MAX_COLUMNS", 2 * 42)  # two images a launch: 2 + 2 + 1
    pm._runner.cache_clear()
    try:
        out = poisoned(cp, ref.shape)
        pm.pointwise_mma_conv2d(xg, wg, out=out, tiles=MMA_TILES[2], splits=4)
        assert rel_error(cp.asnumpy(out), ref) <= 1e-5
    finally:
        pm._runner.cache_clear()


def test_conv2d_method_mma_and_pointwise_api(rng):
    import cupy as cp

    from xcorr_app import conv2d, pointwise

    x, wt = _data(rng, 2, 40, 9, 10, 24)
    ref = conv2d_reference(x, wt)
    got = conv2d(cp.asarray(x), cp.asarray(wt), method="mma")
    assert isinstance(got, cp.ndarray) and got.dtype == cp.float32
    assert rel_error(cp.asnumpy(got), ref) <= 1e-5
    mixed = pointwise(cp.asarray(x), cp.asarray(wt[:, :, 0, 0]))
    assert rel_error(cp.asnumpy(mixed), ref) <= 1e-5
