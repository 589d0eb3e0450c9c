"""``lucas_kanade="auto"`` decided while the first pass measures (GPU runs, issue 27): the same
table, options, notes, settings and progress as deciding first.  The overlap is forced here on
NumPy (``passes_table(..., overlap=True)``), the logic GPU runs take."""

import concurrent.futures
import functools

import numpy as np
import pytest
import tifffile

from xcorr_app import align
from xcorr_app.alignment import _api, _template
from xcorr_app.alignment._lk_decision import noisy_stack, noisy_stack_later
from xcorr_app.bench._accuracy_data import make_stack
from xcorr_app.io import ArraySource, open_stack
from tests.cli_helpers import digest


def _noisy_circular():
    """Circular shifts of one image, noisy enough for auto to turn Lucas-Kanade on, which
    ``boundary="auto"`` then turns off."""
    f = make_stack("circular", 0, quick=True).frames
    return f + np.random.default_rng(1).normal(0, f.std() / 2, f.shape).astype(np.float32)


STACKS = {"low_light": lambda: make_stack("low_light", 0, quick=True).frames,
          "plain": lambda: make_stack("plain", 0, quick=True).frames,
          "circular": lambda: make_stack("circular", 0, quick=True).frames,
          "noisy_circular": _noisy_circular}


def _run(monkeypatch, stack, overlap, device="cpu", chunk_frames=2, **kwargs):
    """``align`` (on the CPU by default) with ``passes_table`` forced to overlap (or not): its table and
    options, the result's notes and settings, the progress calls, and whether the decision
    was taken in the background."""
    out, seen, later = {}, [], []

    def spy(*args, **kw):
        out["passes"] = _template.passes_table(*args, **kw, overlap=overlap)
        return out["passes"]

    def spy_later(*args, **kw):  # the future passes_table waits on (None: decided first)
        later.append(decision_later(*args, **kw))
        return later[-1]

    decision_later = _template.decision_later
    monkeypatch.setattr(_api, "passes_table", spy)
    monkeypatch.setattr(_template, "decision_later", spy_later)
    res = align(stack, device=device, chunk_frames=chunk_frames, progress=seen.append,
                **kwargs)
    table, _, run, notes = out["passes"]
    return {"table": table, "run": run, "notes": notes, "result_notes": res.notes,
            "settings": res.settings, "shifts": res.shifts, "progress": seen,
            "background": [f is not None for f in later]}


