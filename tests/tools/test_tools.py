"""Smoke tests of the maintainer's tools in ``tools/`` (``tools/README.md``), on the CPU: each
answers ``--help``, refuses bad arguments with one ``error:`` line, and runs small (the GPU tools
refuse cleanly without a GPU, and run a tiny case with one)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xcorr_app import backend

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
PYTHON_TOOLS = ("ab_align.py", "align_timeline.py", "napari_screenshot.py", "oneshot.py",
                "plan_host_time.py", "planner_data.py", "planner_fit.py")
CELL = ROOT / "sample_data" / "cell_drift.tif"


def tool(name, *args, cwd=ROOT):
    """Run ``tools/<name>`` as a maintainer does, the checkout first on ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(TOOLS / name), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def assert_refused(proc, words):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: ") and words in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_readme_lists_every_tool_and_no_other():
    readme = (TOOLS / "README.md").read_text()
    files = sorted(p.name for p in TOOLS.iterdir()
                   if p.name != "README.md" and not p.name.startswith((".", "__")))
    listed = sorted(name for name in files if f"`{name}`" in readme)
    assert files == listed
    assert set(PYTHON_TOOLS) <= set(files) and len(files) <= 8


@pytest.mark.parametrize("name", PYTHON_TOOLS)
def test_help(name):
    proc = tool(name, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and proc.stderr == ""


@pytest.mark.parametrize("name, args, words", [
    ("ab_align.py", (CELL, "16,fast"), "only 'noverify'"),
    ("ab_align.py", (CELL, "-3"), "positive integer"),
    ("align_timeline.py", ("--patches", "4by4"), "GYxGX"),
    ("napari_screenshot.py", ("--frames", 3), "at least 16"),
    ("oneshot.py", (ROOT / "no_such_stack.tif",), "no such stack"),
    ("plan_host_time.py", ("--only", "no such row"), "no row matches"),
    ("planner_fit.py", (ROOT / "no_such_data.json", "--dry-run"), "cannot read"),
])
def test_bad_arguments_are_one_error_line(name, args, words):
    assert_refused(tool(name, *args), words)


def test_napari_screenshot_refuses_without_napari_or_a_display(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert_refused(tool("napari_screenshot.py", "--device", "cpu"), "napari")


@pytest.mark.skipif(backend.gpu_available(), reason="a GPU is usable here")
@pytest.mark.parametrize("name, args", [("plan_host_time.py", ("--calls", 100)),
                                        ("align_timeline.py", (16,))])
def test_gpu_tools_refuse_without_a_gpu(name, args):
    assert_refused(tool(name, *args), "needs a usable GPU")


@pytest.mark.gpu
def test_plan_host_time_on_the_gpu():
    proc = tool("plan_host_time.py", "--only", "one_to_one 16x16", "--calls", 100)
    assert proc.returncode == 0, proc.stderr
    assert "graph replay" in proc.stdout and "GPU back to back" in proc.stdout


def test_planner_fit_dry_run_writes_nothing():
    model = ROOT / "xcorr_app" / "correlate" / "data" / "cost_model.json"
    before = model.read_bytes()
    proc = tool("planner_fit.py", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((TOOLS / "planner_data_h100.json").read_text())
    assert f"over {len(data['problems'])} problems" in proc.stdout
    assert model.read_bytes() == before


def test_planner_data_lists_its_problems_without_a_gpu():
    proc = tool("planner_data.py", "--list", "--only", "16x16")
    assert proc.returncode == 0, proc.stderr
    assert "xcorr_app.correlate._mma.MMA:" in proc.stdout
    assert "one_to_one 16x16, full" in proc.stdout and "32x32" not in proc.stdout


def test_ab_align_on_the_cpu():
    proc = tool("ab_align.py", CELL, "8,noverify", "--device", "cpu", "--repeat", 1)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("8,noverify: median ") and "frames/s" in proc.stdout


def test_oneshot_cold_run_on_the_cpu(tmp_path):
    proc = tool("oneshot.py", CELL, "--cold", "--runs", 0, "--", "--device", "cpu",
                "--no-aligned", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = [line for line in proc.stdout.splitlines() if line.startswith("| cell_drift.tif")]
    assert len(row) == 1 and row[0].split("|")[2:4] == [" this ", " cold "]
    assert float(row[0].split("|")[4]) > 0
    assert list(tmp_path.iterdir()) == []  # its outputs and caches went to a scratch folder
