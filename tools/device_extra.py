"""Baseline timings on the device (CUDA events, warm-up, median of 20): the overlap-wise kernel
against CuPy FFT correlation, and the align pipeline's throughput. Not the product benchmark
(`xcorr bench` comes with the warp-shuffle issue); numbers for the issue notes."""
import time

import cupy as cp
import numpy as np

from xcorr_app.gpu_overlap import overlap_xcorr
from xcorr_app.reference import xcorr_fft
from xcorr_app import align


def med_ms(fn, reps=20):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(ts))


rng = np.random.default_rng(0)
print(f"{'problem':44s} {'overlap ms':>11s} {'cupy fft ms':>12s} ratio")
for name, l, r, form, ms in [
    ("one_to_many 1x1024 32x32 full", (32, 32), (1024, 32, 32), "one_to_many", None),
    ("one_to_many 1x256 64x64 full", (64, 64), (256, 64, 64), "one_to_many", None),
    ("one_to_one 128x128 full", (128, 128), (128, 128), "one_to_one", None),
    ("one_to_many 1x64 1024x1024 max_shift 8", (1024, 1024), (64, 1024, 1024), "one_to_many", 8),
    ("one_to_many 1x64 1024x1024 max_shift 16", (1024, 1024), (64, 1024, 1024), "one_to_many", 16),
]:
    L = cp.asarray(rng.standard_normal(l), cp.float32)
    R = cp.asarray(rng.standard_normal(r), cp.float32)
    t_o = med_ms(lambda: overlap_xcorr(L, R, form, ms))
    t_f = med_ms(lambda: xcorr_fft(L, R, form, ms, dtype=np.float32))
    print(f"{name:44s} {t_o:11.3f} {t_f:12.3f} {t_f / t_o:5.2f}")

stack = rng.random((256, 512, 512)).astype(np.float32)
for ms in (None, 8):
    align(stack[:8], device="gpu", max_shift=ms)
    t = time.perf_counter()
    align(stack, device="gpu", max_shift=ms)
    dt = time.perf_counter() - t
    print(f"align 256 frames 512x512 in memory, max_shift={ms}: {256 / dt:.0f} frames/s")
