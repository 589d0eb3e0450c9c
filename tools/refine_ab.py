"""Development probe (device): the fused refinement kernel ``refine_surfaces`` as the package
builds it, timed on the bench's shapes (GYxGX windows over 512x512 frames, the field within
+-1.5 px of a rigid drift): CUDA events, 3 warm-up launches, the median of 15; beside it the
same launch with the grid's width compiled in (``GX``) where the package reads it at run time,
and the two results compared (the same sums in the same order: equal).  Older kernels' A/Bs
(c0a3653, 3938d7e) are in performance.md.

    python3 tools/refine_ab.py [FRAMES] [GYxGX]
"""
import statistics
import sys

import cupy as cp
import numpy as np

from xcorr_app._cuda.loader import KernelFamily
from xcorr_app.alignment import _field_resample
from xcorr_app.alignment._field_resample import field_weights, refine_surfaces_gpu
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
    frames, grid, field = data()
    taper = refine_taper(grid.size, flat=16)
    tnear = cp.asarray(tapered(template_patches(frames[0].get(), grid), taper))
    w = field_weights(grid.centres, SHAPE, cp)
    sums, g_taper = refine_left(tnear, taper)
    p, gx = grid.n_patches, GRID[1]
    print(f"{N} frames of {SHAPE}, {p} windows of {grid.size}, taper {taper is not None}")
    out = cp.full((p, N, *grid.size), cp.nan, cp.float32)

    def launch():
        return (*refine_surfaces_gpu(frames, grid.starts_y, grid.starts_x, grid.size, field, w,
                                     g_taper, tnear, sums, out=out), out)

    variants = {f"package (GX {gx if gx in _field_resample.REFINE_GX else 0})": None}
    if gx not in _field_resample.REFINE_GX:
        threads = _field_resample.REFINE_THREADS
        variants[f"GX {gx} compiled"] = KernelFamily(
            "refine_surfaces.cu", "refine_surfaces",
            [(threads, g) for g in (0, gx) + _field_resample.REFINE_GX])
    original, widths = _field_resample.REFINE, _field_resample.REFINE_GX
    results = {}
    for name, family in variants.items():
        if family is not None:
            _field_resample.REFINE, _field_resample.REFINE_GX = family, widths + (gx,)
        try:
            med, low, results[name] = timed(launch)
        finally:
            _field_resample.REFINE, _field_resample.REFINE_GX = original, widths
        print(f"{name:28s} {med:8.3f} ms a launch (min {low:.3f})")
    first = next(iter(results.values()))
    for name, res in results.items():
        same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(res, first))
        print(f"{name:28s} equal to the package's: {same}")


if __name__ == "__main__":
    main()
