"""Development probe (device): ``summed_area_tables`` (``sat_columns`` + ``sat_rows``) with each
row-segment count of ``sat_columns``' blocks, on the patch pass's windows (4096 of 145x145,
a search of +-4), the rigid pass's frames (256 of 512x512, +-14) and large frames (16 of
2048x2048, all rows): CUDA events, median of 20, and what ``sat_segments`` picks.

    python3 tools/sat_probe.py
"""
import statistics

import cupy as cp
import numpy as np

from xcorr_app.registration import _surfaces

rng = cp.random.default_rng(0)
real = _surfaces.sat_segments
for (n, h, w), bound in (((4096, 145, 145), 4), ((256, 512, 512), 14), ((16, 2048, 2048), None)):
    x = rng.standard_normal((n, h, w), dtype=cp.float32)
    line, first = [], None
    for s in _surfaces.SAT_SEGMENTS:
        _surfaces.sat_segments = lambda h, s=s: s
        for _ in range(3):
            _surfaces.summed_area_tables(x, bound_rows=bound)
        times = []
        for _ in range(20):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            t = _surfaces.summed_area_tables(x, bound_rows=bound)
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b))
        t = t[0].get()
        first = t if first is None else first
        diff = float(np.abs(t - first).max() / max(1e-300, np.abs(first).max()))
        line.append(f"{s}: {statistics.median(times):.3f} ms (rel diff {diff:.1e})")
    _surfaces.sat_segments = real
    print(f"{n} x {h}x{w}, bound {bound}: " + "; ".join(line) + f"; picks {real(h)}")
