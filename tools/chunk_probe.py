"""Development probe (device, issue 27): the warm in-process wall of ``align`` with patches
(and rigid) on the bench's 4096 frames of 512x512, GPU-resident (CuPy in) and host in/out
(NumPy in, then the aligned frames into one fresh float32 array), for chunk_frames 64..1024:
how much of a run is the per-chunk host work (median of 3).

    python3 tools/chunk_probe.py [FRAMES]
"""
import statistics
import sys
import time

import cupy as cp
import numpy as np

from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=(4, 4),
          max_deviation=MAX_DEVIATION)


def host(opts):
    res = align(stack, **opts)
    for _ in res.apply(stack, out=np.empty(stack.shape, np.float32)):
        pass
    return res


def wall(fn):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    r = fn()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t, r


align(g[:256], **kw)
for c in (64, 128, 256, 512, 1024):
    for label, fn in (("patches gpu", lambda: align(g, chunk_frames=c, **kw)),
                      ("rigid gpu", lambda: align(g, chunk_frames=c, **dict(kw, patches=None))),
                      ("patches host in/out", lambda: host(dict(kw, chunk_frames=c)))):
        fn()
        runs = [wall(fn) for _ in range(3)]
        t = statistics.median(r[0] for r in runs)
        res = runs[0][1]
        print(f"chunk {c:5d} {label:20s} {t:.4f} s {n / t:8.0f} frames/s "
              f"(chunk used {res.settings['chunk_frames']})", flush=True)
