"""Development probe (device): the host's timeline of a warm GPU-resident ``align(...,
patches=GYxGX, out=CuPy)`` of the bench's stack without a profiler (issue 27): functions of
the run wrapped to note ``time.perf_counter`` on entry and exit (no device waits added), the
third run's marks printed in ms from the call, with the GPU's end (an event recorded after the
call, its time against one recorded before it), and Python's garbage collections.

    python3 tools/host_marks.py [FRAMES] [GYxGX]      (default 4096 8x8)
"""
import gc
import sys
import time

import cupy as cp

from xcorr_app.alignment import _api, _patch_pass, _patches, _pipeline, _template
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack
from wrapping import wrap_function

WRAP = [(_api, "_check_grid"), (_api, "resolve_auto"), (_api, "prebuild"),
        (_api, "check_aligned_out"), (_api, "StashedSource"), (_api, "keep_on_gpu"),
        (_pipeline, "Measurer.memory_plan"), (_api, "PreparedFrames.for_run"),
        (_api, "shared_plan"), (_api, "passes_table"), (_api, "result_from_table"),
        (_template, "decide_lucas_kanade"), (_template, "prepared_reference"),
        (_template, "measure_frames"), (_template, "periodic_frames"),
        (_pipeline, "Measurer.of"), (_patch_pass, "measure_field"),
        (_patch_pass, "patch_grid"), (_patch_pass, "_template_image"),
        (_patch_pass, "PatchSetup.make"), (_patch_pass, "_measurer"),
        (_patch_pass, "measure_range"), (_patch_pass, "field_from_rows"),
        (_patches, "patch_shifts")]
marks = []


def collected(phase, info):  # Python's garbage collections, as marks
    marks.append((time.perf_counter(), f"{'>' if phase == 'start' else '<'} gc gen "
                  f"{info['generation']}" + (f" ({info['collected']} freed)"
                                             if phase == "stop" else "")))


gc.callbacks.append(collected)


def marked(label, fn):
    def wrapped(*a, **k):
        marks.append((time.perf_counter(), "> " + label))
        try:
            return fn(*a, **k)
        finally:
            marks.append((time.perf_counter(), "< " + label))
    return wrapped


for module, name in WRAP:
    wrap_function(module, name, marked)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
grid = tuple(int(v) for v in sys.argv[2].split("x")) if len(sys.argv) > 2 else (8, 8)
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
out = cp.empty(g.shape, cp.float32)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=grid,
          max_deviation=MAX_DEVIATION, out=out)
for run in range(3):
    cp.cuda.Device().synchronize()
    marks.clear()
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    t0 = time.perf_counter()
    _api.align(g, **kw)
    t1 = time.perf_counter()
    b.record()
    b.synchronize()
    t2 = time.perf_counter()
    print(f"run {run}: call {1e3 * (t1 - t0):.2f} ms, GPU done {1e3 * (t2 - t0):.2f} ms, "
          f"events {cp.cuda.get_elapsed_time(a, b):.2f} ms")
seen = {}
for t, label in marks:
    if label.endswith("patch_shifts"):  # (one a chunk: the first two only)
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 2:
            continue
    print(f"  {1e3 * (t - t0):8.2f}  {label}")
