"""Development probe for the im2win convolution.

`time [LAYERS]`: per layer of the im2win paper at batch 128 and 16, the tuned call of each
layout (and cuDNN's time, where PyTorch is installed); `tiles [LAYERS]` also each tile;
`ncu LAYER [N [LAYOUT [TILE]]]`: one call with a fixed tile, for ncu; `splits LAYER:N,...`:
each tile at 1 to 16 splits of K, and the tuned plan.  Works on older trees
(no layouts) for A/B runs: PYTHONPATH picks the tree."""
import sys

import cupy as cp

from xcorr_app.conv import _im2win as gpu_conv
from xcorr_app.bench._conv import IM2WIN_LAYERS, flops
from xcorr_app._cuda.timing import time_gpu

LAYOUTS = getattr(gpu_conv, "LAYOUTS", ("old",))


def layer(name, n):
    c, h, w, f, k, s = IM2WIN_LAYERS[int(name[4:]) - 1]
    x = cp.random.rand(n, c, h, w, dtype=cp.float32)
    wt = cp.random.rand(f, c, k, k, dtype=cp.float32)
    return x, wt, s, flops(n, c, h, w, f, k, s)


def call(x, wt, s, layout, **kw):
    if layout == "old":
        return gpu_conv.im2win_conv2d(x, wt, s, 0, **kw)
    return gpu_conv.im2win_conv2d(x, wt, s, 0, layout=layout, **kw)


def cudnn(x, wt, s):
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(wt, device="cuda")
    return time_gpu(lambda: torch.nn.functional.conv2d(tx, tw, stride=s), repeat=7)


what = sys.argv[1] if len(sys.argv) > 1 else "time"
if what == "ncu":
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    x, wt, s, _ = layer(sys.argv[2], n)
    layout = sys.argv[4] if len(sys.argv) > 4 else LAYOUTS[0]
    tiles = tuple(int(v) for v in sys.argv[5].split(",")) if len(sys.argv) > 5 else None
    call(x, wt, s, layout, tiles=tiles, tune=False)
    cp.cuda.Device().synchronize()
elif what == "splits":
    for spec in sys.argv[2].split(","):
        name, n = spec.split(":")
        x, wt, s, fl = layer(name, int(n))
        call(x, wt, s, "direct")
        plan = gpu_conv.tuned_plan(x, wt, (s, s), (0, 0), "direct")
        print(f"{name} N={n} tuned {plan}")
        for t in gpu_conv.IM2WIN_TILES:
            cells = [f"{sp}: {time_gpu(lambda: call(x, wt, s, 'direct', tiles=t, splits=sp)):.3f}"
                     for sp in (1, 2, 4, 8, 16)]
            print(f"  {t[:2]} " + " ".join(cells), flush=True)
else:
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else \
        [f"conv{i + 1}" for i in range(len(IM2WIN_LAYERS))]
    for name in names:
        for n in (128, 16):
            x, wt, s, fl = layer(name, n)
            cells = []
            for layout in LAYOUTS:
                ms = time_gpu(lambda: call(x, wt, s, layout), repeat=7)
                cells.append(f"{layout} {ms:7.3f}ms {fl / ms / 1e9:5.1f}TF")
            ref = cudnn(x, wt, s)
            if ref is not None:
                cells.append(f"cudnn {ref:7.3f}ms {fl / ref / 1e9:5.1f}TF")
            if what == "tiles":
                for t in gpu_conv.IM2WIN_TILES:
                    ms = time_gpu(lambda: call(x, wt, s, LAYOUTS[0], tiles=t), repeat=5)
                    cells.append(f"{t[:2]} {ms:.3f}")
            print(f"{name:7s} N={n:3d} " + " | ".join(cells), flush=True)
            del x, wt
            cp.get_default_memory_pool().free_all_blocks()
