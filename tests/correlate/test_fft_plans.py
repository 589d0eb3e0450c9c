"""cuFFT's first plans made ahead and the planner's charge for a cold FFT size
(xcorr_app.correlate._fft_plans, _planner._charge_cold_fft)."""
import numpy as np
import pytest

from xcorr_app.correlate import _fft_plans
from xcorr_app.correlate import _planner
from xcorr_app.correlate._fft import fft_geometry
from xcorr_app.correlate._forms import form_layout
from xcorr_app.correlate._plans import Plan


def test_specs():
    assert _fft_plans.rfft2_specs((37, 53)) == [("r2c", (37, 53)), ("c2r", (37, 53))]
    assert _fft_plans.edge_specs((37, 53)) == [("r2c1", (53,)), ("r2c1", (37,))]
    assert _fft_plans.edge_specs((64, 64)) == [("r2c1", (64,))]


def _ranked():
    return [(Plan("fft"), 12.0), (Plan("tiled"), 66.0), (Plan("warp_per_shift"), 90.0)]


@pytest.fixture
def cold(monkeypatch):
    """Every size cold; the background plans recorded instead of made."""
    started = []
    monkeypatch.setattr(_fft_plans, "is_warm", lambda kind, shape: False)
    monkeypatch.setattr(_fft_plans, "warm_async",
                        lambda specs, later=False: started.append((specs, later)))
    return started


def test_a_cold_fft_is_charged_over_the_calls(cold):
    lay = form_layout("one_to_many", (2048, 2048), (64, 2048, 2048))
    ranked, size = _planner._charge_cold_fft(_ranked(), lay, 16, calls=1)
    assert size == (2160, 2160)  # 2048 + 16 rounded up to a 5-smooth length
    assert ranked[0][0].method == "tiled"
    assert ranked[-1][0].method == "fft" and ranked[-1][1] == pytest.approx(
        12.0 + _fft_plans.COLD_FFT_MS)
    assert cold == [([("r2c", (2160, 2160)), ("c2r", (2160, 2160))], True)]  # the next run
    # a long run spreads the charge: the FFT stays the best
    ranked, size = _planner._charge_cold_fft(_ranked(), lay, 16, calls=1000)
    assert ranked[0][0].method == "fft" and size == (2160, 2160)
    assert cold[-1][1] is False  # this run waits for them


def test_no_charge_without_calls_or_when_warm(cold, monkeypatch):
    lay = form_layout("one_to_many", (512, 512), (16, 512, 512))
    assert _planner._charge_cold_fft(_ranked(), lay, 16, calls=None) == (_ranked(), None)
    tiled_first = _ranked()[1:] + _ranked()[:1]
    assert _planner._charge_cold_fft(tiled_first, lay, 16, calls=1) == (tiled_first, None)
    assert cold == []
    monkeypatch.setattr(_fft_plans, "is_warm", lambda kind, shape: True)
    assert _planner._charge_cold_fft(_ranked(), lay, 16, calls=1) == (_ranked(), None)


def test_turned_off(monkeypatch):
    monkeypatch.setenv(_fft_plans.ENV, "0")
    assert _fft_plans.warm_async(_fft_plans.rfft2_specs((16, 16))) is None


@pytest.mark.gpu
def test_gpu_plans_made_ahead_leave_markers_and_the_same_results(tmp_path, monkeypatch, rng):
    import cupy as cp

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    shape = (37, 53)
    specs = _fft_plans.rfft2_specs(shape) + _fft_plans.edge_specs(shape)
    assert not any(_fft_plans.is_warm(*s) for s in specs)
    fut = _fft_plans.warm_async(specs)
    assert fut is not None
    _fft_plans.wait_warm()
    assert fut.done() and all(_fft_plans.is_warm(*s) for s in specs)
    assert _fft_plans.warm_async(specs) is None  # nothing left to make
    a = rng.random((3, *shape)).astype(np.float32)
    spec = cp.fft.rfft2(cp.asarray(a))
    np.testing.assert_allclose(spec.get(), np.fft.rfft2(a.astype(np.float64)), rtol=0,
                               atol=2e-4 * np.abs(a).sum())
    back = cp.fft.irfft2(spec, s=shape).get()
    np.testing.assert_allclose(back, a, atol=1e-5)


@pytest.mark.gpu
def test_gpu_the_planner_takes_a_direct_kernel_while_the_fft_size_is_cold(tmp_path,
                                                                           monkeypatch):
    import cupy as cp

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    _planner.forget()
    ref = cp.zeros((512, 512), cp.float32)
    frames = cp.zeros((16, 512, 512), cp.float32)
    warm = _planner.decide(ref, frames, "one_to_many", 32)  # no calls: the model alone
    if warm.plan.method != "fft":
        pytest.skip(f"the model does not choose the FFT here on this GPU ({warm.plan})")
    _planner.forget()
    size = fft_geometry((512, 512), (512, 512), 32).size  # 576: 512 + 32, 5-smooth
    assert not _fft_plans.is_warm("r2c", size)
    d = _planner.decide(ref, frames, "one_to_many", 32, calls=1)
    assert d.cold and d.plan.method != "fft" and "cold" in d.reason
    fut = _fft_plans.warm_async(_fft_plans.rfft2_specs((8, 8)))  # after those for the next run
    fut.result(timeout=60)
    assert _fft_plans.is_warm("r2c", size) and _fft_plans.is_warm("c2r", size)
    d = _planner.decide(ref, frames, "one_to_many", 32, calls=1)
    assert not d.cold and d.plan.method == "fft"
    _planner.forget()


def test_helper_program_and_switch(monkeypatch):
    program = _fft_plans._CHILD.format(transforms=_fft_plans._TRANSFORMS)
    compile(program, "<helper>", "exec")  # a valid program of its own (no xcorr import)
    assert "xcorr" not in program and set(_fft_plans._TRANSFORMS) == {"r2c", "c2r", "r2c1"}
    monkeypatch.setenv(_fft_plans.ENV, "off")
    assert _fft_plans.spawn_warmers(_fft_plans.rfft2_specs((16, 16))) == []
    with pytest.raises(ValueError, match="unknown transform kind"):
        _fft_plans._make("c2c", (4, 4), None)


def test_machine_key_needs_no_cuda():
    key = _fft_plans._versions()
    assert len(key) == 12 and int(key, 16) >= 0  # a hash, read without importing CuPy


@pytest.mark.gpu
def test_gpu_helper_processes_build_the_plans(tmp_path, monkeypatch):
    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    specs = _fft_plans.rfft2_specs((29, 31)) + _fft_plans.edge_specs((29, 31))
    assert _fft_plans.spawn_warmers(specs) == specs
    assert _fft_plans.spawn_warmers(specs) == []  # being made: not twice
    assert _fft_plans.warm_async(specs) is None  # nor by the thread
    _fft_plans.wait_warm()
    assert all(_fft_plans.is_warm(*s) for s in specs)
