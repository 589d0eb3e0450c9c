"""``shifts.json`` and ``shifts.csv`` written a column at a time (``io.json_text``, outputs/_save.py
``frame_columns``; ``AlignResult.csv_text``) say what the value-at-a-time writers said: the
records of ``frame_records`` (a record a line), and one formatted row a frame, byte for byte;
``motion_field.npz`` is stored as NumPy writes it, read back the same."""

import json
import zipfile

import numpy as np
import pytest
import tifffile
from scipy import ndimage as ndi

from sample_paths import stack_path
from xcorr_app import align
from xcorr_app.alignment import AlignResult
from xcorr_app.alignment.outputs import result_document, write_motion_field
from xcorr_app.alignment.outputs._save import frame_columns
from xcorr_app.io import json_numbers, json_text, strict_json


DOCUMENTS = [
    {"frames": []},
    {"n": 2, "frames": [{"x": 1.5, "y": None, "z": "inf", "w": True, "v": 3},
                        {"x": -0.0, "y": 5e-324, "z": "-inf", "w": False, "v": -2},
                        {"x": 1e308, "y": 0.1, "z": "\u00e9 \"q\" \\ \n {} %s", "w": True,
                         "v": 2 ** 70}]},
    {"t": (1, (2.5, "x")), "s": "\u2603", "frames": [{"a": [1, {"b": 2}]}, {}]},
]


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_json_text_is_the_document_a_record_a_line(doc):
    text = json_text(doc, "frames")
    assert json.loads(text) == json.loads(json.dumps(doc))
    assert text.endswith("\n ]\n}\n" if doc["frames"] else "[]\n}\n")
    lines = text.splitlines()
    first = lines.index(' "frames": [') + 1 if doc["frames"] else len(lines)
    for line, record in zip(lines[first:], doc["frames"]):
        assert json.loads(line.strip().rstrip(",")) == json.loads(json.dumps(record))


def test_json_text_refuses_what_standard_json_does_not_hold():
    with pytest.raises(ValueError):
        json_text({"frames": [{"a": float("nan")}]}, "frames")
    with pytest.raises(ValueError, match="last key"):
        json_text({"frames": [], "n": 1}, "frames")


def test_json_numbers():
    assert json_numbers(np.array([1.5, np.nan, np.inf, -np.inf, -0.0])) == \
        [1.5, None, "inf", "-inf", -0.0]


def _stack(rng, n=40, shape=(24, 28)):
    base = ndi.gaussian_filter(rng.random((shape[0] + 10, shape[1] + 10)), 1.5)
    moves = rng.integers(-3, 4, size=(n, 2))
    stack = np.stack([base[5 + dy:5 + dy + shape[0], 5 + dx:5 + dx + shape[1]]
                      for dy, dx in moves]).astype(np.float32)
    stack[3] = 2.0  # constant: NaN shifts
    stack[7, 2, 2] = np.nan  # a NaN pixel
    return stack


def _csv_by_row(res):
    """``shifts.csv`` as it was first written, a formatted row a frame."""
    from xcorr_app.alignment._result import CSV_COLUMNS, _csv_field

    rows = [",".join(CSV_COLUMNS)]
    for i in range(res.n_frames):
        dy, dx = res.shifts[i]
        fy, fx = res.fft_shifts[i]
        rows.append(f"{i},{_csv_field(res.sources[i])},{float(dy)!r},{float(dx)!r},"
                    f"{res.peak[i]:.6g},"
                    f"{res.confidence[i]:.4g},{str(bool(res.low_confidence[i])).lower()},"
                    f"{fy:.4f},{fx:.4f},{str(bool(res.agree[i])).lower()}")
    return "\n".join(rows) + "\n"


def _runs(rng):
    yield align(_stack(rng), max_shift=4, device="cpu", min_confidence=2.0)
    yield align(stack_path("cell"), device="cpu", patches=(4, 4))
    n = 300
    shifts, fft = rng.normal(0, 3, (n, 2)), rng.normal(0, 3, (n, 2))
    peak, conf = rng.random(n), rng.random(n) * 10
    for column in (shifts[:, 0], fft[:, 1], peak, conf):
        column[rng.choice(n, 12, replace=False)] = [np.nan] * 4 + [np.inf] * 4 + [-np.inf] * 4
    yield AlignResult(shifts, peak, conf, fft, rng.random(n) > 0.5,
                      [f"f{i}.tif" if i % 3 else 'a,b "c"\n\u00e9.tif' for i in range(n)],
                      {"reference": "first", "device": "cpu", "note": float("nan")},
                      low_confidence=rng.random(n) > 0.5, plan="fft",
                      source=np.zeros((n, 8, 8), np.float32), border=rng.random(n) > 0.9,
                      frame_shape=(8, 8), seconds=0.5)


def test_the_frames_and_the_table_are_as_written_a_value_at_a_time(rng):
    for res in _runs(rng):
        doc = result_document(res)
        assert doc["frames"] == strict_json(res.frame_records())
        assert list(frame_columns(res)) == list(res.frame_records()[0])
        old = strict_json({**{k: v for k, v in doc.items() if k != "frames"},
                           "frames": res.frame_records()})
        assert json.loads(json_text(doc, "frames")) == old
        assert res.csv_text() == _csv_by_row(res)


def test_motion_field_npz_is_stored_and_reads_back(tmp_path):
    res = align(stack_path("cell"), device="cpu", patches=(4, 4))
    path = tmp_path / "motion_field.npz"
    write_motion_field(path, res)
    with zipfile.ZipFile(path) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    with np.load(path) as f:
        np.testing.assert_array_equal(f["field"], res.motion_field)
        np.testing.assert_array_equal(f["rigid"], res.shifts)
        assert f["low"].dtype == bool and f["quality_flag"].dtype == np.int8


def test_frame_records_are_standard_json_with_a_frame_not_measured():
    """A NaN frame's record (its shift and its quality figures not measured) is JSON-ready as
    said: ``None`` where nothing was measured, no bare NaN (``json.dumps(allow_nan=False)``)."""
    frames = tifffile.imread(stack_path("cell")).astype(np.float32)
    frames[2] = np.nan
    res = align(frames, max_shift=8, verify=False, device="cpu")
    records = res.frame_records()
    json.dumps(records, allow_nan=False)
    assert records[2]["dy"] is None and records[2]["correlation_after"] is None
    assert records[2]["residual_dy"] is None and records[1]["correlation_after"] > 0.5
