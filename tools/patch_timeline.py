"""Development probe (device): where a warm GPU-resident ``align(..., patches=4x4)`` of the
bench's stack spends its time (issue 27): the wall of the rigid and the patch run (median of
3), then one patch run under PyTorch's profiler (CUPTI sees CuPy's kernels and copies too): the
GPU's busy time against the wall, the kernels by total time, and the host's gaps; then the
same run under cProfile (host functions by cumulative and own time).

    python3 tools/patch_timeline.py [FRAMES] [out] [GYxGX]

``out``: the aligned frames warped into a CuPy array too (``out=``, as the bench's GPU row);
``GYxGX``: the patch grid (default 4x4).
"""
import cProfile
import pstats
import statistics
import sys
import time

import cupy as cp
import torch

from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
grid = tuple(int(v) for v in sys.argv[3].split("x")) if len(sys.argv) > 3 else (4, 4)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=grid,
          max_deviation=MAX_DEVIATION)
if len(sys.argv) > 2 and sys.argv[2] == "out":
    kw["out"] = cp.empty(g.shape, cp.float32)
rigid = dict(kw, patches=None)
small = {k: (v[:256] if k == "out" else v) for k, v in kw.items()}
align(g[:256], **small)  # warm-up
align(g[:256], **dict(small, patches=None))


def wall(opts):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    res = align(g, **opts)
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t, res


for label, opts in (("patches", kw), ("rigid", rigid)):
    runs = [wall(opts) for _ in range(3)]
    med = statistics.median(r[0] for r in runs)
    res = runs[0][1]
    print(f"{label}: {med:.4f} s = {n / med:.0f} frames/s, chunk {res.settings['chunk_frames']},"
          f" lk {res.settings['lucas_kanade']}, prefilter {res.settings.get('prefilter')},"
          f" notes {res.notes}", flush=True)

from torch.profiler import ProfilerActivity, profile  # noqa: E402

for label, opts in (("patches", kw), ("rigid", rigid)):
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        align(g, **opts)
        cp.cuda.Device().synchronize()
        t1 = time.perf_counter()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    busy = sum(e.device_time for e in events) / 1e6
    print(f"\n== {label} under the profiler: wall {t1 - t0:.4f} s, GPU kernel+copy time"
          f" {busy:.4f} s ({len(events)} events)")
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    if spans:
        first, last = spans[0][0], max(s[1] for s in spans)
        merged, cur = 0.0, list(spans[0])
        gaps = []
        for a, b in spans[1:]:
            if a > cur[1]:
                merged += cur[1] - cur[0]
                gaps.append((a - cur[1], cur[1] - first))
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        merged += cur[1] - cur[0]
        print(f"GPU span {(last - first) / 1e6:.4f} s, GPU busy (union) {merged / 1e6:.4f} s;"
              " largest idle gaps (ms at ms from the first kernel):")
        for gap, at in sorted(gaps, reverse=True)[:15]:
            print(f"   {gap / 1e3:8.2f} ms at {at / 1e3:8.2f} ms")
    agg = {}
    for e in events:
        a = agg.setdefault(e.name[:90], [0, 0.0])
        a[0] += 1
        a[1] += e.device_time
    for name, (count, total) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:30]:
        print(f"{total / 1e3:9.2f} ms {count:6d}x  {name}")

prof = cProfile.Profile()
prof.enable()
align(g, **kw)
cp.cuda.Device().synchronize()
prof.disable()
st = pstats.Stats(prof)
st.sort_stats("cumulative").print_stats(45)
st.sort_stats("tottime").print_stats(25)
