"""Development probe (device): the host time of a plan call's layers, interleaved so that the
host's drift between measurements cancels (issue 24): blocks of 100 calls of the plan call
(the compiled base's call, `_plancall.c`), its Python method (`_call`), its compiled call
alone (`plan.fast_call`) and of what the checks read, in turn, 300 blocks each, each block
timed from an empty queue (the enqueue alone); medians and quartiles. one_to_one 16x16, 32x32.

    python3 tools/layer_probe.py
"""
import statistics
import time

import cupy as cp

from xcorr_app import correlation_plan


def block_us(fn, n=100):
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    for n in (16, 32):
        plan = correlation_plan((n, n), (n, n), "one_to_one")
        a, b = cp.random.rand(n, n, dtype=cp.float32), cp.random.rand(n, n, dtype=cp.float32)
        out = cp.empty(plan.out_shape, cp.float32)
        fc, s = plan.fast_call, cp.cuda.get_current_stream().ptr
        call = getattr(plan, "_call")  # the Python method (the call before _plancall.c)
        layers = {"plan(a, b, out)": lambda: plan(a, b, out),
                  "plan._call(a, b, out) (Python)": lambda: call(a, b, out),
                  "fast_call(a, b, out, s)": lambda: fc(a, b, out, s),
                  "stream ptr getter": plan._stream_ptr,
                  "a.shape == (n, n)": lambda: a.shape == (n, n),
                  "a._c_contiguous": lambda: a._c_contiguous,
                  "empty lambda": lambda: None}
        for fn in layers.values():
            for _ in range(2000):
                fn()
        times = {k: [] for k in layers}
        for _ in range(300):
            for k, fn in layers.items():
                times[k].append(block_us(fn))
        print(f"{n}x{n} plan base {type(plan).__mro__[1].__name__}", flush=True)
        for k, v in times.items():
            q = statistics.quantiles(v, n=4)
            print(f"{n}x{n} {k:26s} median {q[1]:5.2f} us (quartiles {q[0]:5.2f} {q[2]:5.2f})",
                  flush=True)


if __name__ == "__main__":
    main()
