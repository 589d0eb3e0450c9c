"""Development probe (device): how much of a small problem's time is the host's dispatch.

For each plan of the bench's small problems it prints the event-timed call as the bench times it
(``run_plan``), 200 calls back to back, the GPU's time alone (200 calls in one CUDA graph), the
host microseconds per call, and (with ``profile``) the top of a cProfile of 2000 calls.
``floor`` prints the same for an empty kernel and for a memset alone (what any call costs);
``planned ROW...`` takes each bench row whose name contains ROW, asks the planner again
(``refresh``) and probes its eight fastest candidates.  ``host`` splits one prepared launch's
host time into its parts (the driver's call alone, the pointer writes, the layers above).
``plan`` prints the host microseconds per call of a correlation plan (issue 24; target <= 4
us) on the pipeline rows of the bench (one-to-one 16x16 to 64x64, 1x8 at 16x16 and 32x32):
time.perf_counter over 10000 calls in blocks of 100, the median block, the GPU's queue kept
short (a synchronize every 100 calls; the figure is the GPU's pace where that is slower), and
the enqueue alone (the same blocks of 100 calls, each timed from an empty queue without its
synchronize), with the output given and allocated, through the compiled launch path
(``plan.fast_call``, built by ``python3 setup.py build_ext --inplace``) and the Python path
(the same plan with ``fast_call = None``) side by side, beside cross_correlate, run_plan (the
path before plans) and a graph replay; then the GPU's figures back-to-back and in graph
replay.

    python3 tools/dispatch_probe.py [profile] [floor] [host] [plan] [planned "1x8 at 32x32" ...]
"""
import cProfile
import pstats
import statistics
import sys
import time

import cupy as cp
import numpy as np

from xcorr_app import correlation_plan, cross_correlate
from xcorr_app.bench import _xcorr as bench_xcorr
from xcorr_app.bench._xcorr_plans import back_to_back
from xcorr_app.correlate import _planner as planner
from xcorr_app.correlate._forms import form_layout
from xcorr_app.correlate._warp_shuffle import _LAUNCHES
from xcorr_app._cuda.launch import PreparedLaunch, fastlaunch
from xcorr_app.correlate._plans import Plan, run_plan
from xcorr_app.correlate._shifts import output_shape
from xcorr_app._cuda.timing import time_gpu

CASES = [("one_to_one", (16, 16), (16, 16), "warp_per_shift:shared=1"),
         ("one_to_many", (32, 32), (8, 32, 32), "warp_shuffle:rights=2,distribution=rectangle,"
                                                "rows_per_worker=1"),
         ("one_to_many", (16, 16), (256, 16, 16), "mma:tile_y=1,tile_x=16")]


def in_graph(fn, n=200):
    """Milliseconds per call of ``n`` calls captured in one CUDA graph: the GPU's time alone."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(n):
            fn()
        graph = stream.end_capture()
        graph.launch()
        stream.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        graph.launch()
        stop.record()
        stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / n


def _blocks_us(fn, n, block, wait_inside):
    """Median over blocks of ``block`` calls of the host microseconds per call (a busy host's
    bursts fall in a few blocks: the median leaves them out), each block started from an
    empty queue; with ``wait_inside`` its synchronize is timed too."""
    stream = cp.cuda.get_current_stream()
    fn()
    stream.synchronize()
    per = []
    for _ in range(max(1, n // block)):
        t = time.perf_counter()
        for _ in range(block):
            fn()
        if wait_inside:
            stream.synchronize()
        per.append((time.perf_counter() - t) / block * 1e6)
        stream.synchronize()
    return statistics.median(per)


def host_us(fn, n=2000):
    """Host microseconds per call, the GPU's queue kept short (a synchronize every 100 calls,
    timed): the GPU's pace where it is slower than the host."""
    return _blocks_us(fn, n, 100, True)


def enqueue_us(fn, n=2000, block=100):
    """Host microseconds per call spent in ``fn()`` itself: blocks of ``block`` calls timed from
    an empty queue, each synchronized *outside* the timing (what :func:`host_us` counts as well
    is the wait for the GPU, which is the GPU's pace where it is slower than the host)."""
    return _blocks_us(fn, n, block, False)


