"""GPU launchers of the multi-channel convolution kernels: im2win (``kernels/im2win_conv.cu``)
and pointwise with dynamic blocking (``kernels/pointwise_conv.cu``).

:func:`im2win_conv2d` builds the window-order tensor of the input (shape
``(N, C, HO, (W + 2 pad) * KH)``, ``KH / stride`` times the input instead of im2col's
``KH * KW``), for as many images at a time as fit in :data:`WIN_BYTES`, and runs the tiled
convolution over it; :func:`pointwise_conv2d` runs the 1x1
kernel with the tiles :mod:`xcorr_app.pointwise_plan` chooses for the problem and the GPU.
"""

from __future__ import annotations

import math

import numpy as np

from .kernel_loader import KernelFamily
from .pointwise_plan import THREADS as POINTWISE_THREADS
from .pointwise_plan import configurations, device_limits, plan

#: (BLOCK_M, BLOCK_N, BLOCK_K, THREAD_M, THREAD_N) of the im2win convolution
IM2WIN_TILES = ((128, 128, 8, 8, 8), (128, 64, 8, 8, 4), (64, 128, 16, 4, 8), (64, 64, 16, 4, 4))
IM2WIN = KernelFamily("im2win_conv.cu", "im2win_conv", IM2WIN_TILES)
IM2WIN_TRANSFORM = KernelFamily("im2win_conv.cu", "im2win_transform", [()])
POINTWISE = KernelFamily("pointwise_conv.cu", "pointwise_conv",
                         [c.template for c in configurations()])


def im2win_tiles(m: int, q: int, sms: int = 132) -> tuple:
    """The tile for ``m`` filters and ``q`` output columns: among those that give every SM a
    block (all of them when none does), the one wasting the least work on filter rows past
    ``m``, then the largest.

    >>> im2win_tiles(64, 100000), im2win_tiles(512, 100000), im2win_tiles(512, 784)
    ((64, 128, 16, 4, 8), (128, 128, 8, 8, 8), (64, 64, 16, 4, 4))
    """
    def blocks(t):
        return -(-m // t[0]) * -(-q // t[1])

    full = [t for t in IM2WIN_TILES if blocks(t) >= sms] or \
        [max(IM2WIN_TILES, key=blocks)]
    return min(full, key=lambda t: (-(-m // t[0]) * t[0] / m, -t[0] * t[1]))


def output_size(size, k, stride, pad):
    return (size + 2 * pad - k) // stride + 1


#: most bytes of the im2win tensor held at once: the batch is transformed and convolved in
#: groups of images that fit (at least one), so the extra memory stays small ...
WIN_BYTES = 64 << 20
#: ... unless a group would give fewer than this many waves of blocks (2 per SM)
WAVES = 4


_TUNED: dict = {}


def _tuned_tiles(x, w, stride, padding, out, win_bytes, waves):
    """The fastest of :data:`IM2WIN_TILES` for this problem on this GPU, measured once (as
    cuDNN's benchmark mode does) and remembered for the process."""
    import cupy as cp

    from .timing import time_gpu

    n = x.shape[0]  # batches of similar size share a tile (partial chunks, the reference)
    key = (cp.cuda.Device().id, 1 << max(0, (n - 1).bit_length()), x.shape[1:], w.shape,
           stride, padding)
    best = _TUNED.get(key)
    if best is None:
        times = {t: time_gpu(lambda t=t: im2win_conv2d(x, w, stride, padding, out, tiles=t,
                                                       win_bytes=win_bytes, waves=waves),
                             warmup=1, repeat=3) for t in IM2WIN_TILES}
        best = _TUNED[key] = min(times, key=times.get)
    return best


def im2win_conv2d(x, w, stride=1, padding=0, out=None, tiles=None, win_bytes=WIN_BYTES,
                  waves=WAVES, tune=True):
    """NCHW float32 convolution of CuPy ``x`` (N, C, H, W) with ``w`` (F, C, KH, KW).

    ``tiles``: one of :data:`IM2WIN_TILES`; by default the fastest, measured on the first call
    of each problem (``tune=False``: chosen by :func:`im2win_tiles` without measuring)."""
    import cupy as cp

    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    ho, wo = output_size(h, kh, stride, padding), output_size(wd, kw, stride, padding)
    wp = wd + 2 * padding
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    k = c * kh * kw
    k4 = -(-k // 4) * 4
    filt = cp.zeros((f, k4), cp.float32)  # f'[co][c * KK + kw * KH + kh], rows padded
    filt[:, :k] = cp.asarray(w, dtype=cp.float32).transpose(0, 1, 3, 2).reshape(f, k)
    if out is None:
        out = cp.empty((n, f, ho, wo), cp.float32)
    if out.data.ptr % 16 or not out.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous float32 array aligned to 16 bytes")
    sms = device_limits().sms
    if tiles is None:
        tiles = _tuned_tiles(x, w, stride, padding, out, win_bytes, waves) if tune else \
            im2win_tiles(f, n * ho * wo, sms)
    bm, bn, bk, tm, tn = tiles
    # images per group: within win_bytes, but enough for WAVES full waves of blocks (a group
    # that leaves SMs idle costs more than the memory it saves)
    per_image = -(-f // bm) * (ho * wo / bn)
    group = max(win_bytes // (c * ho * wp * kh * 4), math.ceil(waves * 2 * sms / per_image))
    group = max(1, min(n, group))
    win = cp.empty((group, c, ho, wp * kh), cp.float32)
    for n0 in range(0, n, group):
        g = min(group, n - n0)
        total = g * c * ho * wp
        IM2WIN_TRANSFORM.get()((min(65535 * 4, -(-total // 256)),), (256,),
                               (x[n0:n0 + g], win, np.int32(g), np.int32(c), np.int32(h),
                                np.int32(wd), np.int32(kh), np.int32(stride),
                                np.int32(padding), np.int32(ho), np.int32(wp)))
        qg = g * ho * wo
        IM2WIN.get(bm, bn, bk, tm, tn)((-(-qg // bn), -(-f // bm)), ((bm // tm) * (bn // tn),),
                                       (filt, win, out[n0:n0 + g], np.int32(f), np.int32(k),
                                        np.int32(k4), np.int32(kh * kw), np.int32(kh),
                                        np.int32(stride), np.int32(ho), np.int32(wo),
                                        np.int32(wp * kh), np.int64(qg)))
    return out


def pointwise_conv2d(x, w, out=None, config=None):
    """NCHW float32 1x1 convolution of CuPy ``x`` (N, C, H, W) with ``w`` (F, C) or
    (F, C, 1, 1)."""
    import cupy as cp

    n, c, h, wd = x.shape
    w = cp.ascontiguousarray(cp.asarray(w, dtype=cp.float32).reshape(w.shape[0], c))
    f = w.shape[0]
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    if x.data.ptr % 16:  # a view at an odd offset: the kernel reads 16 bytes at a time
        x = x.copy()
    hw, q = h * wd, n * h * wd
    cfg = config or plan(f, c, q)
    if out is None:
        out = cp.empty((n, f, h, wd), cp.float32)
    if out.data.ptr % 16 or not out.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous float32 array aligned to 16 bytes")
    grid = (-(-q // cfg.block_p), -(-f // cfg.block_f))
    POINTWISE.get(*cfg.template)(grid, (POINTWISE_THREADS,),
                                 (w, x, out, np.int32(f), np.int32(c), np.int32(hw),
                                  np.int64(q)))
    return out
