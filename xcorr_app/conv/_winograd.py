"""GPU Winograd convolution F(2x2, 3x3) (``kernels/conv/winograd_conv.cu``) for 3x3 filters at
stride 1, any zero padding.

The kernel is fused: each block transforms the input patches and filters it needs as it loads
them, runs the 16 element-wise GEMMs over the channels in registers and transforms its sums
before storing them, so it needs no memory beside the output.  It does 16 multiplications per
channel for each 2x2 output tile where a direct convolution does 36.  Lavin and Gray's
F(2x2, 3x3) keeps the float32 error near the direct sum's (about 6e-7 of the largest output
on normal data); F(4x4, 3x3) would reach about 1e-5, the limit the tests hold every kernel to.

Examples
--------
>>> winograd_tiles(26, 25)
(13, 13)
>>> applicable((8, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1))
True
>>> applicable((8, 128, 28, 28), (128, 128, 3, 3), (2, 2), (1, 1))
False
"""

from __future__ import annotations

import functools

import numpy as np

from .._cuda import KernelFamily, PreparedLaunch, device_limits, stream_counters
from ..errors import InputError
from ._im2win import blocks_per_sm, split_plan, split_steps, tuning_key
from ._validation import pair

#: (BLOCK_M filters, BLOCK_N tiles, BLOCK_K channels, THREAD_M, THREAD_N, GROUPS): GROUPS
#: groups of (BLOCK_M / THREAD_M) x (BLOCK_N / THREAD_N) threads share the 16 elements
WINOGRAD_TILES = ((32, 64, 8, 8, 8, 16), (64, 32, 8, 8, 4, 8), (32, 32, 8, 8, 4, 8))
#: outputs per Winograd tile (MY, MX): F(2x2, 3x3)
OUTPUT_TILE = (2, 2)
#: the kernel's one-dimensional F(2, 3) (Lavin and Gray): input BT, filter G, output AT;
#: a tile is AT [(G g G^T) * (BT d BT^T)] AT^T
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
WINOGRAD = KernelFamily("winograd_conv.cu", "winograd_conv",
                        [t + OUTPUT_TILE for t in WINOGRAD_TILES])
#: split-K candidates, as for the im2win kernel
SPLITS = (1, 2, 4, 8, 16)


def elements(tile=OUTPUT_TILE) -> int:
    """Transform elements (element-wise GEMMs) of F(MY x MX, 3x3): (MY + 2) (MX + 2)."""
    return (tile[0] + 2) * (tile[1] + 2)


