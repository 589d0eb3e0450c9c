"""Development probe (device): the tensor-core (3xTF32) kernel's accuracy and speed.

    python3 tools/mma_probe.py check     # every tile against float64: normal, uniform, uint16
    python3 tools/mma_probe.py check0    # the same without the per-row sums
    python3 tools/mma_probe.py time      # every tile on the bench's problems, beside the
                                         # lane-per-pair kernel and the FFT
"""
import sys

import numpy as np
import cupy as cp

from xcorr_app._cuda import loader as kernel_loader
from xcorr_app.correlate import _direct as reference
from xcorr_app.correlate._mma import MMA_TILES, mma_xcorr, unsupported
from xcorr_app.correlate._plans import run_plan
from xcorr_app._cuda.timing import fp32_fma_peak_flops, time_gpu

PROBLEMS = [("one_to_many", (32, 32), (8, 32, 32)), ("one_to_many", (16, 16), (256, 16, 16)),
            ("one_to_many", (32, 32), (256, 32, 32)), ("one_to_many", (64, 64), (256, 64, 64)),
            ("one_to_many", (16, 16), (4000, 16, 16)), ("one_to_many", (32, 32), (4000, 32, 32)),
            ("one_to_many", (64, 64), (4000, 64, 64)), ("n_to_m", (8, 32, 32), (8, 32, 32)),
            ("n_to_m", (16, 32, 32), (64, 32, 32)), ("n_to_mn", (4, 32, 32), (4, 64, 32, 32))]
CHECKS = [("one_to_many", (31, 33), (13, 31, 33), None), ("one_to_many", (5, 3), (3, 5, 3), None),
          ("n_to_mn", (3, 17, 40), (3, 9, 17, 40), None), ("n_to_m", (2, 64, 64), (17, 64, 64), None),
          ("one_to_many", (100, 37), (9, 100, 37), (2, 40)), ("one_to_many", (7, 13), (20, 40, 70), 4),
          ("one_to_many", (32, 32), (300, 32, 32), None), ("n_to_m", (3, 1, 1), (9, 5, 3), None)]


def set_macros(**macros):
    kernel_loader.COMPILE_OPTIONS = ("-std=c++17",) + tuple(f"-D{a}={b}" for a, b in
                                                           macros.items())
    kernel_loader._COMPILED.clear()
    from xcorr_app.correlate import _warp_shuffle as gpu_warp_shuffle
    gpu_warp_shuffle._LAUNCHES.clear()


def rel(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def check(row_sums_options=(1,)):
    rng = np.random.default_rng(1)
    for row_sums in row_sums_options:
        set_macros(XCORR_MMA_ROW_SUMS=row_sums)
        for form, ls, rs, ms in CHECKS:
            for kind in ("normal", "positive", "uint16"):
                if kind == "normal":
                    left, right = rng.standard_normal(ls), rng.standard_normal(rs)
                elif kind == "positive":
                    left, right = rng.random(ls), rng.random(rs)
                else:
                    left = rng.integers(0, 65536, ls).astype(np.float64)
                    right = rng.integers(0, 65536, rs).astype(np.float64)
                want = reference.xcorr(left, right, form, ms)
                errs = []
                for ty, tx in MMA_TILES:
                    why = unsupported(form, ls[-2:], rs[-2:], ty, tx)
                    if why:
                        errs.append(f"{ty}x{tx}: -")
                        continue
                    out = cp.full(want.shape, cp.nan, cp.float32)
                    got = mma_xcorr(cp.asarray(left, cp.float32), cp.asarray(right, cp.float32),
                                    form, ms, out=out, tile_y=ty, tile_x=tx).get()
                    errs.append(f"{ty}x{tx}: {rel(got, want):.2e}")
                print(f"row_sums={row_sums} {form} {ls} x {rs} max_shift={ms} {kind}: "
                      + ", ".join(errs), flush=True)


def timing():
    set_macros()
    for form, ls, rs in PROBLEMS:
        left = cp.random.rand(*ls, dtype=cp.float32)
        right = cp.random.rand(*rs, dtype=cp.float32)
        fmas = np.prod(rs) * np.prod(ls[-2:]) * (ls[0] if form == "n_to_m" else 1)
        row = []
        for plan in ("fft", "pair_tiled:tile_y=4,tile_x=8", "pair_tiled:tile_y=8,tile_x=8"):
            try:
                ms = time_gpu(lambda: run_plan(plan, left, right, form), warmup=3, repeat=15)
                row.append(f"{plan.split(':')[0]}{'' if ':' not in plan else plan[-4:]} {ms:.4f}")
            except Exception as exc:  # noqa: BLE001
                row.append(f"{plan}: {type(exc).__name__}")
        for ty, tx in MMA_TILES:
            if unsupported(form, ls[-2:], rs[-2:], ty, tx):
                continue
            ms = time_gpu(lambda: mma_xcorr(left, right, form, tile_y=ty, tile_x=tx),
                          warmup=3, repeat=15)
            row.append(f"mma {ty}x{tx} {ms:.4f} ({2 * fmas / (ms * 1e-3) / fp32_fma_peak_flops():.0%})")
        print(f"{form} {ls} x {rs}: " + "; ".join(row), flush=True)


if __name__ == "__main__":
    for what in sys.argv[1:] or ["check", "time"]:
        {"check": check, "check0": lambda: check((0,)), "time": timing}[what]()
