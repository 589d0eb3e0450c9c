"""``bidi``: the line offset of a bidirectional scan, estimated (subpixel, both signs) from a
few frames and removed from every frame read: the measuring passes, the aligned output,
``AlignResult.apply``/``save`` and ``xcorr apply``; a stack scanned one way is left as it is;
bad values are refused in one line."""

import json

import numpy as np
import pytest
import tifffile

import xcorr_app
from xcorr_app.alignment import AlignOptions, correct_bidi, estimate_bidi, parse_bidi
from xcorr_app.errors import InputError

from cli_helpers import assert_clean_error, xcorr
from synthetic import drift_stack, fourier_moved

#: the columns cut off the scan's edges (the Fourier move wraps around there)
EDGE = 4


def scanned(stack, offset):
    """``stack`` (uint16 frames) as a bidirectional scan whose odd rows lie ``offset`` px to
    the right of the even rows (a Fourier move along x), float32, the wrapped edges cut."""
    s = stack.astype(np.float64)
    s[:, 1::2] = fourier_moved(s[:, 1::2], (offset,))
    return s[:, :, EDGE:-EDGE].astype(np.float32)


@pytest.fixture(scope="module")
def drift():
    """32 noisy frames (peak SNR 10) with a known drift of up to 4 px, and its truth."""
    return drift_stack(np.random.default_rng(1), n=32, shape=(96, 120), max_shift=4.0)


def rms(shifts, truth):
    return float(np.sqrt(((np.asarray(shifts) - truth) ** 2).sum(axis=1).mean()))


def aligned(res, stack, **kw):
    return np.concatenate([c for _, c in res.apply(stack, device="cpu", **kw)])


def output_error(out, res, stack):
    """RMS difference of the aligned frames ``out`` from the frames scanned one way
    (``stack``'s) moved by the same shifts, inside the edges (shifted in)."""
    want = aligned(res, scanned(stack, 0.0), bidi=0)
    return float(np.sqrt(((out - want)[:, 8:-8, 8:-8] ** 2).mean()))


@pytest.mark.parametrize("offset", [0.2, 0.7, 1.5, 3.0, -0.5, -2.0])
@pytest.mark.parametrize("image", ["astronaut", "coins"])
def test_the_offset_is_estimated(offset, image):
    stack, _ = drift_stack(np.random.default_rng(3), n=32, shape=(96, 120), max_shift=4.0,
                           image=image)
    est, error = estimate_bidi(scanned(stack, offset))
    assert abs(est - offset) <= (0.1 if abs(offset) >= 3 else 0.05), (est, error)
    assert error < 0.05


@pytest.mark.parametrize("offset", [0.7, -2.0])
def test_auto_removes_it_before_measuring_and_in_the_output(drift, offset):
    stack, truth = drift
    raw = scanned(stack, offset)
    res = xcorr_app.align(raw, bidi="auto", device="cpu", max_shift=8)
    assert abs(res.settings["bidi"] - offset) <= 0.05
    assert any(n.startswith("bidi auto: the odd rows lay") for n in res.notes)
    assert rms(res.shifts, truth) < 0.05
    fixed = output_error(aligned(res, raw), res, stack)
    off = xcorr_app.align(raw, bidi="off", device="cpu", max_shift=8)
    assert off.settings["bidi"] == 0.0
    # the offset is the same in every frame: the shifts hardly see it (they are relative to
    # frame 0), the aligned frames do (of about 57 counts RMS: 1.2 against 4.2 at 0.7 px)
    assert fixed < output_error(aligned(off, raw), off, stack) / 3


def test_a_given_offset_is_used_as_it_is(drift):
    stack, truth = drift
    raw = scanned(stack, 0.7)
    res = xcorr_app.align(raw, bidi=0.7, device="cpu", max_shift=8)
    assert res.settings["bidi"] == 0.7 and res.settings["options"]["bidi"] == 0.7
    assert rms(res.shifts, truth) < 0.05
    out = np.zeros(raw.shape, np.float32)
    again = xcorr_app.align(raw, bidi="0.7", device="cpu", max_shift=8, out=out)
    np.testing.assert_array_equal(out, aligned(res, raw))  # the run's out= alike
    np.testing.assert_array_equal(again.shifts, res.shifts)
    assert output_error(out, res, stack) < 1.5


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("image", ["astronaut", "coins"])
def test_a_stack_without_offset_is_left_as_it_is(seed, image):
    stack, _ = drift_stack(np.random.default_rng(seed), n=16, shape=(80, 96), image=image)
    auto = xcorr_app.align(stack, bidi="auto", device="cpu")
    off = xcorr_app.align(stack, bidi="off", device="cpu")
    assert auto.settings["bidi"] == 0.0
    np.testing.assert_array_equal(auto.shifts, off.shifts)
    assert not any("bidi" in n for n in auto.notes)


def test_correction_moves_the_odd_rows_only_in_the_stacks_type():
    rng = np.random.default_rng(0)
    for dtype in (np.uint8, np.uint16, np.int16, np.float32, np.float64):
        frames = (rng.random((3, 6, 10)) * 100).astype(dtype)
        fixed = correct_bidi(frames, 2.0)
        assert fixed.dtype == dtype
        np.testing.assert_array_equal(fixed[:, 0::2], frames[:, 0::2])
        np.testing.assert_array_equal(fixed[:, 1::2, :-2], frames[:, 1::2, 2:])
    frames = np.array([[[0, 0, 0], [0, 100, 200]]], np.uint16)
    assert correct_bidi(frames, -0.25).tolist() == [[[0, 0, 0], [0, 75, 175]]]
    assert correct_bidi(frames, 0.0) is not frames  # (a copy: inputs are never modified)


