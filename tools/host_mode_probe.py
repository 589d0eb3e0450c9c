"""Development probe (device): is a plan call's enqueue dearer while the GPU waits for it than
while it is busy (issue 24)? On some hosts the one_to_one 16x16 row is host-bound (0.0043 ms
back to back, enqueue 4.0 us) where the next rows' enqueue is 2.7 us on the same host. For
16x16 and 32x32 plans, on several CPUs of the host (`os.sched_setaffinity`): the enqueue of
100 calls from an idle GPU and from a busy one (a spin kernel queued first), and back to back
(200 calls between CUDA events) from an idle GPU and behind a spin kernel; medians.

    python3 tools/host_mode_probe.py
"""
import os
import statistics
import time

import cupy as cp

from xcorr_app import correlation_plan
from xcorr_app.bench._xcorr_plans import back_to_back

SPIN = cp.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}""", "spin")


def spin(us):
    SPIN((1,), (1,), (cp.int64(int(us * 1800)),))  # ~1.8 GHz (order of magnitude is enough)


def enqueue_us(fn, busy_us, blocks=40, n=100):
    out = []
    for _ in range(blocks):
        cp.cuda.Device().synchronize()
        if busy_us:
            spin(busy_us)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    cp.cuda.Device().synchronize()
    return statistics.median(out)


def b2b_us(fn, busy_us, rounds=9):
    lead = (lambda: spin(busy_us)) if busy_us else None
    return statistics.median(back_to_back(fn, warmup=0, lead=lead) * 1e3
                             for _ in range(rounds))


def main():
    cpus = sorted(os.sched_getaffinity(0))
    print(f"cpus {cpus}; pid {os.getpid()}", flush=True)
    plans = []
    for n in (16, 32):
        plan = correlation_plan((n, n), (n, n), "one_to_one")
        a, b = cp.random.rand(n, n, dtype=cp.float32), cp.random.rand(n, n, dtype=cp.float32)
        out = cp.empty(plan.out_shape, cp.float32)
        fn = (lambda p, x, y, o: lambda: p(x, y, o))(plan, a, b, out)
        for _ in range(3000):
            fn()
        plans.append((f"{n}x{n} {plan.method}", fn))
    spin(10)
    cp.cuda.Device().synchronize()
    picks = sorted({cpus[0], cpus[len(cpus) // 4], cpus[len(cpus) // 2], cpus[-1]})
    for cpu in [None] + picks:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        where = "any cpu" if cpu is None else f"cpu {cpu}"
        for label, fn in plans:
            e_idle, e_busy = enqueue_us(fn, 0), enqueue_us(fn, 2000)
            b_idle, b_busy = b2b_us(fn, 0), b2b_us(fn, 500)
            print(f"{where:8s} {label:34s} enqueue idle {e_idle:5.2f} busy {e_busy:5.2f} us | "
                  f"back to back idle {b_idle:5.2f} behind spin {b_busy:5.2f} us", flush=True)
    os.sched_setaffinity(0, set(cpus))
    # the same plan again in one process: does its figure settle or flip over time?
    label, fn = plans[0]
    seq = [f"{b2b_us(fn, 0, rounds=1):.2f}" for _ in range(30)]
    print(f"16x16 back to back, 30 single rounds in a row: {' '.join(seq)}", flush=True)


if __name__ == "__main__":
    main()
