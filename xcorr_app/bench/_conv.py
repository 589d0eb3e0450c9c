"""The ``xcorr bench conv`` benchmark: the im2win, Winograd and pointwise kernels against
cuDNN and im2col + cuBLAS.

Layers: the 12 of the im2win paper (C_in, H, W, C_out, filter, stride; no padding) at batch 128
and 16, and MobileNetV2's 19 pointwise layers at batch 32.  Each row times, in one run with
CUDA events (warm-up, median):

* **ours**: :func:`xcorr_app.conv2d` (the tiled convolution reading the input's windows in
  im2win's order or, where it is faster, for 3x3 filters at stride 1 the fused Winograd kernel
  and for the 1x1 layers the pointwise kernel, its first call measured and tuned as cuDNN's
  benchmark mode does; the "kernel" column says which); beside it, not a peer, the im2win kernel
  over the im2win tensor the paper builds (``layout="im2win"``, its transform inside the
  timing);
* **cuDNN**: ``torch.nn.functional.conv2d`` in float32, ``cudnn.benchmark = True``, TF32 off;
* **im2col + cuBLAS**: the patch matrix built by CuPy (a strided view copied out) and one
  CuPy ``matmul`` (TF32 off, CuPy's default); for 1x1 layers just the matmul.

It prints TFLOPS (2 N C_out H_o W_o C_in KH KW / time), our ratio to the fastest peer and to
cuDNN, and each method's peak GPU memory of the call beyond its inputs (CuPy allocations
through a memory hook; PyTorch's ``max_memory_allocated``), our largest difference from cuDNN's
output (relative to its largest value), and the geometric means.
"""

from __future__ import annotations

import json
import math

from ..errors import InputError, XcorrError
from ._common import (cell, free_gpu_memory, reason, torch_unavailable_reason, utc_now,
                      versions_line)

IM2WIN_LAYERS = [(3, 227, 227, 96, 11, 4), (3, 231, 231, 96, 11, 4), (3, 227, 227, 64, 7, 2),
                 (32, 224, 224, 64, 7, 2), (96, 24, 24, 256, 5, 1), (256, 12, 12, 512, 3, 1),
                 (3, 224, 224, 64, 3, 1), (64, 112, 112, 128, 3, 1), (64, 56, 56, 64, 3, 1),
                 (128, 28, 28, 128, 3, 1), (256, 14, 14, 256, 3, 1), (512, 7, 7, 512, 3, 1)]
MOBILENET_V2_POINTWISE = [
    (32, 16, 112), (16, 96, 112), (96, 24, 56), (24, 144, 56), (144, 24, 56), (144, 32, 28),
    (32, 192, 28), (192, 32, 28), (192, 64, 14), (64, 384, 14), (384, 64, 14), (384, 96, 14),
    (96, 576, 14), (576, 96, 14), (576, 160, 7), (160, 960, 7), (960, 160, 7), (960, 320, 7),
    (320, 1280, 7)]
BATCHES = (128, 16)
POINTWISE_BATCH = 32
TARGET_VS_CUDNN = 1.0
TARGET_VS_CUBLAS = 1.0
#: the pointwise rows: no layer below this ratio to cuDNN (and the geometric mean >= 1)
POINTWISE_FLOOR_VS_CUDNN = 0.8


def problems(batches=BATCHES, pointwise_batch=POINTWISE_BATCH, quick=False):
    """``(name, kind, N, C, H, W, F, K, stride)`` of every row.

    >>> len(problems()), problems()[0]
    (43, ('conv1', 'im2win', 128, 3, 227, 227, 96, 11, 4))
    """
    rows = []
    for b in batches:
        for i, (c, h, w, f, k, s) in enumerate(IM2WIN_LAYERS):
            rows.append((f"conv{i + 1}", "im2win", (4 if quick else b), c, h, w, f, k, s))
    for i, (c, f, hw) in enumerate(MOBILENET_V2_POINTWISE):
        rows.append((f"pw{i + 1}", "pointwise", (2 if quick else pointwise_batch), c, hw, hw,
                     f, 1, 1))
    return rows


def flops(n, c, h, w, f, k, s) -> float:
    ho, wo = (h - k) // s + 1, (w - k) // s + 1
    return 2.0 * n * f * ho * wo * c * k * k


class PeakMemory:
    """Peak bytes CuPy allocates inside a ``with`` block (a CuPy memory hook)."""

    def __enter__(self):
        import cupy as cp

        class Hook(cp.cuda.MemoryHook):
            name = "xcorr-peak"

            def __init__(hook):
                hook.now = hook.peak = 0

            def malloc_postprocess(hook, device_id, size, mem_size, mem_ptr, pmem_id):
                hook.now += mem_size
                hook.peak = max(hook.peak, hook.now)

            def free_postprocess(hook, device_id, mem_size, mem_ptr, pmem_id):
                hook.now -= mem_size

        self._hook = Hook()
        self._hook.__enter__()
        return self

    def __exit__(self, *exc):
        self._hook.__exit__(*exc)
        self.peak = self._hook.peak