def winograd_tiles(ho: int, wo: int, tile=OUTPUT_TILE) -> tuple:
    """Tiles of ``tile`` outputs covering an ``ho x wo`` output (the last ones partly outside)."""
    return -(-ho // tile[0]), -(-wo // tile[1])


def unsupported(x_shape, w_shape, stride, padding) -> str | None:
    """Why the Winograd kernel does not compute this convolution, or ``None`` when it does:
    3x3 filters at stride 1, sizes within its 32-bit indices and grid.  ``stride``,
    ``padding``: (y, x) pairs."""
    (n, c, h, wd), (f, wc, kh, kw) = x_shape, w_shape
    if (kh, kw) != (3, 3) or tuple(stride) != (1, 1):
        return f"it takes 3x3 filters at stride 1, got {kh}x{kw} at stride {tuple(stride)}"
    if wc != c:
        return f"the filters have {wc} channels but the input has {c}"
    ho, wo = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
    if ho < 1 or wo < 1:
        return f"a 3x3 filter does not fit a {h}x{wd} image with padding {tuple(padding)}"
    ty, tx = winograd_tiles(ho, wo)
    if n * ty * tx >= 2**31 - 256 or f * ho * wo >= 2**31 or h * wd >= 2**31 or \
            max(padding) >= 2**15 or f >= 2**21:
        return (f"the problem is past its 32-bit indices (N={n}, F={f}, {h}x{wd} images, "
                f"padding {tuple(padding)})")
    return None


def applicable(x_shape, w_shape, stride, padding) -> bool:
    """Whether the Winograd kernel computes this convolution (:func:`unsupported`)."""
    return unsupported(x_shape, w_shape, stride, padding) is None


def shared_bytes(tiles, tile=OUTPUT_TILE) -> int:
    """Dynamic shared memory of a block: two buffers of the U and V tiles (U's rows padded by
    4), or, if more, the sums of all its threads (the epilogue's exchange between groups)."""
    bm, bn, bk = tiles[:3]
    pipe = 2 * bk * (elements(tile) * (bm + bn) + 4)
    return max(pipe, elements(tile) * bm * bn) * 4


def resident_blocks(tiles, limits) -> int:
    """Blocks of this tile an SM holds at once (:func:`~xcorr_app.conv._im2win.blocks_per_sm`)."""
    return blocks_per_sm(tile_threads(tiles), shared_bytes(tiles), limits)


def _candidates(x_shape, w_shape, padding):
    """``(tiles, splits)`` worth measuring: every tile, split where its grid is under two
    waves, each split at least :data:`~xcorr_app.conv._im2win.MIN_SPLIT_STEPS` channel steps."""
    limits = device_limits()
    out = []
    for t in WINOGRAD_TILES:
        blocks, steps = _grid(t, x_shape, w_shape, padding)
        resident = resident_blocks(t, limits) * limits.sms
        most = -(-steps // split_steps(blocks, steps, resident))
        out += [(t, s) for s in SPLITS if s == 1 or (s <= most and blocks * s <= 8 * resident)]
    return out


def _grid(tiles, x_shape, w_shape, padding):
    """Blocks of one launch (without splits) and channel steps of each."""
    (n, c, h, wd), f = x_shape, w_shape[0]
    ty, tx = winograd_tiles(h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2)
    return -(-n * ty * tx // tiles[1]) * -(-f // tiles[0]), -(-c // tiles[2])


#: the autotuner's namespace of the Winograd kernel's ``(tiles, splits)``
TUNING_NAMESPACE = "conv.winograd"


def tuned_plan(x, w, padding):
    """The fastest ``(tiles, splits)`` for this problem on this GPU, measured once and
    remembered by the autotuner (:func:`xcorr_app._cuda.tuning.fastest`: in memory and on
    disk); ``padding`` a (y, x) pair."""
    import cupy as cp

    from .._cuda import fastest

    shape = (x.shape[0], w.shape[0], x.shape[2] + 2 * padding[0] - 2,
             x.shape[3] + 2 * padding[1] - 2)
    outs = []  # one output for the measured runs, made only if they run

    def run(c):
        if not outs:
            outs.append(cp.empty(shape, cp.float32))
        return prepared(x, w, padding, *c)(x, w, outs[0])

    return fastest({c: lambda c=c: run(c) for c in _candidates(x.shape, w.shape, padding)},
                   TUNING_NAMESPACE, tuning_key(x.shape, w.shape, padding))


def tile_threads(tiles) -> int:
    bm, bn, _, tm, tn, groups = tiles
    return (bm // tm) * (bn // tn) * groups


@functools.lru_cache(maxsize=256)
def _runner(device, x_shape, w_shape, padding, tiles, splits):
    """``run(x, w, out)`` for one problem, tile and split: the launch with its scalars packed
    once (:class:`~xcorr_app._cuda.launch.PreparedLaunch`), so a repeated call costs a few
    microseconds of host time."""
    (n, c, h, wd), f = x_shape, w_shape[0]
    py, px = padding
    ho, wo = h + 2 * py - 2, wd + 2 * px - 2
    blocks, steps = _grid(tiles, x_shape, w_shape, padding)
    if splits is None:
        limits = device_limits()
        splits = -(-steps // split_steps(blocks, steps, resident_blocks(tiles, limits) *
                                         limits.sms))
    splits, per_split = split_plan(steps, splits)
    ty, tx = winograd_tiles(ho, wo)
    p = n * ty * tx
    grid = (-(-p // tiles[1]), -(-f // tiles[0]), splits)
    launch = PreparedLaunch(WINOGRAD.get(*tiles, *OUTPUT_TILE), grid, (tile_threads(tiles),), 4,
                            tuple(np.int32(v) for v in (f, c, h, wd, ho, wo, ty, tx, p, py, px,
                                                        per_split)), shared_bytes(tiles))
    count = grid[0] * grid[1]

    def run(x, w, out):
        launch(w, x, out, stream_counters(count) if splits > 1 else out)
        return out
    return run


def winograd_conv2d(x, w, padding=0, out=None, tiles=None, splits=None, tune=True):
    """NCHW float32 convolution (stride 1) of CuPy ``x`` (N, C, H, W) with 3x3 filters ``w``
    (F, C, 3, 3) by the fused Winograd kernel.

    ``padding``: an int or a (y, x) pair.  ``tiles``: one of :data:`WINOGRAD_TILES`;
    ``splits``: how many blocks share the sum over the channels of one output tile (in order:
    deterministic); by default the fastest pair, measured on the first call of each problem
    (``tune=False``: the first tile, split to fill two waves)."""
    import cupy as cp

    py, px = pair(padding, "padding", 0)
    n, c, h, wd = x.shape
    f = w.shape[0]
    why = unsupported(x.shape, w.shape, (1, 1), (py, px))
    if why:
        raise InputError(f"the Winograd kernel cannot compute this convolution: {why}")
    ho, wo = h + 2 * py - 2, wd + 2 * px - 2
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    w = cp.ascontiguousarray(w, dtype=cp.float32)
    if out is None:
        out = cp.empty((n, f, ho, wo), cp.float32)
    if out.dtype != cp.float32 or not out.flags.c_contiguous or out.shape != (n, f, ho, wo):
        raise InputError(f"out must be a C-contiguous float32 array of shape {(n, f, ho, wo)}")
    return prepared(x, w, (py, px), tiles, splits, tune)(x, w, out)


def prepared(x, w, padding, tiles=None, splits=None, tune=True):
    """``run(x, w, out)`` for this problem, tile and split (by default the tuned pair,
    measured now if it has not been): C-contiguous float32 CuPy arrays of ``x``'s and ``w``'s
    shapes; ``padding`` a (y, x) pair."""
    import cupy as cp

    if tiles is None and tune:
        tiles, tuned = tuned_plan(x, w, padding)
        splits = tuned if splits is None else splits
    elif tiles is None:
        tiles = WINOGRAD_TILES[0]
    return _runner(cp.cuda.Device().id, x.shape, w.shape, padding, tiles, splits)
