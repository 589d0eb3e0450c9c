"""The 3-D linear refinement's sums: the overlap sums at the 27 lags around a peak
(``cube_sums``), the Gauss-Newton fit's sums of products (``_fit_sums``) and a volume's sums
over boxes (``VolumeSums``).  On the CPU from the circular correlation and by NumPy; on the
GPU xcorr's kernels (kernels/alignment/linear3d.cu) against float64 references on odd sizes
below a warp and above a block, into poisoned buffers."""

import numpy as np
import pytest

from xcorr_app.alignment.volume import _linear

SHAPES = [(3, 5, 7), (9, 14, 17), (17, 40, 300)]


def _volumes(shape, seed):
    rng = np.random.default_rng(seed)
    return (_linear.centred(rng.random(shape)), _linear.centred(rng.random(shape)))


def _defined(ref, vol, lag):
    """``sum R(x + lag) M(x)`` over the overlap, float64 sums of float32 products."""
    (rlo, rhi), (mlo, mhi) = _linear._boxes(ref.shape, lag)
    if any(h <= l for l, h in zip(rlo, rhi)):
        return 0.0
    a = ref[tuple(slice(l, h) for l, h in zip(rlo, rhi))]
    b = vol[tuple(slice(l, h) for l, h in zip(mlo, mhi))]
    return float((a * b).astype(np.float64).sum())


def _centres(shape):
    """Centres inside, at the faces (some of the 27 lags leave no overlap) and across."""
    z, y, x = shape
    return [(0, 0, 0), (1, -2, 3), (z - 1, 0, -(x - 1)), (-(z - 2), y - 2, 1), (z, 0, 0)]


def _lags(centre):
    return [tuple(int(v) for v in np.asarray(centre) + o) for o in _linear.OFFSETS]


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_cube_sums_cpu_are_their_definitions(shape):
    ref, vol = _volumes(shape, sum(shape))
    product = (np.fft.rfftn(ref) * np.conj(np.fft.rfftn(vol)))[None]
    for centre in _centres(shape)[:4]:
        lags = _lags(centre)[::2]  # (some of them, as the climb asks)
        got = _linear.cube_sums(ref, vol, np.asarray(centre), product, lags)
        assert list(got) == lags
        for lag in lags:
            assert got[lag] == pytest.approx(_defined(ref, vol, lag), rel=1e-5, abs=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES + [(5, 256, 256)])  # (the last: a second stride)
def test_gpu_cube_sums_are_their_definitions(shape, poisoned_empty):
    import cupy as cp

    ref, vol = _volumes(shape, sum(shape) + 1)
    for centre in _centres(shape):
        lags = _lags(centre)
        got = _linear.cube_sums(cp.asarray(ref), cp.asarray(vol), np.asarray(centre), None,
                                lags)
        for lag in lags:
            want = _defined(ref, vol, lag)
            assert got[lag] == pytest.approx(want, rel=1e-9, abs=1e-9), (centre, lag)
    again = _linear.cube_sums(cp.asarray(ref), cp.asarray(vol), np.zeros(3, np.int64), None,
                              _lags((0, 0, 0)))
    assert again == _linear.cube_sums(cp.asarray(ref), cp.asarray(vol), np.zeros(3, np.int64),
                                      None, _lags((0, 0, 0)))  # (the same numbers every run)


def _fit_case(shape, seed):
    rng = np.random.default_rng(seed)
    ref = rng.normal(size=shape).astype(np.float32)
    grads = [rng.normal(size=shape).astype(np.float32) for _ in range(3)]
    moved = rng.normal(size=(shape[0] - 1, shape[1] - 2, shape[2] - 1)).astype(np.float32)
    box = (slice(1, shape[0] - 1), slice(2, shape[1] - 1), slice(1, shape[2] - 2))
    inner = (slice(0, shape[0] - 2), slice(1, shape[1] - 2), slice(0, shape[2] - 3))
    cols = [ref[box], *(g[box] for g in grads), moved[inner], np.ones(ref[box].shape)]
    m = np.stack([c.astype(np.float64).ravel() for c in cols])
    return ref, grads, moved, box, inner, m @ m.T


@pytest.mark.parametrize("shape", SHAPES[:2])
def test_fit_sums_cpu(shape):
    ref, grads, moved, box, inner, want = _fit_case(shape, 3)
    np.testing.assert_allclose(_linear._fit_sums(ref, grads, box, moved, inner), want,
                               rtol=1e-12, atol=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_fit_sums(shape, poisoned_empty):
    import cupy as cp

    ref, grads, moved, box, inner, want = _fit_case(shape, 4)
    got = _linear._fit_sums(cp.asarray(ref), [cp.asarray(g) for g in grads], box,
                            cp.asarray(moved), inner)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)


def test_volume_sums_refuse_a_box_deeper_than_their_ends():
    vol = _volumes((6, 9, 11), 5)[1]
    sums = _linear.VolumeSums(vol, (1, 1, 1))
    assert sums.box((1, 0, 0), (6, 9, 10)) == pytest.approx(
        float(vol[1:, :, :10].astype(np.float64).sum()), abs=1e-9)
    with pytest.raises(ValueError, match="deeper"):
        sums.box((2, 0, 0), (6, 9, 11))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["plain", "squares", "neighbours"])
@pytest.mark.parametrize("shape, ends", [
    ((7, 33, 300), (2, 3, 4)),
    ((3, 5, 2), (1, 3, 1)),  # (x's two columns each other's neighbour; y's ends meet: kept whole)
    ((2, 600, 500), (1, 5, 7)),  # (past one grid of the marginal kernel: 300,000 outputs)
])
def test_gpu_volume_sums_equal_the_hosts(kind, shape, ends, poisoned_empty):
    """VolumeSums of CuPy volumes (linear3d.cu's marginal_sums and corner_values, the items
    made as read) against the host's, every kind, sizes under a warp and past a grid."""
    import cupy as cp

    vol = _volumes(shape, 6)[1]
    want = _linear.VolumeSums(vol, ends, kind)
    got = _linear.VolumeSums(cp.asarray(vol), ends, kind)
    for a, b in [(want.zy, got.zy), (want.zx, got.zx), (want.yx, got.yx),
                 (want.corner, got.corner)]:
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9)
    for lag in [(ends[0], -ends[1], ends[2]), (-ends[0], ends[1], -1), (0, 0, 0)]:  # (cuts
        # as deep as the kept ends)
        lo, hi = _linear._boxes(vol.shape, lag)[1]
        assert got.box(lo, hi) == pytest.approx(want.box(lo, hi), rel=1e-9, abs=1e-9)
