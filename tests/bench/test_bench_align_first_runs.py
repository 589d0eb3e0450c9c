"""``xcorr bench align --first-runs``: its processes, table and targets (the whole bench on the
GPU; its parts and refusals on the CPU)."""

import sys

import pytest

from cli_helpers import assert_clean_error, xcorr
from xcorr_app.bench import _align_first_runs as fr
from xcorr_app.bench._oneshot import python_argv


def test_runs_times_first_then_warm_and_reports_a_failure():
    lines = []
    row = fr._runs("quick", python_argv("-c", "pass"), None, None, 2, lines.append,
                   first={})
    assert row["first"] > 0 and len(row["runs"]) == 2 and row["seconds"] in row["runs"]
    assert row["error"] == "" and lines[0].startswith("  quick: first ")
    bad = fr._runs("bad", python_argv("-c", "import sys; sys.exit('no luck')"), None, None, 2,
                   lines.append)
    assert bad["error"] == "no luck" and bad["seconds"] is None
    assert lines[-1] == "  bad: failed: no luck"


@pytest.mark.parametrize("folder", [False, True])
def test_runs_write_into_a_new_output_each_time(tmp_path, folder):
    """With ``written``, what the process writes is gone before each run: each run finds no
    output of the one before (the process fails if it does)."""
    out = tmp_path / ("out" if folder else "copy.tif")
    source = ("import os, sys\np = sys.argv[1]\nif os.path.exists(p): sys.exit('exists')\n"
              + ("os.makedirs(p)\nopen(os.path.join(p, 'a'), 'w').close()\n" if folder
                 else "open(p, 'w').close()\n"))
    row = fr._runs("fresh", python_argv("-c", source, out), None, None, 3, [].append,
                   written=out)
    assert row["error"] == "" and len(row["runs"]) == 3 and out.exists()
    again = fr._runs("again", python_argv("-c", source, out), None, None, 1, [].append)
    assert again["error"] == "exists"


def _row(name, first=None, seconds=None, error=""):
    return {"name": name, "first": first, "runs": [], "seconds": seconds, "error": error}


@pytest.mark.parametrize("gpu_first, align, met", [(1.5, 1.05, ("yes", "yes")),
                                                     (6.7, 2.5, ("no", "no"))])
def test_targets(gpu_first, align, met):
    rows = [_row("cell, --device cpu", seconds=1.6), _row("cell, --device gpu", gpu_first, 2.0),
            _row("cell, default device (auto)", 1.7, 1.6), _row("stack, xcorr align", None, align),
            _row("stack, tifffile read + write", None, 0.3),
            _row("CUDA start (import cupy, first allocation)", None, 0.5)]
    lines = fr._targets(rows)
    assert len(lines) == 3
    assert lines[0].endswith(f"(target <= 1.0x: {met[0]})")
    assert f"{gpu_first / 1.6:.2f}x" in lines[0] and "1.06x the CPU's" in lines[1]
    assert "= 0.50 s" in lines[2] and lines[2].endswith("(what overlaps could reach)")
    # the serial floor: CUDA start + the measurement + the float32 copy, one after the other
    more = fr._targets(rows + [_row("stack, xcorr align --keep-dtype", None, 0.99),
                               _row("stack, tifffile read + write as float32", None, 0.4),
                               _row(fr.MEASURE_ROW, None, 0.1),
                               _row("stack, xcorr align --force over the previous run's "
                                    "outputs", None, 1.8)])
    assert len(more) == 6 and more[:2] == lines[:2] and more[4] == lines[2]
    assert "0.50 + the measurement 0.10 + read + write as float32 0.40" in more[2]
    assert more[2].endswith(f"= 1.00 s: {align:.2f}x (target <= 1.2x: {met[1]})")
    assert more[3].endswith("0.99 s vs its serial floor 0.90 s (the uint16 copy 0.30): 1.10x")
    assert more[5] == ("the default align over its previous outputs (--force) 1.80 s: 3.60x "
                       "that max")
    table = fr._table(rows[:2] + [_row("x", error="boom")])
    assert table[2] == "| cell, --device cpu |  | 1.60 |" and table[-1] == "| x |  | failed |"


def test_the_measurement_is_timed_in_its_own_process(tmp_path, monkeypatch):
    """The measurement row's figures are the ones its process timed, not the process's wall
    clock (which holds its imports and the untimed call)."""
    monkeypatch.setattr(fr, "MEASURE", "import json\nopen({dst!r}, 'w').write(json.dumps("
                        "[0.25] * {runs}))\n# {src}\n")
    row = fr._measured(tmp_path / "stack.tif", tmp_path, 3, [].append)
    assert row["runs"] == [0.25] * 3 and row["seconds"] == 0.25 and row["error"] == ""
    monkeypatch.setattr(fr, "MEASURE", "import sys\nsys.exit('no GPU {src} {dst} {runs}')\n")
    bad = fr._measured(tmp_path / "stack.tif", tmp_path, 3, [].append)
    assert bad["error"].startswith("no GPU") and bad["seconds"] is None


def test_cli_refusals_are_one_line(tmp_path):
    r = xcorr("bench", "align", "--first-runs", "--quick")
    assert r.returncode == 2
    assert_clean_error(r, "--first-runs takes --frames, --size, --repeat, --workdir and --json")
    with pytest.raises(fr.InputError, match="--repeat at least 1"):
        fr.main(repeat=0)
    with pytest.raises(fr.InputError, match="is not there"):
        fr.main(sample=tmp_path / "none.tif")


def test_without_a_gpu_it_says_so(monkeypatch):
    from xcorr_app import backend

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(backend, "gpu_unavailable_reason", lambda: "no device here")
    with pytest.raises(fr.XcorrError, match="needs a GPU: no device here"):
        fr.main()


@pytest.mark.gpu
@pytest.mark.slow
def test_the_whole_bench_on_a_small_stack(tmp_path):
    lines = []
    status = fr.main(frames=4, size="128", repeat=1, workdir=tmp_path, echo=lines.append,
                     json_path=tmp_path / "rows.json")
    assert status == 0, "\n".join(lines)
    assert any("first GPU run" in line for line in lines)
    assert any("one-shot align" in line for line in lines)
    assert any("with --keep-dtype" in line for line in lines)
    assert (tmp_path / "rows.json").exists() and sys.executable
