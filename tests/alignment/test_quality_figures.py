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
@pytest.mark.parametrize("shape,area", [((3, 5, 7), None), ((2, 13, 29), (1, 12, 3, 28)),
                                        ((70, 300, 41), (4, 299, 0, 37)),
                                        ((3, 9, 2100), (2, 7, 5, 2090))])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("into", [False, True])
def test_gpu_shifted_moments_match_the_shift_and_the_definition(rng, shape, area, dtype, into):
    """``shifted_moments`` (the rigid report's chunk in one read): the shifted area equals
    :func:`~xcorr_app.alignment.warp.shift_frames`' NumPy definition less its first pixel (to
    float32 rounding: the taps weighed once a frame; with ``whole`` bit for bit, and the whole
    frames shifted the definition's bit for bit, every pixel written: the array poisoned
    first), NaN where it is, the border blended towards 0 where a tap lies outside; both
    moments equal the float64 definition's of the frames as they came and shifted.  Odd frames under a warp and over a block, frames wider
    than the kernel's tile of columns, fractional, whole, NaN and far shifts, every pixel type,
    the pool poisoned with NaN first."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import area_blocks, moments_of, shifted_moments
    from xcorr_app.alignment.warp import shift_frames

    n, h, w = shape
    y0, y1, x0, x1 = area or (0, h, 0, w)
    frames = (rng.random(shape) * 200).astype(dtype)
    if np.dtype(dtype).kind == "f":
        frames[-1, y1 - 1, x1 - 1] = np.nan
    shifts = rng.uniform(-3, 3, (n, 2))
    shifts[0] = (1.0, -2.0)  # (whole: one tap)
    if n > 2:
        shifts[1], shifts[2] = (np.nan, 0.25), (40.0, -0.5)  # (NaN counts as 0; beyond)
    ref = rng.standard_normal((y1 - y0, x1 - x0)).astype(np.float32)
    junk = cp.full(1 << 22, np.nan)  # the pool's next blocks hold NaN
    del junk
    blocks = (n, area_blocks(y1 - y0), 3)
    before, after = cp.full(blocks, np.nan), cp.full(blocks, np.nan)
    whole = cp.full(shape, np.nan, cp.float32) if into else None
    got = shifted_moments(cp.asarray(frames), cp.asarray(shifts), cp.asarray(ref),
                          (y0, y1, x0, x1), before, after, whole)
    everything = shift_frames(frames, np.nan_to_num(shifts))
    shifted = everything[:, y0:y1, x0:x1]
    want = shifted - shifted[:, :1, :1]  # (less the first pixel)
    g = cp.asnumpy(got)
    if into:
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(cp.asnumpy(whole), everything)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(want))
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-5 * np.nanmax(np.abs(want)))
    # (the frames as they came: the same sums; shifted: the definition's shift, whose taps
    # are weighed a pixel at a time, to float32 rounding without ``whole``)
    for sums, of, at, tol in ((before, frames, (y0, y1, x0, x1), 1e-12),
                              (after, shifted, (0, y1 - y0, 0, x1 - x0), 1e-12 if into else 1e-6)):
        have, defined = moments_of(sums), _moments_definition(of, ref[None], at)
        finite = np.isfinite(defined).all(axis=1)
        assert np.isnan(have[~finite]).any(axis=1).all()
        np.testing.assert_allclose(have[finite], defined[finite], rtol=tol,
                                   atol=tol * np.abs(defined[finite]).max())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1, 3), (5, 7, 4), (300, 64, 3)])
def test_gpu_block_sums_equal_the_hosts_in_order(rng, shape):
    """The moments' blocks added on the GPU give the host's sums (:func:`moments_of`) bit for
    bit: the same order, left to right, a NaN block's frame NaN."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import block_sums, moments_of

    partial = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 8, shape)
    partial[-1, -1, 0] = np.nan
    got = cp.asnumpy(block_sums(cp.asarray(partial)))
    np.testing.assert_array_equal(got, moments_of(partial))


def _regions(rng, h, w, count, area):
    """``count`` random regions inside ``area`` (frame coordinates), one of them the area's
    lower right corner, one a single pixel row."""
    y0, y1, x0, x1 = area
    out = []
    for _ in range(count - 3):
        a, b = sorted(rng.choice(np.arange(y0, y1 + 1), 2, replace=False))
        c, d = sorted(rng.choice(np.arange(x0, x1 + 1), 2, replace=False))
        out.append((a, b, c, d))
    out += [(y1 - 3, y1, x1 - 5, x1), (y0, y0 + 1, x0, x1)]
    return np.array([area, *out])


