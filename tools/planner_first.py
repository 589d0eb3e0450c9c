"""How long the planner makes a fresh process wait (device script): wall seconds of
``decide()`` and of the chosen plan's first run (its compile included) for align-like
problems, with the cost model (default) and with bounded tuning (``tune=True``), and whether a
smaller and a partial chunk reuse the decision.  Run it with empty caches
(``XCORR_CACHE_DIR`` and ``CUPY_CACHE_DIR`` pointing at new folders) to see a fresh machine.

Usage: ``PYTHONPATH=. python3 tools/planner_first.py``
"""

import time

import cupy as cp

from xcorr_app.correlate._planner import decide
from xcorr_app.correlate._plans import run_plan

PROBLEMS = [((1024, 1024), 64, 16), ((2048, 2048), 64, 16), ((512, 512), 64, 4),
            ((120, 160), 12, None)]


def main():
    rs = cp.random.RandomState(0)
    for tune in (False, True):
        for shape, n, bound in PROBLEMS:
            left = rs.standard_normal(shape, dtype=cp.float32)
            right = rs.standard_normal((n,) + shape, dtype=cp.float32)
            t0 = time.perf_counter()
            d = decide(left, right, "one_to_many", bound, tune=tune)
            t1 = time.perf_counter()
            run_plan(d.plan, left, right, "one_to_many", bound)
            cp.cuda.get_current_stream().synchronize()
            t2 = time.perf_counter()
            again = [decide(left, right[:k], "one_to_many", bound, tune=tune).plan == d.plan
                     for k in (n // 4, n - 5)]
            print(f"tune={tune!s:5} {n}x{shape} bound {bound}: decide {t1 - t0:.3f} s, first "
                  f"run {t2 - t1:.3f} s, plan {d.plan} ({d.source}), reused for smaller "
                  f"chunks: {again}", flush=True)
            del left, right


if __name__ == "__main__":
    main()
