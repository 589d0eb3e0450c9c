"""The quality report's figures (:mod:`xcorr_app.alignment._quality_figures`): the GPU's
moments kernel (``kernels/alignment/quality_moments.cu``) against a float64 definition, and the
GPU's correlations from moments against the CPU's centred frames on flat and faint frames."""

import numpy as np
import pytest

def _moments_definition(frames, refs, area):
    """float64 definition: per frame, over the area, sums of d, d^2, d * ref_j, d each pixel
    (as float32, as the kernel and the CPU's lines convert it) less the area's first."""
    y0, y1, x0, x1 = area
    v = np.asarray(frames, np.float32)[:, y0:y1, x0:x1].astype(np.float64)
    v = v - v[:, :1, :1]
    cols = [v.sum(axis=(1, 2)), (v * v).sum(axis=(1, 2))]
    cols += [(v * np.asarray(r, np.float64)[None]).sum(axis=(1, 2)) for r in refs]
    return np.stack(cols, axis=1)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,area", [((3, 5, 7), None), ((2, 13, 29), (1, 12, 3, 28)),
                                        ((70, 300, 41), (4, 299, 0, 37))])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("j", [1, 2])
def test_gpu_area_moments_match_the_float64_definition(rng, shape, area, dtype, j):
    """``kernels/alignment/quality_moments.cu`` on odd, non-square frames under a warp and over
    a block, areas inside the frame, more rows than the blocks take at once, every pixel type,
    one and two references, a NaN pixel; the pool's memory poisoned with NaN first."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import area_moments

    n, h, w = shape
    y0, y1, x0, x1 = area or (0, h, 0, w)
    frames = (rng.random(shape) * 200).astype(dtype)
    if np.dtype(dtype).kind == "f":
        frames[-1, y1 - 1, x1 - 1] = np.nan
    refs = rng.standard_normal((j, y1 - y0, x1 - x0)).astype(np.float32)
    junk = cp.full(1 << 22, np.nan)  # the pool's next blocks hold NaN
    del junk
    got = area_moments(cp.asarray(frames), cp.asarray(refs), area).get()
    want = _moments_definition(frames, refs, (y0, y1, x0, x1))
    finite = np.isfinite(want).all(axis=1)
    assert (np.isnan(got[~finite]).any(axis=1)).all()  # the NaN pixel's frame: NaN
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12,
                               atol=1e-9 * np.abs(want[finite]).max())


@pytest.mark.gpu
def test_gpu_flat_and_faint_frames_are_judged_as_on_the_cpu(rng):
    """About the pivot a constant frame's spread is exactly 0 (NaN correlation, as the CPU's
    centred frame gives) and a faint one's (mean 1e5, deviation 1) is kept, not lost to the
    cancellation of large sums."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import AreaFigures

    template = rng.random((40, 50)).astype(np.float32)
    frames = np.stack([np.full((40, 50), 12345.678, np.float32),
                       (1e5 + rng.standard_normal((40, 50))).astype(np.float32)])
    cpu = AreaFigures(template, template, np).zncc(frames)
    gpu = AreaFigures(cp.asarray(template), cp.asarray(template), cp).zncc(cp.asarray(frames)).get()
    assert np.isnan(cpu[0]) and np.isnan(gpu[0])
    np.testing.assert_allclose(gpu[1], cpu[1], atol=1e-6)


@pytest.mark.gpu
def test_gpu_area_moments_refuse_what_they_cannot_read():
    import cupy as cp

    from xcorr_app.alignment._quality_figures import area_moments

    with pytest.raises(ValueError, match="area_moments"):
        area_moments(cp.zeros((2, 8, 9)), cp.zeros((1, 8, 8), cp.float32))
    with pytest.raises(ValueError, match="area_moments"):
        area_moments(cp.zeros((2, 8, 9)), cp.zeros((3, 8, 9), cp.float32))
    with pytest.raises(ValueError, match="area_moments"):
        area_moments(cp.zeros((2, 8, 9)), cp.zeros((1, 4, 4), cp.float32), (6, 10, 0, 4))


def test_the_figures_from_moments_are_the_cpus(rng):
    """What a GPU pass makes on the host at its end (zncc_of, residual_of of each frame's
    moments, here the float64 definition's) equals the CPU's figures of the same frames, a
    flat frame's NaN included."""
    from xcorr_app.alignment._quality_figures import AreaFigures

    template = rng.random((31, 43)).astype(np.float32)
    frames = np.stack([np.roll(template, 1, axis=1) + 0.1 * rng.random((31, 43)),
                       2 * template + 3, np.full((31, 43), 7.5)]).astype(np.float32)
    fig = AreaFigures(template, template, np)
    whole = (0, 31, 0, 43)
    zncc = fig.zncc_of(_moments_definition(frames, fig.t.reshape(1, 31, 43), whole))
    want = fig.zncc(frames)
    assert np.isnan(zncc[2]) and np.isnan(want[2])
    np.testing.assert_allclose(zncc[:2], want[:2], atol=1e-6)
    residual = fig.residual_of(_moments_definition(frames, fig.g[0].reshape(2, 31, 43), whole))
    np.testing.assert_allclose(residual[:2], fig.residual(frames)[:2], atol=1e-5)
    assert np.isnan(residual[2]).all() and np.isnan(fig.residual(frames)[2]).all()
