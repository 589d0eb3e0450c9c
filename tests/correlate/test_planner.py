"""The planner: the cost model by default, decisions reused across batch sizes, bounded tuning
(CPU with a fake device where possible; GPU tests marked ``gpu``)."""

import json

import numpy as np
import pytest

from xcorr_app.correlate import _direct as reference
from xcorr_app.correlate import _measure as measure
from xcorr_app.correlate import _planner as planner  # the module under test
from xcorr_app.correlate import Plan
from xcorr_app._cuda import tuning
from xcorr_app.errors import InputError

from conftest import rel_error

H100 = {"sm_count": 132, "clock_khz": 1980000, "memory_clock_khz": 2619000, "bus_width": 5120,
        "compute_capability": "90"}


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A planner that believes it runs on an H100 (no CuPy call), with an empty cache."""
    monkeypatch.setenv(planner.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(planner.TUNE_ENV, raising=False)
    monkeypatch.delenv(planner.MODE_ENV, raising=False)
    monkeypatch.setattr(planner, "_device_id", lambda: 0)
    monkeypatch.setattr(planner, "_device", lambda: H100)
    fingerprint = lambda: ["FAKE H100", "90", "code"]  # noqa: E731
    monkeypatch.setattr(tuning, "device_fingerprint", fingerprint)
    monkeypatch.setattr(planner, "device_fingerprint", fingerprint)
    planner.forget()
    tuning.forget_memory()
    yield tmp_path
    planner.forget()
    tuning.forget_memory()


def frames(n, side=256):
    return np.zeros((side, side), np.float32), np.zeros((n, side, side), np.float32)


def test_count_bucket():
    assert [planner.count_bucket(n) for n in (1, 2, 3, 16, 37, 63, 64, 65)] == \
        [1, 2, 2, 16, 32, 32, 64, 64]


def test_heuristic_by_default_and_reused_across_batch_sizes(fake_gpu):
    d64 = planner.decide(*frames(64), "one_to_many", 4)
    assert d64.source == "heuristic" and "sm_90" in d64.reason
    assert d64.timings[0] == (d64.plan, min(t for _, t in d64.timings))
    # a smaller chunk and the last partial chunk: the same decision, not a new one
    for n in (16, 37, 63):
        d = planner.decide(*frames(n), "one_to_many", 4)
        assert d is d64, (n, d.plan, d64.plan)
    assert set(planner._BUCKETS[d64.key]) == {"1x64", "1x16", "1x32"}
    assert not (fake_gpu / "tuning.json").exists()  # heuristic choices are not written


def test_no_reuse_where_the_model_objects(fake_gpu):
    # 1 x 4000 at 32x32 runs best on tensor cores; 1 x 1 cannot run them at all
    many = planner.decide(*frames(4000, 32), "one_to_many", None)
    assert many.plan.method == "mma"
    one = planner.decide(*frames(1, 32), "one_to_many", None)
    assert one is not many and one.plan.method != "mma"


def test_a_tuned_decision_on_disk_serves_other_batch_sizes(fake_gpu):
    left, right = frames(64)
    lay = planner.form_layout("one_to_many", left.shape, right.shape)
    key = planner.problem_key(lay, 8)
    plan = planner.heuristic(lay, 8)[0][0]
    d = planner.Decision(plan, [(plan, 1.5)], "tuned", "measured 1 candidates", json.dumps(key))
    planner._store(key, json.dumps(key), "1x64", d)
    stored = json.loads((fake_gpu / "tuning.json").read_text())["entries"]
    assert json.dumps([planner.NAMESPACE, key]) in stored
    planner.forget()
    tuning.forget_memory()  # a new process: from the disk
    again = planner.decide(*frames(40), "one_to_many", 8)
    assert again.source == "tuned" and again.plan == plan and "cached" in again.reason


def test_tune_mode_from_the_environment(fake_gpu, monkeypatch):
    assert planner._tune_mode(None) is False
    monkeypatch.setenv(planner.TUNE_ENV, "1")
    assert planner._tune_mode(None) is True
    for value in ("0", "", "off", "false"):
        monkeypatch.setenv(planner.TUNE_ENV, value)
        assert planner._tune_mode(None) is False
    monkeypatch.setenv(planner.TUNE_ENV, "maybe")
    with pytest.raises(InputError, match="XCORR_TUNE must be 0 or 1"):
        planner._tune_mode(None)
    monkeypatch.delenv(planner.TUNE_ENV)
    monkeypatch.setenv(planner.MODE_ENV, "measure")
    assert planner._tune_mode(None) == "full"
    assert planner._tune_mode(False) is False  # the argument wins
    with pytest.raises(InputError, match="tune must be"):
        planner.decide(*frames(4), "one_to_many", 4, tune="sometimes")


def test_rules_mode_still_answers(fake_gpu, monkeypatch):
    monkeypatch.setenv(planner.MODE_ENV, "rules")
    d = planner.decide(*frames(8, 32), "one_to_many", 4)
    assert d.source == "rules" and d.plan.method == "warp_shuffle"


class FakeClock:
    """A clock that each timed run moves on by ``step`` seconds."""

    def __init__(self, step):
        self.now, self.step, self.runs = 0.0, step, []

    def __call__(self):
        return self.now

    def timer(self, fn, warmup, repeat):
        self.now += self.step
        self.runs.append(fn())
        return {"a": 3.0, "b": 1.0, "c": 2.0, "d": 0.5, "e": 0.1}[self.runs[-1]]


def test_bounded_tuning_honours_its_budget():
    clock = FakeClock(step=0.45)
    timings, errors, skipped = measure.time_candidates(
        list("abcde"), lambda p: (lambda: p), budget_s=2.0, clock=clock, timer=clock.timer)
    # started while under 2 s: a (0 s), b, c; each first run and its repeat 0.45 s
    assert [p for p, _ in timings] == ["b", "c", "a"] and skipped == ["d", "e"]
    assert clock.now <= 2.0 + 2 * 0.45 and not errors
    # a failing candidate is skipped, the budget still holds
    clock = FakeClock(step=1.5)
    bad = {"a": lambda: 1 / 0}
    timings, errors, skipped = measure.time_candidates(
        list("abc"), lambda p: bad.get(p, lambda: p), budget_s=2.0, clock=clock,
        timer=clock.timer)
    assert errors and errors[0].startswith("a: ZeroDivisionError")
    assert [p for p, _ in timings] == ["b"] and skipped == ["c"]


@pytest.mark.parametrize("form,left,right,keep", [
    ("one_to_many", (512, 512), (100, 512, 512), (64, 512, 512)),
    ("one_to_many", (16, 16), (4000, 16, 16), (4000, 16, 16)),
    ("n_to_mn", (100, 1024, 1024), (100, 1, 1024, 1024), (16, 1, 1024, 1024)),
    ("n_to_m", (8, 2048, 2048), (64, 2048, 2048), (16, 2048, 2048)),
    ("one_to_one", (2048, 2048), (2048, 2048), (2048, 2048)),
])
def test_subsample_bounds_the_tuning_batch(form, left, right, keep):
    a, b = np.broadcast_to(np.float32(0), left), np.broadcast_to(np.float32(0), right)
    _, sub = measure.subsample(a, b, form)
    assert sub.shape == keep


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("form,lshape,rshape", [
    ("one_to_many", (37, 29), (13, 37, 29)),
    ("one_to_one", (45, 23), (31, 19)),
    ("n_to_mn", (3, 41, 27), (3, 5, 41, 27)),
    ("n_to_m", (2, 33, 35), (9, 33, 35)),
    ("one_to_many", (301, 257), (9, 301, 257)),
])
@pytest.mark.parametrize("bound", [None, 3, (6, 2)])
def test_heuristic_plan_runs_and_matches_float64(tmp_path, monkeypatch, rng, form, lshape,
                                                 rshape, bound):
    import cupy as cp

    from xcorr_app import cross_correlate

    monkeypatch.setenv(planner.CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(planner.TUNE_ENV, raising=False)
    planner.forget()
    a, b = rng.standard_normal(lshape), rng.standard_normal(rshape)
    left, right = cp.asarray(a, cp.float32), cp.asarray(b, cp.float32)
    d = planner.decide(left, right, form, bound)
    assert d.source == "heuristic"
    got = cross_correlate(left, right, form, bound, method=d.plan)
    want = reference.xcorr(a.astype(np.float32).astype(np.float64),
                           b.astype(np.float32).astype(np.float64), form, bound)
    assert rel_error(got.get(), want) <= 1e-5, d.plan


@pytest.mark.gpu
def test_bounded_tuning_on_the_gpu(tmp_path, monkeypatch, rng):
    import cupy as cp

    monkeypatch.setenv(planner.CACHE_ENV, str(tmp_path))
    planner.forget()
    tuning.forget_memory()
    left = cp.asarray(rng.standard_normal((96, 80)), cp.float32)
    right = cp.asarray(rng.standard_normal((40, 96, 80)), cp.float32)
    d = planner.decide(left, right, "one_to_many", 8, tune=True)
    assert d.source in ("tuned", "heuristic") and isinstance(d.plan, Plan)
    if d.source == "tuned":
        assert d.timings[0][1] == min(t for _, t in d.timings)
        assert (tmp_path / "tuning.json").exists()
    # the last partial chunk reuses it, with or without tuning
    assert planner.decide(left, right[:33], "one_to_many", 8, tune=True).plan == d.plan
    monkeypatch.setenv(planner.TUNE_ENV, "1")
    assert planner.decide(left, right[:35], "one_to_many", 8).plan == d.plan