def test_tile_regions_host_moments_match_the_float64_definition(rng):
    """The CPU's sums of overlapping regions from their tiles (``np.add.reduceat``) equal the
    definition region by region, with the area's first pixel as every region's pivot."""
    from xcorr_app.alignment._quality_figures import TileRegions

    frames = (rng.random((3, 23, 31)) * 200).astype(np.float32)
    area = (2, 21, 3, 30)
    regions = _regions(rng, 23, 31, 6, area)
    tiles = TileRegions(area, regions)
    refs = rng.standard_normal((2, 19, 27)).astype(np.float32)
    got = tiles.host_moments(frames, refs)
    assert got.shape == (3, 6, 4)
    v = frames.astype(np.float64) - frames[:, 2:3, 3:4]
    for r, (a, b, c, d) in enumerate(regions):
        part = v[:, a:b, c:d]
        ref = refs[:, a - 2:b - 2, c - 3:d - 3].astype(np.float64)
        want = np.stack([part.sum(axis=(1, 2)), (part * part).sum(axis=(1, 2)),
                         *((part * q).sum(axis=(1, 2)) for q in ref)], axis=1)
        np.testing.assert_allclose(got[:, r], want, rtol=1e-12, atol=1e-9)


def test_tile_regions_refuse_a_region_outside_the_area():
    from xcorr_app.alignment._quality_figures import TileRegions

    with pytest.raises(ValueError, match="outside the area"):
        TileRegions((0, 10, 0, 10), [(0, 11, 0, 5)])
    with pytest.raises(ValueError, match="outside the area"):  # empty
        TileRegions((0, 10, 0, 10), [(3, 3, 0, 5)])


@pytest.mark.gpu
@pytest.mark.parametrize("shape,area,count", [((3, 9, 11), (0, 9, 0, 11), 4),
                                              ((2, 61, 47), (3, 60, 1, 46), 7),
                                              ((40, 300, 83), (0, 300, 5, 83), 5)])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
