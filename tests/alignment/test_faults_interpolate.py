"""``interpolate_low`` when no frame is confident enough to interpolate from (alignment/
_result.py): the shifts stay as measured, a note says so, the summary counts no interpolated
frame, and the command line does not claim the shifts were interpolated."""

import numpy as np

from cli_helpers import xcorr
from sample_paths import stack_path
from xcorr_app import align


def test_nothing_to_interpolate_from_is_said_not_claimed():
    plain = align(stack_path("cell"), device="cpu", min_confidence=3.0)
    res = align(stack_path("cell"), device="cpu", min_confidence=3.0, interpolate_low=True)
    assert res.low_confidence.all()  # every frame is below 3
    np.testing.assert_array_equal(res.shifts, plain.shifts)
    s = res.summary()
    assert s["interpolated_frames"] == 0 and s["low_confidence_frames"] == 12
    assert any("no frame was confident enough" in n for n in s["notes"])


def test_interpolated_frames_are_counted_when_there_are_neighbours():
    res = align(stack_path("cell"), device="cpu", min_confidence=2.4, interpolate_low=True)
    s = res.summary()
    assert 0 < s["low_confidence_frames"] < 12
    assert s["interpolated_frames"] == int(res.low_confidence.sum())
    assert not any("no frame was confident enough" in n for n in s["notes"])


def test_cli_does_not_claim_an_interpolation(tmp_path):
    res = xcorr("align", stack_path("cell"), "--out", tmp_path, "--device", "cpu",
                "--min-confidence", "3", "--interpolate-low")
    assert res.returncode == 0, res.stderr
    assert "shifts interpolated" not in res.stdout
    assert "not interpolated (no frame was confident enough" in res.stdout
