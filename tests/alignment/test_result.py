"""The result does not lose or fake data: peaks on the border of the --max-shift window,
constant frames and frames with NaN pixels (in stacks and in estimate_shifts), tiny frames,
infinite confidences in shifts.json, sequences of arrays and unsupported pixel types."""

import json

import numpy as np
import pytest
from scipy import ndimage as ndi

from sample_paths import stack_path, truth
from xcorr_app import align, apply_shifts, estimate_shifts
from xcorr_app.alignment import AlignResult
from xcorr_app.errors import InputError


def test_max_shift_below_the_drift_is_flagged_not_agreeing():
    """The cell sample drifts up to 5.8 px; --max-shift 2 cannot follow: the frames pinned at
    the bound are flagged, their confidence is not inf, the FFT reference outside the window
    does not agree, and the summary says so."""
    res = align(stack_path("cell"), max_shift=2, device="cpu")
    pinned = (np.abs(res.shifts) >= 2).any(axis=1)
    beyond = (np.abs(truth("cell")) > 2.5).any(axis=1)
    assert beyond.sum() >= 5 and pinned[beyond].all()
    np.testing.assert_array_equal(res.border, pinned)
    assert res.low_confidence[pinned].all() and not res.low_confidence[~pinned].any()
    assert (res.confidence[pinned] == 0).all()
    assert not res.agree[beyond].any()
    s = res.summary()
    assert s["border_frames"] == int(pinned.sum()) == s["flagged_frames"]
    assert s["agreement"] <= 1 - beyond.mean() + 1e-9
    assert any(f"{int(pinned.sum())} frames peaked on the border of the max_shift window" in n
               and "drift may exceed it" in n for n in s["notes"])
    assert any("outside max_shift" in n for n in s["notes"])
    assert [r["peak_on_border"] for r in res.frame_records()] == pinned.tolist()
    # a bound the drift fits in: nothing flagged, nothing noted
    ok = align(stack_path("cell"), max_shift=10, device="cpu")
    assert not ok.border.any() and not ok.low_confidence.any() and ok.summary()["notes"] == []
    assert ok.agree.all()


def _smooth_stack(rng, n=6, shape=(48, 56)):
    base = ndi.gaussian_filter(rng.random((shape[0] + 12, shape[1] + 12)), 2)
    moves = rng.integers(-3, 4, size=(n, 2))
    moves[0] = 0
    stack = np.stack([base[6 + dy:6 + dy + shape[0], 6 + dx:6 + dx + shape[1]]
                      for dy, dx in moves]).astype(np.float32)
    return stack, moves.astype(np.float64)  # frame[n] = ref[n + move]: shift +move


@pytest.mark.parametrize("bad", ["constant", "nan", "inf"])
def test_estimate_shifts_unmeasurable_frame_is_nan(rng, bad):
    stack, moves = _smooth_stack(rng)
    frames = stack.copy()
    if bad == "constant":
        frames[2] = 7.0
    else:
        frames[2, 5, 7] = np.nan if bad == "nan" else np.inf
    shifts, peak, conf = estimate_shifts(stack[0], frames, max_shift=6, device="cpu")
    assert np.isnan(shifts[2]).all() and np.isnan(peak[2]) and conf[2] == 0
    good = np.arange(len(stack)) != 2
    np.testing.assert_allclose(shifts[good], moves[good], atol=0.1)
    assert np.isfinite(peak[good]).all() and (conf[good] > 1).all()


