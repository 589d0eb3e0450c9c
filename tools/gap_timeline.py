"""Development probe (device): what the host was doing while the GPU idled in a warm
GPU-resident ``align(..., patches=GYxGX, out=CuPy)`` of the bench's stack (issue 27).  Functions
of the run are wrapped in ``torch.profiler.record_function`` (host annotations on the
profiler's clock, which CUPTI's kernel times share); for each idle gap of the GPU longer than
0.2 ms: its length, where it starts (ms from the first kernel) and the innermost annotations
open during it.  Then the annotations' host spans.

    python3 tools/gap_timeline.py [FRAMES] [GYxGX]      (default 4096 4x4)
"""
import sys

import cupy as cp
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from xcorr_app import backend
from xcorr_app.alignment import (_api, _lk_decision, _low_patches, _patch_pass, _patches,
                                 _pipeline, _template, _refine_gpu, _prepared, _result)
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack
from xcorr_app.registration import _surfaces
from wrapping import wrap_function

WRAP = [(_api, "passes_table"), (_api, "result_from_table"), (_api, "shared_plan"),
        (_api, "prebuild"), (_template, "decide_lucas_kanade"), (_template, "periodic_frames"),
        (_template, "measure_frames"), (_template, "prepared_reference"),
        (_template, "relative_to_first"), (_template, "decision_later"),
        (_pipeline, "Measurer.of"),
        (_patch_pass, "_template_image"), (_patch_pass, "patch_grid"),
        (_patch_pass, "measure_range"), (_patch_pass, "field_from_rows"),
        (_patch_pass, "patch_left"), (_patch_pass, "refine_template"),
        (_patch_pass, "template_patches"), (_patch_pass, "prepared_reference"),
        (_patch_pass, "field_weights"), (_patch_pass, "integer_parts"),
        (_patch_pass, "PatchSetup.make"), (_patch_pass, "_measurer"),
        (_patch_pass, "fill_low_gpu"), (_patch_pass, "patch_shifts"),
        (_patch_pass, "refine_shifts"), (_patch_pass, "warp_chunk"),
        (_patches, "summed_area_tables"), (_patches, "zncc_left"),
        (_refine_gpu, "refine_template_gpu"), (backend, "to_numpy"),
        (_api, "resolve_auto"), (_api, "_check_grid"), (_api, "check_aligned_out"),
        (_api, "keep_on_gpu"), (_api, "open_source"), (_api, "StashedSource"),
        (_pipeline, "Measurer.memory_plan"), (_prepared, "PreparedFrames.for_run"),
        (_prepared, "PreparedFrames.release"), (_result, "AlignResult.set_field"),
        (backend, "compute_device"), (_patch_pass, "open_source")]


def annotated(label, fn):
    def wrapped(*a, **k):
        with record_function(label):
            return fn(*a, **k)
    return wrapped


for module, name in WRAP:
    wrap_function(module, name, annotated)
assert _lk_decision and _low_patches and _prepared and _surfaces and torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
GRID = tuple(int(v) for v in sys.argv[2].split("x")) if len(sys.argv) > 2 else (4, 4)
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
out = cp.empty(g.shape, cp.float32)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=GRID,
          max_deviation=MAX_DEVIATION)
_api.align(g[:256], out=out[:256], **kw)  # warm-up
_api.align(g, out=out, **kw)
cp.cuda.Device().synchronize()
with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    with record_function("align"):
        _api.align(g, out=out, **kw)
        cp.cuda.Device().synchronize()
ev = prof.events()
labels = {"align"} | {f"{m.__name__.rsplit('.', 1)[-1]}.{n}" for m, n in WRAP}
# (the annotations have GPU-side twins spanning their kernels: left out, or the union of the
# GPU's work would cover every gap)
named = sorted((e.time_range.start, e.time_range.end, e.name) for e in ev
               if e.device_type.name == "CUDA" and e.name not in labels)
gpu = [(a, b) for a, b, _ in named]
host = [(e.time_range.start, e.time_range.end, e.name) for e in ev
        if e.device_type.name == "CPU" and (e.name == "align" or "." in e.name)
        and not e.name.startswith("aten")]
first = gpu[0][0]
gaps, cur, around = [], list(gpu[0]), {}
for k, (a, b) in enumerate(gpu[1:], 1):
    if a > cur[1]:
        gaps.append((cur[1], a))
        around[cur[1], a] = (named[k - 1][2][:40], named[k][2][:40])  # (the work either side)
        cur = [a, b]
    else:
        cur[1] = max(cur[1], b)
busy = sum(b - a for a, b in gpu)
print(f"GPU span {(cur[1] - first) / 1e3:.2f} ms, kernels+copies {busy / 1e3:.2f} ms, "
      f"idle {sum(b - a for a, b in gaps) / 1e3:.2f} ms in {len(gaps)} gaps")
print("gaps over 0.2 ms (length at start, from the first kernel) and the innermost host "
      "annotations open then:")
for a, b in gaps:
    if b - a < 200:
        continue
    open_ = [h for h in host if h[0] <= b and h[1] >= a and h[2] != "align"]
    open_.sort(key=lambda h: h[1] - h[0])
    names = ", ".join(dict.fromkeys(h[2] for h in open_[:4]))
    print(f"  {(b - a) / 1e3:7.2f} ms at {(a - first) / 1e3:8.2f}: {names}\n"
          f"      after {around[a, b][0]} / before {around[a, b][1]}")
print(f"\nhost annotations (ms from the first kernel; the GPU's last work ends at "
      f"{(cur[1] - first) / 1e3:.2f}; the first 80 and the last 30):")
ordered = sorted(host)
for item in ordered[:80] + [None] + ordered[-30:]:
    if item is None:
        print("  ...")
        continue
    s, e, name = item
    print(f"  {(s - first) / 1e3:8.2f} -> {(e - first) / 1e3:8.2f} ({(e - s) / 1e3:7.2f})  {name}")
