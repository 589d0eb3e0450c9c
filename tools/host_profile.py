"""Development probe (device): where the host's time goes in a warm GPU-resident
``align(..., patches=GYxGX, out=CuPy)`` of the bench's stack (issue 27): cProfile of one call
after two warm-up calls, the functions by their own time and by cumulative time (xcorr's and
the libraries' they call).  The GPU idles while the host works between the passes and before
the first kernel (tools/gap_timeline.py finds those gaps; this says which Python they are).

    python3 tools/host_profile.py [FRAMES] [GYxGX]      (default 4096 8x8)
"""
import cProfile
import io
import pstats
import sys

import cupy as cp

from xcorr_app import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
GRID = tuple(int(v) for v in sys.argv[2].split("x")) if len(sys.argv) > 2 else (8, 8)

stack, _ = make_stack(N, (512, 512))
frames = cp.asarray(stack)
out = cp.empty(stack.shape, cp.float32)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=GRID,
          max_deviation=MAX_DEVIATION, out=out)
for _ in range(2):
    align(frames, **kw)
cp.cuda.Device().synchronize()
prof = cProfile.Profile()
prof.enable()
align(frames, **kw)
cp.cuda.Device().synchronize()
prof.disable()
for key, n in (("tottime", 45), ("cumulative", 70)):
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(n)
    print(buf.getvalue())
