"""GPU launcher of the tensor-core kernel (``kernels/correlate/mma_xcorr.cu``): cross-correlation as
TF32 matrix products with FP32 accuracy (3xTF32), for many small right matrices per left.

Our addition beyond the thesis.  For one right row, one y-shift and 8 consecutive x-shifts,
the sums over 8 right columns of 16 right matrices are one ``mma.sync.m16n8k8`` product of
16 right rows and a Toeplitz block of the left matrix.  Each operand is split into a TF32 high
part and a TF32 remainder and a product is formed from three tensor-core products (hi*hi,
hi*lo, lo*hi), which keeps the error near FP32's (below 1e-6 of the largest output in our
measurements; the tests ask 1e-5).  Inputs must be finite (an infinity gives NaN here).
A warp owns ``tile_y`` y-shifts x ``tile_x`` x-shifts of a group of 16 right matrices; one load
of right values feeds ``tile_y * tile_x / 8`` products.  With ``row_splits`` of 2, 4 or 8, that
many warps of a block share a tile's right rows and add their sums in shared memory (for small
problems, whose few tiles would leave most of the GPU idle).

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> ref, frames = cp.random.rand(32, 32), cp.random.rand(4000, 32, 32)  # doctest: +SKIP
>>> mma_xcorr(ref, frames, "one_to_many", tile_y=4, tile_x=8).shape  # doctest: +SKIP
(4000, 63, 63)
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._forms import FORM_IDS
from ._tiled import MAX_GRID_YZ, PAIR_FORMS
from ._warp_shuffle import geometry, launch
from .._cuda import KernelFamily, device_limits

#: (tile_y, tile_x) compiled for every form with many right matrices; tile_x is 8 x-shifts
#: per tensor-core block times the blocks of a warp
MMA_TILES = [(2, 8), (4, 8), (1, 16), (2, 16), (1, 32)]
MMA_FORMS = PAIR_FORMS
WARPS = 16  # MMA_WARPS of the kernel source
MATRICES = 16  # right matrices of a group (M of the tensor-core product)
SHIFTS = 8  # x-shifts of a tensor-core block (its N)
#: warps that may share one tile's right rows (``row_splits``)
ROW_SPLITS = (1, 2, 4, 8)
MMA = KernelFamily("mma_xcorr.cu", "mma_xcorr",
                   [(FORM_IDS[f], ty, tx // SHIFTS) for f in MMA_FORMS for ty, tx in MMA_TILES])


def matrix_stride(rows, cols) -> int:
    """Floats from one staged right matrix to the next (``mma_matrix_stride``): 8 mod 32."""
    return rows * cols + (8 - rows * cols) % 32


def shared_bytes(left_shape, right_shape, tile_y, tile_x, buffers=2, row_splits=1) -> int:
    """Shared memory of one block: the zero-padded left matrix (``tile_y - 1`` rows above and
    below, ``tile_x + 8`` columns on each side) as 16 bytes per column (the TF32 hi and lo parts
    of it and of the next column), ``buffers`` buffers of 16 right matrices (rows padded to
    whole chunks of 8, :func:`matrix_stride` floats each), and with ``row_splits`` > 1 the
    partial sums of every warp but the first of each tile."""
    (lh, lw), (rh, rw) = left_shape, right_shape
    partial_warps = WARPS - WARPS // row_splits
    return (16 * (lh + 2 * (tile_y - 1)) * (lw + 2 * (tile_x + 8)) +
            buffers * MATRICES * 4 * matrix_stride(rh, 8 * -(-rw // 8)) +
            partial_warps * 4 * 32 * tile_y * (tile_x // SHIFTS) * 4)  # 4 floats per block


def buffers_for(left_shape, right_shape, tile_y, tile_x, limit, row_splits=1) -> int:
    """Right-matrix buffers a block gets: two (the next group's copies overlap this group's
    sums) where they fit ``limit`` bytes, else one, else 0 (the problem does not fit)."""
    for buffers in (2, 1):
        if shared_bytes(left_shape, right_shape, tile_y, tile_x, buffers, row_splits) <= limit:
            return buffers
    return 0


def resident_blocks(registers, shared, limits) -> int:
    """Blocks of 512 threads an SM holds at once with this many registers per thread
    (allocated in units of 8) and bytes of shared memory (1 KiB more is reserved per block),
    within ``limits`` (:func:`~xcorr_app._cuda.device.device_limits`)."""
    by_registers = limits.registers_per_sm // (WARPS * 32 * -(-max(1, registers) // 8) * 8)
    return max(1, min(by_registers, limits.shared_per_sm // (shared + 1024)))


def grid_plan(n_tiles, n_groups, n_left, target, tile_slots=WARPS) -> tuple:
    """``(splits, strides)``: blocks split a group's tiles ``splits`` ways and take every
    ``strides``-th group, for ``splits * strides * n_left <= target`` blocks (one wave: a
    second would wait for the first, staging and all).  The choice minimizes a block's work:
    per group, its rounds of tiles per warp and a quarter round for the group's staging and
    barriers (each block stages every group it sums); among equals, more groups per block.
    A block sums ``tile_slots`` tiles at once (``WARPS // row_splits``).

    >>> grid_plan(128, 250, 1, 132)  # 1 x 4000 at 32x32, tiles of 4x8: two groups per block
    (1, 125)
    >>> grid_plan(128, 16, 1, 132)  # 1 x 256: one group and one round of tiles per block
    (8, 16)
    >>> grid_plan(256, 1, 1, 132, tile_slots=4)  # 1 x 8 at 32x32, tiles of 2x8, rows split 4 ways
    (64, 1)
    """
    best = None
    for strides in range(1, min(n_groups, MAX_GRID_YZ) + 1):
        splits = min(-(-n_tiles // tile_slots), target // (strides * n_left))
        if splits < 1:
            break
        work = -(-n_groups // strides) * (-(-n_tiles // (splits * tile_slots)) + 0.25)
        if best is None or work < best[0]:
            best = (work, splits, strides)
    return (1, 1) if best is None else best[1:]


def unsupported(form, left_shape, right_shape, tile_y, tile_x, limit=None,
                row_splits=1) -> str | None:
    """Why this kernel cannot run a problem (``None`` if it can); ``limit`` is the shared
    memory a block may opt into (default: the current GPU's, an H100's without one)."""
    if form not in MMA_FORMS:
        return (f"the tensor-core kernel needs many right matrices per left (forms "
                f"{', '.join(MMA_FORMS)}), not {form}")
    if (tile_y, tile_x) not in MMA_TILES:
        return (f"tile {tile_y}x{tile_x} is not compiled; use one of "
                + ", ".join(f"{a}x{b}" for a, b in MMA_TILES))
    if row_splits not in ROW_SPLITS:
        return (f"row_splits={row_splits} is not supported; use one of "
                + ", ".join(map(str, ROW_SPLITS)))
    limit = device_limits().shared_per_block if limit is None else limit
    if not buffers_for(left_shape, right_shape, tile_y, tile_x, limit, row_splits):
        need = shared_bytes(left_shape, right_shape, tile_y, tile_x, 1, row_splits)
        return (f"a left of {tuple(left_shape)} and right matrices of {tuple(right_shape)} need "
                f"{need // 1024} KiB of shared memory; this GPU gives a block {limit // 1024} KiB")
    return None


def configure_mma(form, left_shape, right_shape, max_shift, params):
    lay, out_shape, geom = geometry(form, left_shape, right_shape, max_shift)
    ho, wo = out_shape[-2:]
    ty, tx, ks = params["tile_y"], params["tile_x"], params["row_splits"]
    why = unsupported(lay.form, lay.left_shape, lay.right_shape, ty, tx, row_splits=ks)
    if why:
        raise InputError(why)
    if lay.n_left > MAX_GRID_YZ:
        raise InputError(f"too many left matrices for one launch ({lay.n_left})")
    limits = device_limits()
    buffers = buffers_for(lay.left_shape, lay.right_shape, ty, tx, limits.shared_per_block, ks)
    smem = shared_bytes(lay.left_shape, lay.right_shape, ty, tx, buffers, ks)
    tiles_x = -(-wo // tx)
    n_tiles = -(-ho // ty) * tiles_x
    n_groups = -(-lay.m // MATRICES)
    fn = MMA.get(lay.form_id, ty, tx // SHIFTS)
    target = limits.sms * resident_blocks(fn.num_regs, smem, limits)
    splits, strides = grid_plan(n_tiles, n_groups, lay.n_left, target, WARPS // ks)
    i32 = np.int32
    scalars = geom + (i32(lay.m), i32(n_groups), i32(tiles_x), i32(n_tiles),
                      i32(-(-lay.right_shape[1] // 8)), i32(buffers), i32(ks))
    return fn, (splits, strides, lay.n_left), (32, WARPS, 1), scalars, smem, False, out_shape


def mma_xcorr(left, right, form="one_to_many", max_shift=None, out=None, *, tile_y=4,
              tile_x=8, row_splits=1):
    """Cross-correlate CuPy arrays with the tensor-core (3xTF32) kernel.

    Parameters
    ----------
    left, right, form, max_shift, out
        As :func:`xcorr_app.cross_correlate` (float32 CuPy result); ``form`` one of
        :data:`MMA_FORMS`.
    tile_y, tile_x : int
        Shifts per warp along y and x (a compiled pair, see :data:`MMA_TILES`).
    row_splits : {1, 2, 4, 8}
        Warps that share a tile, each summing every ``row_splits``-th right row (their sums
        added in shared memory): more warps and shorter chains of products for problems with
        few tiles.

    Returns
    -------
    cupy.ndarray
        ``batch_shape + (Ho, Wo)`` float32.
    """
    params = (("tile_y", tile_y), ("tile_x", tile_x), ("row_splits", row_splits))
    return launch(configure_mma, left, right, form, max_shift, out, params)
