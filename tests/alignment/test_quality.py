"""The quality report (:mod:`xcorr_app.alignment._quality`): planted bad frames are flagged,
good ones are not; it travels into shifts.json and quality.png; CPU and GPU agree."""

import json

import numpy as np
import pytest
from scipy import ndimage as ndi

from cli_helpers import xcorr
from synthetic import drift_stack, write_stack
from xcorr_app import align


@pytest.fixture(scope="module")
def planted():
    """A drifting stack with a blurred frame (3), a frame moved beyond the search (5) and a
    blank frame (7)."""
    stack, truth = drift_stack(np.random.default_rng(49), n=10, shape=(80, 96), max_shift=3,
                               peak_counts=400)
    frames = stack.astype(np.float32)
    frames[3] = ndi.gaussian_filter(frames[3], 4)
    frames[5] = np.roll(frames[5], (30, -25), axis=(0, 1))
    frames[7] = 0.0
    return frames, truth


def test_planted_bad_frames_are_flagged_and_good_ones_are_not(planted):
    frames, _ = planted
    q = align(frames, max_shift=6, device="cpu").quality
    assert q.flagged[[3, 5, 7]].all(), q.summary()
    good = np.setdiff1d(np.arange(len(frames)), [3, 5, 7])
    assert not q.flagged[good].any(), q.summary()
    assert np.isnan(q.after[7]) and q.poor[7]  # blank: nothing to correlate
    assert (q.after[good] >= q.before[good] - 0.01).all()
    assert np.abs(q.residual[good]).max() < 0.2


def test_alignment_raises_the_correlation_and_the_sharpness():
    stack, _ = drift_stack(np.random.default_rng(5), n=8, shape=(72, 80), max_shift=5,
                           peak_counts=300)
    res = align(stack, device="cpu")
    q = res.quality
    moved = np.abs(res.shifts).max(axis=1) > 1.5
    assert (q.after[moved] > q.before[moved]).all()
    assert q.sharpness_after > q.sharpness_before
    assert not q.flagged.any()


