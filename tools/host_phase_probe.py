"""Development probe (device): where the host's time goes in the parts of a warm
GPU-resident ``align(..., patches=GYxGX, out=CuPy)`` of the bench's stack (issue 27) that the
GPU waits for: cProfile's callees of the run's set-up (``resolve_auto``, ``_check_grid``,
``decide_lucas_kanade``), of the periodic test and of the patch pass's set-up and end, by
cumulative time.

    python3 tools/host_phase_probe.py [FRAMES] [GYxGX]      (default 4096 8x8)
"""
import cProfile
import pstats
import sys

import cupy as cp

from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
grid = tuple(int(v) for v in sys.argv[2].split("x")) if len(sys.argv) > 2 else (8, 8)
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
out = cp.empty(g.shape, cp.float32)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=grid,
          max_deviation=MAX_DEVIATION, out=out)
align(g, **kw)
align(g, **kw)
cp.cuda.Device().synchronize()
prof = cProfile.Profile()
prof.enable()
align(g, **kw)
cp.cuda.Device().synchronize()
prof.disable()
st = pstats.Stats(prof)
st.sort_stats("cumulative")
for name in ("resolve_auto", "_check_grid", "decide_lucas_kanade", "periodic_frames",
             "prepared_reference", "PatchSetup.make|make", "_measurer", "field_from_rows",
             "set_field", "result_from_table"):
    print(f"==== {name}")
    st.print_callees(name.split("|")[-1])
