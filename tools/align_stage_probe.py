"""Development probe: GPU time of each stage of the align pipeline on one chunk (CUDA events).

Usage on the device: python3 tools/align_stage_probe.py [FRAMES] [SIZE]
"""
import sys

import cupy as cp
import numpy as np

from xcorr_app.alignment._pipeline import Measurer
from xcorr_app.registration._fft_register import fft_shifts
from xcorr_app.registration._normalize import zncc
from xcorr_app.registration._peaks import find_shifts
from xcorr_app.alignment._preprocess import parse_prefilter, prepare
from xcorr_app.correlate._api import cross_correlate
from xcorr_app.registration._surfaces import summed_area_tables
from xcorr_app._cuda.timing import time_gpu

n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
size = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
raw = cp.asarray(np.random.default_rng(0).integers(0, 60000, (n, size, size), dtype=np.uint16))
pre = parse_prefilter("gaussian:1")
p = prepare(raw, cp, pre)
ref = p.frames[0]
from xcorr_app.alignment._options import fft_reference  # noqa: E402
from xcorr_app.registration._fft_register import periodic_spectrum  # noqa: E402

kw = fft_reference("zncc")[0]  # what the pipeline's verification does
ref_fft = cp.fft.fft2(p.raw[0])
if kw.get("periodic"):
    ref_fft = periodic_spectrum(p.raw[0], ref_fft)
for ms in ((16, 16), None):
    m = Measurer(cp, (size, size), ms, "zncc", "gaussian", 20)
    m(ref, p.frames)
    bound = m.bound
    corr = cross_correlate(ref, p.frames, "one_to_many", bound, method=m.plan)
    z = zncc(corr, ref, p.frames, bound)
    origin = (bound[0], bound[1]) if ms else (size // 2 - 0, size // 2)
    stages = {
        "prepare (f32, checks, demean, gaussian:1)": lambda: prepare(raw, cp, pre),
        f"correlate ({m.plan})": lambda: cross_correlate(ref, p.frames, "one_to_many", bound,
                                                         method=m.plan),
        "zncc (array operations)": lambda: zncc(corr, ref, p.frames, bound),
        "find_shifts (array operations)": lambda: find_shifts(z, bound, "gaussian"),
        "summed-area tables of the frames": lambda: summed_area_tables(p.frames),
        "GpuSurfaces (correlate, zncc, peaks)": lambda: m._surfaces(
            ref, p.frames, m.plan,
            lambda: cross_correlate(ref, p.frames, "one_to_many", bound, method=m.plan)),
        f"fft reference (upsample 20, {kw})": lambda: fft_shifts(
            ref_fft, p.raw, upsample_factor=20, reference_is_fft=True, return_integer=True, **kw),
        "fft reference, integer only": lambda: fft_shifts(
            ref_fft, p.raw, upsample_factor=1, reference_is_fft=True, return_integer=True, **kw),
        "whole measurer": lambda: m(ref, p.frames),
    }
    print(f"--- {n} frames of {size}x{size}, max_shift {ms} (search {bound})")
    for name, fn in stages.items():
        ms_ = time_gpu(fn, warmup=2, repeat=5)
        print(f"{name:45s} {ms_:8.2f} ms  {ms_ / n:7.3f} ms/frame")
