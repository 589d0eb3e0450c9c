"""Kernels built ahead by helper processes: the stages run, the markers, the CLI."""

import numpy as np
import pytest

from cli_helpers import assert_clean_error, xcorr
from xcorr_app.alignment import AlignOptions, PREBUILD_STAGES as STAGES, prebuild
from xcorr_app.alignment._prebuild import run_stage, stage_key


@pytest.mark.parametrize("kw", [{}, {"max_shift": 5}, {"normalization": "phase"},
                                {"reference": "previous", "max_shift": 4},
                                {"verify": False, "subpixel": "parabolic3"},
                                {"subpixel": "upsample"}])
@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_runs_on_the_cpu(kw, stage):
    run_stage(AlignOptions(**kw), stage, (21, 34), "uint16", None, np)


def test_stage_keys_follow_the_settings():
    a = AlignOptions()
    assert stage_key(a, "refine", (64, 64), "uint16", None) == \
        stage_key(AlignOptions(), "refine", (64, 64), "uint16", None)
    others = {stage_key(a, "refine", (64, 64), "uint8", None),
              stage_key(AlignOptions(subpixel="parabolic"), "refine", (64, 64), "uint16", None),
              stage_key(a, "verify", (64, 64), "uint16", None),
              stage_key(a, "refine", (64, 64), "uint16", None)}
    assert len(others) == 4
    # only the measurement depends on the frame shape and the plan
    assert stage_key(a, "refine", (64, 64), "uint16", None) == \
        stage_key(a, "refine", (99, 64), "uint16", "fft")
    assert stage_key(a, "measure", (64, 64), "uint16", None) != \
        stage_key(a, "measure", (99, 64), "uint16", None)


def test_built_stages_start_no_helper(tmp_path, monkeypatch):
    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    opts = AlignOptions(verify=False)
    for stage in STAGES:
        marker = tmp_path / "prebuilt" / stage_key(opts, stage, (32, 32), "uint16", None)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("{}")
    assert prebuild(opts, (32, 32), "uint16", stages=STAGES) == []


def test_info_compile_without_a_gpu_is_one_line():
    from xcorr_app import backend

    if backend.gpu_available():
        pytest.skip("a GPU is usable here")
    r = xcorr("info", "--compile")
    assert r.returncode == 2
    assert_clean_error(r, "needs a usable GPU")


@pytest.mark.gpu
def test_prebuild_builds_once_then_align_runs(tmp_path, monkeypatch):
    import cupy as cp

    from sample_paths import stack_path
    from xcorr_app import align

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    opts = AlignOptions(max_shift=6)
    codes = prebuild(opts, (41, 57), "uint16", None, stages=STAGES, wait=True,
                     device=cp.cuda.Device().id)
    logs = {p.name: p.read_text()[-2000:] for p in (tmp_path / "prebuilt").glob("*.log")}
    assert codes == [0] * len(STAGES), logs  # (a failing helper's traceback is kept)
    assert len(list((tmp_path / "prebuilt").iterdir())) == len(STAGES)
    assert prebuild(opts, (41, 57), "uint16", None, stages=STAGES) == []
    res = align(stack_path("cell"), device="gpu", max_shift=6)
    assert res.agree.all()


def test_exit_waits_for_the_longest_grace_then_stops(monkeypatch):
    """At exit the process waits as long as the most patient prebuild asked (0 s: helpers
    stopped at once; 15 s, the default: a cold machine's run lets its helpers finish)."""
    import subprocess
    import sys

    from xcorr_app._cuda import helpers

    seen = []
    monkeypatch.setattr(helpers, "stop", lambda procs, grace: seen.append(grace))
    monkeypatch.setattr(helpers, "_RUNNING", [])
    monkeypatch.setattr(helpers, "_GRACES", [])
    monkeypatch.setattr(helpers, "_STARTED", set())
    monkeypatch.setattr(helpers, "marker", lambda key: helpers.Path("/nonexistent") / key)
    monkeypatch.setattr(helpers.atexit, "register", lambda fn: None)
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or object())
    opts = AlignOptions(verify=False)
    prebuild(opts, (32, 32), "uint16", stages=("apply",), exit_grace=0.0)
    helpers._finish_at_exit()
    prebuild(opts, (32, 32), "uint16", stages=("refine",), exit_grace=15.0)
    helpers._finish_at_exit()
    assert seen == [0.0, 15.0] and len(started) == 2
    assert sys.executable in started[0][0]


def test_the_stages_a_run_goes_through():
    from xcorr_app.alignment._prebuild import RUN_STAGES, helper_stages, kernels_built, wanted

    assert wanted(AlignOptions(), RUN_STAGES) == list(RUN_STAGES)
    assert wanted(AlignOptions(verify=False, quality=False), ("verify", "apply", "quality")) \
        == ["apply"]
    assert "quality" not in wanted(AlignOptions(patches=(4, 4)), RUN_STAGES)  # (a rigid one)
    # where xcorr's kernels ship built, no helper: nothing is left for one to build, and such
    # a machine counts as built (device auto needs no first-run allowance)
    assert helper_stages(True) == () and helper_stages(False) == RUN_STAGES
    assert kernels_built(AlignOptions(), (64, 80), "uint16", helper_stages(True))


def test_a_payload_of_a_masked_run_is_json_and_builds_unmasked_stages():
    """A helper process gets the options as JSON: a mask (an image) is left out, as are the
    options' private fields (its read image)."""
    import json

    from xcorr_app.alignment._prebuild import _payload

    mask = np.ones((20, 24), bool)
    mask[:4] = False
    opts = AlignOptions(mask=mask, device="cpu")
    payload = json.loads(json.dumps(_payload(opts, "measure", (20, 24), np.uint16, None, 0)))
    assert payload["opts"]["mask"] is None
    assert not [k for k in payload["opts"] if k.startswith("_")]
    assert AlignOptions(**payload["opts"]).mask is None