@pytest.mark.parametrize("bad", ["constant", "nan"])
def test_estimate_shifts_unusable_reference_is_an_error(rng, bad):
    stack, _ = _smooth_stack(rng)
    ref = stack[0].copy()
    if bad == "constant":
        ref[:] = 3.0
    else:
        ref[4, 4] = np.nan
    with pytest.raises(InputError, match="reference is constant or has NaN"):
        estimate_shifts(ref, stack, max_shift=4, device="cpu")
    refs = np.stack([stack[0]] * len(stack))
    refs[3] = ref
    with pytest.raises(InputError, match="reference 3 is constant"):
        estimate_shifts(refs, stack, max_shift=4, device="cpu")


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (3, 16), (16, 2)])
def test_frames_below_4x4_are_refused(rng, shape):
    frames = rng.random((2, *shape))
    with pytest.raises(InputError, match="at least 4 pixels"):
        estimate_shifts(frames[0], frames, device="cpu")
    with pytest.raises(InputError, match="at least 4 pixels"):
        align(frames, device="cpu")


def test_4x4_frames_are_measured(rng):
    img = rng.random((4, 4))
    shifts, _, _ = estimate_shifts(img, img[None], device="cpu")
    np.testing.assert_allclose(shifts, [[0.0, 0.0]], atol=1e-6)


@pytest.mark.parametrize("bad", ["constant", "nan"])
def test_unmeasurable_frame_in_a_stack_is_nan_flagged_and_not_agreeing(rng, bad):
    stack, moves = _smooth_stack(rng, n=12)
    if bad == "constant":
        stack[5] = 2.0
    else:
        stack[5, 10, 10] = np.nan
    res = align(stack, device="cpu")
    assert np.isnan(res.shifts[5]).all() and np.isnan(res.fft_shifts[5]).all()
    assert res.low_confidence[5] and not res.agree[5] and res.confidence[5] == 0
    assert res.low_confidence.sum() == 1
    s = res.summary()
    assert s["agreement"] == pytest.approx(11 / 12)  # not 100%: frame 5 was not checked
    assert (s["constant_frames"], s["nonfinite_frames"]) == ((1, 0) if bad == "constant"
                                                             else (0, 1))
    word = "constant frame" if bad == "constant" else "NaN or Inf pixels"
    assert any(word in n for n in s["notes"])
    # the other frames are measured as without it
    keep = np.arange(12) != 5
    alone = align(stack[keep], device="cpu")
    np.testing.assert_array_equal(res.shifts[keep], alone.shifts)
    np.testing.assert_allclose(res.shifts[keep], moves[keep], atol=0.1)


@pytest.mark.parametrize("chunk", [64, 1, 2, 3])
def test_previous_reference_measures_across_unmeasurable_frames(rng, chunk):
    """Each frame after an unmeasurable one (frame 3: NaN; 6 and 7: constant) is measured
    against the last measurable frame before it: the accumulated drift is the one of the stack
    without them, whatever the chunks (it was lost before: a step of 0 for the frame after)."""
    stack, moves = _smooth_stack(rng, n=10)
    stack[3, 0, 0] = np.nan
    stack[6] = 5.0
    stack[7] = 5.0
    res = align(stack, "previous", device="cpu", chunk_frames=chunk)
    bad = np.isin(np.arange(10), [3, 6, 7])
    alone = align(stack[~bad], "previous", device="cpu")
    np.testing.assert_array_equal(res.shifts[~bad], alone.shifts)
    np.testing.assert_allclose(res.shifts[~bad], moves[~bad], atol=0.1)
    assert np.isnan(res.shifts[bad]).all()
    assert res.low_confidence.tolist() == bad.tolist()
    assert any("last measurable frame" in n for n in res.summary()["notes"])


def test_previous_reference_chain_starts_at_the_first_measurable_frame(rng):
    stack, moves = _smooth_stack(rng, n=6)
    stack[0] = 1.0
    res = align(stack, "previous", device="cpu", chunk_frames=2)
    np.testing.assert_array_equal(res.shifts[1:], align(stack[1:], "previous",
                                                        device="cpu").shifts)
    np.testing.assert_allclose(res.shifts[1:], moves[1:] - moves[1], atol=0.1)


