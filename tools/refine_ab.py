"""Development probe (device): the fused refinement kernel ``refine_surfaces`` as the package
builds it, timed on the bench's shapes (GYxGX windows over 512x512 frames, the field within
+-1.5 px of a rigid drift): CUDA events, 3 warm-up launches, the median of 15 (the launch of
the field's pieces included).  Older kernels' A/Bs (c0a3653, 3938d7e, the widths compiled in
of 5795d0b) are in performance.md.

    python3 tools/refine_ab.py [FRAMES] [GYxGX]

``$REFINE_STRIP_FLOATS`` overrides ``_refine_gpu.REFINE_STRIP_FLOATS`` (the rows of a strip).
"""
import os
import statistics
import sys

import cupy as cp
import numpy as np

from xcorr_app.alignment import _refine_gpu
from xcorr_app.alignment._refine_gpu import refine_surfaces_gpu
from xcorr_app.alignment._spline import field_weights
from xcorr_app.alignment._patches import (PatchGrid, common_area, refine_left, refine_taper,
                                          tapered, template_patches)

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
GRID = tuple(int(v) for v in sys.argv[2].split("x")) if len(sys.argv) > 2 else (4, 4)
SHAPE = (512, 512)


def data(seed=3):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((SHAPE[0] + 32, SHAPE[1] + 32)).astype(np.float32)
    import cupyx.scipy.ndimage as ndi
    base = ndi.gaussian_filter(cp.asarray(base), 2.0)
    rigid = rng.uniform(-6, 6, (N, 2))
    frames = cp.stack([base[16 + int(round(a)):16 + int(round(a)) + SHAPE[0],
                            16 + int(round(b)):16 + int(round(b)) + SHAPE[1]] for a, b in rigid])
    frames += cp.asarray(rng.standard_normal(frames.shape).astype(np.float32)) * 0.05
    grid = PatchGrid.make(GRID, None, 4, SHAPE, common_area(rigid, SHAPE, 6))
    field = rigid[:, None, None, :] + rng.uniform(-1.5, 1.5, (N, *grid.grid, 2))
    return cp.ascontiguousarray(frames, cp.float32), grid, cp.asarray(field)


def timed(launch):
    for _ in range(3):
        launch()
    times = []
    for _ in range(15):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        res = launch()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(times), min(times), [r.get() for r in res]


def main():
    if os.environ.get("REFINE_STRIP_FLOATS"):
        _refine_gpu.REFINE_STRIP_FLOATS = int(os.environ["REFINE_STRIP_FLOATS"])
    frames, grid, field = data()
    taper = refine_taper(grid.size, flat=16)
    tnear = cp.asarray(tapered(template_patches(frames[0].get(), grid), taper))
    w = field_weights(grid.centres, SHAPE, cp)
    sums, g_taper = refine_left(tnear, taper)
    p = grid.n_patches
    print(f"{N} frames of {SHAPE}, {p} windows of {grid.size}, taper {taper is not None}")
    out = cp.full((p, N, *grid.size), cp.nan, cp.float32)

    def launch():
        return (*refine_surfaces_gpu(frames, grid.starts_y, grid.starts_x, grid.size, field, w,
                                     g_taper, tnear, sums, out=out), out)

    med, low, _ = timed(launch)
    print(f"{'package':28s} {med:8.3f} ms a launch (min {low:.3f})")

if __name__ == "__main__":
    main()
