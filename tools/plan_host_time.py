"""Host microseconds of a correlation plan's call, beside the GPU's time of the same call.

What it measures, on the pipeline rows of ``xcorr bench xcorr`` (one-to-one 16x16 to 64x64,
1x8 at 16x16 and 32x32; float32 CuPy arrays, the planner's plan):

* **host**: ``time.perf_counter`` over CALLS calls in blocks of 100, the median block, the GPU's
  queue kept short (a synchronize at the end of every block, timed: where the GPU is slower than
  the host this is the GPU's pace);
* **enqueue**: the same blocks, each started from an empty queue and synchronized outside the
  timing (the host's own time in the call);

for the plan call with ``out`` given and allocated, through the compiled launch path
(``plan.fast_call``; ``xcorr info`` says whether it is built: ``python3 setup.py build_ext
--inplace`` in a checkout) and through Python (the same plan with ``fast_call = None``), beside
``cross_correlate`` and a CUDA-graph replay; then the GPU's time a call, 200 calls back to back
between two CUDA events (the median of 9 rounds), and a graph replay's.

Usage (needs a GPU and CuPy)::

    python3 tools/plan_host_time.py [--calls 10000] [--only 16x16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

#: (name, form, left shape, right shape): the pipeline rows of ``xcorr bench xcorr``
CASES = ([(f"one_to_one {s}x{s}", "one_to_one", (s, s), (s, s)) for s in (16, 32, 48, 64)]
         + [(f"1x8 at {s}x{s}", "one_to_many", (s, s), (8, s, s)) for s in (16, 32)])


def blocks_us(cp, fn, calls, block=100, wait_inside=True):
    """Median over blocks of ``block`` calls of the host microseconds per call, each block
    started from an empty queue; ``wait_inside``: its synchronize is timed too."""
    stream = cp.cuda.get_current_stream()
    fn()
    stream.synchronize()
    per = []
    for _ in range(max(1, calls // block)):
        t = time.perf_counter()
        for _ in range(block):
            fn()
        if wait_inside:
            stream.synchronize()
        per.append((time.perf_counter() - t) / block * 1e6)
        stream.synchronize()
    return statistics.median(per)


def back_to_back_us(cp, fn, calls=200, rounds=9):
    """GPU microseconds a call: ``calls`` calls between two CUDA events, the median round."""
    fn()
    per = []
    for _ in range(rounds):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        per.append(cp.cuda.get_elapsed_time(start, stop) * 1e3 / calls)
    return statistics.median(per)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=10000, help="calls a measurement (default 10000)")
    ap.add_argument("--only", default="", help="only rows whose name contains this")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if args.only in c[0]]
    if args.calls < 100 or not cases:
        ap.exit(2, "error: --calls must be at least 100\n" if args.calls < 100
                else f"error: no row matches --only {args.only!r}\n")

    from xcorr_app import backend

    if not backend.gpu_available():
        ap.exit(2, f"error: needs a usable GPU: {backend.gpu_unavailable_reason()}\n")
    import cupy as cp

    from xcorr_app.correlate import correlation_plan, cross_correlate

    print(f"{backend.gpu_name()}; host us a call (the enqueue alone in brackets)", flush=True)
    rng = cp.random.RandomState(0)
    for name, form, ls, rs in cases:
        left = rng.standard_normal(ls, dtype=cp.float32)
        right = rng.standard_normal(rs, dtype=cp.float32)
        plan = correlation_plan(ls, rs, form)
        python = correlation_plan(ls, rs, form, method=plan.method)
        python.fast_call = None  # the same plan, its checks and launches in Python
        out = cp.empty(plan.out_shape, cp.float32)
        graph = plan.graph(left, right, cp.empty(plan.out_shape, cp.float32))
        path = "compiled" if plan.fast_call is not None else "Python: not built"
        calls = [(f"plan call, out given ({path})", lambda: plan(left, right, out)),
                 ("plan call, out given (Python path)", lambda: python(left, right, out)),
                 (f"plan call, out allocated ({path})", lambda: plan(left, right)),
                 ("plan call, out allocated (Python path)", lambda: python(left, right)),
                 ("cross_correlate, out given", lambda: cross_correlate(left, right, form,
                                                                        out=out)),
                 ("graph replay", graph.replay)]
        print(f"== {name}: {plan.method}", flush=True)
        for label, call in calls:
            host = blocks_us(cp, call, args.calls)
            enqueue = blocks_us(cp, call, args.calls, wait_inside=False)
            print(f"   {label}: {host:.2f} us ({enqueue:.2f})", flush=True)
        print(f"   GPU back to back: {back_to_back_us(cp, calls[0][1]):.2f} us a call "
              f"({path}), {back_to_back_us(cp, calls[1][1]):.2f} (Python path), "
              f"{back_to_back_us(cp, graph.replay):.2f} a graph replay", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
