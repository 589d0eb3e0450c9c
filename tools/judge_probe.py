"""Development probe (device): GPU-resident walls of the bench's stack (4096 frames of 512x512
on the GPU, median of 5), rigid and patches, with the lucas_kanade auto judgement as it is and
made instant (a stand-in for the CPU's ``_judged``; issue 27, 2026-11-23: whether the judgement
on host threads stalled the first pass; measured then with the threaded CPU judgement, since
replaced on GPU runs by the device's).

    python3 tools/judge_probe.py
"""
import statistics, time
import cupy as cp
from xcorr_app.alignment import _lk_decision as lk
from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack
stack, _ = make_stack(4096, (512, 512), seed=0)
g = cp.asarray(stack)
base = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, max_deviation=MAX_DEVIATION)
orig = lk._judged
def wall(o):
    cp.cuda.Device().synchronize(); t = time.perf_counter(); align(g, **o); cp.cuda.Device().synchronize()
    return time.perf_counter() - t
for name, fn in (("as is", orig), ("instant", lambda f: (list(f), (False, 0.003))[1]),
                 ("as is", orig)):
    lk._judged = fn
    for p in (None, (4, 4)):
        o = dict(base, patches=p); align(g[:256], **o)
        w = statistics.median(wall(o) for _ in range(5))
        print(f"judged {name:10s} patches {p}: {w:.4f} s {4096 / w:.0f} frames/s", flush=True)