@pytest.mark.parametrize("j", [1, 2])
def test_gpu_tile_regions_match_the_cpus(rng, shape, area, count, dtype, j):
    """``tile_moments`` and ``tile_regions`` (overlapping regions of every frame from one read)
    against the CPU's sums: odd, non-square frames and regions under a warp and over a block,
    regions touching the area's last row and column, the frames whole and cut to the area, one
    and two references, a NaN pixel; the pool poisoned with NaN first."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import TileRegions

    n, h, w = shape
    y0, y1, x0, x1 = area
    frames = (rng.random(shape) * 200).astype(dtype)
    if np.dtype(dtype).kind == "f":
        frames[-1, y1 - 1, x1 - 1] = np.nan
    refs = rng.standard_normal((j, y1 - y0, x1 - x0)).astype(np.float32)
    tiles = TileRegions(area, _regions(rng, h, w, count, area), cp)
    cp.cuda.Device().synchronize()
    junk = cp.full(1 << 22, np.nan)
    del junk
    want = tiles.host_moments(frames, refs)
    cut = np.ascontiguousarray(frames[:, y0:y1, x0:x1])
    for got in (tiles.moments(cp.asarray(frames), cp.asarray(refs)),
                tiles.moments(cp.asarray(cut), cp.asarray(refs), (0, 0))):
        got = got.get()
        assert got.shape == (n, count, 2 + j)
        finite = np.isfinite(want).all(axis=2)
        assert np.isnan(got[~finite]).any(axis=-1).all()
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12,
                                   atol=1e-9 * np.abs(want[finite]).max())


def _pivoted_region_sums(images, pivot, refs, area, regions):
    """float64 definition: (n, R, 2 + J) sums over each region of d, d^2, d * ref_j, d each
    pixel (as float32) less ``pivot`` (n,); ``images`` cut to the area."""
    y0, _, x0, _ = area
    v = np.asarray(images, np.float32).astype(np.float64) - np.asarray(pivot)[:, None, None]
    out = []
    for a, b, c, d in regions:
        part = v[:, a - y0:b - y0, c - x0:d - x0]
        ref = np.asarray(refs, np.float64)[:, a - y0:b - y0, c - x0:d - x0]
        out.append(np.stack([part.sum(axis=(1, 2)), (part * part).sum(axis=(1, 2)),
                             *((part * q).sum(axis=(1, 2)) for q in ref)], axis=1))
    return np.stack(out, axis=1)


def _assert_report_sums(got, sets, area, regions):
    """``got`` (n, R, 10) equals the float64 definitions of the three ``sets`` (images cut to
    the area, their pivots, their references) within float32 rounding of the terms they add
    (a pixel's products are float32)."""
    want = np.concatenate([_pivoted_region_sums(f, p, r, area, regions) for f, p, r in sets],
                          axis=-1)
    terms = np.concatenate([_pivoted_region_sums(
        np.abs(np.asarray(f, np.float32).astype(np.float64) - np.asarray(p)[:, None, None]),
        np.zeros(len(f)), np.abs(r), area, regions) for f, p, r in sets], axis=-1)
    assert (np.abs(got - want) <= 1e-5 * terms).all()


@pytest.mark.gpu
@pytest.mark.parametrize("shape,area,grid", [((3, 19, 23), (0, 19, 0, 23), (2, 3)),
                                             ((4, 61, 147), (2, 60, 3, 146), (4, 4)),
                                             ((5, 140, 301), (0, 137, 9, 301), (3, 8)),
                                             ((2, 37, 811), (1, 36, 2, 809), (2, 8)),
                                             ((3, 100, 70), (40, 61, 7, 20), (2, 2))])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
def test_gpu_warp_moments_match_the_float64_definition(rng, shape, area, grid, dtype):
    """``warp_report`` (a piecewise chunk warped and its report's three sets of sums in one
    pass) against the definitions: the warped frames (whole, and the area alone) are the
    CPU's field warp (:func:`~xcorr_app.alignment.piecewise.warp_chunk`: bilinear, fill 0)
    to float32 rounding, the GPU's own warp bit for bit; the sums are float64 sums of the
    frames and of the warped frames against the template's area, of the prepared frames warped
    the same way against the two gradient planes; odd, non-square frames, areas narrower than
    a warp and over three blocks of columns wide, an area far inside the frames (rows above
    and below it warped only), grid widths read at run time (2, 3) and built (4, 8); the pool
    poisoned with NaN first."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import TileRegions
    from xcorr_app.alignment.piecewise import field_weights, warp_chunk

    n, h, w = shape
    y0, y1, x0, x1 = area
    gy, gx = grid
    regions = _regions(rng, h, w, 6, area)
    frames = (rng.random(shape) * 200).astype(dtype)
    prepared = (rng.standard_normal(shape) * 3 + 10).astype(np.float32)
    centres = np.stack(np.meshgrid(np.linspace(2, h - 3, gy), np.linspace(3, w - 4, gx),
                                   indexing="ij"), axis=-1)
    field = rng.uniform(-3, 3, (n, gy, gx, 2))
    refs = rng.standard_normal((3, y1 - y0, x1 - x0)).astype(np.float32)
    weights = field_weights(centres, (h, w), np)
    warped = warp_chunk(frames, field, weights)
    moved = warp_chunk(prepared, field, weights, box=area)
    cut = (slice(None), slice(y0, y1), slice(x0, x1))
    pivot = frames[:, y0, x0].astype(np.float32)
    sets = [(frames[cut], pivot, refs[:1]), (warped[cut], pivot, refs[:1]),
            (moved, prepared[:, y0, x0], refs[1:])]
    tiles = TileRegions(area, regions, cp)
    g = cp.asarray(frames)
    own = warp_chunk(g, cp.asarray(field), field_weights(centres, (h, w), cp)).get()
    cp.cuda.Device().synchronize()
    junk = cp.full(1 << 22, np.nan)
    del junk
    for box in ((0, h, 0, w), area):
        out = cp.full((n, box[1] - box[0], box[3] - box[2]), np.nan, cp.float32)
        got = tiles.warp_moments(g, cp.asarray(prepared), cp.asarray(field),
                                 field_weights(centres, (h, w), cp), cp.asarray(refs[:1]),
                                 cp.asarray(refs[1:]), out, box).get()
        assert got.shape == (n, 6, 10)
        _assert_report_sums(got, sets, area, regions)
        window = (slice(None), slice(box[0], box[1]), slice(box[2], box[3]))
        np.testing.assert_array_equal(out.get(), own[window])
        np.testing.assert_allclose(out.get(), warped[window], rtol=1e-6, atol=1e-4)


@pytest.mark.gpu
def test_gpu_warp_moments_refuse_what_they_cannot_read():
    import cupy as cp

    from xcorr_app.alignment._quality_figures import TileRegions
    from xcorr_app.alignment.piecewise import field_weights

    tiles = TileRegions((1, 8, 0, 9), [(1, 8, 0, 9), (2, 6, 1, 5)], cp)
    weights = field_weights(np.array([[[3.0, 4.0]]]), (8, 9), cp)
    frames, field = cp.zeros((2, 8, 9)), cp.zeros((2, 1, 1, 2))
    refs = cp.zeros((1, 7, 9), cp.float32), cp.zeros((2, 7, 9), cp.float32)
    out = cp.zeros((2, 8, 9), cp.float32)
    with pytest.raises(ValueError, match="warp_report"):  # the area outside the box
        tiles.warp_moments(frames, frames, field, weights, *refs, out[:, 2:], (2, 8, 0, 9))
    with pytest.raises(ValueError, match="warp_report"):  # prepared frames of another size
        tiles.warp_moments(frames, frames[:, :, 1:], field, weights, *refs, out, (0, 8, 0, 9))
    with pytest.raises(ValueError, match="warp_report"):  # out not the box's
        tiles.warp_moments(frames, frames, field, weights, *refs, out[:, 1:], (0, 8, 0, 9))
    with pytest.raises(ValueError, match="warp_report"):  # float64 out
        tiles.warp_moments(frames, frames, field, weights, *refs, out.astype(cp.float64),
                           (0, 8, 0, 9))
    with pytest.raises(ValueError, match="warp_report"):  # references of another area
        tiles.warp_moments(frames, frames, field, weights, refs[0], refs[1][:, 1:], out,
                           (0, 8, 0, 9))


@pytest.mark.gpu
def test_gpu_warp_moments_past_a_launchs_frames(rng):
    """More frames than a launch's grid holds (65535): the frames past it are warped and
    summed where they lie (the launch's frame offset), as the definition says."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import TileRegions
    from xcorr_app.alignment.piecewise import field_weights, warp_chunk

    n, h, w = 65537, 6, 7
    area, regions = (0, 6, 0, 7), np.array([(0, 6, 0, 7), (1, 4, 2, 6)])
    frames = rng.integers(0, 200, (n, h, w)).astype(np.uint16)
    prepared = rng.random((n, h, w), np.float32)
    centres = np.array([[[2.5, 3.0]]])
    field = rng.uniform(-1, 1, (n, 1, 1, 2))
    refs = rng.standard_normal((3, h, w)).astype(np.float32)
    out = cp.empty((n, h, w), cp.float32)
    got = TileRegions(area, regions, cp).warp_moments(
        cp.asarray(frames), cp.asarray(prepared), cp.asarray(field),
        field_weights(centres, (h, w), cp), cp.asarray(refs[:1]), cp.asarray(refs[1:]), out,
        (0, h, 0, w)).get()
    tail = slice(n - 5, n)  # (the second launch's frames, and the first's last)
    weights = field_weights(centres, (h, w), np)
    warped = warp_chunk(frames[tail], field[tail], weights)
    moved = warp_chunk(prepared[tail], field[tail], weights)
    pivot = frames[tail, 0, 0].astype(np.float32)
    _assert_report_sums(got[tail], [(frames[tail], pivot, refs[:1]), (warped, pivot, refs[:1]),
                                    (moved, prepared[tail, 0, 0], refs[1:])], area, regions)
    np.testing.assert_allclose(out[tail].get(), warped, rtol=1e-6, atol=1e-4)


@pytest.mark.gpu
def test_gpu_tile_moments_refuse_what_they_cannot_read():
    import cupy as cp

    from xcorr_app.alignment._quality_figures import TileRegions

    tiles = TileRegions((0, 8, 0, 9), [(0, 8, 0, 9), (2, 6, 1, 5)], cp)
    with pytest.raises(ValueError, match="tile_moments"):  # references of another size
        tiles.moments(cp.zeros((2, 8, 9)), cp.zeros((1, 8, 8), cp.float32))
    with pytest.raises(ValueError, match="tile_moments"):  # the area outside the frames
        tiles.moments(cp.zeros((2, 8, 9)), cp.zeros((1, 8, 9), cp.float32), (1, 0))


def test_template_regions_figures_from_sums_are_the_direct_ones(rng):
    """The correlations and residuals :class:`TemplateRegions` makes of the template's and the
    frames' sums over the regions equal the float64 definitions made region by region (the
    frame centred, the template's area gradient cut and scaled by the region's norm), a flat
    region's NaN included; an aligned region's residual is 0, a shifted one's near its shift."""
    from scipy import ndimage as ndi

    from xcorr_app.alignment._quality_figures import (TemplateRegions, TileRegions,
                                                      template_moments, template_refs)

    base = (ndi.gaussian_filter(rng.random((40, 48)), 2) * 1000 + 3000).astype(np.float32)
    prepared = base - base.mean()
    area = (2, 38, 3, 45)
    regions = np.array([area, (2, 20, 3, 25), (15, 38, 20, 45)])
    tiles = TileRegions(area, regions)
    t_ref, g_ref, q = template_refs(base, prepared, area, np)
    fig = TemplateRegions(tiles, template_moments(tiles, t_ref, g_ref, q))
    frames = np.stack([base, 2 * base + 3, ndi.shift(base, (0, 0.3), order=3),
                       np.full_like(base, 7.5)]).astype(np.float32)
    zncc = fig.zncc(tiles.host_moments(frames, t_ref))
    residual = fig.residual(tiles.host_moments(frames - base.mean(), g_ref))
    g = np.stack(np.gradient(prepared[2:38, 3:45].astype(np.float64)))
    for r, (a, b, c, d) in enumerate(regions):
        t = base[a:b, c:d].astype(np.float64)
        t = t - t.mean()
        for k in range(3):
            f = frames[k, a:b, c:d].astype(np.float64)
            f = f - f.mean()
            want = (f * t).sum() / np.sqrt((f * f).sum() * (t * t).sum())
            assert zncc[k, r] == pytest.approx(want, abs=1e-6)
        gp = g[:, a - 2:b - 2, c - 3:d - 3] / np.sqrt((t * t).sum())
        f = frames[2, a:b, c:d].astype(np.float64)
        f = (f - f.mean()) / np.sqrt(((f - f.mean()) ** 2).sum())
        h = np.einsum("iyx,jyx->ij", gp, gp)
        q = t / np.sqrt((t * t).sum())
        want = -np.linalg.solve(h, ((f - q)[None] * gp).sum(axis=(1, 2)))
        np.testing.assert_allclose(residual[2, r], want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(residual[:2], 0, atol=1e-5)
    # (the frame's content moved 0.3 px along x: the residual says so, as the rigid one does)
    assert np.all(np.abs(residual[2, :, 1] - 0.3) < 0.05), residual[2]
    assert np.all(np.abs(residual[2, :, 0]) < 0.05), residual[2]
    assert np.isnan(zncc[3]).all() and np.isnan(residual[3]).all()


@pytest.mark.gpu
def test_gpu_template_regions_are_the_cpus(rng):
    """The template's references and sums made on the GPU (shipped kernels, no pivot) equal
    the CPU's."""
    import cupy as cp

    from xcorr_app.alignment._quality_figures import (TileRegions, template_moments,
                                                      template_refs)

    image = (rng.random((37, 53)) * 900 + 100).astype(np.float32)
    prepared = rng.standard_normal((37, 53)).astype(np.float32)
    area = (1, 36, 2, 51)
    regions = _regions(rng, 37, 53, 6, area)
    cpu = TileRegions(area, regions)
    gpu = TileRegions(area, regions, cp)
    want = template_refs(image, prepared, area, np)
    got = template_refs(cp.asarray(image), cp.asarray(prepared), area, cp)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g.get(), w)
    for w, g in zip(template_moments(cpu, *want), template_moments(gpu, *got)):
        np.testing.assert_allclose(g.get(), w, rtol=1e-12, atol=1e-9)


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
    # an area of uint16 frames read in place, each pixel as float32
    raw = (rng.random(shape) * 60000).astype(np.uint16)
    y0, y1, x0, x1 = 1, shape[1], 0, shape[2] - 1
    got = frame_sums(cp.zeros((y1 - y0, x1 - x0)), cp.asarray(raw), area=(y0, y1, x0, x1)).get()
    np.testing.assert_allclose(got, raw[:, y0:y1, x0:x1].astype(np.float64).sum(axis=0),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="frame_sums"):  # sums of another shape than the area
        frame_sums(cp.zeros(shape[1:]), cp.zeros(shape), area=(y0, y1, x0, x1))


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