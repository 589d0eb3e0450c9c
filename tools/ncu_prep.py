"""Development probe (device, under Nsight Compute): one GPU-resident ``align(...,
patches=4x4, out=CuPy)`` of 512 frames of the bench's stack (issue 27), for ``ncu -k regex:...``
to capture the preparation's and the warp's kernels (``tools/ncu_prep.sh``).

    python3 tools/ncu_prep.py [FRAMES] [GYxGX]
"""
import sys

import cupy as cp

from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

n = int(sys.argv[1]) if len(sys.argv) > 1 else 512
grid = tuple(int(v) for v in sys.argv[2].split("x")) if len(sys.argv) > 2 else (4, 4)
stack, _ = make_stack(n, (512, 512), seed=0)
g = cp.asarray(stack)
align(g, max_shift=MAX_SHIFT, device="gpu", verify=False, patches=grid,
      max_deviation=MAX_DEVIATION, out=cp.empty(g.shape, cp.float32))
cp.cuda.Device().synchronize()
