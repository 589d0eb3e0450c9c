"""Development probe for ncu: one launch of each reuse path on a 32 x 2048 x 2048 stack
(`reuse [SIZE]`), or of the lane-per-pair kernel on 1 x 4000 at 32x32 (`pair`)."""
import sys

import cupy as cp
import numpy as np

what = sys.argv[1] if len(sys.argv) > 1 else "reuse"
if what == "reuse":
    from xcorr_app.gpu_reuse_conv import reuse_correlate

    stack = cp.random.rand(32, 2048, 2048, dtype=cp.float32)
    out = cp.empty_like(stack)
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    w = np.random.rand(size, size).astype(np.float32)
    for kw in (dict(loads="registers"), dict(loads="async", rows_per_block=64)):
        reuse_correlate(stack, w, out=out, **kw)
else:
    from xcorr_app.gpu_tiled import pair_tiled_xcorr

    left = cp.random.rand(32, 32, dtype=cp.float32)
    right = cp.random.rand(4000, 32, 32, dtype=cp.float32)
    pair_tiled_xcorr(left, right, "one_to_many", tile_y=4, tile_x=8, rows_per_chunk=0)
cp.cuda.Device().synchronize()
