"""Development probe (device): the patch search of the bench's ``--patches 4x4`` (16 template
patches of 145x145 against 256 windows each, +-4 px) and ``8x8`` (64 of 74x74): the
warp-per-result kernel (``method="band"``) against the planner's measured best and the FFT,
CUDA events, median of 15 after a warm-up; the largest difference from the FFT's surfaces.

    python3 tools/band_probe.py
"""
import statistics

import cupy as cp

from xcorr_app import cross_correlate
from xcorr_app.correlate._planner import decide


def timed(fn, reps=15):
    fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(out)


rng = cp.random.default_rng(0)
for p, side in ((16, 145), (64, 74)):
    t = rng.standard_normal((p, side, side), dtype=cp.float32)
    w = rng.standard_normal((p, 256, side, side), dtype=cp.float32)
    best = decide(t, w, "n_to_mn", 4, refresh=True, tune="full")
    rows = [("band", "band"), ("fft", "fft"), (f"planner best {best.plan}", best.plan)]
    ref = cross_correlate(t, w, "n_to_mn", max_shift=4, method="fft")
    print(f"== {p} patches of {side}x{side} x 256 windows, +-4 (planner: {best.reason})")
    for name, m in rows:
        got = cross_correlate(t, w, "n_to_mn", max_shift=4, method=m)
        err = float(cp.abs(got - ref).max() / cp.abs(ref).max())
        ms = timed(lambda m=m: cross_correlate(t, w, "n_to_mn", max_shift=4, method=m))
        print(f"  {ms:8.3f} ms  {name}  (max |diff| / max |fft| {err:.2e})")
