"""A/B of in-process align() on one stack: `python3 tools/ab_align.py STACK.tif [SETTING ...]`
prints the median of 3 warm runs per setting (after one warm-up run) for the tree on
PYTHONPATH; a SETTING is ``none`` (unbounded), ``16`` (max_shift 16), optionally followed by
``,noverify`` (``16,noverify``); tools/ab_align.sh runs it for this tree and .old/."""
import statistics
import sys
import time

import xcorr_app

path = sys.argv[1]
for arg in sys.argv[2:] or ["none", "16"]:
    ms, _, extra = arg.partition(",")
    kw = dict(device="gpu", max_shift=None if ms == "none" else int(ms),
              verify=extra != "noverify")
    xcorr_app.align(path, **kw)
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        xcorr_app.align(path, **kw)
        runs.append(time.perf_counter() - t)
    print(f"{arg}: median {statistics.median(runs):.3f} s  runs {[round(r, 3) for r in runs]}")
