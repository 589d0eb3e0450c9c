"""cuFFT's first plans on a fresh machine: the planner's charge for a cold FFT size and the
plans built for the next run (xcorr_app.correlate._fft_plans, _planner._charge_cold_fft)."""
import pytest

from xcorr_app.correlate import _fft_plans
from xcorr_app.correlate import _planner
from xcorr_app.correlate import Plan, fft_geometry, form_layout


def test_specs_and_markers(tmp_path, monkeypatch):
    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    assert _fft_plans.rfft2_specs((37, 53)) == [("r2c", (37, 53)), ("c2r", (37, 53))]
    assert not _fft_plans.is_warm("r2c", (37, 53))
    _fft_plans.mark_warm("r2c", (37, 53))
    assert _fft_plans.is_warm("r2c", (37, 53)) and not _fft_plans.is_warm("c2r", (37, 53))
    key = _fft_plans._versions()
    assert len(key) == 12 and int(key, 16) >= 0  # a hash, read without importing CuPy


def _ranked():
    return [(Plan("fft"), 12.0), (Plan("tiled"), 66.0), (Plan("warp_per_shift"), 90.0)]


@pytest.fixture
def cold(tmp_path, monkeypatch):
    """A fresh cache folder and process: every size cold; the builds for later recorded."""
    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_fft_plans, "_CHARGED", set())
    later = []
    monkeypatch.setattr(_fft_plans, "build_later", lambda specs: later.append(specs))
    return later


def test_a_cold_fft_is_charged_over_the_calls_once(cold):
    lay = form_layout("one_to_many", (2048, 2048), (64, 2048, 2048))
    ranked, size = _planner._charge_cold_fft(_ranked(), lay, 16, calls=1)
    assert size == (2160, 2160)  # 2048 + 16 rounded up to a 5-smooth length
    assert ranked[0][0].method == "tiled"
    assert ranked[-1][0].method == "fft" and ranked[-1][1] == pytest.approx(
        12.0 + _fft_plans.COLD_FFT_MS)
    assert cold == [[("r2c", (2160, 2160)), ("c2r", (2160, 2160))]]  # for the next run
    # once per process: the next decision plans the FFT (built here once), marked warm
    assert _planner._charge_cold_fft(_ranked(), lay, 16, calls=1) == (_ranked(), None)
    assert _fft_plans.is_warm("r2c", (2160, 2160)) and _fft_plans.is_warm("c2r", (2160, 2160))


def test_a_long_run_keeps_the_fft_and_marks_it(cold):
    lay = form_layout("one_to_many", (1024, 1024), (64, 1024, 1024))
    ranked, size = _planner._charge_cold_fft(_ranked(), lay, 8, calls=1000)
    assert ranked[0][0].method == "fft" and size == fft_geometry((1024, 1024), (1024, 1024),
                                                                 8).size
    assert cold == [] and _fft_plans.is_warm("c2r", size)


def test_no_charge_without_calls_or_when_warm(cold):
    lay = form_layout("one_to_many", (512, 512), (16, 512, 512))
    assert _planner._charge_cold_fft(_ranked(), lay, 16, calls=None) == (_ranked(), None)
    tiled_first = _ranked()[1:] + _ranked()[:1]
    assert _planner._charge_cold_fft(tiled_first, lay, 16, calls=1) == (tiled_first, None)
    size = fft_geometry((512, 512), (512, 512), 16).size
    for spec in _fft_plans.rfft2_specs(size):
        _fft_plans.mark_warm(*spec)
    assert _planner._charge_cold_fft(_ranked(), lay, 16, calls=1) == (_ranked(), None)
    assert cold == []


def test_helper_program_and_switch(monkeypatch):
    program = _fft_plans._CHILD.format(transforms=_fft_plans._TRANSFORMS)
    compile(program, "<helper>", "exec")  # a program of its own: nothing of xcorr imported
    assert "xcorr" not in program
    monkeypatch.setattr(_fft_plans, "_LATER", [])
    monkeypatch.setenv(_fft_plans.ENV, "0")
    _fft_plans.build_later(_fft_plans.rfft2_specs((16, 16)))
    assert _fft_plans._LATER == []


def test_one_helper_per_size_across_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    marker = _fft_plans._marker("r2c", (16, 16))
    assert _fft_plans._claim(marker)  # this run starts the helper
    assert not _fft_plans._claim(marker)  # the next run, while it builds, does not
    claim = marker.with_name(marker.name + ".building")
    old = claim.stat().st_mtime - 2 * _fft_plans.BUILDING_S
    import os

    os.utime(claim, (old, old))  # a helper that died long ago: claimed again
    assert _fft_plans._claim(marker)
    _fft_plans.mark_warm("r2c", (16, 16))
    assert not _fft_plans._claim(marker)  # built: nothing to do


@pytest.mark.gpu
def test_gpu_the_helper_builds_a_plan_and_its_marker(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    program = _fft_plans._CHILD.format(transforms=_fft_plans._TRANSFORMS)
    for kind, shape in _fft_plans.rfft2_specs((29, 31)):
        # (a cold odd-size plan is compiled by cuFFT: under the whole suite's load, on 14
        # workers, one c2r took past 120 s)
        subprocess.run([sys.executable, "-c", program, kind, "29x31",
                        str(_fft_plans._marker(kind, shape))], check=True, timeout=400)
        assert _fft_plans.is_warm(kind, shape)


@pytest.mark.gpu
def test_gpu_the_planner_takes_a_direct_kernel_while_the_fft_size_is_cold(tmp_path,
                                                                           monkeypatch):
    import cupy as cp

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_fft_plans, "_CHARGED", set())
    later = []
    monkeypatch.setattr(_fft_plans, "build_later", lambda specs: later.append(specs))
    _planner.forget()
    ref = cp.zeros((512, 512), cp.float32)
    frames = cp.zeros((16, 512, 512), cp.float32)
    warm = _planner.decide(ref, frames, "one_to_many", 32)  # no calls: the model alone
    if warm.plan.method != "fft":
        pytest.skip(f"the model does not choose the FFT here on this GPU ({warm.plan})")
    _planner.forget()
    size = fft_geometry((512, 512), (512, 512), 32).size
    d = _planner.decide(ref, frames, "one_to_many", 32, calls=1)
    assert d.cold and d.plan.method != "fft" and "cold" in d.reason
    assert later == [_fft_plans.rfft2_specs(size)]  # built when the process exits
    d = _planner.decide(ref, frames, "one_to_many", 32, calls=1)  # charged once a process
    assert not d.cold and d.plan.method == "fft" and _fft_plans.is_warm("r2c", size)
    _planner.forget()
