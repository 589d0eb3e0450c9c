"""The 3-D path's later stages built by helper processes (``volume._prebuild``): every stage
runs (on the CPU here, on the GPU in a helper), keys follow the settings that change the
kernels, and on a GPU the helpers leave their markers and start no second time."""

import numpy as np
import pytest

from xcorr_app.alignment.volume import _prebuild
from xcorr_app.alignment.volume._prebuild import (VOLUME_STAGES, prebuild_volumes,
                                                  run_volume_stage, volume_key)


@pytest.mark.parametrize("bounds", [None, [2, None, 3]])
@pytest.mark.parametrize("stage", VOLUME_STAGES)
def test_every_stage_runs_on_the_cpu(stage, bounds):
    run_volume_stage({"stage": stage, "bounds": bounds, "upsample": 20.0}, xp=np)


def test_keys_follow_the_bounded_axes_and_the_upsampling():
    keys = {volume_key("peak", b, 20) for b in (None, [2, None, 3], [5, None, 1], [2, 2, 2])}
    assert len(keys) == 3  # (the same axes bounded: the same kernels, whatever the bound)
    assert volume_key("refine", None, 20) != volume_key("refine", None, 10)
    assert volume_key("refine", None, 20) != volume_key("peak", None, 20)


def test_no_helper_without_a_gpu(monkeypatch):
    monkeypatch.setattr(_prebuild, "gpu_available", lambda: False)
    assert prebuild_volumes(None, 20.0, aligned=True) == []


@pytest.mark.gpu
def test_helpers_build_once_then_align_volumes_runs(tmp_path, monkeypatch):
    from xcorr_app._cuda import built_marker, helpers
    from xcorr_app.alignment import align_volumes

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(helpers, "_STARTED", set())
    procs = prebuild_volumes([2, 2, 2], 20.0, aligned=True)
    assert len(procs) == 3 and [p.wait() for p in procs] == [0, 0, 0]
    for stage in VOLUME_STAGES:
        assert built_marker(volume_key(stage, [2, 2, 2], 20.0)).exists(), stage
    assert prebuild_volumes([2, 2, 2], 20.0, aligned=True) == []  # (built: none again)
    vol = np.random.default_rng(1).random((8, 16, 16))
    stack = np.stack([vol, np.roll(vol, (1, -1, 2), axis=(0, 1, 2))])
    res = align_volumes(stack, max_shift=2, upsample=1, device="gpu")
    assert res.shifts[1].tolist() == [-1.0, 1.0, -2.0]
