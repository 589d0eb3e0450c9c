"""``xcorr bench align --patches`` (bench/_align_patches.py): the data, the per-patch FFT loop
(on NumPy here), the table and targets, main's options and flow with a made-up run; a quick real
run on the GPU."""

import json

import numpy as np
import pytest

from xcorr_app import backend
from xcorr_app.bench import _align_patches as bp
from xcorr_app.bench._align_data import truth_at
from xcorr_app.errors import InputError, XcorrError

from cli_helpers import assert_clean_error, xcorr


def test_make_stack_repeats_distinct_frames_with_their_truth(monkeypatch):
    monkeypatch.setattr(bp, "DISTINCT", 3)
    stack, params = bp.make_stack(7, (96, 112), seed=1)
    assert stack.shape == (7, 96, 112) and stack.dtype == np.uint16
    np.testing.assert_array_equal(stack[3], stack[0])
    np.testing.assert_array_equal(stack[5], stack[2])
    assert params[4] is params[1]
    assert np.all(params[0][0] == 0) and np.abs(params[1][0]).max() <= 10


def test_fft_patch_loop_finds_the_rigid_shift_with_align_sign(rng):
    """On NumPy: a frame that is the template moved by ``s`` (``frame[q - s] = ref[q]``) gives
    ``s`` at every patch."""
    from scipy import ndimage as ndi

    ref = ndi.gaussian_filter(rng.random((96, 120)), 0.7).astype(np.float32)  # rough: no edge peak
    s = np.array([3, -5])
    frame = np.roll(ref, tuple(-s), axis=(0, 1))  # frame[y] = ref[y + s]
    out = bp.fft_patch_loop(np.stack([ref, frame]), ref, [16, 48], [20, 60], (32, 40), xp=np)
    assert out.shape == (2, 2, 2, 2)
    np.testing.assert_array_equal(out[0], 0)
    np.testing.assert_array_equal(out[1], np.broadcast_to(s, (2, 2, 2)))


def test_field_rms_against_the_truth(monkeypatch):
    monkeypatch.setattr(bp, "DISTINCT", 2)
    _, params = bp.make_stack(2, (96, 96))
    c = np.stack(np.meshgrid([30.0, 60.0], [30.0, 60.0], indexing="ij"), axis=-1)
    truth = truth_at(params, c)
    assert bp.field_rms(truth, params, c) == 0.0
    assert bp.field_rms(truth + 0.5, params, c) == pytest.approx(0.5)


def fake_rows(fps_host=6000.0, fps_gpu=40000.0, err=0.05):
    rows = [bp._row("xcorr --patches, host in/out", 100, 2.0, [100 / fps_host] * 3, err),
            bp._row("xcorr --patches, on the GPU", 100, 1.0, [100 / fps_gpu] * 3, err),
            bp._row("rigid only, host in/out", 100, 1.0, [0.01] * 3, 0.6),
            bp._row("rigid only, on the GPU", 100, 1.0, [0.005] * 3, 0.6),
            bp._row("per-patch CuPy FFT loop, 32 frames", 32, 0.5, [0.32] * 3, 0.4)]
    for r in rows:
        r["vs_loop"] = r["fps"] / rows[-1]["fps"]
    return rows


def test_table_and_targets():
    rows = fake_rows()
    lines = bp.format_table(rows)
    assert lines[0].startswith("| path | frames | first call s | warm s (median)")
    assert len(lines) == 2 + len(rows)
    assert "| xcorr --patches, on the GPU | 100 | 1.00 | 0.003 | 40000 | 400.0x | 0.050 |" \
        in lines
    t = bp.target_lines(rows)
    assert len(t) == 2 and all("missed" not in x for x in t)
    slow = bp.target_lines(fake_rows(fps_host=100.0, err=0.2))
    assert "missed" in slow[0] and "field 0.200 px RMS <= 0.1 (missed)" in slow[0]


def test_the_quality_reports_cost_against_each_runs_twin_without_it():
    rows = fake_rows()
    rows += [bp._row("xcorr --patches, on the GPU" + bp.NO_QUALITY, 100, 1.0,
                     [100 / 40000 / 1.05] * 3, 0.05),
             bp._row("rigid only, on the GPU" + bp.NO_QUALITY, 100, 1.0, [0.0025] * 3, 0.6)]
    lines = [t for t in bp.target_lines(rows) if t.startswith("quality")]
    assert lines == ["quality report's cost, xcorr --patches, on the GPU: 5% <= 10% (met)",
                     "quality report's cost, rigid only, on the GPU: 100% <= 10% (missed)"]


