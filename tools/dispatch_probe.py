"""Development probe (device): how much of a small problem's time is the host's dispatch.

For each plan of the bench's small problems it prints the event-timed call as the bench times it
(``run_plan``), 200 calls back to back, the GPU's time alone (200 calls in one CUDA graph), the
host microseconds per call, and (with ``profile``) the top of a cProfile of 2000 calls.

    python3 tools/dispatch_probe.py [profile]
"""
import cProfile
import pstats
import sys
import time

import cupy as cp

from xcorr_app.forms import form_layout
from xcorr_app.gpu_warp_shuffle import _LAUNCHES
from xcorr_app.plans import Plan, run_plan
from xcorr_app.shifts import output_shape
from xcorr_app.timing import time_gpu

CASES = [("one_to_one", (16, 16), (16, 16), "warp_per_shift:shared=1"),
         ("one_to_one", (32, 32), (32, 32), "warp_per_shift:shared=1"),
         ("one_to_one", (48, 48), (48, 48), "warp_per_shift"),
         ("one_to_many", (16, 16), (8, 16, 16), "warp_per_shift:shared=1"),
         ("one_to_many", (32, 32), (8, 32, 32), "warp_shuffle:shifts=2,distribution=rectangle,"
                                                "rows_per_worker=1"),
         ("one_to_many", (16, 16), (256, 16, 16), "warp_shuffle:rights=4"),
         ("n_to_m", (8, 32, 32), (8, 32, 32), "warp_shuffle:lefts=2,rights=4,"
                                              "distribution=rectangle,rows_per_worker=2"),
         ("n_to_mn", (4, 32, 32), (4, 64, 32, 32), "pair_tiled:tile_x=8,rows_per_chunk=4")]


def back_to_back(fn, n=200):
    fn()
    cp.cuda.get_current_stream().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(n):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / n


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


def host_us(fn, n=2000):
    fn()
    cp.cuda.get_current_stream().synchronize()
    t = time.perf_counter()
    for k in range(n):
        fn()
        if k % 100 == 99:
            cp.cuda.get_current_stream().synchronize()
    cp.cuda.get_current_stream().synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main(profile=False):
    t = time.perf_counter()
    sum(range(1_000_000))
    print(f"this host's Python: sum(range(1e6)) in {(time.perf_counter() - t) * 1e3:.1f} ms")
    for form, ls, rs, spec in CASES:
        left = cp.random.rand(*ls, dtype=cp.float32)
        right = cp.random.rand(*rs, dtype=cp.float32)
        lay = form_layout(form, ls, rs)
        out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, None),
                       cp.float32)
        plan = Plan.parse(spec)
        call = lambda: run_plan(plan, left, right, form, None, out=out)  # noqa: E731
        bench = time_gpu(call, warmup=5, repeat=51)
        per = back_to_back(call)
        cfg = list(_LAUNCHES.values())[-1]  # this problem's launch, kept by the first call
        if getattr(cfg, "arrange", 0) is None and not cfg.zero_first:
            k = cfg.kernel
            args = (left, right, out) + k.constants
            cupy_call = lambda: k.fn(k.grid, k.block, args, shared_mem=k.shared_mem)  # noqa
            bare_txt = (f", CuPy's launch host {host_us(cupy_call):.1f} us, prepared launch "
                        f"host {host_us(lambda: k(left, right, out)):.1f} us")
        else:
            bare_txt = ""
        try:
            gpu = f"{in_graph(call) * 1e3:.1f} us"
        except Exception as exc:  # a path that cannot be captured
            gpu = f"not capturable ({type(exc).__name__}: {exc})"
        print(f"{form} {ls} x {rs} {spec}: bench-timed {bench * 1e3:.1f} us, back-to-back "
              f"{per * 1e3:.1f} us, in a graph {gpu}, host {host_us(call):.1f} us per call{bare_txt}", flush=True)
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(2000):
                call()
            prof.disable()
            cp.cuda.get_current_stream().synchronize()
            pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main("profile" in sys.argv[1:])
