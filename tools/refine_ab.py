"""Development probe (device): the fused refinement kernel ``refine_surfaces`` as the package
builds it, timed on the bench's shapes (4x4 windows of 143x143 over 512x512 frames, the field
within +-1.5 px of a rigid drift): CUDA events, 3 warm-up launches, the median of 15.  (It
compared older kernels too, ``tools/ab/patch_field_old.cu`` of c0a3653 and
``tools/ab/refine_prev.cu`` of 3938d7e; since the row coefficients come from ``field_rows``,
2026-11-24, their arguments differ from the launcher's; those A/Bs are in performance.md.)

    git show c0a3653:xcorr_app/alignment/cuda/patch_field.cu > tools/ab/patch_field_old.cu
    git show 3938d7e:xcorr_app/alignment/cuda/refine_surfaces.cu > tools/ab/refine_prev.cu
    python3 tools/refine_ab.py [FRAMES]      (on the device: carry tools/ab, it is ignored)
"""
import statistics
import sys
from pathlib import Path

import cupy as cp
import numpy as np

from xcorr_app.alignment import _field_resample
from xcorr_app.alignment._field_resample import field_weights, refine_surfaces_gpu
from xcorr_app.alignment._patches import (PatchGrid, common_area, refine_left, refine_taper,
                                          tapered, template_patches)
from xcorr_app._cuda.loader import COMPILE_OPTIONS, include_dir

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
SHAPE = (512, 512)
ROOT = Path(__file__).resolve().parent.parent


class Fixed:
    """Stands in for ``_field_resample.REFINE``: ``get`` returns one compiled kernel."""

    def __init__(self, fn):
        self.fn = fn

    def get(self, *args, **kw):
        return self.fn


def raw(path, extra=(), threads=128, gx=None):
    code = Path(path).read_text()
    name = f"refine_surfaces<{threads}>" if gx is None else f"refine_surfaces<{threads}, {gx}>"
    mod = cp.RawModule(code=code, options=(*COMPILE_OPTIONS, f"-I{include_dir()}",
                                           f"-I{Path(path).parent}", *extra),
                       name_expressions=[name])
    return mod.get_function(name), threads


def data(seed=3):
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((SHAPE[0] + 32, SHAPE[1] + 32)).astype(np.float32)
    import cupyx.scipy.ndimage as ndi
    base = ndi.gaussian_filter(cp.asarray(base), 2.0)
    rigid = rng.uniform(-6, 6, (N, 2))
    frames = cp.stack([base[16 + int(round(a)):16 + int(round(a)) + SHAPE[0],
                            16 + int(round(b)):16 + int(round(b)) + SHAPE[1]] for a, b in rigid])
    frames += cp.asarray(rng.standard_normal(frames.shape).astype(np.float32)) * 0.05
    grid = PatchGrid.make((4, 4), None, 4, SHAPE, common_area(rigid, SHAPE, 6))
    field = rigid[:, None, None, :] + rng.uniform(-1.5, 1.5, (N, *grid.grid, 2))
    return cp.ascontiguousarray(frames, cp.float32), grid, cp.asarray(field)


def main():
    frames, grid, field = data()
    taper = refine_taper(grid.size, flat=16)
    tnear = cp.asarray(tapered(template_patches(frames[0].get(), grid), taper))
    w = field_weights(grid.centres, SHAPE, cp)
    sums, g_taper = refine_left(tnear, taper)
    p = grid.n_patches
    print(f"{N} frames of {SHAPE}, {p} windows of {grid.size}, taper {taper is not None}")

    def launch():
        out = cp.full((p, N, *grid.size), cp.nan, cp.float32)
        return (*refine_surfaces_gpu(frames, grid.starts_y, grid.starts_x, grid.size, field, w,
                                     g_taper, tnear, sums, out=out), out)

    new = ROOT / "xcorr_app/alignment/cuda/refine_surfaces.cu"
    # (the kernels of c0a3653 and 3938d7e took the field's weights, not field_rows' table:
    # their launcher is their commit's; the session's A/B of 2026-11-24 is in performance.md)
    variants = {"package (new)": None}
    assert new.exists() and raw
    original, default = _field_resample.REFINE, _field_resample.REFINE_THREADS
    results = {}
    for name, built in variants.items():
        _field_resample.REFINE = original if built is None else Fixed(built[0])
        _field_resample.REFINE_THREADS = default if built is None else built[1]
        try:
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
            results[name] = [r.get() for r in res]
            print(f"{name:28s} {statistics.median(times):8.3f} ms a launch "
                  f"(min {min(times):.3f}; includes the poisoned output's fill)")
        finally:
            _field_resample.REFINE = original
            _field_resample.REFINE_THREADS = default
    fill = []
    for _ in range(15):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        cp.full((p, N, *grid.size), cp.nan, cp.float32)
        b.record()
        b.synchronize()
        fill.append(cp.cuda.get_elapsed_time(a, b))
    print(f"{'(the fill alone)':28s} {statistics.median(fill):8.3f} ms")
    if "old (c0a3653)" not in results:
        return
    old = results["old (c0a3653)"]
    for name, res in results.items():
        z, iy, ix, win = res
        print(f"{name:28s} z max |diff| {np.abs(z - old[0]).max():.3g}, peaks differing "
              f"{int(((iy != old[1]) | (ix != old[2])).sum())} of {iy.size}, windows max |diff| "
              f"{np.nanmax(np.abs(win - old[3])):.3g}, finite z {bool(np.isfinite(z).all())}")


if __name__ == "__main__":
    main()
