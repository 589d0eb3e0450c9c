"""Development probe for ncu: one launch of each reuse path on a 32 x 2048 x 2048 stack
(`reuse [SIZE]`), or of the lane-per-pair kernel on 1 x COUNT at SIDE x SIDE
(`pair [SIDE [COUNT]]`, default 32 and 4000), or of the tensor-core kernel on the same
(`mma [SIDE [COUNT [TILE_Y TILE_X [ROW_SPLITS]]]]`)."""
import sys

import cupy as cp
import numpy as np

what = sys.argv[1] if len(sys.argv) > 1 else "reuse"
if what == "reuse":
    from xcorr_app.filters._reuse import reuse_correlate

    stack = cp.random.rand(32, 2048, 2048, dtype=cp.float32)
    out = cp.empty_like(stack)
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    w = np.random.rand(size, size).astype(np.float32)
    for kw in (dict(loads="registers"), dict(loads="async", rows_per_block=64)):
        reuse_correlate(stack, w, out=out, **kw)
elif what == "mma":
    from xcorr_app.correlate._mma import mma_xcorr

    side = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 4000
    ty, tx = (int(v) for v in sys.argv[4:6]) if len(sys.argv) > 5 else (2, 32)
    splits = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    left = cp.random.rand(side, side, dtype=cp.float32)
    right = cp.random.rand(count, side, side, dtype=cp.float32)
    mma_xcorr(left, right, "one_to_many", tile_y=ty, tile_x=tx, row_splits=splits)
else:
    from xcorr_app.correlate._tiled import pair_tiled_xcorr

    side = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 4000
    left = cp.random.rand(side, side, dtype=cp.float32)
    right = cp.random.rand(count, side, side, dtype=cp.float32)
    pair_tiled_xcorr(left, right, "one_to_many", tile_y=4, tile_x=8, rows_per_chunk=0)
cp.cuda.Device().synchronize()
