"""Development probe for the Winograd convolution: per 3x3 stride-1 layer of the im2win paper
(LAYER:N,... or all at batch 128 and 16), the error against a float64 cuDNN result, the time of
each tile and split, the tuned choice, the im2win kernel's tuned time and cuDNN's."""
import sys

import cupy as cp

from xcorr_app.conv import _im2win as gpu_conv
from xcorr_app.conv import _winograd as gpu_winograd
from xcorr_app.bench._conv import IM2WIN_LAYERS, flops
from xcorr_app._cuda.timing import time_gpu

import torch

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = False
specs = sys.argv[1].split(",") if len(sys.argv) > 1 else \
    [f"conv{i}:{n}" for n in (128, 16) for i in range(6, 13)]
for spec in specs:
    name, n = spec.split(":")
    c, h, w, f, k, s = IM2WIN_LAYERS[int(name[4:]) - 1]
    n = int(n)
    x = cp.random.standard_normal((n, c, h, w), dtype=cp.float32)
    wt = cp.random.standard_normal((f, c, k, k), dtype=cp.float32)
    tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(wt, device="cuda")
    ref = cp.asarray(torch.nn.functional.conv2d(tx.double(), tw.double()))
    out = cp.full(ref.shape, cp.nan, cp.float32)
    gpu_winograd.winograd_conv2d(x, wt, 0, out=out)
    err = float(cp.abs(out - ref).max() / cp.abs(ref).max())
    fl = flops(n, c, h, w, f, k, s)
    cells = []
    for t, sp in gpu_winograd._candidates(x.shape, wt.shape, (0, 0)):
        ms = time_gpu(lambda: gpu_winograd.winograd_conv2d(x, wt, 0, out=out, tiles=t, splits=sp),
                      repeat=7)
        cells.append(f"{t[0]}x{t[1]}/{sp}: {ms:.3f}")
    tuned = gpu_winograd.tuned_plan(x, wt, (0, 0))
    wms = time_gpu(lambda: gpu_winograd.winograd_conv2d(x, wt, 0, out=out), repeat=9)
    ims = time_gpu(lambda: gpu_conv.im2win_conv2d(x, wt, 1, 0, out=out), repeat=9)
    cms = time_gpu(lambda: torch.nn.functional.conv2d(tx, tw), repeat=9)
    print(f"{name} N={n}: err {err:.2e}  winograd {wms:.3f} ms ({fl / wms / 1e9:.0f} TFLOPS eq)"
          f"  im2win {ims:.3f}  cuDNN {cms:.3f}  -> {cms / min(wms, ims):.2f}x  tuned {tuned}"
          f"\n    {'  '.join(cells)}", flush=True)
