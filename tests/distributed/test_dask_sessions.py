"""Whole sessions on a Dask cluster (``xcorr_app.dask.align_sessions``, ``xcorr align A B
--workers N``): each recording a task that a worker process aligns and saves itself, reading
its own file; the rows, folders and files those of one process, the table written by the
client, resumable."""

import csv

import h5py
import numpy as np
import pytest

pytest.importorskip("distributed")
xdask = pytest.importorskip("xcorr_app.dask")

import xcorr_app  # noqa: E402
from cli_helpers import assert_clean_error, xcorr  # noqa: E402
from synthetic import drift_stack, write_stack  # noqa: E402

pytestmark = pytest.mark.slow

OPTS = dict(max_shift=4, device="cpu", quality=False)


@pytest.fixture
def recordings(tmp_path):
    """Two TIFFs (two frame sizes) and an HDF5 dataset named by its source path."""
    folder = tmp_path / "in"
    folder.mkdir()
    a, _ = drift_stack(np.random.default_rng(11), n=6, shape=(40, 48), max_shift=3)
    b, _ = drift_stack(np.random.default_rng(12), n=5, shape=(36, 56), max_shift=3,
                       image="coins")
    c, _ = drift_stack(np.random.default_rng(13), n=7, shape=(32, 40), max_shift=3)
    write_stack(folder / "a.tif", a)
    write_stack(folder / "b.tif", b)
    with h5py.File(folder / "c.h5", "w") as f:
        f["data"] = c.astype(np.float32)
    return [str(folder / "a.tif"), str(folder / "b.tif"), f"{folder / 'c.h5'}:/data"]


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.name in ("shifts.csv", "aligned.tif")}


def test_a_session_on_worker_processes_equals_one_process(client, tmp_path, recordings,
                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)  # (relative paths: made absolute for the workers)
    given = [r.replace(str(tmp_path) + "/", "") for r in recordings]
    want = xcorr_app.align_sessions(given, "one", **OPTS)
    seen = []
    got = xdask.align_sessions(given, "many", client=client, progress=seen.append, **OPTS)
    assert seen == [1, 1, 1]
    assert [r["status"] for r in got] == ["done"] * 3
    assert [r["path"] for r in got] == given
    assert [r["folder"] for r in got] == [f"many/{n}_xcorr" for n in "abc"]
    for w, g in zip(want, got):
        assert {k: v for k, v in g.items() if k not in ("folder", "seconds")} == \
            {k: v for k, v in w.items() if k not in ("folder", "seconds")}
    for n in "abc":
        files = _files(tmp_path / "many" / f"{n}_xcorr")
        assert set(files) == {"shifts.csv", "aligned.tif"}
        assert files == _files(tmp_path / "one" / f"{n}_xcorr")
    with open(tmp_path / "many" / "sessions.csv", newline="") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["done"] * 3
    again = xdask.align_sessions(given, "many", client=client, **OPTS)
    assert [r["status"] for r in again] == ["skipped"] * 3


def test_a_bad_recording_fails_alone_on_its_worker(client, tmp_path, recordings):
    bad = tmp_path / "in" / "bad.tif"
    bad.write_bytes(b"II*\x00 not a tiff")
    rows = xdask.align_sessions([recordings[0], str(bad)], tmp_path / "out", client=client,
                                **OPTS)
    assert [r["status"] for r in rows] == ["done", "failed"]
    assert "bad.tif" in rows[1]["reason"]


def test_options_are_checked_before_any_task(tmp_path, recordings):
    with pytest.raises(ValueError, match=r"gpus=\.\.\. runs without Dask"):
        xdask.align_sessions(recordings, tmp_path / "out", gpus="0", scheduler="sync",
                             **{**OPTS, "device": "auto"})
    assert not (tmp_path / "out").exists()


def test_the_command_line_on_a_local_cluster(tmp_path, recordings):
    out = tmp_path / "out"
    res = xcorr("align", *recordings, "--out", out, "--workers", "2", "--device", "cpu",
                "--max-shift", "4", "--no-quality", "--no-aligned")
    assert res.returncode == 0, res.stderr
    assert "3 recordings: 3 done" in res.stderr
    single = xcorr("align", recordings[1], "--out", tmp_path / "single", "--device", "cpu",
                   "--max-shift", "4", "--no-quality", "--no-aligned", "-q")
    assert single.returncode == 0, single.stderr
    assert (out / "b_xcorr" / "shifts.csv").read_text() == \
        (tmp_path / "single" / "shifts.csv").read_text()
    assert_clean_error(xcorr("align", *recordings, "--out", tmp_path / "x", "--workers", "2",
                             "--scheduler", "tcp://127.0.0.1:1", "--device", "cpu"),
                       "--workers", "--scheduler")


@pytest.mark.gpu
def test_tasks_align_their_recordings_on_the_gpu(tmp_path, recordings):
    """Each task on the GPU (``session_task``'s device, here in this process): the shifts of
    one process's GPU run of it."""
    opts = {**OPTS, "device": "gpu"}
    rows = xdask.align_sessions(recordings, tmp_path / "out", scheduler="sync",
                                aligned=False, **opts)
    assert [r["status"] for r in rows] == ["done"] * 3, [r["reason"] for r in rows]
    for path, row in zip(recordings, rows):
        want = xcorr_app.align(path, **opts)
        with open(f"{row['folder']}/shifts.csv", newline="") as f:
            got = np.array([[float(r["dy"]), float(r["dx"])] for r in csv.DictReader(f)])
        np.testing.assert_allclose(got, want.shifts, atol=1e-3)  # (the table's digits)


def test_a_recording_whose_task_fails_is_its_row(tmp_path, recordings, monkeypatch):
    """A task failing outside its recording's run (a device it cannot use, say) fails that
    recording alone: the others are done and the table is written."""
    from xcorr_app.alignment import Session

    real = Session.align

    def align(self, k):
        if "b.tif" in str(self.recordings[k]):
            raise RuntimeError("no such device")
        return real(self, k)

    monkeypatch.setattr(Session, "align", align)
    seen = []
    rows = xdask.align_sessions(recordings, tmp_path / "out", progress=seen.append,
                                scheduler="sync", **OPTS)
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    assert rows[1]["reason"] == "internal error: RuntimeError: no such device"
    assert rows[1]["path"] == recordings[1] and seen == [1, 1, 1]
    with open(tmp_path / "out" / "sessions.csv", newline="") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["done", "failed", "done"]


def test_rows_name_the_paths_as_given(client, tmp_path, recordings, monkeypatch):
    """A rerun's skipped rows say the folders as given, as one process's do."""
    monkeypatch.chdir(tmp_path)
    given = [r.replace(str(tmp_path) + "/", "") for r in recordings[:2]]
    xdask.align_sessions(given, "out", client=client, **OPTS)
    again = xdask.align_sessions(given, "out", client=client, **OPTS)
    one = xcorr_app.align_sessions(given, "out", **OPTS)
    assert [r["reason"] for r in again] == [r["reason"] for r in one]
    assert "out/a_xcorr" in again[0]["reason"] and str(tmp_path) not in again[0]["reason"]


def test_progress_as_each_recording_ends_one_after_another(tmp_path, recordings):
    """Without a client, one recording after another here, ``progress`` told as each ends."""
    seen = []

    def progress(n):
        seen.append((n, len(list((tmp_path / "out").glob("*_xcorr")))))

    xdask.align_sessions(recordings, tmp_path / "out", progress=progress, scheduler="sync",
                         **OPTS)
    assert seen == [(1, 1), (1, 2), (1, 3)]
