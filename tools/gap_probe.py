"""Development probe (device): GPU-resident walls of the bench's stack (4096 frames of 512x512
uint16 on the GPU, warm, median of 5) with ``lucas_kanade`` auto (the default) against off,
rigid and patches, after the time of the auto judgement itself (on the GPU, CuPy and NumPy
stacks; on the CPU); then the GPU's busy time of each run under PyTorch's profiler (issue 27:
where the rigid pass's host gaps came from).

    python3 tools/gap_probe.py [FRAMES]
"""
import statistics
import sys
import time

import cupy as cp

from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
base = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, max_deviation=MAX_DEVIATION)
rows = [(f"{what}, lucas_kanade {lk}", dict(base, patches=p, lucas_kanade=lk))
        for what, p in (("rigid", None), ("patches", (4, 4))) for lk in ("auto", "off")]
for _, o in rows:
    align(g[:256], **o)


def wall(opts):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    align(g, **opts)
    cp.cuda.Device().synchronize()
    return time.perf_counter() - t


from xcorr_app.alignment._lk_decision import noisy_stack, noisy_stack_on_gpu  # noqa: E402
from xcorr_app.io import ArraySource  # noqa: E402

for label, src in (("CuPy stack", ArraySource(g)), ("NumPy stack", ArraySource(stack))):
    noisy_stack_on_gpu(src).result()
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    got = noisy_stack_on_gpu(src).result()
    t1 = time.perf_counter()
    print(f"lucas_kanade auto judged on the GPU, {label}: {1e3 * (t1 - t):.2f} ms {got}",
          flush=True)
t = time.perf_counter()
cpu = noisy_stack(ArraySource(stack))
print(f"the same on the CPU (one thread): {1e3 * (time.perf_counter() - t):.2f} ms {cpu}",
      flush=True)

for label, o in rows:
    w = statistics.median(wall(o) for _ in range(5))
    print(f"{label:32s} {w:.4f} s  {n / w:7.0f} frames/s", flush=True)

from torch.profiler import ProfilerActivity, profile  # noqa: E402

for label, o in rows:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        align(g, **o)
        cp.cuda.Device().synchronize()
        t1 = time.perf_counter()
    ev = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                if e.device_type.name == "CUDA")
    busy, end = 0, None
    for a, b in ev:
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    print(f"{label:32s} profiled wall {t1 - t0:.4f} s, span {(ev[-1][1] - ev[0][0]) / 1e6:.4f} s,"
          f" GPU busy {busy / 1e6:.4f} s", flush=True)
