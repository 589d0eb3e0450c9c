"""Development probe (device): the host time of a plan call's layers (issue 24): the driver
launch alone (CuPy's wrapper), the compiled call alone (checks + launch in C), and the plan
call (its Python wrapper around it), on one_to_one 16x16 and 1x8 at 16x16; 20000 calls, a
synchronize every 100 (the GPU's pace where it is slower than the host), and the enqueue alone
(each block of 100 calls timed from an empty queue, its synchronize outside).

    python3 tools/fastcall_probe.py
"""
import cupy as cp
from dispatch_probe import enqueue_us, host_us  # (tools/ is the script's folder)

from xcorr_app import correlation_plan


def per_call_us(fn, n=20000):
    for _ in range(2000):  # warm-up
        fn()
    return host_us(fn, n), enqueue_us(fn, n)


def main():
    for form, ls, rs, method in [("one_to_one", (16, 16), (16, 16), "small:tile_y=1,row_splits=16"),
                                 ("one_to_one", (16, 16), (16, 16), "warp_per_shift:shared=1"),
                                 ("one_to_many", (16, 16), (8, 16, 16), "small:tile_y=1,row_splits=16")]:
        a, b = cp.random.rand(*ls, dtype=cp.float32), cp.random.rand(*rs, dtype=cp.float32)
        plan = correlation_plan(ls, rs, form, method=method)
        out = cp.empty(plan.out_shape, cp.float32)
        fc, s = plan.fast_call, cp.cuda.get_current_stream().ptr
        k = plan._kernel
        rows = [("plan(a, b, out)", lambda: plan(a, b, out)),
                ("fast_call(a, b, out, s)", lambda: fc(a, b, out, s)),
                ("kernel.launch_on (Python pack + CuPy driver call)",
                 lambda: k.launch_on(s, a.data.ptr, b.data.ptr, out.data.ptr))]
        print(f"== {form} {ls} x {rs} {method} (zeroes first: {plan._zero})", flush=True)
        for label, fn in rows:
            paced, alone = per_call_us(fn)
            print(f"   {label:52s} {paced:6.2f} us (enqueue alone {alone:5.2f})", flush=True)


if __name__ == "__main__":
    main()
