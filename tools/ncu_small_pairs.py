"""Development probe for ncu (issue 24): six calls of a plan on one small pair (SIDE [M [SPEC]]: one_to_one, or 1 x M)."""
import sys
import cupy as cp
from xcorr_app import correlation_plan
side = int(sys.argv[1]); m = int(sys.argv[2]) if len(sys.argv) > 2 else 0
spec = sys.argv[3] if len(sys.argv) > 3 else "warp_per_shift:shared=1"
if m:
    plan = correlation_plan((side, side), (m, side, side), "one_to_many", method=spec)
    a, b = cp.random.rand(side, side, dtype=cp.float32), cp.random.rand(m, side, side, dtype=cp.float32)
else:
    plan = correlation_plan((side, side), (side, side), method=spec)
    a, b = cp.random.rand(side, side, dtype=cp.float32), cp.random.rand(side, side, dtype=cp.float32)
out = cp.empty(plan.out_shape, cp.float32)
for _ in range(6):
    plan(a, b, out)
cp.cuda.Device().synchronize()
