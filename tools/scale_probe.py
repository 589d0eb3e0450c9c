"""Where does the --gpus run lose time?  Reads of the bench stack by 1 and 2 threads (memory map
copy vs pread into the buffer, NumPy vs pinned buffers), then align on one GPU and on all GPUs,
from the file and from a stack in memory, with the default and a short GIL switch interval.
Usage: python3 tools/scale_probe.py STACK.tif [reads]"""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import cupyx
import numpy as np
import tifffile

from xcorr_app import align
from xcorr_app.streaming import frame_ranges

path = sys.argv[1]
with tifffile.TiffFile(path) as tf:
    s = tf.series[0]
    off, shape, dtype = s.dataoffset, s.shape, s.dtype
n, fb = shape[0], int(np.prod(shape[1:])) * dtype.itemsize
CH = 64


def reader(method, pinned):
    def run(a, b):
        buf = (cupyx.empty_pinned if pinned else np.empty)((CH, *shape[1:]), dtype)
        buf[...] = 0
        if method == "mmap":
            mm = tifffile.memmap(path, mode="r")
            for i in range(a, b, CH):
                k = min(CH, b - i)
                np.copyto(buf[:k], mm[i:i + k])
        else:
            fd = os.open(path, os.O_RDONLY)
            for i in range(a, b, CH):
                k = min(CH, b - i)
                view = memoryview(buf[:k]).cast("B")
                got = os.preadv(fd, [view], off + i * fb)
                assert got == k * fb
            os.close(fd)
    return run


for method in (("mmap", "pread") if "reads" in sys.argv[2:] else ()):
    for pinned in (False, True):
        for threads in (1, 2, 4):
            fn = reader(method, pinned)
            best = 1e9
            for _ in range(3):
                t = time.perf_counter()
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(lambda r: fn(*r), frame_ranges(n, threads)))
                best = min(best, time.perf_counter() - t)
            print(f"read {method:5s} pinned={pinned!s:5s} threads={threads}: {best:.3f} s "
                  f"{n * fb / best / 1e9:.2f} GB/s", flush=True)


def timed(label, stack, **kw):
    align(stack, device="gpu", **kw)
    ts = []
    for _ in range(3):
        t = time.perf_counter()
        align(stack, device="gpu", **kw)
        ts.append(time.perf_counter() - t)
    print(f"align {label}: median {np.median(ts):.3f} s ({min(ts):.3f}-{max(ts):.3f})", flush=True)


import xcorr_app.alignment._gpus as _as  # noqa: E402  (where align_on_gpus calls it)

_orig = _as.measure_frames
spans = []


def _logged(*a, **k):
    import cupy
    t = time.perf_counter()
    out = _orig(*a, **k)
    spans.append((cupy.cuda.Device().id, k.get("start"), round(t - t0[0], 3),
                   round(time.perf_counter() - t0[0], 3)))
    return out


_as.measure_frames = _logged
t0 = [0.0]
timed("file, 1 GPU", path)
t0[0] = time.perf_counter()
spans.clear()
align(path, device="gpu", gpus="all")
print("per-GPU spans (device, start frame, begin s, end s):", spans, flush=True)
timed("file, --gpus all", path, gpus="all")
mem = tifffile.imread(path)
timed("memory, 1 GPU", mem)
timed("memory, --gpus all", mem, gpus="all")

sys.setswitchinterval(0.0002)
timed("file, --gpus all, switch interval 0.2 ms", path, gpus="all")
timed("memory, --gpus all, switch interval 0.2 ms", mem, gpus="all")

# consecutive --gpus runs: total, per-GPU spans, garbage collections and pinned pool blocks
import gc  # noqa: E402

import cupy  # noqa: E402

collections_seen = []
gc.callbacks.append(lambda phase, info: phase == "stop" and collections_seen.append(
    (info["generation"], round(time.perf_counter() - t0[0], 3))))
for i in range(6):
    spans.clear()
    collections_seen.clear()
    t0[0] = time.perf_counter()
    align(path, device="gpu", gpus="all")
    total = time.perf_counter() - t0[0]
    pool = cupy.get_default_pinned_memory_pool()
    print(f"run {i}: {total:.3f} s; spans {spans}; gc {collections_seen}; pinned free blocks "
          f"{pool.n_free_blocks()}", flush=True)
