"""The pointwise (1x1, stride 1, unpadded) convolution on the tensor cores in 3xTF32
(``kernels/conv/pointwise_mma.cu``): the layers of many input channels and few pixels, where the
FFMA kernels (im2win's, dynamic blocking's) leave the GPU waiting on their K loop (MobileNetV2's
deep-input 1x1 layers at batch 32, where it measured faster than the im2win kernel:
docs/kernels.md).  :func:`xcorr_app.conv.conv2d` measures it against the others on a problem's first
call and keeps the fastest.

Examples
--------
>>> mma_candidates(576)[:3]
[((32, 64, 1, 2, 3), 1), ((32, 64, 1, 2, 3), 2), ((32, 64, 1, 2, 3), 4)]
>>> [s for t, s in mma_candidates(48) if t == MMA_TILES[0]]  # 3 K steps: not split
[1]
"""

from __future__ import annotations

import functools

import numpy as np

from .._cuda import KernelFamily, PreparedLaunch, stream_counters
from ..errors import InputError
from ._im2win import MAX_COLUMNS, split_plan, tuning_key

#: (BLOCK_M, BLOCK_N, WARPS_M, WARPS_N, STAGES): every warp a 32x32 tile of outputs (2 x 4
#: m16n8 fragments), in blocks of 2 to 8 warps (48 KiB of static shared memory at most)
MMA_TILES = ((32, 64, 1, 2, 3), (64, 32, 2, 1, 3), (64, 64, 2, 2, 3), (128, 64, 4, 2, 3),
             (64, 128, 2, 4, 3))
#: channels a K step stages (the kernel's BLOCK_K)
BLOCK_K = 16
#: split-K ways measured, each split summing at least MIN_STEPS K steps
SPLITS = (1, 2, 4, 8)
MIN_STEPS = 4
POINTWISE_MMA = KernelFamily("pointwise_mma.cu", "pointwise_mma", MMA_TILES)
#: the autotuner's namespace of the kernel's ``(tiles, splits)``
TUNING_NAMESPACE = "conv.pointwise_mma"


def mma_candidates(channels: int) -> list:
    """``(tiles, splits)`` worth measuring for ``channels`` input channels: every tile, split
    :data:`SPLITS` ways where each split keeps :data:`MIN_STEPS` K steps."""
    steps = -(-int(channels) // BLOCK_K)
    return [(t, s) for t in MMA_TILES for s in SPLITS if s == 1 or steps // s >= MIN_STEPS]


def threads(tiles) -> int:
    return tiles[2] * tiles[3] * 32


@functools.lru_cache(maxsize=256)
def _runner(device, x_shape, f, tiles, splits):
    """``run(x, w, out)`` for one problem, tile and split: the batch in launches of at most
    :data:`~._im2win.MAX_COLUMNS` columns, their scalars packed once."""
    n, c, h, wd = x_shape
    p = h * wd
    if p > MAX_COLUMNS:
        raise InputError(f"a {h}x{wd} image is too large for the GPU pointwise kernel")
    splits, per_split = split_plan(-(-c // BLOCK_K), splits)
    group = max(1, min(n, MAX_COLUMNS // p))
    launches = []
    for n0 in range(0, n, group):
        g = min(group, n - n0)
        grid = (-(-(g * p) // tiles[1]), -(-f // tiles[0]), splits)
        launches.append((n0, g, grid[0] * grid[1], PreparedLaunch(
            POINTWISE_MMA.get(*tiles), grid, (threads(tiles),), 4,
            (np.int32(f), np.int32(c), np.int32(p), np.int32(g * p), np.int32(per_split)))))

    def run(x, w, out):
        for n0, g, count, launch in launches:
            locks = stream_counters(count) if splits > 1 else out
            if g == n:
                launch(w, x, out, locks)
            else:
                launch(w, x[n0:n0 + g], out[n0:n0 + g], locks)
        return out
    return run


def tuned_mma(x, w):
    """The fastest ``(tiles, splits)`` of :func:`mma_candidates` for this problem on this
    GPU, measured once and remembered by the autotuner (in memory and on disk)."""
    import cupy as cp

    from .._cuda import fastest

    n, c, h, wd = x.shape
    f = w.shape[0]
    outs = []  # one output for the measured runs

    def run(cand):
        if not outs:
            outs.append(cp.empty((n, f, h, wd), cp.float32))
        return _runner(cp.cuda.Device().id, x.shape, f, *cand)(x, w, outs[0])

    return fastest({cand: lambda cand=cand: run(cand) for cand in mma_candidates(c)},
                   TUNING_NAMESPACE, tuning_key(x.shape, (f, c, 1, 1)))


def prepared_mma(x, w, tiles=None, splits=1):
    """``run(x, w, out)`` of the kernel for this problem (C-contiguous float32 CuPy arrays;
    ``w`` (F, C) or (F, C, 1, 1)), with the tuned tile and split unless ``tiles`` is given."""
    import cupy as cp

    f = w.shape[0]
    if tiles is None:
        tiles, splits = tuned_mma(x, w.reshape(f, -1))
    return _runner(cp.cuda.Device().id, tuple(x.shape), f, tuple(tiles), int(splits))


def pointwise_mma_conv2d(x, w, out=None, tiles=None, splits=1):
    """NCHW float32 1x1 convolution of CuPy ``x`` (N, C, H, W) with ``w`` (F, C) or
    (F, C, 1, 1) on the tensor cores (3xTF32: within float32's accuracy of the sum).

    ``tiles``: one of :data:`MMA_TILES` and ``splits`` the split-K ways, else the fastest
    pair, measured on the problem's first call."""
    import cupy as cp

    n, c, h, wd = x.shape
    w = cp.ascontiguousarray(cp.asarray(w, dtype=cp.float32).reshape(w.shape[0], c))
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    shape = (n, w.shape[0], h, wd)
    if out is None:
        out = cp.empty(shape, cp.float32)
    if tuple(out.shape) != shape or not out.flags.c_contiguous or out.dtype != cp.float32:
        raise InputError(f"out must be a C-contiguous float32 array of shape {shape}")
    if tiles is not None and tuple(tiles) not in MMA_TILES:
        raise InputError(f"tiles must be one of {MMA_TILES}, got {tiles!r}")
    return prepared_mma(x, w, tiles, splits)(x, w, out)