def test_previous_reference_range_looks_back_for_a_measurable_frame(rng):
    """A range that starts after an unmeasurable frame (other GPUs, Dask workers) measures its
    first frame against the last measurable one before it: the rows the whole run gives."""
    from xcorr_app.alignment import AlignOptions
    from xcorr_app.alignment.rigid import measure_frames
    from xcorr_app.io import ArraySource

    stack, _ = _smooth_stack(rng, n=9)
    stack[4] = 3.0
    opts = AlignOptions(reference="previous")
    with ArraySource(stack) as src:
        whole, _ = measure_frames(opts, src, np, 4, None)
    with ArraySource(stack) as src:
        part, _ = measure_frames(opts, src, np, 3, None, start=5)
    np.testing.assert_array_equal(part, whole[5:])


def test_infinite_confidence_is_the_string_inf_in_json_and_csv():
    n = 3
    res = AlignResult(np.array([[0.0, 0.0], [1.0, 2.0], [np.nan, np.nan]]),
                      np.array([1.0, 0.9, np.nan]), np.array([np.inf, 2.5, 0.0]),
                      np.zeros((n, 2)), np.ones(n, bool), ["a"] * n, {})
    records = res.frame_records()
    assert [r["confidence"] for r in records] == ["inf", 2.5, 0.0]
    assert records[2]["dy"] is None and records[2]["peak"] is None
    text = json.dumps(records, allow_nan=False)  # standard JSON: no Infinity, no NaN
    assert json.loads(text)[0]["confidence"] == "inf"
    assert res.csv_text().splitlines()[1].split(",")[5] == "inf"


def test_a_list_of_frames_is_a_stack(rng):
    stack, _ = _smooth_stack(rng, n=4)
    want = align(stack, max_shift=5, device="cpu")
    for seq in (list(stack), tuple(stack)):
        got = align(seq, max_shift=5, device="cpu")
        np.testing.assert_array_equal(got.shifts, want.shifts)
    out = np.concatenate([c for _, c in apply_shifts(list(stack), want.shifts, device="cpu")])
    assert out.shape == stack.shape


@pytest.mark.parametrize("seq,msg", [
    (lambda s: [s[0], s[1][:-1]], "one shape"),
    (lambda s: [s[0][None], s[1][None]], "one shape"),
    (lambda s: [s[0], s[1].astype(np.float64)], "mixes pixel types"),
    (lambda s: [], "empty"),
    (lambda s: ["a.tif", "b.tif"], "sequence of paths"),
    (lambda s: [[1.0, 2.0], [3.0, 4.0]], "sequence of 2-D arrays"),
])
def test_bad_sequences_are_clear_errors(rng, seq, msg):
    stack, _ = _smooth_stack(rng, n=2)
    with pytest.raises(InputError, match=msg):
        align(seq(stack), device="cpu")


@pytest.mark.parametrize("dtype", [np.int64, np.uint32, np.int32, bool, np.complex64])
def test_pixel_types_the_reader_refuses_are_refused(rng, dtype):
    stack = (rng.random((3, 16, 16)) * 100).astype(dtype)
    with pytest.raises(InputError, match="pixels of type"):
        align(stack, device="cpu")
    with pytest.raises(InputError, match="pixels of type"):
        estimate_shifts(stack[0], stack, device="cpu")
    with pytest.raises(InputError, match="pixels of type"):
        list(apply_shifts(stack, np.zeros((3, 2)), device="cpu"))
    ok = (rng.random((3, 16, 16)) * 100).astype(np.uint16)
    with pytest.raises(InputError, match="reference has pixels of type"):
        align(ok, reference=stack[0], device="cpu")


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float16, np.float32,
                                   np.float64])
def test_pixel_types_the_reader_reads_are_aligned(rng, dtype):
    stack, _ = _smooth_stack(rng, n=3)
    res = align((stack * 200).astype(dtype), max_shift=5, device="cpu")
    assert np.isfinite(res.shifts).all()
