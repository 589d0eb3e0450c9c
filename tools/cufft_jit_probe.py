"""Development probe (device): how cuFFT's plan-time JIT behaves on a fresh machine (issue 26).

A: one process, empty driver cache: the first plans of several types, sizes and batches, in
order (does a batch-16 plan reuse what its batch-1 plan built? does another size?).
B: two threads creating plans of two sizes at once against one after the other.
C: a thread preparing a plan while the main thread works, then the main thread's own plan.

    python3 tools/cufft_jit_probe.py
"""
import os
import subprocess
import sys
import tempfile

A = r"""
import time, cupy as cp
cp.cuda.Device().synchronize()
def t(label, fn):
    t0 = time.perf_counter(); fn(); cp.cuda.Device().synchronize()
    print(f"  {label:34s} {1e3 * (time.perf_counter() - t0):7.1f} ms", flush=True)
z = lambda *s: cp.zeros(s, cp.float32)
c = lambda *s: cp.zeros(s, cp.complex64)
t("R2C 2160^2 b1", lambda: cp.fft.rfft2(z(1, 2160, 2160)))
t("R2C 2160^2 b16", lambda: cp.fft.rfft2(z(16, 2160, 2160)))
t("R2C 2048^2 b1", lambda: cp.fft.rfft2(z(1, 2048, 2048)))
t("R2C 2048^2 b16", lambda: cp.fft.rfft2(z(16, 2048, 2048)))
t("C2R 2160^2 b1", lambda: cp.fft.irfft2(c(1, 2160, 1081), s=(2160, 2160)))
t("C2R 2160^2 b16", lambda: cp.fft.irfft2(c(16, 2160, 1081), s=(2160, 2160)))
t("C2R 2048^2 b16", lambda: cp.fft.irfft2(c(16, 2048, 1025), s=(2048, 2048)))
t("C2C 1D 2048 b2 (axis -1)", lambda: cp.fft.fft(c(2, 2048), axis=-1))
t("R2C 1024^2 b1", lambda: cp.fft.rfft2(z(1, 1024, 1024)))
t("C2C 2048^2 b1", lambda: cp.fft.fft2(c(1, 2048, 2048)))
"""
B = r"""
import time, threading, sys, cupy as cp
cp.cuda.Device().synchronize()
def work(h):
    with cp.cuda.Stream(non_blocking=True):
        cp.fft.rfft2(cp.zeros((1, h, h), cp.float32)); cp.cuda.get_current_stream().synchronize()
t0 = time.perf_counter()
if sys.argv[1] == "threads":
    ts = [threading.Thread(target=work, args=(h,)) for h in (2160, 2048)]
    [x.start() for x in ts]; [x.join() for x in ts]
else:
    work(2160); work(2048)
print(f"  {sys.argv[1]:34s} {1e3 * (time.perf_counter() - t0):7.1f} ms (R2C 2160^2 and 2048^2)", flush=True)
"""
C = r"""
import time, threading, cupy as cp
cp.cuda.Device().synchronize()
def prepare():
    with cp.cuda.Stream(non_blocking=True):
        cp.fft.rfft2(cp.zeros((1, 2160, 2160), cp.float32)); cp.cuda.get_current_stream().synchronize()
th = threading.Thread(target=prepare); t0 = time.perf_counter(); th.start()
x = 0
while time.perf_counter() - t0 < 0.4: x += 1   # the main thread busy in Python (holds the GIL often)
th.join(); t1 = time.perf_counter()
cp.fft.rfft2(cp.zeros((16, 2160, 2160), cp.float32)); cp.cuda.Device().synchronize()
print(f"  prepared in a thread: joined at {1e3 * (t1 - t0):.1f} ms, main's b16 plan then "
      f"{1e3 * (time.perf_counter() - t1):.1f} ms", flush=True)
"""


def fresh(code, *args):
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                           env=dict(os.environ, CUDA_CACHE_PATH=d))
        print(r.stdout + r.stderr[-2000:], end="", flush=True)


if __name__ == "__main__":
    print("A: one process, empty driver cache, in order")
    fresh(A)
    print("B")
    fresh(B, "serial")
    fresh(B, "threads")
    print("C")
    fresh(C)
