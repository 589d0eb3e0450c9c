"""Development probe (device, issue 27): where the host in/out --patches row spends its wall
time, on the bench's stack (4096 frames of 512x512 uint16 by default), warm, the median of 3.

    python3 tools/host_stage_probe.py [FRAMES]          # the stages
    python3 tools/host_stage_probe.py [FRAMES] chunks   # whole runs per chunk_frames

The stages: ``align`` of the uint16 NumPy stack, ``align(out=)`` (the bench's host in/out row:
the aligned frames made by the run, into a fresh array), ``AlignResult.apply(out=)`` into one float32
array written before and into a fresh one, the plain floors (one upload of the stack, one
download of a float32 stack of its size into a fresh and into a written array), then one run of
each under cProfile.  ``chunks``: ``align`` with patches and rigid, GPU-resident (CuPy in) and
host in/out (NumPy in, the aligned frames into one fresh float32 array), for chunk_frames 64 to
1024: how much of a run is the per-chunk host work.
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

KW = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=(4, 4),
          max_deviation=MAX_DEVIATION)


def wall(fn):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    r = fn()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t, r


def median_wall(fn, runs=3):
    return statistics.median(wall(fn)[0] for _ in range(runs))


def applied(res, stack, into):
    for _ in res.apply(stack, out=into):  # (apply yields the chunks)
        pass
    return res


def host_run(stack, **kw):  # the bench's host in/out row: align(out=) into a fresh array
    return align(stack, out=np.empty(stack.shape, np.float32), **kw)


def stages(stack):
    n = len(stack)
    out = np.zeros(stack.shape, np.float32)
    host_run(stack[:256], **KW)
    rows = {"align": median_wall(lambda: align(stack, **KW)),
            "align rigid": median_wall(lambda: align(stack, **dict(KW, patches=None)))}
    rows["align(out=) into fresh"] = median_wall(lambda: host_run(stack, **KW))
    rows["align(out=) into written"] = median_wall(lambda: align(stack, out=out, **KW))
    from xcorr_app.streaming import _into_out  # A/B: the plain copy from the device instead
    staged, _into_out.STAGE_BYTES = _into_out.STAGE_BYTES, 1 << 62  # of the pinned pieces
    rows["align(out=) into fresh, plain copies"] = median_wall(lambda: host_run(stack, **KW))
    _into_out.STAGE_BYTES = staged
    rows["align(out=) rigid into fresh"] = median_wall(
        lambda: host_run(stack, **dict(KW, patches=None)))
    res = align(stack, **KW)
    rows["apply(out=) into written"] = median_wall(lambda: applied(res, stack, out))
    rows["apply(out=) into fresh"] = median_wall(
        lambda: applied(res, stack, np.empty(stack.shape, np.float32)))
    rows["upload stack (pageable)"] = median_wall(lambda: cp.asarray(stack))
    g = cp.zeros(stack.shape, cp.float32)
    rows["download float32 into written"] = median_wall(lambda: g.get(out=out))
    rows["download float32 into fresh"] = wall(lambda: g.get())[0]
    g = None  # (the GPU's memory back before the profiles)
    for k, v in rows.items():
        print(f"{k:34s} {v:7.3f} s  {n / v:8.0f} frames/s")
    for label, fn in (("align(out=) into fresh", lambda: host_run(stack, **KW)),
                      ("apply into fresh",
                       lambda: applied(res, stack, np.empty(stack.shape, np.float32)))):
        prof = cProfile.Profile()
        prof.runcall(fn)
        cp.cuda.Device().synchronize()
        print(f"\n== cProfile: {label}")
        p = pstats.Stats(prof)
        p.sort_stats("cumulative").print_stats(35)
        p.sort_stats("tottime").print_stats(20)


def chunks(stack):
    n = len(stack)
    g = cp.asarray(stack)
    align(g[:256], **KW)
    for c in (64, 128, 256, 512, 1024):
        for label, fn in (("patches gpu", lambda: align(g, chunk_frames=c, **KW)),
                          ("rigid gpu", lambda: align(g, chunk_frames=c,
                                                      **dict(KW, patches=None))),
                          ("patches host in/out", lambda: host_run(stack, chunk_frames=c, **KW))):
            fn()
            t = median_wall(fn)
            print(f"chunk {c:5d} {label:20s} {t:.4f} s {n / t:8.0f} frames/s", flush=True)


if __name__ == "__main__":
    frames = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    data, _ = make_stack(frames, (512, 512), seed=0)
    (chunks if sys.argv[2:3] == ["chunks"] else stages)(data)
