"""``xcorr bench align --gpus``: its runs, rows, targets and the whole flow with stand-in
processes on the CPU; the real processes on the GPUs of the machine."""

import json
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import assert_clean_error, xcorr
from xcorr_app import backend, streaming
from xcorr_app.errors import InputError
from xcorr_app.bench import _align_gpus as ag
from xcorr_app.bench._oneshot import OneShot


def test_runs_cover_every_count_kind_and_executor():
    runs = ag.runs_of((0, 1, 2, 3), (8, 8))
    names = [r[0] for r in runs]
    assert names[:4] == ["xcorr align (one GPU)", "xcorr align --gpus 0",
                         "xcorr align --gpus 0,1", "xcorr align --gpus all"]
    assert names[4:8] == ["xcorr align --workers 2", "xcorr align --workers 4",
                          "xcorr align --scheduler (2 workers)",
                          "xcorr align --scheduler (4 workers)"]
    assert names[8] == "xcorr align --patches 8x8 (one GPU)" and len(runs) == 16
    assert runs[3][1:] == ("rigid", 4, ["--gpus", "all"], None)
    assert runs[8][3:] == (["--patches", "8x8", "--device", "gpu"], (0,))
    assert runs[5][4] == (0, 1, 2, 3)  # (Dask's workers shown the GPUs named)
    # (a cluster started before the run: its address put in for the placeholder)
    assert runs[7][3] == ["--scheduler", ag.SCHEDULER] and runs[7][4] == (0, 1, 2, 3)
    # GPUs named out of order or not from 0: a list, never "all"; one GPU: the first named
    named = ag.runs_of((2, 3), (4, 4), dask=False)
    assert named[2][3] == ["--gpus", "2,3"] and named[0][4] == (2,)
    # a stack below 16 GiB: every GPU named (all would run on one), no Dask runs
    small = ag.runs_of((0, 1, 2, 3), (8, 8), shared=False)
    assert [r[0] for r in small][3] == "xcorr align --gpus 0,1,2,3" and len(small) == 8
    assert [r[0] for r in ag.runs_of((0,), (4, 4), dask=False)] == [
        "xcorr align (one GPU)", "xcorr align --gpus 0",
        "xcorr align --patches 4x4 (one GPU)", "xcorr align --patches 4x4 --gpus 0"]


