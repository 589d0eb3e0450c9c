"""Development probe (device, issue 27): where the host in/out --patches row spends its wall
time: ``align`` of a uint16 NumPy stack (4096 frames of 512x512, the bench's) then
``AlignResult.apply(out=)`` into one float32 array, each timed (median of 3, warm), then one
run of each under cProfile (cumulative and own time).  Also the plain floors: one upload of the
stack to the GPU, one download of a float32 stack of its size into a fresh and into a touched
array.

    python3 tools/host_stage_probe.py [FRAMES]
"""
import cProfile
import pstats
import statistics
import sys
import time

import cupy as cp
import numpy as np

from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
stack, _ = make_stack(n, (512, 512), seed=0)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=(4, 4),
          max_deviation=MAX_DEVIATION)
out = np.empty(stack.shape, np.float32)
out.fill(0)
res = align(stack[:256], **kw)
for _ in res.apply(stack[:256], out=out[:256]):  # (apply yields the chunks)
    pass


def applied(res, into):
    for _ in res.apply(stack, out=into):
        pass


def wall(fn):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    r = fn()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t, r


rows = {}
for label, fn in (("align", lambda: align(stack, **kw)),
                  ("align rigid", lambda: align(stack, **dict(kw, patches=None)))):
    runs = [wall(fn) for _ in range(3)]
    rows[label] = statistics.median(r[0] for r in runs)
    res_of = runs[0][1]
    if label == "align":
        res = res_of
rows["apply(out=) into touched"] = statistics.median(wall(lambda: applied(res, out))[0]
                                                    for _ in range(3))
rows["apply(out=) into fresh"] = statistics.median(
    wall(lambda: applied(res, np.empty(stack.shape, np.float32)))[0] for _ in range(3))
rows["upload stack (pageable)"] = statistics.median(wall(lambda: cp.asarray(stack))[0]
                                                    for _ in range(3))
g = cp.zeros(stack.shape, cp.float32)
rows["download float32 into touched"] = statistics.median(wall(lambda: g.get(out=out))[0]
                                                          for _ in range(3))
rows["download float32 into fresh"] = wall(lambda: g.get())[0]
del g
for k, v in rows.items():
    print(f"{k:34s} {v:7.3f} s  {n / v:8.0f} frames/s")
for label, fn in (("align", lambda: align(stack, **kw)),
                  ("apply into fresh", lambda: applied(res, np.empty(stack.shape, np.float32)))):
    prof = cProfile.Profile()
    prof.runcall(fn)
    cp.cuda.Device().synchronize()
    print(f"\n== cProfile: {label}")
    p = pstats.Stats(prof)
    p.sort_stats("cumulative").print_stats(35)
    p.sort_stats("tottime").print_stats(20)