@pytest.mark.parametrize("value", ["abc", "nan", "1e9", float("inf"), -17, True, None, [1]])
def test_bad_values_are_refused(value):
    with pytest.raises(InputError, match="bidi must be auto, off or a line offset"):
        parse_bidi(value)
    with pytest.raises(InputError, match="bidi"):
        xcorr_app.align(np.zeros((2, 8, 8), np.float32), bidi=value, device="cpu")


def test_bidi_with_patches_or_several_gpus_is_refused():
    with pytest.raises(InputError, match="patches"):
        xcorr_app.align(np.zeros((2, 32, 32), np.float32), bidi="auto", patches="2x2",
                        device="cpu")
    with pytest.raises(InputError, match="gpus"):
        AlignOptions(bidi=1.0).check_executor("gpus")


@pytest.mark.parametrize("value", ["abc", "nan", "1e9"])
def test_the_command_refuses_a_bad_value_in_one_line(tmp_path, value):
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, np.zeros((2, 16, 16), np.uint16))
    res = xcorr("align", path, "--bidi", value, "--device", "cpu", "--out", tmp_path / "o")
    assert res.returncode == 2
    assert_clean_error(res, "--bidi")
    assert not (tmp_path / "o").exists()


def test_shifts_json_records_it_and_apply_reproduces_the_output(tmp_path, drift):
    stack, truth = drift
    raw = np.clip(np.rint(scanned(stack, 1.5)), 0, 65535).astype(np.uint16)  # (a scan's type)
    path = tmp_path / "raw.tif"
    tifffile.imwrite(path, raw, imagej=True, metadata={"axes": "TYX"})
    res = xcorr("align", path, "--bidi", "auto", "--device", "cpu", "--max-shift", "8",
                "--out", tmp_path / "run")
    assert res.returncode == 0, res.stderr
    assert "--bidi auto: the odd rows lay 1.5" in res.stdout
    doc = json.loads((tmp_path / "run" / "shifts.json").read_text())
    assert abs(doc["settings"]["bidi"] - 1.5) <= 0.05
    assert doc["settings"]["options"]["bidi"] == "auto"
    shifts = np.array([[f["dy"], f["dx"]] for f in doc["frames"]])
    assert rms(shifts, truth) < 0.05
    out = tifffile.imread(tmp_path / "run" / "aligned.tif")
    assert abs(estimate_bidi(raw)[0] - 1.5) < 0.05  # (the input as it was)
    run = res_of(doc)
    assert output_error(out, run, stack) < output_error(aligned(run, raw), run, stack) / 3
    for table in ("shifts.json", "shifts.csv"):
        again = tmp_path / f"again_{table}.tif"
        res = xcorr("apply", tmp_path / "run" / table, path, "--device", "cpu", "--out", again)
        assert res.returncode == 0, res.stderr
        assert "line offset" in res.stdout
        np.testing.assert_array_equal(tifffile.imread(again), out)


@pytest.mark.parametrize("value", ['"x"', "1e9", "true"])
def test_apply_refuses_a_damaged_offset_in_one_line(tmp_path, value):
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, np.zeros((2, 16, 16), np.uint16))
    table = tmp_path / "shifts.json"
    table.write_text('{"settings": {"bidi": %s}, "frames": [{"frame": 0, "dy": 0, "dx": 0}, '
                     '{"frame": 1, "dy": 1, "dx": 0}]}' % value)
    res = xcorr("apply", table, path, "--device", "cpu", "--out", tmp_path / "a.tif")
    assert res.returncode == 2
    assert_clean_error(res, "settings.bidi")
    assert not (tmp_path / "a.tif").exists()


def test_save_writes_the_corrected_stack(tmp_path, drift):
    stack, _ = drift
    raw = scanned(stack, -0.5)
    res = xcorr_app.align(raw, bidi="auto", device="cpu", max_shift=8)
    res.save(tmp_path / "o", plots=False)
    saved = tifffile.imread(tmp_path / "o" / "aligned.tif")
    np.testing.assert_array_equal(saved, aligned(res, raw))
    fixed = output_error(saved, res, stack)
    # bidi=0: the shifts alone (a stack corrected elsewhere); here the offset stays
    assert fixed < output_error(aligned(res, raw, bidi=0), res, stack) / 2


def res_of(doc):
    """A stand-in result with a saved run's shifts (what ``output_error`` applies)."""
    shifts = np.array([[f["dy"], f["dx"]] for f in doc["frames"]])
    return _Shifts(shifts)


class _Shifts:
    def __init__(self, shifts):
        self.shifts = shifts

    def apply(self, stack, bidi=0, device="cpu"):
        return xcorr_app.apply_shifts(stack, self.shifts, device=device, bidi=bidi)


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0.7, -2.0])
def test_gpu_removes_it_alike(drift, offset):
    import cupy

    stack, truth = drift
    raw = scanned(stack, offset)
    cpu = xcorr_app.align(raw, bidi="auto", device="cpu", max_shift=8)
    for given in (raw, cupy.asarray(raw)):
        out = np.zeros(raw.shape, np.float32)
        gpu = xcorr_app.align(given, bidi="auto", device="gpu", max_shift=8, out=out)
        assert gpu.settings["bidi"] == cpu.settings["bidi"]
        assert rms(gpu.shifts, truth) < 0.05
        np.testing.assert_allclose(out, aligned(cpu, raw), atol=1e-2)
        assert output_error(out, gpu, stack) < 1.5


@pytest.mark.gpu
def test_gpu_correction_matches_the_cpus():
    import cupy

    frames = (np.random.default_rng(0).random((4, 16, 24)) * 1000).astype(np.uint16)
    for offset in (0.3, -1.7):
        np.testing.assert_array_equal(correct_bidi(cupy.asarray(frames), offset).get(),
                                      correct_bidi(frames, offset))
