"""A/B of in-process align() on one stack: `python3 tools/ab_align.py STACK.tif [max_shift|none] ...`
prints the median of 3 warm runs per setting (after one warm-up run) for the tree on
PYTHONPATH; tools/ab_align.sh runs it for this tree and .old/."""
import statistics
import sys
import time

import xcorr_app

path = sys.argv[1]
for arg in sys.argv[2:] or ["none", "16"]:
    ms = None if arg == "none" else int(arg)
    xcorr_app.align(path, device="gpu", max_shift=ms)
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        xcorr_app.align(path, device="gpu", max_shift=ms)
        runs.append(time.perf_counter() - t)
    print(f"max_shift={arg}: median {statistics.median(runs):.3f} s  runs {[round(r, 3) for r in runs]}")
