"""The quality report's figures (:mod:`xcorr_app.alignment._quality_figures`): the GPU's
moments kernel (``kernels/alignment/quality_moments.cu``) and its image kernels
(``kernels/alignment/quality_images.cu``) against float64 definitions or the CPU's figures, and
the GPU's correlations from moments against the CPU's centred frames on flat and faint frames."""

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

    from xcorr_app.alignment._quality_figures import area_moments, moments_of

    n, h, w = shape
    y0, y1, x0, x1 = area or (0, h, 0, w)
    frames = (rng.random(shape) * 200).astype(dtype)
    if np.dtype(dtype).kind == "f":
        frames[-1, y1 - 1, x1 - 1] = np.nan
    refs = rng.standard_normal((j, y1 - y0, x1 - x0)).astype(np.float32)
    junk = cp.full(1 << 22, np.nan)  # the pool's next blocks hold NaN
    del junk
    got = moments_of(area_moments(cp.asarray(frames), cp.asarray(refs), area))
    want = _moments_definition(frames, refs, (y0, y1, x0, x1))
    finite = np.isfinite(want).all(axis=1)
    assert (np.isnan(got[~finite]).any(axis=1)).all()  # the NaN pixel's frame: NaN
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12,
                               atol=1e-9 * np.abs(want[finite]).max())


@pytest.mark.gpu
@pytest.mark.parametrize("shape,size,count", [((3, 9, 11), (5, 7), 3), ((2, 61, 47), (33, 21), 5),
                                              ((40, 300, 83), (270, 31), 4)])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
@pytest.mark.parametrize("j", [1, 2])
def test_gpu_region_moments_match_the_float64_definition(rng, shape, size, count, dtype, j):
    """``region_moments`` (P overlapping regions of every frame in one launch) against the
    definition region by region: odd, non-square frames and regions under a warp and over a
    block, more rows than the blocks take at once, regions touching the frame's last row and
    column, one and two references each, a NaN pixel; the pool poisoned with NaN first."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import moments_of, region_moments

    n, h, w = shape
    rows, cols = size
    starts = np.stack([rng.integers(0, h - rows + 1, count), rng.integers(0, w - cols + 1, count)],
                      axis=1)
    starts[-1] = (h - rows, w - cols)
    frames = (rng.random(shape) * 200).astype(dtype)
    if np.dtype(dtype).kind == "f":
        frames[-1, h - 1, w - 1] = np.nan
    refs = rng.standard_normal((count, j, rows, cols)).astype(np.float32)
    junk = cp.full(1 << 22, np.nan)
    del junk
    got = moments_of(region_moments(cp.asarray(frames), cp.asarray(starts, cp.int32), size,
                                    cp.asarray(refs)))
    assert got.shape == (n, count, 2 + j)
    for p, (y, x) in enumerate(starts):
        want = _moments_definition(frames, refs[p], (y, y + rows, x, x + cols))
        finite = np.isfinite(want).all(axis=1)
        assert np.isnan(got[~finite, p]).any(axis=1).all()
        np.testing.assert_allclose(got[finite, p], want[finite], rtol=1e-12,
                                   atol=1e-9 * np.abs(want[finite]).max())


@pytest.mark.gpu
def test_gpu_region_moments_refuse_what_they_cannot_read():
    import cupy as cp

    from xcorr_app.alignment._quality_figures import region_moments

    starts = cp.zeros((2, 2), cp.int32)
    with pytest.raises(ValueError, match="region_moments"):  # references of another size
        region_moments(cp.zeros((2, 8, 9)), starts, (4, 4), cp.zeros((2, 1, 4, 5), cp.float32))
    with pytest.raises(ValueError, match="region_moments"):  # starts of another count
        region_moments(cp.zeros((2, 8, 9)), starts, (4, 4), cp.zeros((3, 1, 4, 4), cp.float32))
    with pytest.raises(ValueError, match="region_moments"):  # starts not int32
        region_moments(cp.zeros((2, 8, 9)), starts.astype(cp.int64), (4, 4),
                       cp.zeros((2, 1, 4, 4), cp.float32))


def test_region_figures_from_moments_are_the_products(rng):
    """What a GPU pass makes of the regions' sums on the host (zncc_from, residual_from, here
    of the float64 definition's sums) equals the CPU's batched products of the same regions, a
    flat region's NaN included."""
    from xcorr_app.alignment._quality_figures import RegionFigures

    templates = rng.random((3, 13, 17)).astype(np.float32)
    fig = RegionFigures(templates, templates, np)
    regions = np.stack([np.roll(templates, 1, axis=2) + 0.1 * rng.random((3, 13, 17)),
                        2 * templates + 3, np.full((3, 13, 17), 7.5)]).astype(np.float32)
    whole = (0, 13, 0, 17)
    sums = np.stack([_moments_definition(regions[:, p], fig.t[p].reshape(1, 13, 17), whole)
                     for p in range(3)], axis=1)
    zncc = fig.zncc_from(sums)
    want = fig.zncc(regions.reshape(3, 3, -1))
    assert np.isnan(zncc[2]).all() and np.isnan(want[2]).all()
    np.testing.assert_allclose(zncc[:2], want[:2], atol=1e-6)
    sums = np.stack([_moments_definition(regions[:, p], fig.g[p].reshape(2, 13, 17), whole)
                     for p in range(3)], axis=1)
    residual = fig.residual_from(sums)
    np.testing.assert_allclose(residual[:2], fig.residual(regions.reshape(3, 3, -1))[:2],
                               atol=1e-5)
    assert np.isnan(residual[2]).all()


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


