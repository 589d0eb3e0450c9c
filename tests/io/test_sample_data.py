"""Tests of the committed sample data in sample_data/."""

from pathlib import Path

import numpy as np
import pytest
from skimage.registration import phase_cross_correlation

from xcorr_app.io import open_stack

SAMPLE_DATA = Path(__file__).resolve().parents[2] / "sample_data"
NAMES = ("cell", "moon", "hubble")


def truth_of(name):
    lines = (SAMPLE_DATA / f"{name}_truth.csv").read_text().splitlines()
    assert lines[0] == "frame,dy,dx"
    return np.array([[float(v) for v in line.split(",")] for line in lines[1:]])


@pytest.mark.parametrize("name", NAMES)
def test_stack_and_folder_hold_the_same_frames(name):
    with open_stack(SAMPLE_DATA / f"{name}_drift.tif") as stack:
        assert (stack.n_frames, stack.frame_shape, stack.dtype) == (12, (120, 160), np.uint16)
        frames = stack.read(0, 12)
    with open_stack(SAMPLE_DATA / f"{name}_frames") as folder:
        assert folder.n_frames == 12 and folder.notes == []
        names = [folder.source_name(i) for i in range(12)]
        assert names == [f"frame_{i}.tif" for i in range(1, 13)]
        np.testing.assert_array_equal(folder.read(0, 12), frames)
    assert frames.max() > 0


@pytest.mark.parametrize("name", NAMES)
def test_truth_table(name):
    truth = truth_of(name)
    assert truth.shape == (12, 3)
    np.testing.assert_array_equal(truth[:, 0], np.arange(12))
    assert tuple(truth[0, 1:]) == (0.0, 0.0)
    assert 3 < np.abs(truth[:, 1:]).max() <= 6.5  # a real, subpixel drift of a few pixels


@pytest.mark.parametrize("name", NAMES)
def test_truth_follows_the_phase_cross_correlation_convention(name):
    """Plain cross-correlation recovers the truth (cell is too smooth for phase normalization)."""
    with open_stack(SAMPLE_DATA / f"{name}_drift.tif") as stack:
        frames = stack.read(0, 12).astype(np.float64)
    normalization = None if name == "cell" else "phase"
    frames -= frames.mean(axis=(1, 2), keepdims=True)
    measured = np.array([phase_cross_correlation(frames[0], f, upsample_factor=100,
                                                 normalization=normalization)[0] for f in frames])
    assert np.abs(measured - truth_of(name)[:, 1:]).max() < 0.25


def test_sample_data_is_small():
    files = [p for p in SAMPLE_DATA.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert sum(p.stat().st_size for p in files) <= 5 * 1024 * 1024
