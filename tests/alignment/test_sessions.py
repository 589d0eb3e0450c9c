"""Whole sessions in one call (:func:`xcorr_app.align_sessions`): each recording into its own
folder exactly as one :func:`xcorr_app.align` and :meth:`AlignResult.save` of it, one summary
table, resumable, a bad recording failing alone."""

import csv
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import xcorr_app
from synthetic import drift_stack, write_cut_tiff, write_stack
from xcorr_app.alignment import SESSION_COLUMNS, AlignOptions
from xcorr_app.errors import InputError, OutputError

#: the options of every run here (small and quick on the CPU)
OPTS = dict(max_shift=4, device="cpu", quality=False)


@pytest.fixture
def session(tmp_path):
    """Three recordings: two TIFFs (uint16, of two frame sizes) and an HDF5 dataset
    (float32)."""
    folder = tmp_path / "in"
    folder.mkdir()
    a, _ = drift_stack(np.random.default_rng(1), n=6, shape=(40, 48), max_shift=3)
    b, _ = drift_stack(np.random.default_rng(2), n=5, shape=(36, 56), max_shift=3,
                       image="coins")
    c, _ = drift_stack(np.random.default_rng(3), n=7, shape=(32, 40), max_shift=3)
    write_stack(folder / "a.tif", a)
    write_stack(folder / "b.tif", b)
    with h5py.File(folder / "c.h5", "w") as f:
        f["data"] = c.astype(np.float32)
    return [str(folder / "a.tif"), str(folder / "b.tif"), f"{folder / 'c.h5'}:/data"]


def read_table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_each_recording_as_one_align(tmp_path, session):
    out = tmp_path / "out"
    rows = xcorr_app.align_sessions(session, out, aligned=False, **OPTS)
    assert [r["status"] for r in rows] == ["done"] * 3
    assert [r["folder"] for r in rows] == [str(out / n) for n in ("a_xcorr", "b_xcorr",
                                                                   "c_xcorr")]
    assert [r["frames"] for r in rows] == [6, 5, 7]
    for path, row in zip(session, rows):
        res = xcorr_app.align(path, **OPTS)
        assert (Path(row["folder"]) / "shifts.csv").read_text() == res.csv_text()
        assert row["median_confidence"] == round(float(np.median(res.confidence)), 4)
        assert row["low_confidence_frames"] == int(res.low_confidence.sum())
        assert row["reason"] == "" and row["seconds"] > 0
        assert sorted(p.name for p in Path(row["folder"]).iterdir()) == \
            ["drift.png", "shifts.csv", "shifts.json"]
    table = read_table(out / "sessions.csv")
    assert list(table[0]) == list(SESSION_COLUMNS)
    assert [(t["path"], t["status"], t["frames"]) for t in table] == \
        [(p, "done", str(n)) for p, n in zip(session, (6, 5, 7))]


def test_rerun_skips_finished_and_force_redoes(tmp_path, session):
    out = tmp_path / "out"
    first = xcorr_app.align_sessions(session, out, aligned=False, **OPTS)
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("shifts.json")}
    again = xcorr_app.align_sessions(session, out, aligned=False, **OPTS)
    assert [r["status"] for r in again] == ["skipped"] * 3
    assert all("force" in r["reason"] for r in again)
    # (a skipped row tells the earlier run's numbers, read from its shifts.json)
    for key in ("frames", "median_confidence", "low_confidence_frames"):
        assert [r[key] for r in again] == [r[key] for r in first]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("shifts.json")} == stamps
    assert [t["status"] for t in read_table(out / "sessions.csv")] == ["skipped"] * 3
    forced = xcorr_app.align_sessions(session, out, force=True, aligned=False, **OPTS)
    assert [r["status"] for r in forced] == ["done"] * 3
    assert all(p.stat().st_mtime_ns != stamps[p] for p in out.rglob("shifts.json"))


def test_a_half_written_shifts_json_is_not_a_finished_run(tmp_path, session):
    out = tmp_path / "out"
    xcorr_app.align_sessions(session[:2], out, aligned=False, **OPTS)
    doc = json.loads((out / "b_xcorr" / "shifts.json").read_text())
    doc["frames"] = doc["frames"][:2]  # (not a run's: its summary counts 5 frames)
    (out / "b_xcorr" / "shifts.json").write_text(json.dumps(doc))
    rows = xcorr_app.align_sessions(session[:2], out, aligned=False, **OPTS)
    assert [r["status"] for r in rows] == ["skipped", "failed"]
    assert "exists" in rows[1]["reason"] and "force" in rows[1]["reason"]
    assert [r["status"] for r in xcorr_app.align_sessions(
        session[:2], out, force=True, aligned=False, **OPTS)] == ["done", "done"]


