"""The patch pass's fused refinement kernel (``kernels/alignment/patch_field.cu``
``refine_surfaces``, launched by ``_refine_gpu.refine_surfaces_gpu``) against the CPU's
steps in float64: the windows sampled through the field (``windows_through``), less their mean
and tapered (``tapered``), the n_to_mn correlation within +-1 px, ``normalize.zncc`` and the
first maximum; then ``refine_shifts`` of both devices.

Sizes: odd and non-square frames, windows narrower than a warp (8-31 px) and wider than a
block (more than 256 px), grids of one patch and of 6x7; every output poisoned first.
Tolerances: windows within 1e-5 of the data range (float32 samples of the same sums), surfaces
within 2e-5 (float32 outputs of float64 sums), the peak the first maximum of the GPU's own
surface, shifts within 1e-3 px of the CPU."""

import numpy as np
import pytest

from xcorr_app.alignment.piecewise import _patches, _refine_gpu
from xcorr_app.alignment.piecewise import common_area, field_weights
from xcorr_app.alignment.piecewise._refine_gpu import refine_surfaces_gpu
from xcorr_app.alignment.piecewise._patches import (PatchGrid, refine_left, refine_shifts,
                                                    refine_taper, tapered, template_patches,
                                                    windows_through)
from xcorr_app.alignment.rigid import prepare
from xcorr_app.bench._align_data import nonrigid_stack
from xcorr_app.correlate import cross_correlate
from xcorr_app.registration import ZnccLeft, zncc, zncc_left

pytestmark = pytest.mark.gpu

CASES = [  # frame shape, grid, max_deviation, the taper's flat part (None: no taper)
    ((157, 173), (3, 4), 4, 16),
    ((157, 173), (3, 4), 4, None),
    ((157, 173), (6, 7), 2, 12),     # windows of 24-26 px: narrower than a warp
    ((61, 301), (1, 1), 4, 64),      # one window 289 px wide: wider than a block
    ((97, 83), (1, 1), 3, None),
    ((97, 401), (2, 20), 3, 12),     # 20 patches wide: any width (the widths compiled: 1-8)
    ((129, 211), (2, 5), 3, 12),
    ((140, 150), (3, 2), 3, None),
    ((131, 147), (2, 3), 2, 16),
    ((157, 301), (3, 8), 2, 12),
    ((129, 211), (2, 6), 3, None),
]


def case_data(shape, grid_shape, dev, n=13, seed=5):
    stack, params = nonrigid_stack(np.random.default_rng([seed, *shape]), n, shape, 5.0, 3.0,
                                   400.0, None, iterations=8)
    frames = prepare(stack, np).frames
    rigid = np.array([p[0] for p in params])
    grid = PatchGrid.make(grid_shape, None, dev, shape, common_area(rigid, shape, dev + 2))
    rng = np.random.default_rng(seed)
    field = rigid[:, None, None, :] + rng.uniform(-1.5, 1.5, (n, *grid.grid, 2))
    return frames, grid, field


def poisoned(p, n):
    """``(z, iy, ix)`` for ``surfaces=``, filled with values no launch writes."""
    import cupy as cp

    return (cp.full((p * n, 3, 3), cp.nan, cp.float32), cp.full(p * n, -7, cp.int64),
            cp.full(p * n, -7, cp.int64))


def cpu_surfaces(tnear, right):
    """The CPU's definition in float64: ZNCC surfaces (P * N, 3, 3) within +-1 px."""
    corr = cross_correlate(tnear, right, "n_to_mn", max_shift=1, device="cpu")
    part = zncc_left(tnear, right.shape, 1)
    per = ZnccLeft(part.n, part.mean[:, None], part.var[:, None], part.bad[:, None])
    z = zncc(corr, tnear, right, 1, left_part=per)
    return z.reshape(-1, 3, 3)


@pytest.mark.parametrize("shape, grid_shape, dev, flat", CASES)
def test_fused_refinement_equals_the_cpu_steps(shape, grid_shape, dev, flat):
    frames, grid, field = case_data(shape, grid_shape, dev)
    check_against_cpu(frames, grid, field, shape, flat)