def _cupy_peak(fn):
    import cupy as cp

    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()  # so the hook sees every allocation (not pool reuse)
    with PeakMemory() as pm:
        fn()
        cp.cuda.Device().synchronize()
    return pm.peak


def im2col_matmul(x, w, stride):
    """The im2col + cuBLAS peer: patches (N, C KH KW, HO WO) copied out of a strided view, one
    batched matmul with the (F, C KH KW) filters."""
    import cupy as cp
    from cupy.lib.stride_tricks import as_strided

    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    w2 = w.reshape(f, c * kh * kw)
    if kh == kw == 1 and stride == 1:
        return cp.matmul(w2, x.reshape(n, c, h * wd)).reshape(n, f, h, wd)
    ho, wo = (h - kh) // stride + 1, (wd - kw) // stride + 1
    sn, sc, sh, sw = x.strides
    view = as_strided(x, (n, c, kh, kw, ho, wo), (sn, sc, sh, sw, sh * stride, sw * stride))
    cols = view.reshape(n, c * kh * kw, ho * wo)  # copies: the im2col matrix
    return cp.matmul(w2, cols).reshape(n, f, ho, wo)


def torch_conv(x, w, stride):
    """cuDNN through PyTorch (DLPack views of the CuPy arrays), fp32, autotuned, TF32 off."""
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    tx, tw = torch.from_dlpack(x), torch.from_dlpack(w)
    return lambda: F.conv2d(tx, tw, stride=stride)


def _torch_peak(fn):
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def run_problem(name, kind, n, c, h, w, f, k, s, check=True, repeat=10):
    """One row: ms, TFLOPS and peak memory of ours and the peers, and our error."""
    import cupy as cp

    from ..conv import chosen_method, conv2d
    from .._cuda import time_gpu

    rng = cp.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w), dtype=cp.float32)
    wt = rng.standard_normal((f, c, k, k), dtype=cp.float32)
    row = {"name": name, "kind": kind, "shape": [n, c, h, w, f, k, s],
           "gflop": flops(n, c, h, w, f, k, s) / 1e9, "ms": {}, "mem_mb": {}, "error": {}}
    methods = {"ours": lambda: conv2d(x, wt, stride=s),
               "im2col_cublas": lambda: im2col_matmul(x, wt, s)}
    if kind == "im2win":
        from ..conv import im2win_conv2d

        methods["ours_im2win"] = lambda: im2win_conv2d(x, wt, s, layout="im2win")
    no_torch = torch_unavailable_reason()
    if not no_torch:
        methods["cudnn"] = torch_conv(x, wt, s)
    else:
        row["error"]["cudnn"] = no_torch
    for m, fn in methods.items():
        try:
            row["ms"][m] = time_gpu(fn, warmup=2, repeat=repeat)
            peak = _torch_peak(fn) if m == "cudnn" else _cupy_peak(fn)
            row["mem_mb"][m] = peak / 2**20
        except Exception as exc:  # noqa: BLE001 - out of memory: a table entry
            row["ms"][m] = None
            row["error"][m] = reason(exc)
        free_gpu_memory()
    row["kernel"] = chosen_method(x, wt, s) if row["ms"].get("ours") is not None else "failed"
    if check and row["ms"].get("ours") is not None and "cudnn" in methods:
        ours = conv2d(x, wt, stride=s)  # against cuDNN's float32 result
        ref = cp.from_dlpack(methods["cudnn"]())
        row["rel_error"] = float(cp.abs(ours - ref).max() / max(float(cp.abs(ref).max()), 1e-30))
        del ours, ref
    free_gpu_memory()
    peers = [row["ms"].get(p) for p in ("cudnn", "im2col_cublas") if row["ms"].get(p)]
    ours = row["ms"].get("ours")
    row["vs_best_peer"] = min(peers) / ours if ours and peers else None
    row["vs_cudnn"] = row["ms"]["cudnn"] / ours if ours and row["ms"].get("cudnn") else None
    row["vs_cublas"] = (row["ms"]["im2col_cublas"] / ours
                        if ours and row["ms"].get("im2col_cublas") else None)
    row["tflops"] = {m: row["gflop"] / t for m, t in row["ms"].items() if t}
    return row