@pytest.mark.parametrize("layout, cut", [("imagej", 0.6), ("plain", "page1")])
def test_a_damaged_recording_fails_alone(tmp_path, session, layout, cut):
    stack, _ = drift_stack(np.random.default_rng(4), n=20, shape=(24, 32), max_shift=2)
    damaged = write_cut_tiff(tmp_path / "in" / "cut.tif", stack, layout, cut)
    out = tmp_path / "out"
    rows = xcorr_app.align_sessions([session[0], str(damaged), session[2]], out, **OPTS)
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    assert "truncated" in rows[1]["reason"] and "\n" not in rows[1]["reason"]
    assert rows[1]["frames"] is None and rows[1]["median_confidence"] is None
    assert not (out / "cut_xcorr").exists()  # (nothing left of the failed one)
    assert (out / "a_xcorr" / "aligned.tif").is_file()
    table = read_table(out / "sessions.csv")
    assert table[1]["status"] == "failed" and table[1]["reason"] == rows[1]["reason"]
    assert table[1]["frames"] == ""


def test_a_glob_pattern_and_the_current_folder(tmp_path, session, monkeypatch):
    (tmp_path / "in" / "notes.txt").write_text("not a recording")
    monkeypatch.chdir(tmp_path)
    seen = []
    rows = xcorr_app.align_sessions("in/*.tif", progress=seen.append, aligned=False, **OPTS)
    assert [r["path"] for r in rows] == ["in/a.tif", "in/b.tif"]  # (sorted; .h5 and .txt not)
    assert [r["folder"] for r in rows] == ["a_xcorr", "b_xcorr"]
    assert seen == [1, 1]
    assert (tmp_path / "a_xcorr" / "shifts.csv").is_file()
    assert [t["path"] for t in read_table(tmp_path / "sessions.csv")] == ["in/a.tif", "in/b.tif"]


def test_options_built_once(tmp_path, session):
    opts = AlignOptions(max_shift=3, device="cpu", quality=False, reference="mean")
    rows = xcorr_app.align_sessions(session[1:], tmp_path / "out", options=opts,
                                    aligned=False)
    assert [r["status"] for r in rows] == ["done", "done"]
    doc = json.loads((tmp_path / "out" / "c_xcorr" / "shifts.json").read_text())
    assert doc["settings"]["reference"] == "mean" and doc["settings"]["max_shift"] == [3, 3]


def test_refusals_before_anything_runs(tmp_path, session):
    out = tmp_path / "out"
    with pytest.raises(InputError, match="matches no file"):
        xcorr_app.align_sessions(str(tmp_path / "none" / "*.tif"), out, **OPTS)
    with pytest.raises(InputError, match="both be written into"):
        xcorr_app.align_sessions([session[0], str(tmp_path / "other" / "a.tif")], out, **OPTS)
    with pytest.raises(InputError, match="max_shift"):
        xcorr_app.align_sessions(session, out, max_shift=-1, device="cpu")
    with pytest.raises(InputError, match="unknown option 'max_shfit'"):
        xcorr_app.align_sessions(session, out, max_shfit=4)
    with pytest.raises(InputError, match="channel=K"):
        xcorr_app.align_sessions(session, out, channels="all", **OPTS)
    with pytest.raises(InputError, match="aligned=False"):
        xcorr_app.align_sessions(session, out, aligned=False, crop=True, **OPTS)
    with pytest.raises(InputError, match="no recording"):
        xcorr_app.align_sessions([], out, **OPTS)
    with pytest.raises(InputError, match="not a file"):
        xcorr_app.align_sessions(session, session[0], **OPTS)
    assert not out.exists()
    out.mkdir()
    (out / "sessions.csv").write_text("mine,not xcorr's\n")
    with pytest.raises(OutputError, match="not a summary table"):
        xcorr_app.align_sessions(session, out, **OPTS)
    assert sorted(p.name for p in out.iterdir()) == ["sessions.csv"]
    assert (out / "sessions.csv").read_text() == "mine,not xcorr's\n"


@pytest.mark.gpu
def test_one_recording_a_gpu(tmp_path, session):
    """``gpus``: the recordings share the GPUs, each on one, with the shifts of a run of it
    on a GPU alone."""
    rows = xcorr_app.align_sessions(session, tmp_path / "out", gpus="all", max_shift=4,
                                    quality=False, aligned=False)
    assert [r["status"] for r in rows] == ["done"] * 3
    for path, row in zip(session, rows):
        res = xcorr_app.align(path, max_shift=4, quality=False, device="gpu")
        got = [[float(t["dy"]), float(t["dx"])]
               for t in read_table(Path(row["folder"]) / "shifts.csv")]
        np.testing.assert_allclose(got, res.shifts, atol=1e-3)


def test_an_unexpected_failure_is_that_recordings_row(tmp_path, session, monkeypatch):
    """An exception of another kind (a driver's RuntimeError, say) fails its recording alone:
    the others are done and the table written."""
    from xcorr_app.alignment import _api

    real = _api.align

    def flaky(path, *args, **kwargs):
        if str(path).endswith("b.tif"):
            raise RuntimeError("device lost")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_api, "align", flaky)
    rows = xcorr_app.align_sessions(session, tmp_path / "out", **OPTS)
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    assert rows[1]["reason"] == "internal error: RuntimeError: device lost"
    assert read_table(tmp_path / "out" / "sessions.csv")[1]["status"] == "failed"


def test_every_channel_to_nwb_is_refused_once_before_anything_runs(tmp_path, session):
    with pytest.raises(InputError, match="one channel"):
        xcorr_app.align_sessions(session, tmp_path / "out", format="nwb", channels="all",
                                 channel=0, **OPTS)
    assert not (tmp_path / "out").exists()
