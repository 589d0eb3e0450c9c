"""Development probe (device): why the bench's first pipeline row (one_to_one 16x16) can be
host-bound where the probes are not (issue 24): the row's pipeline figures measured three
times in one process (before and after the bench's own row, with torch loaded), then with the
cyclic garbage collector frozen, and the plan's back-to-back figure alone.

    python3 tools/pipe_row_probe.py
"""
import gc

import cupy as cp

from xcorr_app import correlation_plan
from xcorr_app.bench import _xcorr as bx
from xcorr_app.bench._xcorr_plans import back_to_back, pipeline_figures
from xcorr_app.correlate._planner import heuristic


def plan_alone(prob, left, right, label):
    ls, rs = prob.shapes()
    plan = correlation_plan(ls, rs, prob.form, prob.max_shift)
    out = cp.empty(plan.out_shape, cp.float32)
    times = sorted(back_to_back(lambda: plan(left, right, out)) for _ in range(9))
    print(f"{label}: plan alone back to back {times[4] * 1e3:.2f} us (min {times[0] * 1e3:.2f}, "
          f"max {times[-1] * 1e3:.2f}); {len(gc.get_objects())} objects tracked", flush=True)


def figures(prob, left, right, label):
    model = heuristic(prob.layout(), prob.max_shift)[0][0]
    peers = {"cupy_fft": lambda: bx.cupy_fft_peer(left, right, prob.form, prob.max_shift),
             "torch": lambda: bx.torch_peer(left, right, prob.form, prob.max_shift)}
    ms = pipeline_figures(prob, model, left, right, peers)["ms"]
    print(f"{label}: " + ", ".join(f"{k} {v * 1e3:.2f} us" for k, v in ms.items()
                                    if v is not None), flush=True)


def main():
    prob = [p for p in bx.PROBLEMS if p.name.startswith("one_to_one 16x16")][0]
    left, right = bx.make_inputs(prob)
    plan_alone(prob, left, right, "fresh process")
    figures(prob, left, right, "pipeline figures, first")
    plan_alone(prob, left, right, "after torch")
    row = bx.bench_problem(prob)
    print(f"the bench's row: back to back {row['pipeline']['ms']['plan'] * 1e3:.2f} us", flush=True)
    figures(prob, left, right, "pipeline figures, after the row")
    gc.collect()
    gc.freeze()
    figures(prob, left, right, "pipeline figures, gc frozen")
    plan_alone(prob, left, right, "gc frozen")
    gc.unfreeze()
    gc.disable()
    plan_alone(prob, left, right, "gc disabled")
    gc.enable()


if __name__ == "__main__":
    main()