def test_windows_reaching_past_the_frame_equal_the_cpu_steps():
    """A field that moves windows past the frame's edges (taps clamped to the edge, the
    kernel's other sampling path) and windows straddling them: the CPU's numbers."""
    shape = (97, 83)
    frames, grid, field = case_data(shape, (2, 3), 3)
    field = field.copy()
    field[1::3] += (-30.0, 25.0)  # whole windows outside
    field[2::3] += (3.7, -4.2)    # windows across the edge
    check_against_cpu(frames, grid, field, shape, 12)


def check_against_cpu(frames, grid, field, shape, flat):
    import cupy as cp

    taper = None if flat is None else refine_taper(grid.size, flat=flat)
    if flat is not None:
        assert taper is not None and taper.min() < 1.0  # the taper is exercised
    tp = template_patches(frames[0], grid)
    tnear = tapered(tp, taper)
    w_cpu, w_gpu = field_weights(grid.centres, shape, np), field_weights(grid.centres, shape, cp)
    win_cpu = windows_through(frames, grid, field, w_cpu)  # float32 (P, N, ph, pw)
    right = tapered(win_cpu, taper)
    z_cpu = cpu_surfaces(tnear.astype(np.float64), right.astype(np.float64))

    g_tnear = cp.asarray(tnear)
    sums, g_taper = refine_left(g_tnear, taper)
    out = cp.full(win_cpu.shape, cp.nan, cp.float32)  # poisoned
    z, iy, ix = refine_surfaces_gpu(cp.asarray(frames), grid.starts_y, grid.starts_x, grid.size,
                                    cp.asarray(field), w_gpu, g_taper, g_tnear, sums, out=out,
                                    surfaces=poisoned(grid.n_patches, len(frames)))
    np.testing.assert_allclose(out.get(), win_cpu, rtol=0, atol=1e-5 * float(np.ptp(frames)))
    z = z.get()
    assert z.shape == z_cpu.shape and np.isfinite(z).all()
    np.testing.assert_allclose(z, z_cpu, rtol=0, atol=2e-5)
    first = z.reshape(len(z), 9).argmax(axis=1)  # the first maximum of the GPU's own surface
    np.testing.assert_array_equal(iy.get(), first // 3)
    np.testing.assert_array_equal(ix.get(), first % 3)

    r_cpu = refine_shifts(tnear, frames, grid, field, w_cpu, taper=taper)
    r_gpu = refine_shifts(g_tnear, cp.asarray(frames), grid, cp.asarray(field), w_gpu,
                          device="gpu", left=(sums, g_taper), taper=taper).get()
    assert r_gpu.shape == (len(frames), grid.n_patches, 2)
    np.testing.assert_allclose(r_gpu, r_cpu, rtol=0, atol=1e-3)


def test_launches_split_by_frames_and_a_wide_grid_takes_the_steps(monkeypatch):
    """More frames than one launch takes (the grid's limit, lowered to 5 here), or a strip of
    one window row at a time (the shared memory for the rows' coefficients lowered): the same
    results; a grid wider than the kernel takes (limit lowered to 1): the unfused steps, the
    same shifts."""
    import cupy as cp

    shape = (157, 173)
    frames, grid, field = case_data(shape, (3, 4), 4)
    taper = refine_taper(grid.size, flat=16)
    tnear = cp.asarray(tapered(template_patches(frames[0], grid), taper))
    w_gpu = field_weights(grid.centres, shape, cp)
    g_frames, g_field = cp.asarray(frames), cp.asarray(field)
    left = refine_left(tnear, taper)
    args = (g_frames, grid.starts_y, grid.starts_x, grid.size, g_field, w_gpu, left[1], tnear,
            left[0])
    p, n = grid.n_patches, len(frames)

    def launch():  # every output poisoned
        out = cp.full((p, n, *grid.size), cp.nan, cp.float32)
        return [a.get() for a in (*refine_surfaces_gpu(*args, out=out, surfaces=poisoned(p, n)),
                                  out)]

    whole = launch()
    want = refine_shifts(tnear, g_frames, grid, g_field, w_gpu, device="gpu", left=left,
                         taper=taper).get()
    monkeypatch.setattr(_refine_gpu, "MAX_GRID", 5)
    split = launch()
    assert np.isfinite(whole[0]).all() and (whole[1] >= 0).all()
    for a, b in zip(split, whole):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(_refine_gpu, "REFINE_STRIP_FLOATS", 1)  # a strip a window row
    for a, b in zip(launch(), whole):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(_patches, "REFINE_MAX_GX", 1)
    steps = refine_shifts(tnear, g_frames, grid, g_field, w_gpu, device="gpu", left=left,
                          taper=taper).get()
    np.testing.assert_allclose(steps, want, rtol=0, atol=1e-4)


def test_a_frame_with_nan_pixels_reads_minus_one_everywhere():
    """As normalize.zncc: a window with NaN pixels has no valid shift (-1 at all nine), its
    peak the first of them; the other frames are untouched."""
    import cupy as cp

    shape = (97, 83)
    frames, grid, field = case_data(shape, (2, 2), 3)
    frames = frames.copy()
    frames[4, 40:44, 30:50] = np.nan
    taper = None
    tnear = cp.asarray(template_patches(frames[0], grid))
    w_gpu = field_weights(grid.centres, shape, cp)
    sums, _ = refine_left(tnear, taper)
    z, iy, ix = refine_surfaces_gpu(cp.asarray(frames), grid.starts_y, grid.starts_x, grid.size,
                                    cp.asarray(field), w_gpu, None, tnear, sums)
    z = z.get().reshape(grid.n_patches, len(frames), 9)
    win = windows_through(frames, grid, field, field_weights(grid.centres, shape, np))
    hit = np.isnan(win).any(axis=(2, 3))  # (P, N): the windows that read a NaN pixel
    assert hit[:, 4].any() and not hit[:, np.arange(len(frames)) != 4].any()
    assert (z[hit] == -1.0).all()
    assert (iy.get().reshape(hit.shape)[hit] == 0).all()
    assert (ix.get().reshape(hit.shape)[hit] == 0).all()
    want = cpu_surfaces(template_patches(frames[0], grid).astype(np.float64),
                        win.astype(np.float64)).reshape(z.shape)
    assert np.isfinite(z[~hit]).all()
    np.testing.assert_allclose(z[~hit], want[~hit], rtol=0, atol=2e-5)


def test_flat_template_patches_and_flat_windows_read_minus_one_as_on_the_cpu():
    """A constant template patch (the left side's bad flag) and a constant frame (every window
    flat: the right side's variance rule): -1 at every shift, as normalize.zncc gives."""
    import cupy as cp

    shape = (97, 83)
    frames, grid, field = case_data(shape, (2, 2), 3)
    frames = frames.copy()
    frames[5] = 3.0  # every window of frame 5 constant
    tp = template_patches(frames[0], grid)
    tp[1] = 7.0  # template patch 1 constant
    w_cpu = field_weights(grid.centres, shape, np)
    want = cpu_surfaces(tp.astype(np.float64),
                        windows_through(frames, grid, field, w_cpu).astype(np.float64))
    g_tp = cp.asarray(tp)
    sums, _ = refine_left(g_tp, None)
    z, _, _ = refine_surfaces_gpu(cp.asarray(frames), grid.starts_y, grid.starts_x, grid.size,
                                  cp.asarray(field), field_weights(grid.centres, shape, cp),
                                  None, g_tp, sums, surfaces=poisoned(grid.n_patches,
                                                                      len(frames)))
    z = z.get().reshape(grid.n_patches, len(frames), 9)
    want = want.reshape(z.shape)
    assert (want[1] == -1.0).all() and (want[:, 5] == -1.0).all()
    assert (z[1] == -1.0).all() and (z[:, 5] == -1.0).all()
    np.testing.assert_allclose(z, want, rtol=0, atol=2e-5)


def test_bad_arguments_are_input_errors():
    import cupy as cp

    from xcorr_app.errors import InputError

    shape = (97, 83)
    frames, grid, field = case_data(shape, (2, 2), 3, n=3)
    tnear = cp.asarray(template_patches(frames[0], grid))
    w_gpu = field_weights(grid.centres, shape, cp)
    sums, _ = refine_left(tnear, None)
    args = [cp.asarray(frames), grid.starts_y, grid.starts_x, grid.size, cp.asarray(field),
            w_gpu, None, tnear, sums]
    bad_taper = list(args)
    bad_taper[6] = cp.ones((3, 3), cp.float32)
    bad_tpl = list(args)
    bad_tpl[7] = tnear[:3]
    host_taper = list(args)  # a NumPy taper: the kernel reads device memory
    host_taper[6] = np.ones(grid.size, np.float32)
    bad_sums = list(args)
    bad_sums[8] = (sums[0].astype(cp.float32), sums[1], sums[2])
    for a in (bad_taper, bad_tpl, host_taper, bad_sums):
        with pytest.raises(InputError):
            refine_surfaces_gpu(*a)


@pytest.mark.parametrize("shape, grid_shape, dev, flat", [CASES[0], CASES[4], CASES[5]])
def test_converged_windows_are_left_and_the_rest_unchanged(shape, grid_shape, dev, flat):
    """With the pass before's corrections (``last``): a window under REFINE_CONVERGED px on
    both axes gets the flat surface about its centre and is not sampled (its window in ``out``
    stays poisoned), its correction exactly 0 on both devices; every other window's surface,
    peak and window are those of the launch without ``last``, bit for bit; the shifts GPU =
    CPU.  Some corrections sit just under and over the limit, one is NaN."""
    import cupy as cp

    frames, grid, field = case_data(shape, grid_shape, dev)
    taper = None if flat is None else refine_taper(grid.size, flat=flat)
    tnear = tapered(template_patches(frames[0], grid), taper)
    g_tnear = cp.asarray(tnear)
    sums, g_taper = refine_left(g_tnear, taper)
    p, n = grid.n_patches, len(frames)
    lim = _patches.REFINE_CONVERGED
    rng = np.random.default_rng(9)
    last = rng.choice([0.0, 0.3 * lim, 0.999 * lim, lim, 1.5 * lim, 0.2], (n, p, 2))
    last[0, 0, 0] = np.nan
    last[1, 0] = (-0.5 * lim, 0.5 * lim)  # (converged, either sign)
    done = (np.abs(last) < lim).all(axis=-1)  # (N, P)
    assert done.any() and not done.all()
    w_gpu = field_weights(grid.centres, shape, cp)
    args = (cp.asarray(frames), grid.starts_y, grid.starts_x, grid.size, cp.asarray(field),
            w_gpu, g_taper, g_tnear, sums)
    outs = [cp.full((p, n, *grid.size), cp.nan, cp.float32) for _ in range(2)]
    whole = [a.get() for a in refine_surfaces_gpu(*args, out=outs[0], surfaces=poisoned(p, n))]
    # (the kernel reads the corrections as refine_shifts lays them out: (P, N, 2) transposed)
    g_last = cp.ascontiguousarray(cp.asarray(last).transpose(1, 0, 2)).transpose(1, 0, 2)
    left = [a.get() for a in refine_surfaces_gpu(*args, out=outs[1], surfaces=poisoned(p, n),
                                                 last=g_last, converged=lim)]
    skip = done.T.reshape(-1)  # (surfaces: p * n + n)
    flat_surface = np.full((3, 3), 0.5, np.float32)
    flat_surface[1, 1] = 1.0
    assert (left[0][skip] == flat_surface).all()
    assert (left[1][skip] == 1).all() and (left[2][skip] == 1).all()
    for a, b in zip(left, whole):
        np.testing.assert_array_equal(a[~skip], b[~skip])
    sampled = outs[1].get().reshape(p * n, -1)
    assert np.isnan(sampled[skip]).all()
    np.testing.assert_array_equal(sampled[~skip], outs[0].get().reshape(p * n, -1)[~skip])

    w_cpu = field_weights(grid.centres, shape, np)
    r_cpu = refine_shifts(tnear, frames, grid, field, w_cpu, taper=taper, last=last)
    r_gpu = refine_shifts(g_tnear, cp.asarray(frames), grid, cp.asarray(field), w_gpu,
                          device="gpu", left=(sums, g_taper), taper=taper, last=g_last).get()
    assert (r_cpu[done] == 0).all() and (r_gpu[done] == 0).all()
    np.testing.assert_allclose(r_gpu, r_cpu, rtol=0, atol=1e-3)
    plain = refine_shifts(tnear, frames, grid, field, w_cpu, taper=taper)
    np.testing.assert_array_equal(r_cpu[~done], plain[~done])