def report(label, call, extra=""):
    bench = time_gpu(call, warmup=5, repeat=51)
    per = back_to_back(call)
    try:
        gpu = f"{in_graph(call) * 1e3:.1f} us"
    except Exception as exc:  # a path that cannot be captured
        gpu = f"not capturable ({type(exc).__name__}: {exc})"
    print(f"{label}: bench-timed {bench * 1e3:.1f} us, back-to-back {per * 1e3:.1f} us, in a "
          f"graph {gpu}, host {host_us(call):.1f} us per call{extra}", flush=True)


def probe(form, ls, rs, spec, profile=False, left=None, right=None):
    left = cp.random.rand(*ls, dtype=cp.float32) if left is None else left
    right = cp.random.rand(*rs, dtype=cp.float32) if right is None else right
    lay = form_layout(form, ls, rs)
    out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, None),
                   cp.float32)
    plan = Plan.parse(spec)
    call = lambda: run_plan(plan, left, right, form, None, out=out)  # noqa: E731
    call()
    bare_txt = ""
    if plan.on_gpu_only and plan.method != "overlap":
        cfg = list(_LAUNCHES.values())[-1]  # this problem's launch, kept by the first call
        if getattr(cfg, "arrange", 0) is None and cfg.kernel is not None:
            k = cfg.kernel
            bare_txt = (f", prepared launch alone host {host_us(lambda: k(left, right, out)):.1f}"
                        f" us, zeroed first {cfg.zero_first}")
    report(f"{form} {ls} x {rs} {spec}", call, bare_txt)
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            call()
        prof.disable()
        cp.cuda.get_current_stream().synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def floor():
    """An empty kernel through a prepared launch, a memset alone, and both."""
    fn = cp.RawKernel(r'extern "C" __global__ void empty(float* a, float* b, float* c) {}',
                      "empty")
    a = cp.zeros(31752, cp.float32)
    fn((1,), (32,), (a, a, a))
    k = PreparedLaunch(fn, (1, 1, 1), (32, 1, 1), 3)
    stream = cp.cuda.get_current_stream

    def memset():
        cp.cuda.runtime.memsetAsync(a.data.ptr, 0, a.nbytes, stream().ptr)

    def both():
        memset()
        k(a, a, a)

    report("empty kernel, prepared launch", lambda: k(a, a, a))
    report("memsetAsync of 127 KB alone", memset)
    report("memsetAsync then empty kernel", both)


def host_parts():
    """Host microseconds of the pieces of one launch of an empty kernel, and of run_plan's
    layers above the launch (the launch replaced by a no-op)."""
    fn = cp.RawKernel(r'extern "C" __global__ void empty(float* a, float* b, float* c, int n) {}',
                      "empty")
    a = cp.zeros(1024, cp.float32)
    n = np.int32(5)
    fn((1,), (32,), (a, a, a, n))
    k = PreparedLaunch(fn, (1, 1, 1), (32, 1, 1), 3, (n,))
    stream = cp.cuda.get_current_stream().ptr
    launch = cp.cuda.driver.launchKernel
    args = (*k._head, stream, 0, k._extra_ptr)
    for label, call in [("CuPy RawKernel call", lambda: fn((1,), (32,), (a, a, a, n))),
                        ("PreparedLaunch call", lambda: k(a, a, a)),
                        ("driver launchKernel alone", lambda: launch(*args)),
                        ("memsetAsync alone", lambda: cp.cuda.runtime.memsetAsync(
                            a.data.ptr, 0, 4096, stream)),
                        ("event record alone", lambda: cp.cuda.Event().record())]:
        print(f"{label}: host {host_us(call):.2f} us per call", flush=True)
    ls, rs, form = (16, 16), (256, 16, 16), "one_to_many"
    left = cp.random.rand(*ls, dtype=cp.float32)
    right = cp.random.rand(*rs, dtype=cp.float32)
    out = cp.empty((256, 31, 31), cp.float32)
    plan = Plan.parse("mma:tile_y=2,tile_x=8,row_splits=2")
    call = lambda: run_plan(plan, left, right, form, None, out=out)  # noqa: E731
    call()
    cfg = list(_LAUNCHES.values())[-1]
    real = cfg.kernel.__class__.__call__
    print(f"run_plan mma 1x256 at 16x16: host {host_us(call):.2f} us per call", flush=True)
    cfg.kernel.__class__.__call__ = lambda self, *arrays: None
    try:
        print(f"  the same with a no-op launch: host {host_us(call):.2f} us per call", flush=True)
    finally:
        cfg.kernel.__class__.__call__ = real