def geomean(values):
    vals = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def format_rows(rows) -> list:
    head = ("| layer | N | C,H,W -> F, k/s | kernel | ours ms | cuDNN ms | im2col+cuBLAS ms | "
            "TFLOPS ours / cuDNN / cuBLAS | vs fastest peer | vs cuDNN | memory MB ours / cuDNN"
            " / cuBLAS | rel err | im2win over the im2win tensor: ms / MB |")
    lines = [head, "|" + " --- |" * 13]

    def num(v, fmt):
        return "n/a" if v is None else format(v, fmt)

    for r in rows:
        n, c, h, w, f, k, s = r["shape"]
        ms, tf, mem = r["ms"], r["tflops"], r["mem_mb"]
        cells = [r["name"], n, f"{c},{h},{w} -> {f}, {k}/{s}", r.get("kernel", "n/a"),
                 num(ms.get("ours"), ".3f"),
                 num(ms.get("cudnn"), ".3f"), num(ms.get("im2col_cublas"), ".3f"),
                 " / ".join(num(tf.get(m), ".1f") for m in ("ours", "cudnn", "im2col_cublas")),
                 num(r["vs_best_peer"], ".2f") + "x", num(r["vs_cudnn"], ".2f") + "x",
                 " / ".join(num(mem.get(m), ".0f") for m in ("ours", "cudnn", "im2col_cublas")),
                 num(r.get("rel_error"), ".1e"),
                 f"{num(ms.get('ours_im2win'), '.3f')} / {num(mem.get('ours_im2win'), '.0f')}"
                 if "ours_im2win" in ms else "-"]
        lines.append("| " + " | ".join(cell(x) for x in cells) + " |")
    return lines


def summary_lines(rows) -> list:
    conv = [r for r in rows if r["kind"] == "im2win"]
    pw = [r for r in rows if r["kind"] == "pointwise"]
    out = []
    g = geomean(r["vs_cudnn"] for r in conv)
    more = sum(1 for r in conv if r["mem_mb"].get("ours") is not None
               and r["mem_mb"].get("cudnn") is not None
               and r["mem_mb"]["ours"] > r["mem_mb"]["cudnn"])
    if g is not None:
        out.append(f"im2win layers: geometric mean {g:.2f}x cuDNN (target >= "
                   f"{TARGET_VS_CUDNN:g}x: {'yes' if g >= TARGET_VS_CUDNN else 'no'}); more "
                   f"memory than cuDNN on {more} of {len(conv)} rows")
    g = geomean(r["vs_cublas"] for r in pw)
    if g is not None:
        out.append(f"pointwise layers: geometric mean {g:.2f}x im2col+cuBLAS (target >= "
                   f"{TARGET_VS_CUBLAS:g}x: {'yes' if g >= TARGET_VS_CUBLAS else 'no'})")
    g = geomean(r["vs_cudnn"] for r in pw)
    if g is not None:
        worst = min((r for r in pw if r["vs_cudnn"]), key=lambda r: r["vs_cudnn"])
        missing = sum(1 for r in pw if not r["vs_cudnn"])
        met = g >= TARGET_VS_CUDNN and worst["vs_cudnn"] >= POINTWISE_FLOOR_VS_CUDNN \
            and not missing
        out.append(f"pointwise layers: geometric mean {g:.2f}x cuDNN, the slowest "
                   f"{worst['name']} {worst['vs_cudnn']:.2f}x"
                   + (f", {missing} not measured" if missing else "")
                   + f" (target >= {TARGET_VS_CUDNN:g}x, none below "
                   f"{POINTWISE_FLOOR_VS_CUDNN:g}x: {'yes' if met else 'no'})")
    return out


def main(*, quick=False, only=None, check=True, json_path=None, force=False, echo=print,
         repeat=10) -> int:
    from .. import backend
    from ..io import prepare_outputs, write_text
    from .._cuda import device_name

    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench conv needs a GPU: {backend.gpu_unavailable_reason()}")
    if json_path is not None:
        prepare_outputs([json_path], force)
    probs = problems(quick=quick)
    if only:
        probs = [p for p in probs if p[1] == only or p[0] == only]
        if not probs:
            raise InputError(f"--only {only!r} matches no layer (im2win, pointwise, conv1..12, "
                             "pw1..19)")
    header = [f"xcorr bench conv on {device_name()}, {utc_now()}", f"versions: {versions_line()}",
              f"timing: CUDA events, 2 warm-up runs, median of {repeat}; float32, TF32 off"]
    for line in header:
        echo(line)
    rows = []
    for p in probs:
        rows.append(run_problem(*p, check=check, repeat=repeat))
        r = rows[-1]
        echo(f"  {r['name']} N={r['shape'][0]}: ours {r['ms'].get('ours')} ms, cuDNN "
             f"{r['ms'].get('cudnn')} ms, im2col+cuBLAS {r['ms'].get('im2col_cublas')} ms"
             + (f"; errors {r['error']}" if r["error"] else ""))
    echo("")
    for line in format_rows(rows) + summary_lines(rows):
        echo(line)
    if json_path is not None:
        write_text(json_path, json.dumps({"header": header, "rows": rows,
                                          "summary": summary_lines(rows)}, indent=1))
    bad = [r for r in rows if r.get("rel_error") is not None and not r["rel_error"] <= 1e-4]
    return 1 if bad or any(r["ms"].get("ours") is None for r in rows) else 0

