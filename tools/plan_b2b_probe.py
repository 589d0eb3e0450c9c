"""Development probe (device): every candidate plan of the pipeline rows of issue 24 timed the
way a pipeline calls a plan: 200 plan calls back to back (CUDA events; the compiled launch path
where built) and 200 graph replays (the GPU alone), with the cost model's prediction, so that
the plan a pipeline wants (the fastest back to back) can be compared with the model's choice.

    python3 tools/plan_b2b_probe.py
"""
import cupy as cp

from xcorr_app import correlation_plan
from xcorr_app.bench._xcorr_plans import back_to_back
from xcorr_app.correlate._forms import form_layout
from xcorr_app.correlate._planner import heuristic

ROWS = [("one_to_one", (16, 16), (16, 16)), ("one_to_one", (32, 32), (32, 32)),
        ("one_to_many", (16, 16), (8, 16, 16)), ("one_to_many", (32, 32), (8, 32, 32))]


def main(top=14):
    for form, ls, rs in ROWS:
        left = cp.random.rand(*ls, dtype=cp.float32)
        right = cp.random.rand(*rs, dtype=cp.float32)
        ranked = heuristic(form_layout(form, ls, rs), None)
        rows = []
        for plan, predicted in ranked[:top]:
            try:
                p = correlation_plan(ls, rs, form, method=str(plan))
                out = cp.empty(p.out_shape, cp.float32)
                b2b = back_to_back(lambda: p(left, right, out))
                g = p.graph(left, right, out)
                rep = back_to_back(g.replay)
            except Exception as exc:  # noqa: BLE001 - a candidate that cannot run
                rows.append((9e9, 0, str(plan), f"failed: {exc}"[:60]))
                continue
            rows.append((b2b, rep, str(plan), f"model {predicted * 1e3:.1f} us, "
                         f"memset {bool(getattr(p, '_zero', False))}"))
        print(f"== {form} {ls} x {rs} (model's first: {ranked[0][0]})", flush=True)
        for b2b, rep, plan, note in sorted(rows):
            print(f"   back to back {b2b * 1e3:6.2f} us   graph {rep * 1e3:6.2f} us   {plan}  ({note})",
                  flush=True)


if __name__ == "__main__":
    main()
