"""A Dask cluster of separate worker processes standing in for nodes (issue 73, docs/cluster.md):
an OME-Zarr store that each task opens itself (nothing shared in memory, no frames through the
client), measured by ``xcorr_app.dask.align`` and by ``xcorr align --scheduler``; the shifts
equal one process's and the known drift."""

import csv
import io
import json
import os

import numpy as np
import pytest
from scipy import ndimage as ndi

pytest.importorskip("distributed")
zarr = pytest.importorskip("zarr")
xdask = pytest.importorskip("xcorr_app.dask")

from cli_helpers import xcorr  # noqa: E402
from xcorr_app import align  # noqa: E402

pytestmark = pytest.mark.slow

N, H, W, MARGIN = 24, 64, 80, 8
OPTIONS = dict(device="cpu", max_shift=8)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``(path, truth)``: an OME-Zarr 0.4 image (Zarr v2, ``t, y, x``, 8 frames a chunk) of a
    smooth random scene drifting by quarter-pixel steps; ``truth[i]`` aligns frame ``i`` with
    frame 0.  Written with zarr in the OME-NGFF layout (ome-zarr-py is no test dependency)."""
    rng = np.random.default_rng(73)
    scene = ndi.gaussian_filter(rng.random((H + 2 * MARGIN, W + 2 * MARGIN)), 2.0)
    truth = np.round(rng.uniform(-4, 4, size=(N, 2)) * 4) / 4
    truth[0] = 0.0
    frames = np.stack([ndi.shift(scene, -t, order=3, mode="reflect")[MARGIN:MARGIN + H,
                                                                      MARGIN:MARGIN + W]
                       for t in truth])
    frames = ((frames - frames.min()) / np.ptp(frames) * 60000).astype(np.uint16)
    path = tmp_path_factory.mktemp("cluster") / "movie.ome.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    root.create_array("0", data=frames, chunks=(8, H, W))
    root.attrs["multiscales"] = [{"version": "0.4", "axes": [
        {"name": "t", "type": "time"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 0.5, 0.5]}]}]}]
    return path, truth


def test_workers_are_processes_of_their_own(client):
    """No shared memory: each worker is a process of its own, none of them this one."""
    pids = client.run(os.getpid)
    assert len(pids) == 2 and len(set(pids.values())) == 2
    assert os.getpid() not in pids.values()


def test_ome_zarr_on_worker_processes_equals_one_process(client, store):
    path, truth = store
    want = align(path, **OPTIONS)
    got = xdask.align(path, client=client, task_frames=8, **OPTIONS)
    assert got.settings["dask"]["task_frames"] == [8, 8, 8]
    np.testing.assert_array_equal(got.shifts, want.shifts)
    np.testing.assert_array_equal(got.low_confidence, want.low_confidence)
    np.testing.assert_allclose(got.shifts, truth, atol=0.1)


def test_a_path_is_one_range_per_worker_each_on_its_own(client, store):
    """Without ``task_frames`` a path's frames go out as one contiguous range per worker, each
    range to a worker of its own (the function the tasks share is on every worker first, so
    no worker draws the tasks to itself), as ``--gpus`` gives each GPU one."""
    from distributed import get_task_stream

    path, _ = store
    client.wait_for_workers(2, timeout=120)  # (one restarted on a loaded machine: back first)
    with get_task_stream(client) as stream:
        got = xdask.align(path, client=client, **{**OPTIONS, "quality": False})
    assert got.settings["dask"]["task_frames"] == [N // 2, N // 2]
    ran = [t for t in stream.data if "range_task" in str(t["key"])]
    assert len(ran) == 2 and len({t["worker"] for t in ran}) == 2
    np.testing.assert_array_equal(got.shifts, align(path, **OPTIONS).shifts)


def test_a_relative_path_is_the_clients(client, store, monkeypatch):
    """Workers started elsewhere open the file the client named: the client makes it absolute
    (a path every node reads the same: docs/cluster.md)."""
    path, _ = store
    monkeypatch.chdir(path.parent)  # (this process only: the workers stay where they started)
    want = align(path, **OPTIONS)
    got = xdask.align(path.name, client=client, task_frames=8, **OPTIONS)
    np.testing.assert_array_equal(got.shifts, want.shifts)


def _shifts(folder):
    """shifts.csv's text, its (dy, dx) columns and shifts.json's settings."""
    text = (folder / "shifts.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    settings = json.loads((folder / "shifts.json").read_text())["settings"]
    return text, np.array([[float(r["dy"]), float(r["dx"])] for r in rows]), settings


def test_cli_scheduler_writes_what_one_process_writes(client, store, tmp_path):
    """``xcorr align STORE --scheduler tcp://...``: another process, a client of this cluster
    (a path's frames: one range per worker)."""
    path, truth = store
    address = client.scheduler.address
    assert address.startswith("tcp://")
    one, cluster = tmp_path / "one", tmp_path / "cluster"
    for out, extra in ((one, ()), (cluster, ("--scheduler", address))):
        res = xcorr("align", path, "--max-shift", "8", "--device", "cpu", "--no-aligned", "-q",
                    "--out", out, *extra)
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
    text, measured, settings = _shifts(cluster)
    want_text, _, want_settings = _shifts(one)
    assert "dask" in settings and "dask" not in want_settings  # (it ran on the cluster)
    assert text == want_text and len(measured) == N
    np.testing.assert_allclose(measured, truth, atol=0.1)
