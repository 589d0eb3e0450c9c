"""Development probe (device): where the lane-per-pair kernel's time goes — the rearrangement
of the right matrices versus the kernel — for each compiled tile, on the bench's problems."""

import cupy as cp

from xcorr_app.forms import form_layout
from xcorr_app.gpu_tiled import PAIR_TILES, _configure_pairs, arranged_rights, pair_tiled_xcorr
from xcorr_app.gpu_warp_shuffle import launch
from xcorr_app.timing import time_gpu

PROBLEMS = [("one_to_many", (32, 32), (4000, 32, 32)), ("one_to_many", (16, 16), (4000, 16, 16)),
            ("n_to_m", (16, 32, 32), (64, 32, 32)), ("one_to_many", (32, 32), (256, 32, 32))]

for form, ls, rs in PROBLEMS:
    left = cp.random.rand(*ls, dtype=cp.float32)
    right = cp.random.rand(*rs, dtype=cp.float32)
    lay = form_layout(form, ls, rs)
    print(f"{form} {ls} x {rs}")
    for ty, tx in PAIR_TILES:
        for rpc in (0, 8):
            try:
                whole = time_gpu(lambda: pair_tiled_xcorr(left, right, form, tile_y=ty, tile_x=tx,
                                                          rows_per_chunk=rpc), warmup=2, repeat=9)
                pre = arranged_rights(right, lay, tx)
                arr = time_gpu(lambda: arranged_rights(right, lay, tx), warmup=2, repeat=9)
                params = (("tile_y", ty), ("tile_x", tx), ("rows_per_chunk", rpc))
                kern = time_gpu(lambda: launch(_configure_pairs, left, right, form, None, None,
                                               params, arrange=lambda r, l: pre),
                                warmup=2, repeat=9)
            except ValueError as exc:
                print(f"  {ty}x{tx} rows {rpc}: {exc}")
                continue
            print(f"  {ty}x{tx} rows {rpc}: whole {whole:.3f} ms, arrange {arr:.3f}, "
                  f"kernel (+zeroing) {kern:.3f}")
