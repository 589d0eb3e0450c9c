"""GPU launchers of the multi-channel convolution kernels: im2win (``kernels/conv/im2win_conv.cu``)
and pointwise with dynamic blocking (``kernels/conv/pointwise_conv.cu``).

:func:`im2win_conv2d` runs the tiled convolution over the windows of the input in im2win's
window order, read either from the input itself (``layout="direct"``, the default: no extra
memory) or from the im2win tensor the paper builds (``layout="im2win"``, shape
``(N, C, HO, (W + 2 pad) * KH)``, ``KH / stride`` times the input instead of im2col's
``KH * KW``, built for as many images at a time as fit in :data:`WIN_BYTES`);
:func:`pointwise_conv2d` runs the 1x1 kernel with the tiles :mod:`xcorr_app.conv._dynamic_blocking`
chooses for the problem and the GPU.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .._cuda import KernelFamily, PreparedLaunch, device_limits, stream_counters, upload_shared
from ..errors import InputError
from ._dynamic_blocking import THREADS as POINTWISE_THREADS
from ._dynamic_blocking import configurations, plan
from ._validation import pair

#: (BLOCK_M, BLOCK_N, BLOCK_K, THREAD_M, THREAD_N, STAGES) of the im2win convolution; the
#: last three, of 128 threads with 4x4 and 4x8 register tiles, fill the GPU on problems of few
#: filters or columns (the tuner picks them on most of MobileNetV2's pointwise layers)
IM2WIN_TILES = ((128, 128, 8, 8, 8, 4), (128, 64, 8, 8, 8, 4), (64, 128, 8, 8, 8, 4),
                (64, 64, 8, 8, 8, 4), (32, 64, 8, 4, 4, 4), (64, 64, 8, 4, 8, 4),
                (32, 128, 8, 4, 8, 4))
#: where the convolution reads its windows: the input, or the im2win tensor
LAYOUTS = ("direct", "im2win")
#: the offset tables are padded with -1 to a multiple of this (the largest BLOCK_K, 16 bytes)
TABLE_ROUND = 16
IM2WIN = KernelFamily("im2win_conv.cu", "im2win_conv",
                      [t + (padded,) for t in IM2WIN_TILES for padded in (False, True)])
IM2WIN_TRANSFORM = KernelFamily("im2win_conv.cu", "im2win_transform", [()])
POINTWISE = KernelFamily("pointwise_conv.cu", "pointwise_conv",
                         [c.template for c in configurations()])
#: columns of one launch stay below this (the kernel's column index is a 32-bit int)
MAX_COLUMNS = 2**31 - 1 - 128
#: split-K: each split sums at least this many K steps, and there are at most MAX_SPLITS
MIN_SPLIT_STEPS = 8
MAX_SPLITS = 16


def tile_threads(tiles) -> int:
    return (tiles[0] // tiles[3]) * (tiles[1] // tiles[4])


def blocks_per_sm(threads: int, shared: int, limits) -> int:
    """Blocks of ``threads`` threads and ``shared`` bytes of shared memory an SM holds at once:
    the convolution kernels' launch bound (512 threads' registers) or their shared memory."""
    return max(1, min(512 // threads, limits.shared_per_sm // (shared + 1024)))  # + driver's


def resident_blocks(tiles, limits) -> int:
    """Blocks of this im2win tile an SM holds at once (:func:`blocks_per_sm`)."""
    bm, bn, bk, _, _, stages = tiles
    return blocks_per_sm(tile_threads(tiles), stages * bk * (bm + 4 + bn) * 4, limits)


def split_plan(steps: int, splits: int) -> tuple:
    """``(splits, steps per split)`` for ``steps`` K steps asked to split ``splits`` ways: no
    split empty, and at most 65535 (the grid's z limit).

    >>> split_plan(10, 4), split_plan(10, 1000), split_plan(10, 0)
    ((4, 3), (10, 1), (1, 10))
    """
    per = -(-steps // max(1, min(int(splits), steps, 65535)))
    return -(-steps // per), per


def tuning_key(x_shape, w_shape, *args) -> list:
    """The problem part of the key a measured choice is remembered under (JSON-able): the batch
    rounded up to a power of two (batches of similar size, e.g. a stack's partial last chunk,
    share it), the rest of the shapes and ``args`` (pairs as lists).  The autotuner adds the
    GPU and the code (:func:`xcorr_app._cuda.tuning.device_fingerprint`).

    >>> tuning_key((5, 3, 20, 18), (8, 3, 3, 3), (1, 1), (0, 0), "direct")
    [8, [3, 20, 18], [8, 3, 3, 3], [1, 1], [0, 0], 'direct']
    """
    def plain(v):
        return [plain(a) for a in v] if isinstance(v, (tuple, list)) else v

    return [1 << max(0, (x_shape[0] - 1).bit_length()), plain(x_shape[1:]), plain(w_shape),
            *(plain(a) for a in args)]


def split_steps(blocks: int, steps: int, resident: int) -> int:
    """K steps per split for ``blocks`` output tiles of ``steps`` K steps each on a GPU that
    holds ``resident`` blocks at once: all of them (no split) with two waves of tiles or more,
    else enough splits for two waves, each of at least :data:`MIN_SPLIT_STEPS` steps.

    >>> split_steps(1000, 300, 264), split_steps(56, 576, 1056), split_steps(56, 12, 1056)
    (300, 36, 12)
    """
    if blocks >= 2 * resident or steps < 2 * MIN_SPLIT_STEPS:
        return steps
    splits = min(-(-2 * resident // blocks), steps // MIN_SPLIT_STEPS, MAX_SPLITS)
    return -(-steps // splits)


def im2win_tiles(m: int, q: int, sms: int = 132) -> tuple:
    """The tile for ``m`` filters and ``q`` output columns: among those that give every SM a
    block (all of them when none does), the one wasting the least work on filter rows past
    ``m``, then the largest.

    >>> im2win_tiles(64, 100000)[:2], im2win_tiles(512, 100000)[:2], im2win_tiles(512, 784)[:2]
    ((64, 128), (128, 128), (32, 64))
    """
    def blocks(t):
        return -(-m // t[0]) * -(-q // t[1])

    full = [t for t in IM2WIN_TILES if blocks(t) >= sms] or \
        [max(IM2WIN_TILES, key=blocks)]
    return min(full, key=lambda t: (-(-m // t[0]) * t[0] / m, -t[0] * t[1]))


def output_size(size, k, stride, pad):
    return (size + 2 * pad - k) // stride + 1


def window_offsets(c, kh, kw, plane, row_step, col_step):
    """The kernel's tables for ``k = (c, kh, kw)`` in the filter's order: ``off(k) = c * plane
    + kh * row_step + kw * col_step`` (-1 past ``K``) and ``pos(k) = kh << 16 | kw``, int32,
    padded to a multiple of :data:`TABLE_ROUND`.

    >>> off, pos = window_offsets(2, 2, 3, 100, 10, 1)
    >>> off[:8].tolist(), off[12:].tolist(), pos[:4].tolist()
    ([0, 1, 2, 10, 11, 12, 100, 101], [-1, -1, -1, -1], [0, 1, 2, 65536])
    """
    if max(kh, kw) >= 2**15:
        raise InputError(f"a {kh}x{kw} filter is too large for the GPU convolution (at most "
                         f"32767 per side)")
    ci, hi, wi = (a.ravel() for a in np.meshgrid(np.arange(c, dtype=np.int64), np.arange(kh),
                                                  np.arange(kw), indexing="ij"))
    k = c * kh * kw
    off = ci * plane + hi * row_step + wi * col_step
    if off.max() + 1 >= 2**31:
        raise InputError(f"one image's windows span {int(off.max()) + 1} values; the GPU "
                         f"convolution takes at most 2**31 per image")
    size = -(-k // TABLE_ROUND) * TABLE_ROUND
    off_t = np.full(size, -1, np.int32)
    off_t[:k] = off
    pos_t = np.zeros(size, np.int32)
    pos_t[:k] = (hi << 16) | wi
    return off_t, pos_t


def _device_tables(c, kh, kw, plane, row_step, col_step):
    """:func:`window_offsets` on the current GPU (cached)."""
    import cupy as cp

    return _cached_tables(cp.cuda.Device().id, c, kh, kw, plane, row_step, col_step)


@functools.lru_cache(maxsize=64)
def _cached_tables(device, *shape):
    import cupy as cp

    return tuple(upload_shared(t) for t in window_offsets(*shape))


#: most bytes of the im2win tensor held at once (``layout="im2win"``): the batch is
#: transformed and convolved in groups of images that fit (at least one) ...
WIN_BYTES = 64 << 20
#: ... unless a group would give fewer than this many waves of blocks (2 per SM)
WAVES = 4


#: the autotuner's namespace of the im2win kernel's ``(tiles, splits)``
TUNING_NAMESPACE = "conv.im2win"


def tuned_plan(x, w, stride, padding, layout="direct", win_bytes=WIN_BYTES, waves=WAVES):
    """The fastest ``(tiles, splits)`` for this problem on this GPU among those of
    :func:`_candidates`, measured once (as cuDNN's benchmark mode does) and remembered by the
    autotuner (:func:`xcorr_app._cuda.tuning.fastest`: in memory and on disk).  ``stride`` and
    ``padding`` are (y, x) pairs."""
    import cupy as cp

    from .._cuda import fastest

    n = x.shape[0]
    shape = (n, w.shape[0], output_size(x.shape[2], w.shape[2], stride[0], padding[0]),
             output_size(x.shape[3], w.shape[3], stride[1], padding[1]))
    outs = []  # one output for the measured runs, made only if they run

    def run(c):
        if not outs:
            outs.append(cp.empty(shape, cp.float32))
        return im2win_conv2d(x, w, stride, padding, outs[0], tiles=c[0], splits=c[1],
                             layout=layout, win_bytes=win_bytes, waves=waves)

    cands = _candidates(x.shape, w.shape, stride, padding, layout, device_limits())
    return fastest({c: lambda c=c: run(c) for c in cands}, TUNING_NAMESPACE,
                   tuning_key(x.shape, w.shape, stride, padding, layout))


def _candidates(x_shape, w_shape, stride, padding, layout, limits):
    """``(tiles, splits)`` worth measuring: every tile unsplit, and, where its tiles give fewer
    than two waves of blocks, split 2, 4, 8 and 16 ways (each split at least
    :data:`MIN_SPLIT_STEPS` steps, at most 8 waves in all).

    >>> from xcorr_app._cuda.device import H100_LIMITS
    >>> len(_candidates((16, 512, 7, 7), (512, 512, 3, 3), (1, 1), (0, 0), "direct",
    ...                 H100_LIMITS))
    35
    >>> {s for _, s in _candidates((128, 64, 112, 112), (128, 64, 3, 3), (1, 1), (0, 0),
    ...                            "direct", H100_LIMITS)}
    {1}
    """
    out = []
    for t in IM2WIN_TILES:
        out.append((t, 1))
        if layout != "direct":  # a group of images over the im2win tensor fills the GPU
            continue
        blocks, steps = _grid(t, x_shape, w_shape, stride, padding)
        resident = resident_blocks(t, limits) * limits.sms
        if blocks < 2 * resident:
            out += [(t, s) for s in (2, 4, 8, 16)
                    if s * MIN_SPLIT_STEPS <= steps and blocks * s <= 8 * resident]
    return out


def _grid(tiles, x_shape, w_shape, stride, padding):
    """Output tiles of one direct launch (the whole batch, up to :data:`MAX_COLUMNS` columns)
    and K steps of each; ``stride`` and ``padding`` are (y, x) pairs."""
    (n, c, h, wd), (f, _, kh, kw) = x_shape, w_shape
    (sy, sx), (py, px) = stride, padding
    q = n * output_size(h, kh, sy, py) * output_size(wd, kw, sx, px)
    return -(-f // tiles[0]) * -(-min(q, MAX_COLUMNS) // tiles[1]), -(-c * kh * kw // tiles[2])


def _default_splits(tiles, x_shape, w_shape, stride, padding, layout):
    """Splits of K for this tile by :func:`split_steps` (one launch's columns: the whole batch
    directly; over the im2win tensor, a group of images fills the GPU already)."""
    if layout != "direct":
        return 1
    blocks, steps = _grid(tiles, x_shape, w_shape, stride, padding)
    limits = device_limits()
    per = split_steps(blocks, steps, resident_blocks(tiles, limits) * limits.sms)
    return -(-steps // per)


@functools.lru_cache(maxsize=256)
def _im2win_launch(device, tiles, padded, grid, scalars):
    """The convolution's launch with its scalars packed once per problem (a few microseconds
    of host time less per call: :class:`~xcorr_app._cuda.launch.PreparedLaunch`)."""
    types = (np.int32,) * 5 + (np.int64,) + (np.int32,) * 10
    return PreparedLaunch(IM2WIN.get(*tiles, padded), grid, (tile_threads(tiles),), 6,
                          tuple(t(v) for t, v in zip(types, scalars)))


@functools.lru_cache(maxsize=256)
def _pointwise_launch(device, cfg, f, c, hw, q):
    grid = (-(-q // cfg.block_p), -(-f // cfg.block_f))
    return PreparedLaunch(POINTWISE.get(*cfg.template), grid, (POINTWISE_THREADS,), 3,
                          (np.int32(f), np.int32(c), np.int32(hw), np.int64(q)))


def im2win_conv2d(x, w, stride=1, padding=0, out=None, tiles=None, splits=None,
                  layout="direct", win_bytes=WIN_BYTES, waves=WAVES, tune=True):
    """NCHW float32 convolution of CuPy ``x`` (N, C, H, W) with ``w`` (F, C, KH, KW).

    ``stride``, ``padding``: an int or a (y, x) pair.  ``layout``: one of :data:`LAYOUTS`.
    ``tiles``: one of :data:`IM2WIN_TILES`, ``splits``: how many blocks share the sum over K
    of one output tile (split-K, summed in order: deterministic); by default the fastest pair,
    measured on the first call of each problem (``tune=False``: the tile of
    :func:`im2win_tiles` and the splits of :func:`split_steps`, without measuring)."""
    import cupy as cp

    if layout not in LAYOUTS:
        raise InputError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    (sy, sx), (py, px) = pair(stride, "stride", 1), pair(padding, "padding", 0)
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    ho, wo = output_size(h, kh, sy, py), output_size(wd, kw, sx, px)
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    filt = cp.ascontiguousarray(w, dtype=cp.float32)  # used in place: k = (c, kh, kw)
    if out is None:
        out = cp.empty((n, f, ho, wo), cp.float32)
    if out.data.ptr % 16 or not out.flags.c_contiguous:
        raise InputError("out must be a C-contiguous float32 array aligned to 16 bytes")
    sms = device_limits().sms
    if tiles is None and tune:
        tiles, tuned_splits = tuned_plan(x, w, (sy, sx), (py, px), layout, win_bytes, waves)
        splits = tuned_splits if splits is None else splits
    elif tiles is None:
        tiles = im2win_tiles(f, n * ho * wo, sms)
    if splits is None:
        splits = _default_splits(tiles, x.shape, w.shape, (sy, sx), (py, px), layout)
    if layout == "direct":
        return _direct_runner(cp.cuda.Device().id, x.shape, w.shape, (sy, sx), (py, px), tiles,
                              splits, MAX_COLUMNS)(x, filt, out)
    bm, bn, bk = tiles[:3]
    k = c * kh * kw
    splits, per_split = split_plan(-(-k // bk), splits)
    off, pos = _device_tables(c, kh, kw, ho * (wd + 2 * px) * kh, 1, kh)

    def gemm(src, dst, g, sn, sh, sw):
        q = g * ho * wo
        grid = (-(-q // bn), -(-f // bm), splits)
        locks = stream_counters(grid[0] * grid[1]) if splits > 1 else off
        _im2win_launch(cp.cuda.Device().id, tiles, False, grid,
                       (f, k, ho, wo, q, sn, sh, sw, 0, sy, sx, py, px, h, wd, per_split))(
            filt, src, off, pos, dst, locks)

    # the im2win tensor, in groups of images: within win_bytes, but enough for WAVES full
    # waves of blocks (a group that leaves SMs idle costs more than the memory it saves)
    wp = wd + 2 * px
    per_image = -(-f // bm) * (ho * wo / bn)
    group = max(win_bytes // (c * ho * wp * kh * 4), math.ceil(waves * 2 * sms / per_image))
    group = max(1, min(n, group, MAX_COLUMNS // (ho * wo)))
    win = cp.empty((group, c, ho, wp * kh), cp.float32)
    i32 = np.int32
    for n0 in range(0, n, group):
        g = min(group, n - n0)
        rows = g * c * ho
        IM2WIN_TRANSFORM.get()((min(rows, 65535 * 8),), (128,),
                               (x[n0:n0 + g], win, i32(rows), i32(h), i32(wd), i32(kh),
                                i32(sy), i32(py), i32(px), i32(ho), i32(wp)))
        gemm(win, out[n0:n0 + g], g, c * ho * wp * kh, wp * kh, sx * kh)
    return out


@functools.lru_cache(maxsize=256)
def _direct_runner(device, x_shape, w_shape, stride, padding, tiles, splits, max_columns):
    """``run(x, filt, out)`` of the direct layout for one problem, tile and split: its launches
    (the batch in groups of at most :data:`MAX_COLUMNS` columns) with their scalars packed
    once, so a repeated call costs a few microseconds of host time."""
    (n, c, h, wd), (f, _, kh, kw) = x_shape, w_shape
    (sy, sx), (py, px) = stride, padding
    ho, wo = output_size(h, kh, sy, py), output_size(wd, kw, sx, px)
    bm, bn, bk = tiles[:3]
    k = c * kh * kw
    splits, per_split = split_plan(-(-k // bk), splits)
    off, pos = _device_tables(c, kh, kw, h * wd, wd, 1)
    group = max(1, min(n, max_columns // (ho * wo)))
    launches = []
    for n0 in range(0, n, group):
        g = min(group, n - n0)
        q = g * ho * wo
        grid = (-(-q // bn), -(-f // bm), splits)
        launches.append((n0, g, grid[0] * grid[1], _im2win_launch(
            device, tiles, bool(py or px), grid,
            (f, k, ho, wo, q, c * h * wd, sy * wd, sx, -py * wd - px, sy, sx, py, px, h, wd,
             per_split))))

    def run(x, filt, out):
        for n0, g, count, launch in launches:
            locks = stream_counters(count) if splits > 1 else off
            if g == n:
                launch(filt, x, off, pos, out, locks)
            else:
                launch(filt, x[n0:n0 + g], off, pos, out[n0:n0 + g], locks)
        return out
    return run


def prepared_direct(x, w, stride, padding):
    """``run(x, w, out)`` of the direct layout with the tuned tile and split of this problem
    (measured now if it has not been): C-contiguous float32 CuPy arrays of ``x``'s and
    ``w``'s shapes; ``stride`` and ``padding`` (y, x) pairs."""
    import cupy as cp

    tiles, splits = tuned_plan(x, w, stride, padding, "direct", WIN_BYTES, WAVES)
    return _direct_runner(cp.cuda.Device().id, x.shape, w.shape, stride, padding, tiles, splits,
                          MAX_COLUMNS)


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
    if out is None:
        out = cp.empty((n, f, h, wd), cp.float32)
    if out.data.ptr % 16 or not out.flags.c_contiguous:
        raise InputError("out must be a C-contiguous float32 array aligned to 16 bytes")
    return prepared_pointwise(x, w, config)(x, w, out)


def prepared_pointwise(x, w, config=None):
    """``run(x, w, out)`` of the pointwise kernel for this problem: C-contiguous float32 CuPy
    arrays, ``x`` and ``out`` aligned to 16 bytes, ``w`` (F, C) or (F, C, 1, 1)."""
    import cupy as cp

    n, c, h, wd = x.shape
    f, hw = w.shape[0], h * wd
    launch = _pointwise_launch(cp.cuda.Device().id, config or plan(f, c, n * hw), f, c, hw,
                               n * hw)

    def run(x, w, out):
        launch(w, x, out)
        return out
    return run
