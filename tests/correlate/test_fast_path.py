"""cross_correlate's fast path: a repeated call runs the plan kept for its arguments without
the checks, with the checked path's results and errors."""

import numpy as np
import pytest

from xcorr_app import cross_correlate
from xcorr_app.correlate import _api, clear_plan_cache, correlation_plan
from xcorr_app.correlate import _plan_cache as plan_cache
from xcorr_app.correlate import Plan
from xcorr_app.errors import InputError

RNG = np.random.default_rng(3)
A = RNG.random((12, 10)).astype(np.float32)
B = np.roll(A, (1, -2), axis=(0, 1))


@pytest.fixture(autouse=True)
def _fresh():
    clear_plan_cache()
    yield
    clear_plan_cache()


def _no_checks(monkeypatch):
    """Make the checked path fail loudly: a call that still returns took the fast path."""
    def refuse(*args, **kwargs):
        raise AssertionError("the checked path ran")

    monkeypatch.setattr(_api, "form_layout", refuse)


def test_repeated_call_skips_the_checks_with_the_same_result(monkeypatch):
    first = cross_correlate(A, B, max_shift=3, device="cpu")
    _no_checks(monkeypatch)
    again = cross_correlate(A, B, max_shift=3, device="cpu")
    want = correlation_plan(A.shape, B.shape, max_shift=3, device="cpu")(A, B)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(again, want)
    out = np.empty_like(first)
    assert cross_correlate(A, B, max_shift=3, device="cpu", out=out) is out
    np.testing.assert_array_equal(out, first)


@pytest.mark.parametrize("change", [
    dict(max_shift=2), dict(form="one_to_many", right=B[None]), dict(left=A.astype(np.float64)),
    dict(method="fft"), dict(right=B[:, :9]),
], ids=["max_shift", "form", "dtype", "method", "shape"])
def test_other_arguments_take_the_checked_path(monkeypatch, change):
    cross_correlate(A, B, max_shift=3, device="cpu")
    kw = dict(left=A, right=B, max_shift=3, device="cpu")
    kw.update(change)
    want = cross_correlate(**kw)  # checked once, then kept
    _no_checks(monkeypatch)
    np.testing.assert_array_equal(cross_correlate(**kw), want)


def test_a_plan_object_as_method_is_kept_by_identity(monkeypatch):
    method = Plan.parse("fft")
    want = cross_correlate(A, B, max_shift=3, method=method, device="cpu")
    np.testing.assert_array_equal(  # an equal object: the checked path, the same plan
        cross_correlate(A, B, max_shift=3, method=Plan.parse("fft"), device="cpu"), want)
    _no_checks(monkeypatch)
    np.testing.assert_array_equal(cross_correlate(A, B, max_shift=3, method=method,
                                                  device="cpu"), want)


def _error(**kw):
    with pytest.raises(ValueError) as excinfo:
        cross_correlate(**kw)
    return type(excinfo.value), str(excinfo.value)


@pytest.mark.parametrize("bad", [
    dict(left=A.astype(complex)), dict(out=np.empty((2, 2), np.float32)), dict(device="bogus"),
], ids=["complex", "out", "device"])
def test_bad_input_after_a_kept_call_raises_as_before(bad):
    kw = dict(left=A, right=B, max_shift=3, device="cpu")
    kw.update(bad)
    checked = _error(**kw)  # nothing kept yet
    cross_correlate(A, B, max_shift=3, device="cpu")
    assert _error(**kw) == checked


def test_unhashable_and_non_array_arguments_still_work():
    want = cross_correlate(A, B, max_shift=3, device="cpu")
    np.testing.assert_array_equal(cross_correlate(A, B, max_shift=[3, 3], device="cpu"), want)
    np.testing.assert_array_equal(cross_correlate(A.tolist(), B, max_shift=3, device="cpu"),
                                  want)


def test_the_table_is_bounded_and_cleared(monkeypatch):
    monkeypatch.setattr(plan_cache, "PLAN_CACHE_SIZE", 3)
    for s in range(1, 6):
        cross_correlate(A, B, max_shift=s, device="cpu")
    assert len(plan_cache._CALLS) == 3
    assert plan_cache.remembered(plan_cache.call_key(A, B, "one_to_one", 1, "auto", "cpu")) \
        is None  # the oldest went first
    clear_plan_cache()
    assert not plan_cache._CALLS


@pytest.mark.gpu
def test_gpu_fast_path_matches_the_plan_and_its_errors(monkeypatch):
    cp = pytest.importorskip("cupy")
    left, right = cp.asarray(A), cp.asarray(B)
    plan = correlation_plan(A.shape, B.shape, max_shift=3, device="gpu")
    want = cp.asnumpy(plan(left, right))
    for _ in range(3):  # the first call checked, then the kept plan's call
        got = cross_correlate(left, right, max_shift=3)
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(got), want)
    key = plan_cache.call_key(left, right, "one_to_one", 3, "auto", "auto")
    assert plan_cache.remembered(key).fast  # the compiled call runs these arrays
    wide = cp.asarray(np.pad(A, ((0, 0), (0, 4))))[:, :10]  # not C-contiguous: converted
    np.testing.assert_array_equal(cp.asnumpy(cross_correlate(wide, right, max_shift=3)), want)
    out = cp.empty(plan.out_shape, cp.float32)
    assert cross_correlate(left, right, max_shift=3, out=out) is out
    np.testing.assert_array_equal(cp.asnumpy(out), want)
    with pytest.raises(InputError):
        cross_correlate(left, right, max_shift=3, out=cp.empty((2, 2), cp.float32))
    np.testing.assert_array_equal(cross_correlate(A, B, max_shift=3, device="gpu"), want)
    monkeypatch.setenv("XCORR_PLANNER", "rules")  # another planner: planned again
    assert plan_cache.kept_call(left, right, "one_to_one", 3, "auto", "auto", None)[0] \
        is NotImplemented
    again = cp.asnumpy(cross_correlate(left, right, max_shift=3))  # (its kernel may differ)
    np.testing.assert_allclose(again, want, rtol=1e-5, atol=1e-5)
