"""Development probe (device): where the GPU patch pass's time goes (issue 27): cProfile of
``align(frames on the GPU, patches=4x4)`` on the bench's stack (1024 frames of 512x512) after a
warm-up, the top functions by cumulative and by own time, and the chunk size.

    python3 tools/patch_profile.py [FRAMES]
"""
import cProfile
import pstats
import sys
import time

import cupy as cp

from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False, patches=(4, 4),
          max_deviation=MAX_DEVIATION)
align(g[:128], **kw)  # warm-up
for label, opts in (("patches", kw), ("rigid", dict(kw, patches=None))):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    res = align(g, **opts)
    cp.cuda.Device().synchronize()
    print(f"{label}: {n / (time.perf_counter() - t):.0f} frames/s, chunk {res.settings['chunk_frames']}",
          flush=True)
prof = cProfile.Profile()
prof.enable()
align(g, **kw)
cp.cuda.Device().synchronize()
prof.disable()
st = pstats.Stats(prof)
st.sort_stats("cumulative").print_stats(40)
st.sort_stats("tottime").print_stats(25)
