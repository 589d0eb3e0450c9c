"""Where a warm ``xcorr_app.align`` run with its frames on the GPU spends its time.

What it measures, on the stack of ``xcorr bench align --patches`` (FRAMES frames of 512x512
uint16: 64 distinct non-rigid frames repeated, already on the GPU) with the bench's settings
(``max_shift`` 14, ``max_deviation`` 4, ``verify=False``), after warm-up calls (kernels built,
plans made):

1. the wall of the piecewise-rigid run (``--patches``, default 4x4) and of the rigid-only run,
   the median of 3 (frames/s);
2. one run of each under PyTorch's profiler (its CUPTI sees CuPy's and xcorr's kernels and
   copies): the GPU's busy time against its span, its largest idle gaps (where the host held it
   up), and the kernels by total GPU time;
3. with ``--cprofile``, the piecewise-rigid run under cProfile: the host's functions by
   cumulative and own time.

``--out``: the aligned frames warped into a CuPy array too (``out=``, as the bench's "on the
GPU" row).  ``--patches none``: the rigid run alone.

Usage (needs a GPU, CuPy and PyTorch)::

    python3 tools/align_timeline.py [FRAMES] [--patches GYxGX|none] [--out] [--cprofile]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def parse_grid(text):
    """``(gy, gx)`` of ``GYxGX``, or ``None`` for ``none``."""
    if text == "none":
        return None
    try:
        gy, gx = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--patches {text!r}: GYxGX (such as 4x4) or none") from None
    if gy < 1 or gx < 1:
        raise ValueError(f"--patches {text!r}: at least one patch each way")
    return gy, gx


def gpu_gaps(events):
    """``(span us, busy us, [(gap us, at us from the first event), ...] largest first)`` of the
    GPU's kernel and copy events."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    if not spans:
        return 0.0, 0.0, []
    first, last = spans[0][0], max(s[1] for s in spans)
    busy, cur, gaps = 0.0, list(spans[0]), []
    for a, b in spans[1:]:
        if a > cur[1]:
            busy += cur[1] - cur[0]
            gaps.append((a - cur[1], cur[1] - first))
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    busy += cur[1] - cur[0]
    return last - first, busy, sorted(gaps, reverse=True)


def profile_run(cp, align, stack, label, opts):
    """One run under PyTorch's profiler: the GPU's span, busy time, gaps and top kernels."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        align(stack, **opts)
        cp.cuda.Device().synchronize()
        wall = time.perf_counter() - t0
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    span, busy, gaps = gpu_gaps(events)
    print(f"\n== {label} under the profiler: wall {wall * 1e3:.1f} ms, GPU span "
          f"{span / 1e3:.1f} ms, busy {busy / 1e3:.1f} ms ({len(events)} events); largest idle "
          "gaps (ms, at ms from the first event):")
    for gap, at in gaps[:15]:
        print(f"   {gap / 1e3:8.2f} at {at / 1e3:8.2f}")
    total = {}
    for e in events:
        count, us = total.get(e.name[:90], (0, 0.0))
        total[e.name[:90]] = (count + 1, us + e.device_time)
    for name, (count, us) in sorted(total.items(), key=lambda kv: -kv[1][1])[:30]:
        print(f"{us / 1e3:9.2f} ms {count:6d}x  {name}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("frames", nargs="?", type=int, default=4096)
    ap.add_argument("--patches", default="4x4", help="GYxGX or none (default 4x4)")
    ap.add_argument("--out", action="store_true", help="warp the frames into a CuPy array")
    ap.add_argument("--cprofile", action="store_true", help="the host's functions too")
    args = ap.parse_args(argv)
    try:
        grid = parse_grid(args.patches)
        if args.frames < 8:
            raise ValueError("FRAMES must be at least 8")
    except ValueError as exc:
        ap.exit(2, f"error: {exc}\n")

    from xcorr_app import backend

    if not backend.gpu_available():
        ap.exit(2, f"error: needs a usable GPU: {backend.gpu_unavailable_reason()}\n")
    import cupy as cp

    from xcorr_app import align

    # the bench's own stack and settings: no public home, and the figures must match the bench's
    from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

    stack = cp.asarray(make_stack(args.frames, (512, 512), seed=0)[0])
    rigid = dict(max_shift=MAX_SHIFT, device="gpu", verify=False)
    runs = [("rigid", rigid)]
    if grid is not None:
        runs.insert(0, (f"patches {grid[0]}x{grid[1]}",
                        dict(rigid, patches=grid, max_deviation=MAX_DEVIATION)))
    if args.out:
        runs = [(label, dict(opts, out=cp.empty(stack.shape, cp.float32))) for label, opts in runs]
    n_small = min(args.frames, 256)
    for _, opts in runs:  # warm-up: kernels, plans and the chunk's shape
        align(stack[:n_small], **{k: (v[:n_small] if k == "out" else v) for k, v in opts.items()})
    print(f"{backend.gpu_name()}: {args.frames} frames of 512x512 on the GPU", flush=True)
    for label, opts in runs:
        walls = []
        for _ in range(3):
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            res = align(stack, **opts)
            cp.cuda.Device().synchronize()
            walls.append(time.perf_counter() - t)
        med = statistics.median(walls)
        print(f"{label}: {med:.4f} s = {args.frames / med:.0f} frames/s; notes {res.notes}",
              flush=True)
    for label, opts in runs:
        profile_run(cp, align, stack, label, opts)
    if args.cprofile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        align(stack, **runs[0][1])
        cp.cuda.Device().synchronize()
        prof.disable()
        stats = pstats.Stats(prof)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
