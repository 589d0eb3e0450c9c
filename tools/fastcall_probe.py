"""Development probe (device): the host time of a plan call's layers (issue 24): the plan call
(its Python method around the compiled call), the same with new arrays every call (two sets
in turn: the graph's parameters set each time), the compiled call alone as one CUDA graph
(parameters set when changed, graph launched) and launching its kernels one by one, and the
driver launch from Python (CuPy's wrapper), on one_to_one 16x16 and 32x32 and 1x8 at 16x16,
on the legacy default stream (a Python caller's current stream unless it made another) and on
a non-blocking stream; 20000 calls, a synchronize every 100 (the GPU's pace where it is slower
than the host), the enqueue alone (each block of 100 calls timed from an empty queue, its
synchronize outside) and back to back (200 calls between two CUDA events, as the bench).

    python3 tools/fastcall_probe.py
"""
from contextlib import nullcontext

import cupy as cp
from dispatch_probe import enqueue_us, host_us  # (tools/ is the script's folder)

from xcorr_app import correlation_plan
from xcorr_app._cuda.launch import compiled_call
from xcorr_app.bench._xcorr_plans import back_to_back


def per_call_us(fn, n=20000):
    for _ in range(2000):  # warm-up
        fn()
    return host_us(fn, n), enqueue_us(fn, n), back_to_back(fn) * 1e3


def main():
    for form, ls, rs, method in [("one_to_one", (16, 16), (16, 16), "warp_per_shift:shared=1"),
                                 ("one_to_one", (32, 32), (32, 32), "warp_per_shift:shared=1"),
                                 ("one_to_many", (16, 16), (8, 16, 16), "small:tile_y=1,row_splits=16")]:
        a, b = cp.random.rand(*ls, dtype=cp.float32), cp.random.rand(*rs, dtype=cp.float32)
        for where, ctx in [("legacy default stream", nullcontext()),
                           ("non-blocking stream", cp.cuda.Stream(non_blocking=True))]:
            with ctx:  # a plan per stream: its graph's launches stay on it
                plan = correlation_plan(ls, rs, form, method=method)
                out = cp.empty(plan.out_shape, cp.float32)
                fc, k = plan.fast_call, plan._kernel
                one_by_one = compiled_call(cp.ndarray, (ls, rs, plan.out_shape), plan.device_id,
                                           0, k, graph=False)
                print(f"== {form} {ls} x {rs} {method} (zeroes first: {plan._zero}; the "
                      f"compiled call a graph: {fc.graph})", flush=True)
                s = cp.cuda.get_current_stream().ptr
                a2, b2, out2 = a.copy(), b.copy(), out.copy()
                turn = [0]

                def in_turn():  # new pointers every call: the graph's parameters set each time
                    turn[0] ^= 1
                    return plan(a, b, out) if turn[0] else plan(a2, b2, out2)

                rows = [("plan(a, b, out)", lambda: plan(a, b, out)),
                        ("plan(...), two sets of arrays in turn", in_turn),
                        ("fast_call(a, b, out, s) (a graph)", lambda: fc(a, b, out, s)),
                        ("fast_call one by one", lambda: one_by_one(a, b, out, s)),
                        ("kernel.launch_on (Python pack + CuPy driver call)",
                         lambda: k.launch_on(s, a.data.ptr, b.data.ptr, out.data.ptr))]
                for label, fn in rows:
                    paced, alone, b2b = per_call_us(fn)
                    print(f"   {where:22s} {label:52s} {paced:6.2f} us (enqueue alone "
                          f"{alone:5.2f}, back to back {b2b:5.2f})", flush=True)


if __name__ == "__main__":
    main()
