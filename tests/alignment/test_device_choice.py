"""device="auto" measures small jobs on the CPU (alignment/_device_choice.py)."""

import numpy as np
import pytest

from xcorr_app.alignment._device_choice import FIRST_RUN_PIXELS, SMALL_JOB_PIXELS, auto_device
from xcorr_app.alignment._options import AlignOptions
from xcorr_app.alignment._prebuild import RUN_STAGES, kernels_built, stage_key


def test_small_jobs_go_to_the_cpu_with_a_note():
    dev, note = auto_device(12, (120, 160), kernels_built=True)
    assert dev == "cpu" and "12 frames of 120x160" in note and "device='gpu'" in note
    dev, note = auto_device(1, (64, 64), kernels_built=False)
    assert dev == "cpu" and "not built yet" in note and "xcorr info --compile" in note


def test_limits_depend_on_whether_the_kernels_are_built():
    side = 1024
    n_small = SMALL_JOB_PIXELS // side ** 2
    assert auto_device(n_small, (side, side), True)[0] == "cpu"
    assert auto_device(n_small + 1, (side, side), True) == ("gpu", None)
    assert auto_device(n_small + 1, (side, side), False)[0] == "cpu"
    n_first = FIRST_RUN_PIXELS // side ** 2
    assert auto_device(n_first, (side, side), False)[0] == "cpu"
    assert auto_device(n_first + 1, (side, side), False) == ("gpu", None)


def test_kernels_built_reads_the_helpers_markers(tmp_path, monkeypatch):
    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    opts = AlignOptions()
    assert not kernels_built(opts, (64, 80), "uint16")
    folder = tmp_path / "prebuilt"
    folder.mkdir()
    stages = [s for s in RUN_STAGES if s != "measure"]
    for s in stages[:-1]:
        (folder / stage_key(opts, s, (64, 80), "uint16", None)).write_text("{}")
    assert not kernels_built(opts, (64, 80), "uint16")  # one stage missing
    (folder / stage_key(opts, stages[-1], (64, 80), "uint16", None)).write_text("{}")
    assert kernels_built(opts, (64, 80), "uint16")
    assert not kernels_built(opts, (64, 80), "float32")  # another pixel type


@pytest.mark.gpu
def test_auto_measures_a_small_stack_on_the_cpu_and_gpu_when_asked(rng):
    import cupy as cp

    from xcorr_app import align

    base = rng.random((70, 90)).astype(np.float32)
    stack = np.stack([base, np.roll(base, (2, -3), axis=(0, 1))])
    auto = align(stack)
    assert auto.settings["device"] == "cpu" and any("measured on the CPU" in n for n in auto.notes)
    gpu = align(stack, device="gpu")
    assert gpu.settings["device"] == "gpu" and not any("on the CPU" in n for n in gpu.notes)
    np.testing.assert_allclose(auto.shifts, gpu.shifts, atol=2e-3)
    on_gpu = align(cp.asarray(stack))  # CuPy input stays on the GPU
    assert on_gpu.settings["device"] == "gpu"


def test_small_job_note_only_where_a_gpu_is_likely(monkeypatch):
    from xcorr_app import backend
    from xcorr_app.alignment._device_choice import small_job_note

    monkeypatch.setattr(backend, "gpu_likely", lambda: True)
    assert "measured on the CPU: 12 frames of 120x160" in small_job_note(12, (120, 160))
    assert small_job_note(64, (512, 512)) is None  # larger than SMALL_JOB_PIXELS: look first
    monkeypatch.setattr(backend, "gpu_likely", lambda: False)
    assert small_job_note(12, (120, 160)) is None  # no GPU likely: the ordinary fallback


def test_gpu_likely_needs_cupy_and_a_device_node(monkeypatch, tmp_path):
    import importlib.util

    from xcorr_app import backend

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert backend.gpu_likely() is False
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(backend, "NVIDIA_DEVICE_NODES", (str(tmp_path / "nvidiactl"),))
    assert backend.gpu_likely() is False
    (tmp_path / "nvidiactl").write_text("")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert backend.gpu_likely() is True
    for hidden in ("", "-1", " "):  # every device hidden: no GPU to expect
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert backend.gpu_likely() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert backend.gpu_likely() is True


@pytest.mark.gpu
def test_cli_auto_on_the_cell_sample_runs_on_the_cpu_and_says_so(tmp_path):
    from cli_helpers import xcorr

    r = xcorr("align", "sample_data/cell_drift.tif", "--no-aligned", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert " on cpu " in r.stdout and "measured on the CPU: 12 frames of 120x160" in r.stdout
    r = xcorr("align", "sample_data/cell_drift.tif", "--no-aligned", "--device", "gpu",
              "--out", str(tmp_path / "g"))
    assert r.returncode == 0 and " on gpu " in r.stdout