PLAN_CASES = ([("one_to_one", (s, s), (s, s)) for s in (16, 32, 48, 64)]
              + [("one_to_many", (s, s), (8, s, s)) for s in (16, 32)])


def plan_probe(n=10000):
    """Host microseconds per call of a correlation plan and of the paths around it."""
    print(f"compiled launch path of plans: {fastlaunch()[1]}", flush=True)
    for form, ls, rs in PLAN_CASES:
        left = cp.random.rand(*ls, dtype=cp.float32)
        right = cp.random.rand(*rs, dtype=cp.float32)
        plan = correlation_plan(ls, rs, form)
        python = correlation_plan(ls, rs, form, method=plan.method)
        python.fast_call = None  # the same plan, its call in Python
        out = cp.empty(plan.out_shape, cp.float32)
        graph = plan.graph(left, right, cp.empty(plan.out_shape, cp.float32))
        compiled = "compiled" if plan.fast_call is not None else "NOT compiled: Python"
        calls = [(f"plan call, out given ({compiled})", lambda: plan(left, right, out)),
                 ("plan call, out given (Python path)", lambda: python(left, right, out)),
                 (f"plan call, out allocated ({compiled})", lambda: plan(left, right)),
                 ("plan call, out allocated (Python path)", lambda: python(left, right)),
                 ("cross_correlate, out given", lambda: cross_correlate(left, right, form,
                                                                        out=out)),
                 ("run_plan (before plans)", lambda: run_plan(plan.method, left, right, form,
                                                              None, out=out)),
                 ("graph replay", graph.replay)]
        print(f"== {form} {ls} x {rs}: {plan.method} (fast call: {plan.fast})", flush=True)
        for label, call in calls:
            print(f"   {label}: host {host_us(call, n):.2f} us per call (the enqueue alone "
                  f"{enqueue_us(call, n):.2f})", flush=True)
        print(f"   GPU: back-to-back {back_to_back(calls[0][1]) * 1e3:.2f} us per call "
              f"({compiled}), {back_to_back(calls[1][1]) * 1e3:.2f} (Python path), graph "
              f"replay {back_to_back(graph.replay) * 1e3:.2f} us per replay", flush=True)


def planned(names):
    for prob in bench_xcorr.PROBLEMS:
        if not any(n in prob.name for n in names):
            continue
        left, right = bench_xcorr.make_inputs(prob)
        d = planner.decide(left, right, prob.form, prob.max_shift, refresh=True)
        print(f"== {prob.name}: planner chose {d.plan}", flush=True)
        for plan, ms in d.timings[:8]:
            print(f"   planner {ms * 1e3:.1f} us  {plan}")
        ls, rs = prob.shapes()
        for plan, _ in d.timings[:8]:
            probe(prob.form, ls, rs, str(plan), left=left, right=right)


def main(argv):
    if "floor" in argv:
        floor()
    if "host" in argv:
        host_parts()
        return
    if "plan" in argv:
        plan_probe()
        return
    if "planned" in argv:
        planned(argv[argv.index("planned") + 1:])
        return
    t = time.perf_counter()
    sum(range(1_000_000))
    print(f"this host's Python: sum(range(1e6)) in {(time.perf_counter() - t) * 1e3:.1f} ms")
    for form, ls, rs, spec in CASES:
        probe(form, ls, rs, spec, profile="profile" in argv)


if __name__ == "__main__":
    main(sys.argv[1:])