def test_main_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(backend, "gpu_unavailable_reason", lambda: "CuPy is not installed")
    with pytest.raises(XcorrError, match="needs a GPU"):
        bp.main("4x4", quick=True)


@pytest.mark.parametrize("kwargs,words", [
    (dict(frames=1), "at least 2"), (dict(size="40"), "--size must be at least"),
    (dict(patches="0x4"), "at least 1x1")])
def test_main_bad_options(kwargs, words):
    kwargs = {"patches": "4x4", "quick": True, **kwargs}
    with pytest.raises(InputError, match=words):
        bp.main(kwargs.pop("patches"), **kwargs)


def test_main_flow_with_a_made_up_run(monkeypatch, tmp_path):
    calls = []

    def fake_run(stack, params, grid, repeat, echo):
        calls.append((stack.shape, grid, repeat))
        return fake_rows(err=0.2 if len(calls) > 1 else 0.05)

    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    monkeypatch.setattr(bp, "run", fake_run)
    monkeypatch.setattr(bp, "DISTINCT", 2)
    lines = []
    out = tmp_path / "rows.json"
    assert bp.main("3x4", frames=5, size="96x128", json_path=out, echo=lines.append) == 0
    assert calls == [((5, 96, 128), (3, 4), 1)]
    assert lines[0].startswith("xcorr bench align --patches 3x4: in process and one-shot")
    doc = json.loads(out.read_text())
    assert len(doc["rows"]) == 5 and doc["targets"]
    assert bp.main("3x4", frames=5, size="96x128", echo=lines.append) == 1  # field off


def test_oneshot_rows_time_whole_processes_and_read_their_field(monkeypatch):
    """On the CPU (the children choose it: no GPU here): three whole ``xcorr align
    --patches`` processes on the stack's first frames, cold then warm, the last writing
    aligned.tif; the field read back from motion_field.npz is the in-process run's."""
    from xcorr_app import align

    monkeypatch.setattr(bp, "DISTINCT", 4)
    monkeypatch.setattr(bp, "ONESHOT_FRAMES", 6)
    stack, params = bp.make_stack(8, (128, 128), seed=2)
    res = align(stack[:6], max_shift=bp.MAX_SHIFT, patches=(2, 2),
                max_deviation=bp.MAX_DEVIATION, device="cpu", verify=False)
    lines = []
    rows = bp.oneshot_rows(stack, params, (2, 2), res.patch_centres, echo=lines.append)
    assert [r["name"] for r in rows] == [
        "one-shot xcorr align --patches (cold caches)",
        "one-shot xcorr align --patches (warm caches)",
        "one-shot xcorr align --patches, aligned.tif written (warm caches)"]
    assert all(not r["error"] and r["frames"] == 6 and r["seconds"] > 0 for r in rows), rows
    want = bp.field_rms(res.motion_field, params[:6], res.patch_centres)
    for r in rows:
        assert r["field_rms_px"] == pytest.approx(want, abs=1e-9)
    assert len(lines) == 3
    table = bp.format_table(rows)
    assert table[2].startswith("| one-shot xcorr align --patches (cold caches) | 6 | - | ")


def test_a_failing_oneshot_process_is_a_row_with_its_error(monkeypatch):
    monkeypatch.setattr(bp, "DISTINCT", 2)
    monkeypatch.setattr(bp, "ONESHOT_FRAMES", 2)
    monkeypatch.setattr(bp, "MAX_DEVIATION", -1)  # the children refuse it
    stack, params = bp.make_stack(2, (128, 128))
    rows = bp.oneshot_rows(stack, params, (2, 2), np.zeros((2, 2, 2)), echo=lambda _: None)
    assert len(rows) == 3 and all("max-deviation" in r["error"] or "max_deviation" in r["error"]
                                  for r in rows), rows
    assert "ERROR" in bp.format_table(rows)[2]


def test_cli_patches_option_errors_are_one_line():
    res = xcorr("bench", "align", "--patches", "0x3")
    assert res.returncode == 2
    assert_clean_error(res, "--patches must be at least 1x1")
    res = xcorr("bench", "align", "--patches", "4x4", "--device", "cpu")
    assert res.returncode == 2
    assert_clean_error(res, "--patches times the GPU in process")


@pytest.mark.gpu
def test_quick_run_on_the_gpu(monkeypatch):
    monkeypatch.setattr(bp, "DISTINCT", 8)
    lines = []
    status = bp.main("4x4", frames=24, size="256", echo=lines.append)
    table = [x for x in lines if x.startswith("| ")]
    assert len(table) == 2 + 9 + 3 and not any("ERROR" in x for x in table), "\n".join(lines)
    assert status == 0, "\n".join(lines)
