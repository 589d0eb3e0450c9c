"""Development probe (device): where the lane-per-pair kernel's time goes — the rearrangement
of the right matrices versus the kernel — for each compiled tile, on the bench's problems.

    python3 tools/pair_probe.py            # every tile, with and without row chunks
    python3 tools/pair_probe.py variants   # compile-time variants of the kernel, A/B in one run
"""
import sys

import cupy as cp

from xcorr_app._cuda import loader as kernel_loader
from xcorr_app.correlate._forms import form_layout
from xcorr_app.correlate._tiled import PAIR_TILES, configure_pairs, arranged_rights, pair_tiled_xcorr
from xcorr_app.correlate._warp_shuffle import launch
from xcorr_app._cuda.timing import time_gpu

PROBLEMS = [("one_to_many", (32, 32), (4000, 32, 32)), ("one_to_many", (16, 16), (4000, 16, 16)),
            ("n_to_m", (16, 32, 32), (64, 32, 32)), ("one_to_many", (32, 32), (256, 32, 32))]
#: macro settings (-D) compared by `variants`: put a development macro of
#: kernels/tiled_xcorr.cu here, e.g. {"XCORR_SOMETHING": 0}; the default build comes first
VARIANTS = [{}]


def kernel_ms(left, right, form, ty, tx, rpc):
    lay = form_layout(form, left.shape, right.shape)
    pre = arranged_rights(right, lay, tx)
    params = (("tile_y", ty), ("tile_x", tx), ("rows_per_chunk", rpc))
    return time_gpu(lambda: launch(configure_pairs, left, right, form, None, None, params,
                                   arranged=pre), warmup=3, repeat=25)


def tiles():
    for form, ls, rs in PROBLEMS:
        left = cp.random.rand(*ls, dtype=cp.float32)
        right = cp.random.rand(*rs, dtype=cp.float32)
        lay = form_layout(form, ls, rs)
        print(f"{form} {ls} x {rs}")
        for ty, tx in PAIR_TILES:
            for rpc in (0, 8):
                try:
                    whole = time_gpu(lambda: pair_tiled_xcorr(left, right, form, tile_y=ty,
                                                              tile_x=tx, rows_per_chunk=rpc),
                                     warmup=2, repeat=9)
                    arr = time_gpu(lambda: arranged_rights(right, lay, tx), warmup=2, repeat=9)
                    kern = kernel_ms(left, right, form, ty, tx, rpc)
                except ValueError as exc:
                    print(f"  {ty}x{tx} rows {rpc}: {exc}")
                    continue
                print(f"  {ty}x{tx} rows {rpc}: whole {whole:.3f} ms, arrange {arr:.3f}, "
                      f"kernel (+zeroing) {kern:.3f}")


def variants():
    base = kernel_loader.COMPILE_OPTIONS
    data = [(form, cp.random.rand(*ls, dtype=cp.float32), cp.random.rand(*rs, dtype=cp.float32))
            for form, ls, rs in PROBLEMS]
    for _round in range(2):  # twice, interleaved, so drift between variants shows
        for d in VARIANTS:
            kernel_loader.COMPILE_OPTIONS = base + tuple(f"-D{a}={b}" for a, b in d.items())
            kernel_loader._COMPILED.clear()
            res = [f"{form} {tuple(r.shape)} {ty}x{tx}: {kernel_ms(left, r, form, ty, tx, 0):.3f}"
                   for form, left, r in data for ty, tx in ((4, 8), (8, 4))]
            print(f"{d or 'default'}: " + "  ".join(res), flush=True)
    kernel_loader.COMPILE_OPTIONS = base
    kernel_loader._COMPILED.clear()


if __name__ == "__main__":
    variants() if sys.argv[1:] == ["variants"] else tiles()