#: odd, non-square sizes: under a warp, over a block, more rows than the blocks take at once
ODD_SHAPES = [(5, 7), (37, 45), (2100, 259)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ODD_SHAPES)
@pytest.mark.parametrize("kind", ["noise", "flat", "nan"])
def test_gpu_template_figures_are_the_cpus(rng, shape, kind):
    """``template_figures`` (the template's centred copy, its prepared copy's gradient and their
    sums) against the CPU's RegionFigures, whose float64 sums are the definition: the arrays
    and every figure, a flat template's NaN/zero figures and a NaN pixel's NaN sums included;
    the pool's memory poisoned with NaN first."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import AreaFigures

    template = (1000 + 50 * rng.standard_normal(shape)).astype(np.float32)
    prepared = rng.standard_normal(shape).astype(np.float32)
    if kind == "flat":
        template[:], prepared[:] = 321.5, 0.0
    elif kind == "nan":
        template[shape[0] // 2, -1] = np.nan
    junk = cp.full(1 << 22, np.nan)
    del junk
    cpu = AreaFigures(template, prepared, np)
    gpu = AreaFigures(cp.asarray(template), cp.asarray(prepared), cp)
    np.testing.assert_allclose(gpu.t.get(), cpu.t, rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(gpu.g.get(), cpu.g, rtol=1e-5, atol=1e-9)
    host = gpu._constants()
    scale = max(float(np.nanmax(np.abs(template - np.nanmean(template)))), 1.0)
    np.testing.assert_allclose(host["t_total"], cpu.t_total[0], atol=1e-6 * scale * cpu.t.size)
    np.testing.assert_allclose(host["t_norm2"], cpu.t_norm2[0], rtol=1e-9)
    np.testing.assert_allclose(host["g_total"], cpu.g_total[0], atol=1e-9)
    np.testing.assert_allclose(host["tg"], cpu.tg, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(host["inverse"], cpu.inverse, rtol=1e-6)
    if kind == "flat":
        assert np.isnan(host["inverse"]).all() and host["t_norm2"] == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ODD_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_sharpness_is_the_cpus(rng, shape, dtype):
    """``image_figures`` (a mean image's variance and gradient energy) against the CPU's, the
    image divided by a count as a run's sums are; a constant image and one with a NaN or an
    infinite pixel give NaN on both."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import sharpness

    image = (37 * (500 + rng.standard_normal(shape))).astype(dtype)
    for divisor in (1.0, 37.0):
        want = sharpness(image, divisor)
        assert np.isfinite(want)
        assert sharpness(cp.asarray(image), divisor) == pytest.approx(want, rel=1e-6)
    for bad in (np.full(shape, 4.25, dtype), np.where(np.arange(image.size).reshape(shape) == 3,
                                                      np.nan, image), np.where(
            np.arange(image.size).reshape(shape) == 5, np.inf, image)):
        assert np.isnan(sharpness(bad)) and np.isnan(sharpness(cp.asarray(bad)))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 5, 7), (9, 37, 45), (3, 300, 259)])
def test_gpu_frame_sums_add_the_frames_in_float64(rng, shape):
    """``frame_sums`` against NumPy's float64 sums, all frames and those of a mask, added onto
    what the sums held; a frame outside the mask with NaN does not reach them."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import frame_sums

    frames = rng.standard_normal(shape).astype(np.float32) * 1e3
    start = rng.standard_normal(shape[1:])
    ok = np.arange(shape[0]) % 2 == 0
    frames[~ok] = np.nan
    got = frame_sums(cp.asarray(start), cp.asarray(frames), cp.asarray(ok)).get()
    np.testing.assert_allclose(got, start + frames[ok].astype(np.float64).sum(axis=0),
                               rtol=1e-12, atol=1e-9)
    clean = np.nan_to_num(frames)
    got = frame_sums(cp.asarray(start), cp.asarray(clean)).get()
    np.testing.assert_allclose(got, start + clean.astype(np.float64).sum(axis=0), rtol=1e-12,
                               atol=1e-9)
    with pytest.raises(ValueError, match="frame_sums"):
        frame_sums(cp.zeros(shape[1:]), cp.zeros(shape))  # float64 frames


def test_sharpness_is_its_definition(rng):
    """The CPU's ``sharpness(image, divisor)`` against its definition written out: the image
    divided, as float32, its gradient's energy (float32 differences, halved inside, one-sided
    at the edges; squares summed in float64) over its size and float64 variance; an image
    under 3 pixels a side has none."""
    from xcorr_app.alignment._quality_figures import sharpness

    image = rng.random((21, 17)) * 90
    v = (image / 9.0).astype(np.float32)
    gy = np.concatenate([v[1:2] - v[:1], (v[2:] - v[:-2]) * np.float32(0.5), v[-1:] - v[-2:-1]])
    gx = np.concatenate([v[:, 1:2] - v[:, :1], (v[:, 2:] - v[:, :-2]) * np.float32(0.5),
                         v[:, -1:] - v[:, -2:-1]], axis=1)
    energy = np.square(gy).astype(np.float64).sum() + np.square(gx).astype(np.float64).sum()
    mean = v.astype(np.float64).mean()
    var = np.square(v.astype(np.float64) - mean).mean()
    assert sharpness(image, 9.0) == pytest.approx(energy / v.size / var, rel=1e-12)
    assert np.isnan(sharpness(np.ones((2, 9))))