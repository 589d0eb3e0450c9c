"""The device of a run, decided once (backend.decide_device, asked by the pipeline where it
starts on its device): device="auto" measures small jobs on the CPU (xcorr_app/_first_run.py)."""

import numpy as np
import pytest

from xcorr_app import _first_run, backend
from xcorr_app._first_run import SMALL_JOB_PIXELS
from xcorr_app.alignment import AlignOptions
from xcorr_app.alignment._prebuild import RUN_STAGES, kernels_built, stage_key
from xcorr_app.backend import decide_device
from xcorr_app.errors import InputError


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


@pytest.fixture
def gpu_likely_unusable(monkeypatch):
    """A GPU likely (CuPy installed, a device node) but none usable: the probe's answer."""
    monkeypatch.setattr(_first_run, "gpu_likely", lambda: True)
    monkeypatch.setattr(_first_run, "_probe_once", lambda: (False, "CuPy found no CUDA device"))
    monkeypatch.setattr(backend, "_warned_fallback", True)  # (no warning to filter)


def test_cpu_and_small_jobs_are_decided_without_a_look_at_the_gpu(monkeypatch):
    def no_probe():
        raise AssertionError("probed")

    monkeypatch.setattr(_first_run, "gpu_likely", lambda: True)
    monkeypatch.setattr(_first_run, "_probe_once", no_probe)
    built = []
    assert decide_device("cpu", 512, (2048, 2048), kernels_built=built.append) == ("cpu", None)
    dev, note = decide_device("auto", 12, (120, 160), kernels_built=built.append)
    assert dev == "cpu" and "measured on the CPU: 12 frames of 120x160" in note
    assert built == []  # (the kernels' markers are read only where they decide)


def test_auto_without_a_usable_gpu_runs_on_the_cpu_and_gpu_refuses(gpu_likely_unusable):
    assert decide_device("auto", 512, (2048, 2048), kernels_built=lambda: 1 / 0) == ("cpu", None)
    with pytest.raises(InputError, match="device='gpu' was asked for but CuPy found no CUDA"):
        decide_device("gpu", 12, (120, 160))


@pytest.mark.parametrize("built, want", [(True, "gpu"), (False, "cpu")])
def test_auto_on_a_usable_gpu_weighs_the_kernels_not_built(monkeypatch, built, want):
    monkeypatch.setattr(_first_run, "gpu_likely", lambda: True)
    monkeypatch.setattr(_first_run, "_probe_once", lambda: (True, "CUDA device usable"))
    side, asked = 1024, []
    n = SMALL_JOB_PIXELS // side ** 2 + 1  # (more than a small job)
    dev, note = decide_device("auto", n, (side, side),
                              kernels_built=lambda: asked.append(1) or built)
    assert dev == want and asked == [1] and (note is None) == built
    assert decide_device("gpu", 1, (side, side), kernels_built=lambda: 1 / 0) == ("gpu", None)


@pytest.mark.gpu
def test_cli_auto_on_the_cell_sample_runs_on_the_cpu_and_says_so(tmp_path):
    from cli_helpers import xcorr

    r = xcorr("align", "sample_data/cell_drift.tif", "--no-aligned", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert " on cpu " in r.stdout and "measured on the CPU: 12 frames of 120x160" in r.stdout
    r = xcorr("align", "sample_data/cell_drift.tif", "--no-aligned", "--device", "gpu",
              "--out", str(tmp_path / "g"))
    assert r.returncode == 0 and " on gpu " in r.stdout