def test_quality_can_be_skipped_and_is_in_shifts_json(planted, tmp_path):
    frames, _ = planted
    assert align(frames, max_shift=6, device="cpu", quality=False).quality is None
    path = write_stack(tmp_path / "s.tif", frames.astype(np.uint16))
    res = xcorr("align", path, "--max-shift", "6", "--device", "cpu", "--no-aligned", "-q",
                "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "o" / "shifts.json").read_text())
    assert {3, 5, 7} <= set(doc["summary"]["quality"]["poor_frames"]
                            + doc["summary"]["quality"]["worse_frames"])
    assert doc["frames"][7]["quality_flag"] == "poor"
    assert "correlation_after" in doc["frames"][0]
    assert (tmp_path / "o" / "quality.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = xcorr("align", path, "--max-shift", "6", "--device", "cpu", "--no-aligned", "-q",
                "--no-quality", "--out", tmp_path / "n")
    assert res.returncode == 0 and not (tmp_path / "n" / "quality.png").exists()


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_the_area_leaves_out_rows_a_subpixel_shift_brings_in_from_past_the_edge(device):
    """A frame shifted by 2.4 px: its aligned row 2 samples the frame at -0.4, which bilinear
    blends with the fill; measured (the area from rounded shifts, as it was) it took that
    frame's correlation from 0.995 to 0.78 and flagged it poor."""
    rng = np.random.default_rng(0)
    base = ndi.gaussian_filter(rng.random((128, 128)), 3) * 1000
    moves = [(0.3 * k, 0.2 * k) for k in range(10)]
    moves[5] = (-2.4, 0.0)
    frames = np.array([ndi.shift(base, m, order=3, mode="reflect")[16:112, 16:112]
                       for m in moves], np.float32)
    frames += rng.normal(0, 2, frames.shape).astype(np.float32)
    res = align(frames, device=device)
    q = res.quality
    assert abs(res.shifts[5, 0] - 2.4) < 0.05
    assert q.area[0] == 3  # (the first row every shifted frame covers whole: ceil(2.4))
    assert not q.flagged.any(), np.flatnonzero(q.flagged)
    assert q.after[1:].min() > 0.99, q.after.round(4)


@pytest.mark.gpu
@pytest.mark.parametrize("prefilter", ["auto", "none", "gaussian:1", "dog:1,4", "gaussian:4"])
def test_cpu_and_gpu_reports_agree(planted, prefilter):
    """The GPU's rigid report (its aligned areas prefiltered alone: no prefilter, the fused
    separable filter, a difference of gaussians, a gaussian too wide for the fused filter)
    gives the CPU's figures, which prepare every frame whole."""
    frames, _ = planted
    cpu = align(frames, max_shift=6, device="cpu", prefilter=prefilter).quality
    gpu = align(frames, max_shift=6, device="gpu", prefilter=prefilter).quality
    for name in ("before", "after"):
        np.testing.assert_allclose(getattr(gpu, name), getattr(cpu, name), atol=1e-4,
                                   err_msg=name)
    # residuals in pixels, to the GPU = CPU standard: on the flat peaks of gaussian:4 the GPU's
    # own runs differ by about 1e-4 px (its correlation plan is chosen by timing)
    np.testing.assert_allclose(gpu.residual, cpu.residual, atol=1e-3)
    assert (gpu.flagged == cpu.flagged).all()


# ------------------------------------------------------------------------ per patch region

@pytest.fixture(scope="module")
def planted_patches():
    """A deforming stack (3x3 patches) with one patch region blurred (frame 4, patch 0,0),
    one blank (frame 7, patch 2,1) and one scrambled (frame 9, patch 1,2); the grid's
    patch starts and size from a run on the clean stack."""
    from xcorr_app.bench._align_data import nonrigid_stack

    frames = nonrigid_stack(np.random.default_rng(3), 12, (160, 160), 5.0, 2.0, 400.0,
                            "coins")[0].astype(np.float32)
    clean = align(frames, device="cpu", patches="3x3", max_shift=8, quality=False)
    ph, pw = clean.settings["patches"]["size"]
    starts = np.rint(clean.patch_centres - (np.array([ph, pw]) - 1) / 2).astype(int)

    def region(r, c):
        y, x = starts[r, c]
        return slice(y, y + ph), slice(x, x + pw)

    bad = frames.copy()
    ys, xs = region(0, 0)
    bad[4, ys, xs] = ndi.gaussian_filter(bad[4, ys, xs], 8)
    ys, xs = region(2, 1)
    bad[7, ys, xs] = bad[7, ys, xs].mean()
    ys, xs = region(1, 2)
    part = bad[9, ys, xs]
    bad[9, ys, xs] = np.random.default_rng(1).permutation(part.ravel()).reshape(part.shape)
    return bad, {(4, 0, 0), (7, 2, 1), (9, 1, 2)}


def _neighbours(planted):
    """The planted regions and the patches that overlap them (the 8 around each)."""
    return {(f, r + dr, c + dc) for f, r, c in planted for dr in (-1, 0, 1) for dc in (-1, 0, 1)}


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_a_frame_without_a_shift_is_left_out_of_the_aligned_mean(device):
    """A NaN frame gets no shift and no figures after alignment, and is left out of the
    aligned mean whose sharpness is reported (not multiplied by 0: NaN times 0 is NaN), on
    both devices alike; the mean as the frames came holds it (NaN)."""
    import tifffile

    from sample_paths import stack_path

    frames = tifffile.imread(stack_path("cell")).astype(np.float32)
    frames[3] = np.nan
    r = align(frames, device=device)
    assert np.isnan(r.shifts[3]).all() and np.isnan(r.quality.after[3])
    assert np.isnan(r.quality.sharpness_before) and np.isfinite(r.quality.sharpness_after)
    if device == "gpu":
        cpu = align(frames, device="cpu").quality
        assert r.quality.sharpness_after == pytest.approx(cpu.sharpness_after, rel=1e-5)


def test_planted_bad_patch_regions_are_flagged_and_others_are_not(planted_patches):
    frames, planted = planted_patches
    q = align(frames, device="cpu", patches="3x3", max_shift=8).quality
    flagged = {tuple(v) for v in np.argwhere(q.patch_flagged).tolist()}
    assert planted <= flagged, q.summary()["patches"]
    assert flagged <= _neighbours(planted), q.summary()["patches"]
    assert not q.flagged[4]  # the blurred patch: its frame as a whole still correlates well
    for f, r, c in planted:  # each well below the same patch in the other frames
        assert q.patch_after[f, r, c] < np.median(q.patch_after[:, r, c]) - 0.03
    good = np.setdiff1d(np.arange(len(frames)), [4, 7, 9])
    assert np.abs(q.patch_residual[good]).max() < 0.2
    # the frames are judged as the field warps them: better than their rigid shifts
    rigid = align(frames, device="cpu", max_shift=8).quality
    assert np.median(q.after[good]) > np.median(rigid.after[good])


def test_patch_regions_travel_into_shifts_json_and_the_npz(planted_patches, tmp_path):
    frames, planted = planted_patches
    path = write_stack(tmp_path / "p.tif", np.clip(frames, 0, None).astype(np.uint16))
    res = xcorr("align", path, "--patches", "3x3", "--max-shift", "8", "--device", "cpu",
                "--no-aligned", "-q", "--out", tmp_path / "o")
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "o" / "shifts.json").read_text())
    patches = doc["summary"]["quality"]["patches"]
    listed = {tuple(v) for v in patches["worse"] + patches["poor"]}
    assert planted <= listed
    assert np.array(patches["correlation_after_median"]).shape == (3, 3)
    assert doc["frames"][4]["patches_worse"] + doc["frames"][4]["patches_poor"] >= 1
    assert doc["frames"][0]["patches_worse"] == doc["frames"][0]["patches_poor"] == 0
    assert (tmp_path / "o" / "quality.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    npz = np.load(tmp_path / "o" / "motion_field.npz")
    assert npz["quality_after"].shape == (len(frames), 3, 3)
    assert npz["quality_residual"].shape == (len(frames), 3, 3, 2)
    assert all(npz["quality_flag"][f, r, c] > 0 for f, r, c in planted)


@pytest.mark.parametrize("normalization", ["zncc", "phase"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_the_report_of_the_last_patch_pass_is_that_of_a_pass_of_its_own(planted_patches, device,
                                                                         normalization):
    """One device measures a piecewise run's report inside its last patch pass (the chunks it
    holds: as they came, prepared, warped); other executors in a pass of their own over the
    result's field (:func:`measure_quality`): the same figures, with and without ``out``."""
    from xcorr_app.alignment._quality import _OneRange, measure_quality
    from xcorr_app.alignment import AlignOptions
    from xcorr_app.io import open_source

    frames, _ = planted_patches
    opts = AlignOptions(patches="3x3", max_shift=8, device=device, normalization=normalization)
    xp = np if device == "cpu" else pytest.importorskip("cupy")
    out = xp.full(frames.shape, np.nan, np.float32)
    for res in (align(frames, options=opts), align(xp.asarray(frames), options=opts, out=out)):
        with open_source(frames, None) as src:
            apart = measure_quality(opts, res.shifts, _OneRange(src, xp, 5), src.frame_shape,
                                    xp.asarray(frames[0]), (res.motion_field, res.patch_centres,
                                                            res.settings["patches"]["size"]))
        q = res.quality
        assert q.area == apart.area
        for name in ("before", "after", "residual", "patch_before", "patch_after",
                     "patch_residual"):
            np.testing.assert_allclose(getattr(q, name), getattr(apart, name), atol=1e-6,
                                       err_msg=name)
        assert (q.patch_flagged == apart.patch_flagged).all()
        assert q.sharpness_after == pytest.approx(apart.sharpness_after, rel=1e-9)


@pytest.mark.gpu
def test_cpu_and_gpu_patch_reports_agree(planted_patches):
    frames, _ = planted_patches
    cpu = align(frames, device="cpu", patches="3x3", max_shift=8).quality
    gpu = align(frames, device="gpu", patches="3x3", max_shift=8).quality
    for name in ("before", "after", "patch_before", "patch_after"):
        np.testing.assert_allclose(getattr(gpu, name), getattr(cpu, name), atol=1e-4,
                                   err_msg=name)
    for name in ("residual", "patch_residual"):  # (px: the GPU = CPU standard, as above)
        np.testing.assert_allclose(getattr(gpu, name), getattr(cpu, name), atol=1e-3,
                                   err_msg=name)
    assert (gpu.patch_flagged == cpu.patch_flagged).all()


@pytest.mark.gpu
def test_the_patch_pass_makes_every_chunks_figures_before_it_waits(planted_patches,
                                                                    monkeypatch):
    """On the GPU the last patch pass makes the figures of its chunks on the queuing thread
    (no thread of their own), all of them by :meth:`PatchQuality.settle`, before the pass
    waits for the device; the report is the one of a chunk at a time on the CPU."""
    import threading

    from xcorr_app.alignment._quality import PatchQuality

    frames, _ = planted_patches
    seen, figured = [], []
    settle, figure = PatchQuality.settle, PatchQuality._figure

    def settled(self):
        settle(self)
        seen.append((len(self._pending), threading.current_thread() is threading.main_thread(),
                     sorted(figured)))

    def figured_on(self, i, sums):
        figured.extend(range(i, i + len(sums)))
        return figure(self, i, sums)

    monkeypatch.setattr(PatchQuality, "settle", settled)
    monkeypatch.setattr(PatchQuality, "_figure", figured_on)
    gpu = align(frames, device="gpu", patches="3x3", max_shift=8, chunk_frames=3).quality
    assert seen == [(0, True, list(range(len(frames))))]
    cpu = align(frames, device="cpu", patches="3x3", max_shift=8).quality
    np.testing.assert_allclose(gpu.patch_after, cpu.patch_after, atol=1e-4)


@pytest.mark.gpu
def test_the_last_chunk_in_two_halves_gives_the_same_report(planted_patches, monkeypatch):
    """The GPU report runs the range's last chunk in two launches (its first half's figures
    made while the device runs the second): every figure and flag as in one launch, bit for
    bit (a frame's sums are its own), with chunks of 5 frames and an odd last chunk."""
    from xcorr_app.alignment import _quality as Q
    from xcorr_app.alignment._quality_figures import TileRegions

    frames, _ = planted_patches
    launches = []
    warp_moments = TileRegions.warp_moments

    def counted(self, frames, *args, **kwargs):
        launches.append(len(frames))
        return warp_moments(self, frames, *args, **kwargs)

    monkeypatch.setattr(TileRegions, "warp_moments", counted)
    runs = []
    for half in (10 ** 6, 1):
        monkeypatch.setattr(Q, "LAST_HALF", half)
        launches.clear()
        runs.append((align(frames, device="gpu", patches="3x3", max_shift=8,
                           chunk_frames=5).quality, list(launches)))
    (whole, one), (split, two) = runs
    assert one == [5, 5, 2] and two == [5, 5, 1, 1]
    for name in ("before", "after", "residual", "patch_before", "patch_after",
                 "patch_residual", "flagged", "patch_flagged"):
        np.testing.assert_array_equal(getattr(split, name), getattr(whole, name), err_msg=name)


def test_chunks_are_figured_in_order_as_their_sums_land(monkeypatch):
    """PatchQuality._figure_landed (the GPU's bookkeeping, with copies that say when they
    land): without waiting, the chunks in the order they came up to the first whose sums
    (or the template's) have not landed, each once; waiting, all of them."""
    from xcorr_app.alignment import _quality as Q

    class Copy(Q.HostCopy):  # (a landed flag instead of a device's event)
        def __init__(self, value, landed):
            self.value, self.landed = value, landed

        def ready(self):
            return self.landed

        def result(self):
            self.landed = True
            return self.value

    made = []
    q = Q.PatchQuality.__new__(Q.PatchQuality)
    monkeypatch.setattr(Q.PatchQuality, "_figure", lambda self, i, sums: made.append((i, sums)))
    template = [Copy("t", False)]
    q.template = template
    q._pending = [(k, [Copy(k, k != 2)]) for k in (0, 1, 2, 3)]
    q._figure_landed(wait=False)
    assert made == [] and len(q._pending) == 4  # (the template not back: none)
    template[0].landed = True
    q._figure_landed(wait=False)
    assert made == [(0, 0), (1, 1)] and q.template == ["t"]
    assert [i for i, _ in q._pending] == [2, 3]  # (chunk 3 landed, after one that has not)
    q._figure_landed(wait=True)
    assert made == [(k, k) for k in range(4)] and q._pending == []


def test_the_sorted_median_and_percentiles_are_numpys():
    """_quality's own (NumPy's import numpy.ma at first use): equal to np.nanmedian (columns
    with NaNs, odd and even counts) and np.percentile, bit for bit."""
    from xcorr_app.alignment._quality import _nanmedian, _percentiles

    rng = np.random.default_rng(3)
    for shape in [(1, 4), (2, 3), (7, 5), (8, 3, 2)]:
        a = rng.random(shape)
        a[rng.random(shape) < 0.3] = np.nan
        a[0] = rng.random(shape[1:])  # (a number in every column)
        a[-1] = np.where(rng.random(shape[1:]) < 0.3, np.inf, a[-1])  # (infinities count)
        assert np.array_equal(_nanmedian(a), np.nanmedian(a, axis=0))
        clean = np.nan_to_num(a, nan=0.5, posinf=np.inf)  # (no NaN: the middle found apart)
        assert np.array_equal(_nanmedian(clean), np.median(clean, axis=0))
    for n in (1, 2, 3, 10, 101):
        a = rng.random(n) * 1e3
        assert _percentiles(a, (5, 50, 95)) == np.percentile(a, [5, 50, 95]).tolist()
    from xcorr_app.alignment._quality import _SortedColumns

    def columns_of(a):  # (a column a row)
        return np.ascontiguousarray(a.reshape(len(a), -1).T)

    for shape in [(1, 3), (5, 4), (9, 2, 3)]:
        a = rng.random(shape)
        a[rng.random(shape) < 0.3] = np.nan
        a[:, 0] = np.nan  # (a column of NaNs: NaN)
        with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
            want = np.nanpercentile(a, 90, axis=0, method="lower")
        np.testing.assert_array_equal(_SortedColumns(columns_of(a)).quantile(0.9),
                                      want.reshape(-1))
        kept = a[:, 1:][:, ~np.isnan(a[:, 1:]).all(axis=0)]  # (a number in every column:
        # the medians _flags reads)
        np.testing.assert_array_equal(_SortedColumns(columns_of(kept)).median(),
                                      np.nanmedian(kept, axis=0))


def test_the_median_distance_read_off_the_sort_is_numpys():
    """_SortedColumns.median_distance (the robust deviation's binary searches over two sorted
    runs): np.nanmedian of the distances from the median, bit for bit, with ties, NaNs,
    infinities, odd and even counts, a column of one number."""
    from xcorr_app.alignment._quality import _SortedColumns

    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(400):
        c, n = int(rng.integers(1, 5)), int(rng.integers(1, 30))
        a = rng.random((c, n))
        if rng.random() < 0.5:
            a = np.round(a * 4) / 4  # (ties at the median and about it)
        a[rng.random((c, n)) < 0.3] = np.nan
        a[:, 0] = np.where(np.isnan(a[:, 0]), 0.5, a[:, 0])  # (a number in every column)
        if rng.random() < 0.2:
            a[0, -1] = np.inf if rng.random() < 0.5 else -np.inf
        ranked = _SortedColumns(a.copy())
        med = ranked.median()
        if not np.isfinite(med).all():
            continue
        np.testing.assert_array_equal(ranked.median_distance(med),
                                      np.nanmedian(np.abs(a - med[:, None]), axis=1))
        checked += 1
    assert checked > 300


def _flags_reference(before, after, residual):
    """The flags' definition written with NumPy's own statistics, region by region."""
    from xcorr_app.alignment import _quality as Q

    cols = after.reshape(len(after), -1)
    dy, dx = residual[..., 0], residual[..., 1]
    on_template = (np.abs(dy) <= Q.ALIGNED_PX) & (np.abs(dx) <= Q.ALIGNED_PX)
    worse = np.isfinite(after) & np.isfinite(before) & (after < before - Q.WORSE_BY) \
        & ~on_template
    low = np.zeros(cols.shape, bool)
    for j in range(cols.shape[1]):
        c = cols[:, j]
        if not np.isfinite(c).any():
            continue
        med = np.nanmedian(c)
        mad = 1.4826 * np.nanmedian(np.abs(c - med))
        best = np.nanpercentile(c, 100 * Q.BEST_QUANTILE, method="lower")
        bound = med - max(Q.POOR_DEVIATIONS * mad, Q.POOR_DROP)
        low[:, j] = (c < bound) | ((best > 0) & (c < Q.BEST_SHARE * best))
    off = ~(np.abs(dy) <= Q.RESIDUAL_LIMIT) | ~(np.abs(dx) <= Q.RESIDUAL_LIMIT)
    poor = ~np.isfinite(after) | low.reshape(after.shape) | off
    return worse, poor


@pytest.mark.parametrize("spread", [0.0005, 0.004, 0.02, 0.2])
def test_the_flags_are_their_definition(spread):
    """_flags (the robust deviation read off the sort where the middle half of a region's
    values bounds it below POOR_DROP over POOR_DEVIATIONS, computed where not) flags what the
    definition written with np.nanmedian and np.nanpercentile flags: frames (N,) and patch
    regions (N, P), NaN and infinite correlations and residuals, a region with no number,
    spreads on both sides of the bound and a few outliers."""
    from xcorr_app.alignment._quality import _flags

    rng = np.random.default_rng(int(spread * 1e4))
    for shape in [(1,), (2,), (9,), (64,), (40, 7), (33, 3, 2), (400, 5)]:
        # (skewed in the last: its middle half bounds the deviation loosely)
        after = 0.9 + spread * (rng.standard_normal(shape) if len(shape) < 2 or shape[0] < 100
                                else -rng.exponential(1.0, shape))
        after[rng.random(shape) < 0.05] -= 0.3  # (outliers below)
        after[rng.random(shape) < 0.1] = np.nan
        after[rng.random(shape) < 0.02] = np.inf
        if len(shape) > 1:
            after[:, 0] = np.nan  # (a region never measured)
            after[: shape[0] // 2 + 1, 1] = np.inf  # (a region whose median is infinite)
        before = after - 0.02 * rng.standard_normal(shape)
        residual = rng.normal(0.0, 0.3, shape + (2,))
        residual[rng.random(shape + (2,)) < 0.05] = np.nan
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                want = _flags_reference(before, after, residual)
        got = _flags(before, after, residual)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        if shape[0] > 8:  # (the stacks flag some, not all)
            assert want[1].any() and not want[1].all()


def test_the_regions_flags_made_chunk_by_chunk_are_the_flags():
    """_RegionFlags (a frame's own flags made as its chunk's figures come, what wants every
    frame at the end; ranges joined) flags exactly what _flags over every frame at once does,
    with NaN and infinite values, a region never measured, chunks and ranges of unequal length,
    and frames without a field (``without``: poor, not worse, out of the regions' figures);
    the same a second time."""
    from xcorr_app.alignment import _quality as Q

    rng = np.random.default_rng(7)
    for n, p, cuts, ranges in [(300, 7, [0, 100, 256, 300], [300]), (41, 5, [0, 41], [41]),
                               (2000, 64, [0, 256, 512, 1000, 1900, 2000], [1000, 1000])]:
        after = 0.9 + 0.02 * rng.standard_normal((n, p))
        after[rng.random((n, p)) < 0.05] -= 0.3
        after[rng.random((n, p)) < 0.05] = np.nan
        after[rng.random((n, p)) < 0.01] = np.inf
        after[:, 1] = np.nan
        before = after - 0.02 * rng.standard_normal((n, p))
        residual = rng.normal(0.0, 0.3, (n, p, 2))
        ok = rng.random(n) > 0.05
        ok[:n // 2 + 1] = False  # (most without a field, their figures far below: were they
        after[~ok] = np.where(np.isnan(after[~ok]), np.nan, 0.0)  # counted, they the median)
        parts, first = [], 0
        for size in ranges:  # (a range's chunks added in the order they come)
            flags = Q._RegionFlags(size, p)
            for a, b in zip(cuts[:-1], cuts[1:]):
                a, b = max(a, first) - first, min(b, first + size) - first
                if a < b:
                    flags.add(a, *(v[first + a:first + b] for v in (before, after, residual)))
            parts.append(flags.without(ok[first:first + size]))
            first += size
        got = Q._RegionFlags.joined(parts).result()
        gone = np.where(ok[:, None], after, np.nan)  # (as the report's rows say them)
        want = Q._flags(before, gone, residual)
        for g, w in zip(got, want):
            assert g.shape == (n, p) and np.array_equal(g, w)
        assert want[1].any() and not want[1].all() and want[0].any()
        again = Q._RegionFlags.joined(parts).result()  # (its columns sorted by the first)
        assert all(np.array_equal(g, w) for g, w in zip(again, want))


def test_patch_ok_names_the_frames_with_a_shift_and_a_whole_field():
    """patch_ok on the field as the run holds it (a strided view of the pass's rows (N, P, 5))
    and as a plain array: a frame is out for a NaN or infinite shift or any field value, of
    either axis, of any patch."""
    from xcorr_app.alignment._quality import patch_ok

    rng = np.random.default_rng(3)
    n, gy, gx = 9, 3, 4
    rows = rng.normal(size=(n, gy * gx, 5))
    shifts = rng.normal(size=(n, 2))
    rows[1, 5, 0] = np.nan
    rows[2, 11, 1] = np.inf
    rows[3, 0, 2:] = np.nan  # (other columns of the rows: not the field)
    shifts[4, 1] = np.nan
    rows[5, 7, 1] = -np.inf
    field = rows[..., :2].reshape(n, gy, gx, 2)
    want = np.array([True, False, False, True, False, False, True, True, True])
    assert np.array_equal(patch_ok(shifts, field), want)
    assert np.array_equal(patch_ok(shifts, np.ascontiguousarray(field)), want)


def test_the_robust_deviation_is_bounded_and_exact_where_it_moves_the_bound():
    """_mad: never below the exact robust deviation (1.4826 times np.nanmedian's absolute
    deviation), and equal to it wherever POOR_DEVIATIONS times it passes POOR_DROP (where the
    bound of _flags depends on it): columns of 1 to 41 numbers, some NaN, spreads across the
    shortcut's edge."""
    from xcorr_app.alignment import _quality as Q

    rng = np.random.default_rng(11)
    exact_ones = 0
    for n in (1, 2, 3, 4, 5, 8, 9, 40, 41):
        for spread in np.geomspace(1e-3, 3e-2, 12):
            c = 0.9 + spread * rng.standard_normal((n, 20))
            c[rng.random(c.shape) < 0.1] = np.nan
            c[0] = 0.9  # (a number in every column)
            ranked = Q._SortedColumns(np.ascontiguousarray(c.T))
            med = ranked.median()
            got = Q._mad(med, ranked)
            exact = 1.4826 * np.nanmedian(np.abs(c - med), axis=0)
            assert (got >= exact).all()
            moves = Q.POOR_DEVIATIONS * exact > Q.POOR_DROP
            np.testing.assert_array_equal(got[moves], exact[moves])
            exact_ones += int(moves.sum())
    assert exact_ones > 100  # (both sides of the shortcut seen)


def test_frames_behind_a_closed_shutter_are_flagged_though_they_are_half():
    """Half the frames at 1% of the light: the median of the correlations is theirs, so only
    the share of the best frames' flags them; a steady stack keeps every frame unflagged."""
    from xcorr_app.bench._accuracy_data import make_stack

    stack = make_stack("shutter", 0, image="moon", shape=(256, 256))
    res = align(stack.frames, device="cpu")
    closed = np.zeros(len(stack.frames), bool)
    closed[stack.info["closed"]] = True
    assert closed.sum() >= len(closed) // 2 - 1
    assert res.quality.poor[closed].all()
    assert not res.quality.flagged[~closed].any()
    steady = make_stack("low_light", 0, image="retina", shape=(128, 128))
    assert not align(steady.frames, device="cpu").quality.flagged.any()


def test_a_background_fixed_on_the_sensor_does_not_make_aligned_frames_worse():
    """A static background dominates the correlation of the frames as they came, so aligning
    the scene lowers it; the residual says each frame sits on the template, so none is flagged
    ``worse`` (16 of 20 were, every one within 0.5 px of the truth)."""
    from xcorr_app.bench._accuracy_data import make_stack

    stack = make_stack("bleaching_background", 0, image="moon", shape=(128, 128))
    res = align(stack.frames, device="cpu")
    q = res.quality
    shifts = res.shifts - res.shifts[0]
    assert np.hypot(*(shifts - stack.truth).T).max() < 0.5
    assert (q.after < q.before - 0.01).sum() >= 10  # (the correlation does drop)
    assert not q.worse.any() and not q.flagged.any()


def test_frames_shifted_off_the_others_area_are_flagged_not_measured_on_the_whole_frame():
    """Closed-shutter frames whose shifts (50-90 px on 128 px frames) leave the stack no area in
    common: the report is measured on the area of the frames near the median shift, and the
    others are flagged poor, unmeasured (on the whole frame, 4 of them passed)."""
    from xcorr_app.bench._accuracy_data import make_stack

    stack = make_stack("shutter", 3, image="moon", shape=(128, 128))
    res = align(stack.frames, device="cpu")
    q = res.quality
    error = np.hypot(*(res.shifts - res.shifts[0] - stack.truth).T)
    far = (np.abs(res.shifts - np.median(res.shifts, axis=0)) > 32).any(axis=1)
    assert far.sum() >= 8 and (error[far] > 40).all()
    assert q.area[1] - q.area[0] > 64 and q.area[3] - q.area[2] > 64
    assert np.isnan(q.after[far]).all() and q.poor[far].all()
    assert q.flagged[error > 0.5].all()
    assert not q.flagged[error < 0.2].any()
