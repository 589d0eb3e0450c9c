"""Development probe: time the reuse kernel's paths on a 32 x 2048 x 2048 float32 stack for a
few compile-time overrides (rows in flight, rows per copy group, resident blocks).
`xcorr bench filter` is the benchmark; this only guides the defaults.

    python3 tools/filter_probe.py 5 7     # filter sizes (default 3 5 7)
"""
import itertools
import sys

import cupy as cp
import numpy as np

from xcorr_app._cuda import loader as kernel_loader
from xcorr_app.filters._reuse import reuse_correlate
from xcorr_app._cuda.timing import time_gpu

BASE = kernel_loader.COMPILE_OPTIONS
stack = cp.random.rand(32, 2048, 2048, dtype=cp.float32)
out = cp.empty_like(stack)
for _ in range(50):  # bring the clocks up
    cp.copyto(out, stack)
copy_ms = time_gpu(lambda: cp.copyto(out, stack), repeat=30)
print(f"copy {copy_ms:.3f} ms  ({2 * stack.nbytes / copy_ms / 1e6:.0f} GB/s)")
PATHS = [(f"async{c}/{r}", dict(loads="async", rows_per_block=r, columns_per_lane=c))
         for c in (1, 2) for r in (16, 32, 64)]
GRID = {3: dict(ahead=(8,), blocks=(None,), group=(None,), l2=(None,)),
        5: dict(ahead=(10, 15), blocks=(None, 10), group=(None,), l2=(None,)),
        7: dict(ahead=(7,), blocks=(None,), group=(None,), l2=(None,))}
sizes = [int(a) for a in sys.argv[1:]] or [3, 5, 7]
for k in sizes:
    w = np.random.rand(k, k).astype(np.float32)
    ref = reuse_correlate(stack[:2], w, loads="registers")
    print(f"{k}x{k} registers: " + "  ".join(
        f"{r}: {time_gpu(lambda: reuse_correlate(stack, w, out=out, loads='registers', rows_per_block=r), repeat=25):.3f}"
        for r in (16, 32)), flush=True)
    g = GRID[k]
    for ahead, blocks, group, l2 in itertools.product(g["ahead"], g["blocks"], g["group"],
                                                      g["l2"]):
        d = {"XCORR_STAGED_AHEAD": ahead, "XCORR_REUSE_MIN_BLOCKS": blocks,
             "XCORR_STAGED_GROUP": group, "XCORR_STAGED_L2_PREFETCH": l2}
        kernel_loader.COMPILE_OPTIONS = BASE + tuple(f"-D{a}={b}" for a, b in d.items()
                                                     if b is not None)
        kernel_loader._COMPILED.clear()
        err = float(cp.abs(reuse_correlate(stack[:2], w, loads="async") - ref).max())
        res = [f"{n}: {time_gpu(lambda: reuse_correlate(stack, w, out=out, **kw), repeat=25):.3f}"
               for n, kw in PATHS]
        print(f"{k}x{k} ahead {ahead} blocks {blocks} group {group} L2 {l2} err {err:.1e}  "
              + "  ".join(res), flush=True)
kernel_loader.COMPILE_OPTIONS = BASE
kernel_loader._COMPILED.clear()
print(f"roofline {copy_ms:.3f} ms")
