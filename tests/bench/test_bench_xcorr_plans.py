"""The pipeline figures of ``xcorr bench xcorr``: which rows get them and their table (CPU),
the measurement itself (GPU)."""

import pytest

from xcorr_app.bench import _xcorr as bench
from xcorr_app.bench import _xcorr_plans as pipes  # the module under test
from xcorr_app.correlate import heuristic


def test_pipelined_rows():
    chosen = [p.name for p in bench.PROBLEMS if pipes.pipelined(p)]
    for side in (16, 32, 48, 64):
        assert f"one_to_one {side}x{side}, full" in chosen
    for side in (16, 32):  # the thesis's small one-to-many rows
        assert f"one_to_many 1x8 at {side}x{side}, full" in chosen
    assert not any("1x256" in n or "n_to_m" in n or "1024x1024" in n for n in chosen)


def fake_row(name, one, plan, graph, fft, torch, na_torch="", xcorr=None):
    return {"problem": name, "plan": "warp_per_shift:shared=1", "ms": {"ours": one},
            "pipeline": {"ms": {"plan": plan, "cross_correlate": xcorr, "graph": graph,
                                "cupy_fft": fft, "torch": torch},
                         "rel_error": {"plan": 1e-7, "cross_correlate": 1e-7, "graph": 2e-3,
                                       "cupy_fft": None, "torch": None},
                         "na": {"plan": "", "cross_correlate": "", "graph": "",
                                "cupy_fft": "", "torch": na_torch}}}


def test_pipeline_table():
    rows = [fake_row("one_to_one 16x16, full", 0.0137, 0.0030, 0.0029, 0.012, 0.02,
                     xcorr=0.0045),
            {"problem": "one_to_many 1x256 at 32x32, full", "ms": {"ours": 0.1}},
            fake_row("one_to_many 1x8 at 16x16, full", 0.0125, 0.004, None, 0.011, None,
                     na_torch="not available")]
    lines = pipes.pipeline_table(rows)
    assert len(lines) == 1 + 2 + 2  # title, header, one line per row with the figures
    assert "200 calls back to back" in lines[0]
    assert lines[1].startswith("| problem |") and "graph replay ms" in lines[1]
    assert "| 0.0137 | 0.003 | 0.0045 | 1.50 | 0.0029 | 0.012 | 0.02 | 4.00 |" in lines[3]
    assert "cross_correlate / plan" in lines[1]
    assert "graph error 2.0e-03" in lines[3]
    assert "torch: not available" in lines[4] and "| 2.75 |" in lines[4]
    assert "| 0.004 | n/a | n/a |" in lines[4]  # no cross_correlate figure
    assert pipes.pipeline_table([rows[1]]) == []


@pytest.mark.gpu
def test_pipeline_figures_on_a_small_problem():
    prob = bench.problem("one_to_one", 1, 1, 20)
    left, right = bench.make_inputs(prob)
    fft = bench.cupy_fft_peer(left, right, prob.form)
    plan = heuristic(prob.layout(), None)[0][0]  # the cost model's plan, as the bench's
    figures = pipes.pipeline_figures(prob, plan, left, right,
                                     {"cupy_fft": lambda: fft, "torch": lambda: None},
                                     want=fft(), rounds=1)
    assert figures["na"]["torch"] == "not available"
    for path in ("plan", "cross_correlate", "graph", "cupy_fft"):
        assert figures["ms"][path] > 0 and figures["na"][path] == "", figures
    for path in ("plan", "cross_correlate", "graph"):
        assert figures["rel_error"][path] <= bench.TOLERANCE


@pytest.mark.gpu
def test_back_to_back_counts_every_call():
    import cupy as cp

    calls = []
    a = cp.zeros(16, cp.float32)
    ms = pipes.back_to_back(lambda: calls.append(a.fill(1)), n=50, warmup=2)
    assert len(calls) == 52 and ms > 0
