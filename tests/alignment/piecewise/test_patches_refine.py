"""Piecewise-rigid registration, the refinement: the centre-weighted refinement passes (large
patches measure the field at their centres, not its mean over the patch) and the template
refined from the frames warped by their fields (``patch_template_passes``); GPU against CPU."""

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.alignment.piecewise import _patch_pass
from xcorr_app.alignment.piecewise._motion_field import dense_field, warp_frames, warped_sum
from xcorr_app.alignment.piecewise._patches import REFINE_FLAT, refine_taper, tapered
from xcorr_app.bench._align_data import nonrigid_stack, truth_at
from xcorr_app.errors import InputError

from cli_helpers import assert_clean_error, xcorr
from synthetic import write_stack


def rms(a):
    return float(np.sqrt(np.mean(np.square(a))))


@pytest.fixture(scope="module")
def large_patches():
    """A smooth random scene, 256x256, deformed (up to 3 px on drift up to 10 px, peak SNR
    20): 2x2 patches of 129 px, over which the field bends."""
    return nonrigid_stack(np.random.default_rng(5), 8, (256, 256), 10.0, 3.0, 400.0, None,
                          iterations=10)


@pytest.fixture(scope="module")
def small():
    return nonrigid_stack(np.random.default_rng(3), 6, (128, 128), 4.0, 2.0, 400.0, "coins")


def test_refine_taper_is_flat_in_the_centre_and_none_for_small_patches():
    assert refine_taper((REFINE_FLAT, 40)) is None
    w = refine_taper((129, 65))
    assert w.shape == (129, 65) and w.dtype == np.float32
    assert np.all(w[64 - 31:64 + 32, 32] == 1.0)  # the central 64 px of the long axis
    assert w[0, 32] < 0.01 and w[64, 0] > 0.9  # falls to the edge; 65 px: barely weighted
    np.testing.assert_allclose(w, w[::-1, ::-1])


def test_tapered_removes_each_patch_mean_first(rng):
    p = rng.random((3, 70, 70)).astype(np.float32) + 5.0
    w = refine_taper((70, 70))
    out = tapered(p, w)
    want = (p - p.mean(axis=(-2, -1), keepdims=True, dtype=np.float64)) * w
    np.testing.assert_allclose(out, want, rtol=0, atol=1e-5)
    assert tapered(p, None) is p


def test_large_patches_measure_the_field_at_their_centres(large_patches, monkeypatch):
    """129-px patches: the field at the centres within 0.1 px RMS (0.070 measured); without
    the centre weight the refinement matched the field's mean over each patch (0.137)."""
    stack, params = large_patches
    res = align(stack, max_shift=14, patches=(2, 2), device="cpu", verify=False)
    assert res.settings["patches"]["size"] == [129, 129]
    err = rms(res.motion_field - truth_at(params, res.patch_centres))
    assert err <= 0.1
    monkeypatch.setattr(_patch_pass, "refine_taper", lambda size: None)  # the old refinement
    old = align(stack, max_shift=14, patches=(2, 2), device="cpu", verify=False)
    assert rms(old.motion_field - truth_at(params, old.patch_centres)) > 1.5 * err


def test_rigid_stack_stays_flat_with_weighted_large_patches():
    """The centre weight on a rigid stack (drift only, peak SNR 20, 128-px patches): the
    field stays flat (0.044 px at most measured)."""
    stack, _ = nonrigid_stack(np.random.default_rng(7), 8, (256, 256), 10.0, 0.0, 400.0, None,
                              iterations=2)
    res = align(stack, max_shift=14, patches=(2, 2), device="cpu", verify=False)
    assert refine_taper(tuple(res.settings["patches"]["size"])) is not None
    assert np.abs(res.deviation()).max() < 0.05


def test_warped_sum_counts_only_covered_pixels(rng):
    frames = rng.random((3, 40, 50)).astype(np.float32)
    frames[2, 5, 5] = np.nan
    field = np.zeros((3, 2, 2, 2))
    field[1, ..., 1] = 3.0  # frame 1 moved 3 px right: its first 3 columns come from outside
    centres = np.stack(np.meshgrid([10.0, 30.0], [10.0, 40.0], indexing="ij"), axis=-1)
    from xcorr_app.alignment.piecewise import field_weights

    total, count = warped_sum(frames, field, field_weights(centres, (40, 50), np))
    assert count[20, 0] == 2 and count[20, 10] == 3 and count[5, 5] == 2
    np.testing.assert_allclose(total[20, 10], frames[0, 20, 10] + frames[1, 20, 7]
                               + frames[2, 20, 10], rtol=1e-6)


