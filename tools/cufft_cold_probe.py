"""Development probe (device): cuFFT plan creation time on a fresh machine (issue 26).

cuFFT builds some of its kernels at plan time (JIT, cached by the driver in CUDA_CACHE_PATH,
~/.nv/ComputeCache by default): a first run on a fresh machine pays for them.  For each FFT
shape, one process with an empty driver cache, then one with the cache it left, each timing the
first rfft2 / irfft2 of a batch (plan creation and execution).

    python3 tools/cufft_cold_probe.py [HxW ...]
"""
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys, time
import cupy as cp
h, w, b = (int(v) for v in sys.argv[1:4])
x = cp.zeros((b, h, w), cp.float32)
cp.cuda.Device().synchronize()
t = time.perf_counter(); y = cp.fft.rfft2(x); cp.cuda.Device().synchronize(); t1 = time.perf_counter() - t
t = time.perf_counter(); z = cp.fft.irfft2(y, s=(h, w)); cp.cuda.Device().synchronize(); t2 = time.perf_counter() - t
print(f"{t1 * 1e3:7.1f} {t2 * 1e3:7.1f}")
"""


def main(shapes):
    import cupy as cp  # noqa: F401  (the parent's own import: the children's is then warm on disk)

    print("shape        batch   cold rfft2/irfft2 ms    warm (driver cache kept) ms")
    for s in shapes:
        h, w = (int(v) for v in s.split("x"))
        for b in (1, 16):
            with tempfile.TemporaryDirectory() as d:
                env = dict(os.environ, CUDA_CACHE_PATH=d)
                runs = [subprocess.run([sys.executable, "-c", CHILD, str(h), str(w), str(b)], env=env,
                                       capture_output=True, text=True).stdout.strip() for _ in range(2)]
                print(f"{s:12s} {b:5d}   {runs[0]:22s}   {runs[1]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["2048x2048", "2160x2160", "2048x2160", "2304x2304", "2240x2240", "2112x2112",
                          "1024x1024", "1080x1080", "512x512", "120x160", "135x175"])
