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


@pytest.mark.gpu
def test_cpu_and_gpu_reports_agree(planted):
    frames, _ = planted
    cpu = align(frames, max_shift=6, device="cpu").quality
    gpu = align(frames, max_shift=6, device="gpu").quality
    for name in ("before", "after", "residual"):
        np.testing.assert_allclose(getattr(gpu, name), getattr(cpu, name), atol=1e-4,
                                   err_msg=name)
    assert (gpu.flagged == cpu.flagged).all()
