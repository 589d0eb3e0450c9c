"""Development probe (device): where the host's time goes in a warm GPU-resident
``align(..., patches=4x4)`` of the bench's stack (issue 27), phase by phase: the functions
below wrapped with wall-clock marks (entry and exit, ms from the run's start; no device
waits added), the median of 3 runs, and the GPU's own time of the run (CUDA events).

    python3 tools/phase_probe.py [FRAMES]
"""
import collections
import statistics
import sys
import time

import cupy as cp

from xcorr_app.alignment import _api, _lk_decision, _patch_pass, _pipeline, _template
from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=(4, 4),
          max_deviation=MAX_DEVIATION)
marks = collections.defaultdict(list)
t0 = [0.0]


def wrap(module, name, label=None):
    fn = getattr(module, name)
    label = label or f"{module.__name__.rsplit('.', 1)[-1]}.{name}"

    def wrapped(*a, **k):
        start = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            marks[label].append(((start - t0[0]) * 1e3, (time.perf_counter() - t0[0]) * 1e3))
    setattr(module, name, wrapped)


for module, name in [(_api, "passes_table"), (_api, "result_from_table"),
                     (_api, "shared_plan"), (_api, "prebuild"), (_api, "resolve_auto"),
                     (_template, "decide_lucas_kanade"), (_template, "prepared_reference"),
                     (_template, "measure_frames"), (_template, "periodic_frames"),
                     (_template, "reference_frame"),
                     (_patch_pass, "_template_image"), (_patch_pass, "patch_grid"),
                     (_patch_pass, "measure_range"), (_patch_pass, "field_from_rows"),
                     (_patch_pass, "patch_left"), (_patch_pass, "refine_template")]:
    wrap(module, name)
wrap(_patch_pass.PatchSetup, "make", "PatchSetup.make")
assert _pipeline and _lk_decision

align(g[:256], **kw)  # warm-up
runs = []
for _ in range(3):
    marks.clear()
    cp.cuda.Device().synchronize()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    t0[0] = time.perf_counter()
    a.record()
    align(g, **kw)
    b.record()
    b.synchronize()
    wall = (time.perf_counter() - t0[0]) * 1e3
    runs.append((wall, cp.cuda.get_elapsed_time(a, b), dict(marks)))
runs.sort(key=lambda r: r[0])
wall, gpu, m = runs[1]
print(f"{n} frames: wall {wall:.1f} ms (runs {', '.join(f'{r[0]:.1f}' for r in runs)}), "
      f"events {gpu:.1f} ms")
for label, spans in sorted(m.items(), key=lambda kv: kv[1][0][0]):
    for s, e in spans:
        print(f"  {s:8.2f} -> {e:8.2f} ms ({e - s:7.2f})  {label}")
print("median of the walls:", f"{statistics.median(r[0] for r in runs):.1f} ms")
