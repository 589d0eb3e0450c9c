"""The one autotuner: a choice is measured once, then answered from memory or from the disk
cache, by this process or another (no GPU needed: the timer and the device are stubbed)."""

import json
import multiprocessing

import pytest

from xcorr_app._cuda import tuning


@pytest.fixture
def tuner(tmp_path, monkeypatch):
    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "device_fingerprint", lambda: ["Test GPU", [9, 0], "code"])
    calls = []

    def timer(fn, **kwargs):
        calls.append(fn)
        return fn()

    monkeypatch.setattr(tuning, "time_gpu", timer)
    tuning.forget_memory()
    yield calls
    tuning.forget_memory()


def runs():
    return {(1, 16): lambda: 3.0, (2, 8): lambda: 1.0, (4, 4): lambda: 2.0}


def test_measured_once_then_remembered(tuner):
    assert tuning.fastest(runs(), "conv.test", ["problem", 7]) == (2, 8)
    assert len(tuner) == 3
    assert tuning.fastest(runs(), "conv.test", ["problem", 7]) == (2, 8)  # memory: tuple keys
    assert len(tuner) == 3
    tuning.forget_memory()
    assert tuning.fastest(runs(), "conv.test", ["problem", 7]) == (2, 8)  # from the file
    assert len(tuner) == 3
    data = json.loads(tuning.cache_file().read_text())
    assert data["format"] == tuning.CACHE_FORMAT and len(data["entries"]) == 1


def test_other_problems_and_stale_choices_are_measured(tuner):
    tuning.fastest(runs(), "conv.test", ["problem", 7])
    tuning.fastest(runs(), "conv.test", ["problem", 8])
    assert len(tuner) == 6
    fewer = {k: v for k, v in runs().items() if k != (2, 8)}  # the remembered one is gone
    assert tuning.fastest(fewer, "conv.test", ["problem", 7]) == (4, 4)
    assert len(tuner) == 8


def _remember_many(path, start):
    import os

    os.environ["XCORR_CACHE_DIR"] = path
    for k in range(start, start + 20):
        tuning.remember("race", [k], {"choice": k})


def test_processes_do_not_lose_each_others_entries(tuner, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_remember_many, args=(str(tmp_path), 20 * i)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    tuning.forget_memory()
    assert [tuning.recall("race", [k]) for k in range(60)] == [{"choice": k} for k in range(60)]


def test_unwritable_cache_only_costs_a_measurement(tuner, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XCORR_CACHE_DIR", str(blocker / "sub"))  # a folder under a file
    assert tuning.fastest(runs(), "conv.test", ["p"]) == (2, 8)
    assert tuning.fastest(runs(), "conv.test", ["p"]) == (2, 8)
    assert len(tuner) == 3