def _same(a, b, atol=0.0):
    for key in ("table", "shifts"):  # NaN where NaN
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=atol, err_msg=key)
    for key in ("run", "notes", "result_notes", "settings"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("kind,kwargs,lk", [
    ("low_light", {}, "on"),
    ("plain", {}, "off"),
    ("low_light", {"reference": "refined"}, "on"),
    ("low_light", {"reference": "refined:2"}, "on"),
    ("plain", {"reference": "refined"}, "off"),
    ("circular", {}, "off"),
    ("noisy_circular", {}, "off"),
    ("noisy_circular", {"reference": "refined"}, "off"),
])
def test_overlapped_decision_gives_the_results_of_deciding_first(monkeypatch, kind, kwargs, lk):
    stack = STACKS[kind]()
    first = _run(monkeypatch, stack, False, **kwargs)
    both = _run(monkeypatch, stack, True, **kwargs)
    assert first["background"] == [] and both["background"] == [True]
    _same(both, first)
    assert both["settings"]["lucas_kanade"] == lk
    n = len(stack)
    assert sum(both["progress"]) == n and min(both["progress"]) > 0
    noisy = noisy_stack(ArraySource(stack))[0]
    if not noisy or "reference" in kwargs:  # off, or refined: the passes planned right from
        assert both["progress"] == first["progress"]  # the start, the same calls
    if kind == "noisy_circular":  # auto was on until the frames turned out periodic
        assert noisy and any(m.startswith("boundary auto: circular") for m in both["notes"])


def test_a_tiff_file_is_read_by_both_threads_and_left_alone(monkeypatch, tmp_path):
    path = tmp_path / "low.tif"
    tifffile.imwrite(path, make_stack("low_light", 1, quick=True).frames)
    before = digest(path)
    with open_stack(path) as src:
        assert src.concurrent_reads  # one memory-mapped file
    first = _run(monkeypatch, str(path), False)
    both = _run(monkeypatch, str(path), True)
    assert both["background"] == [True]
    _same(both, first)
    assert both["settings"]["lucas_kanade"] == "on"
    assert sum(both["progress"]) == 6
    assert digest(path) == before


def test_sources_two_threads_cannot_read_decide_first(monkeypatch, tmp_path):
    """A folder keeps one file open at a time, a compressed file one file position: no
    background reads; the run is that of deciding first."""
    frames = make_stack("low_light", 0, quick=True).frames
    folder = tmp_path / "frames"
    folder.mkdir()
    for i, frame in enumerate(frames):
        tifffile.imwrite(folder / f"f{i}.tif", frame)
    packed = tmp_path / "packed.tif"
    tifffile.imwrite(packed, frames, compression="zlib")
    for path in (folder, packed):
        with open_stack(path) as src:
            assert noisy_stack_later(src) is None
        first = _run(monkeypatch, str(path), False)
        both = _run(monkeypatch, str(path), True)
        assert both["background"] == [False]
        _same(both, first)
        assert both["progress"] == first["progress"]


class _Decision(concurrent.futures.Future):
    """A decision known at once (``ready``) or only when its result is asked for: the two
    extremes of the background thread's timing."""

    def __init__(self, src, ready):
        super().__init__()
        self.src, self.ready = src, ready
        if ready:
            self.set_result(noisy_stack(src))

    def done(self):
        return self.ready

    def result(self, timeout=None):
        if not self.ready:
            self.ready = True
            self.set_result(noisy_stack(self.src))
        return super().result(timeout)


@pytest.mark.parametrize("ready", [True, False])
def test_progress_when_the_decision_turns_on_early_or_late(monkeypatch, ready):
    """Known before the first chunk: planned for two passes from the start, the calls of
    deciding first; known after the first pass: that pass reported every frame (planned for
    one), the template pass none; never more than the stack's frames in all."""
    stack = STACKS["low_light"]()
    first = _run(monkeypatch, stack, False)
    monkeypatch.setattr(_template, "noisy_stack_later",
                        lambda src: _Decision(src, ready))
    out, seen = {}, []

    def spy(*args, **kw):
        out["passes"] = _template.passes_table(*args, **kw, overlap=True)
        return out["passes"]

    monkeypatch.setattr(_api, "passes_table", spy)
    res = align(stack, device="cpu", chunk_frames=2, progress=seen.append)
    assert res.settings == first["settings"] and res.notes == first["result_notes"]
    np.testing.assert_array_equal(out["passes"][0], first["table"])
    assert first["progress"] == [1, 1, 1, 1, 1, 1]  # 6 frames over two passes of 3 chunks
    assert seen == (first["progress"] if ready else [2, 2, 2])


def test_the_background_decision_is_waited_for_when_a_pass_fails(monkeypatch):
    """The source is closed after passes_table: its reader thread must be done by then.  The
    judgement is held until the pass has failed and then takes 0.3 s more, so without the
    wait the decision could not be done when align raises."""
    import threading
    import time

    from xcorr_app.alignment import _lk_decision

    stack = STACKS["low_light"]()
    started, failed = [], threading.Event()
    judge = _lk_decision._precision_of

    def held(frame):
        failed.wait(10)
        time.sleep(0.3)
        return judge(frame)

    def later(src):
        started.append(noisy_stack_later(src))
        return started[-1]

    def broken(*args, **kwargs):
        failed.set()
        raise RuntimeError("a pass failed")

    monkeypatch.setattr(_lk_decision, "_precision_of", held)
    monkeypatch.setattr(_template, "noisy_stack_later", later)
    monkeypatch.setattr(_template, "measure_frames", broken)
    monkeypatch.setattr(_api, "passes_table",
                        functools.partial(_template.passes_table, overlap=True))
    with pytest.raises(RuntimeError, match="a pass failed"):
        align(stack, device="cpu")
    assert len(started) == 1 and started[0].done()


def test_an_error_of_the_background_decision_reaches_the_caller(monkeypatch):
    from xcorr_app.alignment import _lk_decision

    def failing(frame):
        raise ValueError("the judgement failed")

    monkeypatch.setattr(_lk_decision, "_precision_of", failing)
    monkeypatch.setattr(_api, "passes_table",
                        functools.partial(_template.passes_table, overlap=True))
    with pytest.raises(ValueError, match="the judgement failed"):
        align(STACKS["low_light"](), device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("kind,reference", [("low_light", None), ("plain", None),
                                            ("low_light", "refined"), ("circular", None)])
def test_gpu_resident_run_overlaps_and_matches_deciding_first(monkeypatch, kind, reference):
    """A CuPy stack on the GPU: the decision overlaps the first pass (judged on the device,
    queued before it), and the run is the one that decides first."""
    import cupy as cp

    stack = cp.asarray(make_stack(kind, 0).frames)
    kwargs = dict(device="gpu", chunk_frames=8, reference=reference, max_shift=14,
                  verify=False)
    first = _run(monkeypatch, stack, False, **kwargs)
    both = _run(monkeypatch, stack, True, **kwargs)
    assert both["background"] == [True] and first["background"] == []
    # the same kernels, up to the order of their float32 sums: the correlation kernels add
    # partial sums with atomicAdd, so two runs that both decide first differ too (up to 1.7e-5
    # px on these stacks, H100, 2026-11-23, tools/overlap_probe.py); far below the 1e-3 px
    # the GPU must keep to the CPU
    _same(both, first, atol=1e-4)
    assert sum(both["progress"]) == len(stack)
    assert both["settings"]["lucas_kanade"] == ("on" if kind == "low_light" else "off")
