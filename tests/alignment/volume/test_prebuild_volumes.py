"""The 3-D path's later stages built by helper processes (``volume._prebuild``): every stage
runs (on the CPU here, on the GPU in a helper), keys follow the settings that change the
kernels, and on a GPU the helpers leave their markers and start no second time."""

import numpy as np
import pytest

from xcorr_app.alignment.volume import _prebuild
from xcorr_app.alignment.volume import prebuild_volumes
from xcorr_app.alignment.volume._prebuild import VOLUME_STAGES, run_volume_stage, volume_key


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


@pytest.mark.parametrize("shipped", [False, True])
@pytest.mark.parametrize("bounds, aligned", [(None, False), ([2, None, 3], True)])
def test_shipped_kernels_leave_helpers_only_what_cupy_compiles(monkeypatch, shipped, bounds,
                                                                aligned):
    """Where xcorr's kernels ship built, the subvoxel samples and an unbounded peak need no
    helper (they launch only those); a bounded peak (CuPy's gather) and the warp still do."""
    import xcorr_app._cuda as cuda

    started = []
    monkeypatch.setattr(_prebuild, "gpu_available", lambda: True)
    monkeypatch.setattr(cuda, "shipped_here", lambda: shipped)
    monkeypatch.setattr(_prebuild, "start_helpers",
                        lambda jobs: started.extend(j[1]["stage"] for j in jobs) or [])
    prebuild_volumes(bounds, 20.0, aligned=aligned)
    if not shipped:
        assert started == (["peak", "refine"] if not aligned else list(VOLUME_STAGES))
    else:
        assert started == ([] if bounds is None else ["peak", "apply"])


@pytest.mark.gpu
def test_helpers_build_once_then_align_volumes_runs(tmp_path, monkeypatch):
    from xcorr_app._cuda import built_marker, helpers
    from xcorr_app.alignment import align_volumes

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(helpers, "_STARTED", set())
    from xcorr_app._cuda import shipped_here

    procs = prebuild_volumes([2, 2, 2], 20.0, aligned=True)
    stages = [s for s in VOLUME_STAGES if not (shipped_here() and s == "refine")]
    assert len(procs) == len(stages) and [p.wait() for p in procs] == [0] * len(stages)
    for stage in stages:
        assert built_marker(volume_key(stage, [2, 2, 2], 20.0)).exists(), stage
    assert prebuild_volumes([2, 2, 2], 20.0, aligned=True) == []  # (built: none again)
    vol = np.random.default_rng(1).random((8, 16, 16))
    stack = np.stack([vol, np.roll(vol, (1, -1, 2), axis=(0, 1, 2))])
    res = align_volumes(stack, max_shift=2, upsample=1, device="gpu")
    assert res.shifts[1].tolist() == [-1.0, 1.0, -2.0]