def test_each_process_is_shown_the_gpus_it_uses(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert ag._shown({"A": "1"}, None) == {"A": "1"}
    assert ag._shown({}, (2, 3)) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4, 6,7")  # (this process's own numbering)
    assert ag._shown({}, (1, 2)) == {"CUDA_VISIBLE_DEVICES": "6,7"}


def test_largest_difference_counts_nan_on_one_side_only():
    a = np.array([[0.0, np.nan], [1.0, 2.0]])
    assert ag._largest_difference(a, a) == 0.0
    assert ag._largest_difference(a, a + 3e-5) == pytest.approx(3e-5)
    assert ag._largest_difference(a, np.zeros((2, 2))) == float("inf")
    assert ag._largest_difference(a, a[:1]) == float("inf")


def _rows():
    return [{"name": "read 1", "kind": "read", "k": 1, "seconds": 4.0, "bytes": 8e9},
            {"name": "read 2", "kind": "read", "k": 2, "seconds": 2.0, "bytes": 8e9},
            {"name": "one", "kind": "rigid", "k": 1, "seconds": 6.0, "one": True, "bytes": 8e9},
            {"name": "g2", "kind": "rigid", "k": 2, "seconds": 4.0, "diff": 2e-5, "bytes": 8e9},
            {"name": "w2", "kind": "rigid", "k": 2, "seconds": 4.4, "dask": True, "diff": 0.0,
             "bytes": 8e9},
            {"name": "p1", "kind": "patches", "k": 1, "seconds": 9.0, "one": True,
             "bytes": 8e9},
            {"name": "p2", "kind": "patches", "k": 2, "seconds": 4.5, "diff": 0.01,
             "bytes": 8e9},
            {"name": "bad", "kind": "patches", "k": 2, "seconds": None, "error": "boom",
             "dask": True, "bytes": 8e9}]


def test_targets_and_table():
    rows = ag.summarise(_rows())
    by = {r["name"]: r for r in rows}
    assert by["g2"]["speedup"] == pytest.approx(1.5) and by["g2"]["vs_read"] == pytest.approx(0.5)
    assert by["w2"]["vs_gpus"] == pytest.approx(1.1)
    assert [by[k]["status"] for k in ("read 1", "g2", "p2", "bad")] == \
        ["-", "ok", "DIFFERS", "ERROR"]
    lines = ag.target_lines(rows)
    assert lines == [
        "g2: 1.50x one GPU (target >= 1.85x: no); 50% of the 2-thread read (the read reached "
        ">= 90%: no)",
        "w2: 1.10x --gpus' time (target <= 1.15x: yes)",
        "p2: 2.00x one GPU (target >= 1.85x: yes)",
        "results: every run within 0.0001 px of one GPU's: no (largest 0.01 px)"]
    table = ag.format_table(rows)
    assert table[3] == "| read 2 | 2 | 2.00 | 4.00 |  |  |  |  | - |"
    assert table[5] == "| g2 | 2 | 4.00 | 2.00 | 1.50x | 50% | 2e-05 |  | ok |"
    assert table[-1] == "| bad | 2 | failed |  |  |  |  |  | ERROR |"


class _Calls(list):
    """The processes' command lines (and ``envs``, their environments)."""


@pytest.fixture
def stand_in(monkeypatch):
    """Two "GPUs" whose ``xcorr align`` processes write the true shifts (the ``--gpus 0,1``
    patch run a little off) and a motion field; the reads are real."""
    calls, envs = _Calls(), []

    def fake_run(argv, env=None, out=None):
        argv = list(map(str, argv))
        calls.append(argv)
        envs.append(env)
        folder = Path(argv[argv.index("--out") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        n = 12 if "warm.tif" not in argv[argv.index("align") + 1] else 6
        shifts = ag.SyntheticStack(12, (64, 64), seed=0).shifts[:n]
        frames = [{"dy": float(dy), "dx": float(dx)} for dy, dx in shifts]
        (folder / "shifts.json").write_text(json.dumps({"frames": frames}))
        if "--patches" in argv:
            field = np.zeros((n, 2, 2, 2))
            if "--gpus" in argv and argv[argv.index("--gpus") + 1] == "all":
                field[3] += 0.5
            np.savez(folder / "motion_field.npz", field=field)
        return OneShot(seconds=1.0, peak_bytes=None, returncode=0, stderr="", shifts=None)

    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    monkeypatch.setattr(streaming, "parse_gpus", lambda spec: (0, 1))
    monkeypatch.setattr(ag, "run_process", fake_run)
    monkeypatch.setattr(ag.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(ag, "WARM_FRAMES", 6)
    monkeypatch.setattr(ag, "SCALE_OUT_MIN_BYTES", 0)  # (the stack counts as large)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    calls.envs = envs
    return calls


def test_the_whole_flow_with_stand_in_processes(stand_in, tmp_path):
    lines = []
    status = ag.main("all", frames=12, size="64", patches=(2, 2), repeat=2, workdir=tmp_path,
                     json_path=tmp_path / "rows.json", echo=lines.append)
    assert status == 1  # the patch run on both GPUs differs by 0.5 px
    warm = [c for c in stand_in if c[c.index("align") + 1].endswith("warm.tif")]
    timed = [c for c in stand_in if c not in warm]
    assert len(warm) == 6 and len(timed) == 2 * 6  # 6 runs (no Dask), each timed twice
    assert all("--no-aligned" in c and "--force" in c for c in stand_in)
    shown = {tuple(c[c.index("-q") + 1:]): e.get("CUDA_VISIBLE_DEVICES")
             for c, e in zip(stand_in, stand_in.envs)}
    assert shown[("--device", "gpu")] == "0" and shown[("--gpus", "all")] is None
    doc = json.loads((tmp_path / "rows.json").read_text())
    by = {r["name"]: r for r in doc["rows"]}
    assert by["tifffile.memmap, 2 reader threads"]["seconds"] > 0
    assert by["xcorr align --gpus all"]["diff"] == 0.0
    assert by["xcorr align --gpus all"]["rms_px"] == 0.0
    assert by["xcorr align --patches 2x2 --gpus all"]["status"] == "DIFFERS"
    assert by["xcorr align --patches 2x2 --gpus all"]["diff"] == 0.5
    assert any("no --workers rows" in line for line in doc["header"])
    assert "results: every run within 0.0001 px of one GPU's: no (largest 0.5 px)" in lines
    assert not list(tmp_path.glob("xcorr-bench-gpus-*"))  # the stack removed


def test_a_failed_process_is_a_row_not_a_crash(stand_in, tmp_path, monkeypatch):
    def failing(argv, env=None, out=None):
        if "warm.tif" in str(argv[argv.index("align") + 1]):
            return OneShot(seconds=1.0, peak_bytes=None, returncode=0, stderr="", shifts=None)
        return OneShot(seconds=1.0, peak_bytes=None, returncode=1, stderr="error: boom",
                       shifts=None)

    monkeypatch.setattr(ag, "run_process", failing)
    lines = []
    assert ag.main("all", frames=12, size="64", workdir=tmp_path, keep=True,
                   echo=lines.append) == 1
    assert "  xcorr align (one GPU): failed: error: boom" in lines
    kept, = tmp_path.glob("xcorr-bench-gpus-*.tif")  # --keep: the stack alone
    assert f"stack kept: {kept}" in lines and len(list(tmp_path.iterdir())) == 1


def test_cli_refusals_are_one_line():
    r = xcorr("bench", "align", "--gpus", "all", "--quick")
    assert r.returncode == 2
    assert_clean_error(r, "--gpus takes --frames, --size, --patches, --repeat, --workdir, "
                          "--keep and --json only")
    with pytest.raises(InputError, match="--repeat at least 1"):
        ag.main(repeat=0)


def test_without_a_gpu_it_says_so(monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(backend, "gpu_unavailable_reason", lambda: "no device here")
    r = pytest.raises(ag.XcorrError, match="needs a GPU: no device here")
    with r:
        ag.main()


@pytest.mark.gpu
def test_the_whole_bench_on_this_machines_gpus(tmp_path):
    """Every run as a real process on a small stack (below 16 GiB ``--workers`` runs on one
    GPU); on several GPUs the ``--gpus`` results equal one GPU's."""
    lines = []
    status = ag.main("all", frames=24, size="256", patches=(4, 4), workdir=tmp_path,
                     echo=lines.append, json_path=tmp_path / "rows.json")
    assert status == 0, "\n".join(lines)
    doc = json.loads((tmp_path / "rows.json").read_text())
    assert all(r["status"] in ("ok", "-") for r in doc["rows"])
    assert any(line.startswith("results: every run within") and ": yes" in line
               for line in lines)