def test_template_pass_is_the_mean_of_the_warped_frames(small):
    """``patch_template_passes=1``: the template is the mean of the frames warped by the
    first patch pass's fields (that pass is the run without template passes), frame 0 where
    less than half a frame covers; the field is measured again against it."""
    stack, params = small
    kw = dict(max_shift=8, patches=(3, 3), device="cpu", verify=False)
    first = align(stack, **kw)
    res = align(stack, patch_template_passes=1, **kw)
    dense = dense_field(first.motion_field, first.patch_centres, stack.shape[1:])
    warped = warp_frames(stack.astype(np.float32), dense, "bilinear", np.nan)
    count = np.isfinite(warped).sum(axis=0)
    mean = np.nansum(warped, axis=0, dtype=np.float64) / np.maximum(count, 1)
    want = np.where(count >= 0.5, mean, stack[0])
    want -= want.mean()  # (the template is kept as prepared: less its mean)
    # (float frames are prepared scale-free: multiplied by a power of two, exactly)
    scale = 2.0 ** np.round(np.log2(np.abs(res.patch_template).max() / np.abs(want).max()))
    np.testing.assert_allclose(res.patch_template / scale, want, rtol=0, atol=2e-3)
    assert not np.allclose(res.patch_template, first.patch_template, atol=1.0)
    assert res.settings["patches"]["template_passes"] == 1
    assert first.settings["patches"]["template_passes"] == 0
    assert not np.array_equal(res.motion_field, first.motion_field)  # measured again
    assert rms(res.motion_field - truth_at(params, res.patch_centres)) <= 0.1
    np.testing.assert_array_equal(res.shifts, first.shifts)  # the rigid part unchanged


@pytest.mark.parametrize("value", [3, -1, 1.5, True, "1"])
def test_bad_template_passes_are_input_errors(small, value):
    with pytest.raises(InputError, match="patch_template_passes"):
        align(small[0], max_shift=8, patches=(2, 2), device="cpu", verify=False,
              patch_template_passes=value)


@pytest.fixture(scope="module")
def small_file(small, tmp_path_factory):
    return write_stack(tmp_path_factory.mktemp("refine") / "s.tif", small[0])


@pytest.mark.parametrize("args, words", [
    (["--patches", "2x2", "--patch-template-passes", "3"], ["--patch-template-passes", "0 to 2"]),
    (["--patch-template-passes", "1"], ["--patch-template-passes needs patches"]),
])
def test_cli_template_pass_errors_are_one_line(small_file, tmp_path, args, words):
    r = xcorr("align", str(small_file), "--out", str(tmp_path / "o"), "--device", "cpu", *args)
    assert_clean_error(r, *words)


def test_cli_template_pass_runs(small_file, tmp_path):
    r = xcorr("align", str(small_file), "--out", str(tmp_path / "o"), "--device", "cpu",
              "--max-shift", "8", "--patches", "3x3", "--patch-template-passes", "1",
              "--no-aligned")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "motion_field.npz").exists()
    assert "--patch-template-passes" in xcorr("align", "--help").stdout


# ------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
def test_gpu_tapered_and_warped_sum_equal_cpu(small, monkeypatch):
    import cupy as cp

    from xcorr_app.alignment.piecewise import _motion_field
    from xcorr_app.alignment.piecewise import field_weights

    monkeypatch.setattr(_motion_field, "WARP_SUM_BATCH", 4)  # 6 frames: 4, then 2

    stack, _ = small
    res = align(stack, max_shift=8, patches=(3, 3), device="cpu", verify=False)
    w_cpu = field_weights(res.patch_centres, stack.shape[1:], np)
    w_gpu = field_weights(res.patch_centres, stack.shape[1:], cp)
    t_cpu, c_cpu = warped_sum(stack, res.motion_field, w_cpu)
    t_gpu, c_gpu = warped_sum(cp.asarray(stack), cp.asarray(res.motion_field), w_gpu)
    same = c_gpu.get() == c_cpu  # (a source exactly on the frame's edge may round either way)
    assert same.mean() > 0.999
    np.testing.assert_allclose(t_gpu.get()[same], t_cpu[same], rtol=1e-6, atol=1e-3)
    p = (np.random.default_rng(0).random((4, 80, 90)) * 100).astype(np.float32)
    w = refine_taper((80, 90))
    np.testing.assert_allclose(tapered(cp.asarray(p), w).get(), tapered(p, w), rtol=0,
                               atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("passes", [0, 1])
def test_gpu_refined_fields_equal_cpu(large_patches, passes):
    stack, params = large_patches
    kw = dict(max_shift=14, patches=(2, 2), verify=False, patch_template_passes=passes)
    cpu = align(stack, device="cpu", **kw)
    gpu = align(stack, device="gpu", **kw)
    assert gpu.settings["device"] == "gpu"
    np.testing.assert_allclose(gpu.motion_field, cpu.motion_field, rtol=0, atol=1e-3)
    # near the frame's edge a pixel is covered by few frames, and a source exactly on the edge
    # rounds either way (one frame more or less in its mean); the patches read the inside
    m = 14 + 4 + 1  # max_shift + max_deviation + the bilinear tap
    np.testing.assert_allclose(gpu.patch_template[m:-m, m:-m], cpu.patch_template[m:-m, m:-m],
                               rtol=1e-5, atol=1e-2)
    assert rms(gpu.motion_field - truth_at(params, gpu.patch_centres)) <= 0.1
