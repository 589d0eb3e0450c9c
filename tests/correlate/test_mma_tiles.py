"""The tensor-core kernel's index arithmetic, ported to Python (CPU): every product a tile must
sum lies in the rows and column chunks it walks, and every shared-memory read of the staged
left matrix stays inside its zero padding.  The GPU tests check the kernel itself against the
float64 reference (tests/correlate/test_gpu_mma.py)."""

import numpy as np
import pytest

from xcorr_app.correlate._mma import (MATRICES, MMA_TILES, SHIFTS, buffers_for, matrix_stride,
                               shared_bytes, unsupported)
from xcorr_app._cuda.device import H100_LIMITS
from xcorr_app.correlate import first_shift, output_shape

H100_SHARED = H100_LIMITS.shared_per_block


def tile_walk(lshape, rshape, max_shift, ty, tx):
    """Yield, per tile, ``(ky0, kx0, rows, first column, steps)`` as the kernel computes them."""
    (lh, lw), (rh, rw) = lshape, rshape
    ho, wo = output_shape(lshape, rshape, max_shift)
    sy0, sx0 = first_shift(lshape, rshape, max_shift)
    for ty_index in range(-(-ho // ty)):
        for tx_index in range(-(-wo // tx)):
            ky0, kx0 = sy0 + ty_index * ty, sx0 + tx_index * tx
            y_begin, y_end = max(0, -(ky0 + ty - 1)), min(rh, lh - ky0)
            x_begin, x_end = max(0, -(kx0 + tx - 1)), min(rw, lw - kx0)
            c_begin = x_begin >> 3
            steps = ((x_end + 7) >> 3) - c_begin if x_end > x_begin else 0
            yield ky0, kx0, range(y_begin, y_end), 8 * c_begin, steps


@pytest.mark.parametrize("tile", MMA_TILES)
def test_tiles_cover_every_product_and_stay_in_the_padding(rng, tile):
    ty, tx = tile
    pad = tx + 8  # mma_pad<TXB>() = 8 TXB + 8
    for _ in range(60):
        lshape = tuple(int(v) for v in rng.integers(1, 40, 2))
        rshape = tuple(int(v) for v in rng.integers(1, 40, 2))
        max_shift = None if rng.random() < 0.5 else tuple(int(v) for v in rng.integers(0, 30, 2))
        (lh, lw), (rh, rw) = lshape, rshape
        chunks = -(-rw // 8)
        ho, wo = output_shape(lshape, rshape, max_shift)
        sy0, sx0 = first_shift(lshape, rshape, max_shift)
        covered = np.zeros((ho, wo), np.int64)
        for ky0, kx0, rows, x0, steps in tile_walk(lshape, rshape, max_shift, ty, tx):
            cols = range(x0, x0 + 8 * steps)
            assert steps == 0 or x0 + 8 * steps <= 8 * chunks  # right reads: padded rows
            for i in range(ty):
                for n in range(tx):
                    ky, kx = ky0 + i, kx0 + n
                    if ky - sy0 >= ho or kx - sx0 >= wo:
                        continue
                    # every (y, x) with a nonzero product must be walked
                    need = [(y, x) for y in range(max(0, -ky), min(rh, lh - ky))
                            for x in range(max(0, -kx), min(rw, lw - kx))]
                    assert all(y in rows and x in cols for y, x in need), (lshape, rshape, ky, kx)
                    covered[ky - sy0, kx - sx0] += 1
            if steps and len(rows):
                # left reads: row y + ky0 + i, column u = x0 + 8 s + kx0 + 8 j + g + 2 t4 (+ 1)
                u_min = x0 + kx0
                u_max = x0 + 8 * (steps - 1) + kx0 + 8 * (tx // SHIFTS - 1) + 7 + 6 + 1
                assert -pad <= u_min and u_max < lw + pad, (lshape, rshape, tile, kx0)
                assert rows[0] + ky0 >= -(ty - 1) and rows[-1] + ky0 + ty - 1 < lh + ty - 1
        assert (covered == 1).all()  # every output element written exactly once


def test_matrix_stride_spreads_banks():
    for rows in range(1, 50):
        for cols in (8, 16, 24, 40):
            s = matrix_stride(rows, cols)
            assert s >= rows * cols and s % 32 == 8 and s - rows * cols < 32
            banks = {(g * s + 2 * t4) % 32 for g in range(4) for t4 in range(4)}
            assert len(banks) == 16  # lanes g = 0..3 cover all 32 banks with 8-byte reads


def test_shared_memory_and_buffers():
    # 32x32: left (32 + 6) x (32 + 32) x 16 bytes, two buffers of 16 x (1024 + 8) floats
    assert shared_bytes((32, 32), (32, 32), 4, 8) == 16 * 38 * 64 + 2 * MATRICES * 4 * 1032
    assert buffers_for((32, 32), (32, 32), 4, 8, H100_SHARED) == 2
    assert buffers_for((40, 40), (40, 40), 4, 8, H100_SHARED) == 1
    assert buffers_for((64, 64), (64, 64), 4, 8, H100_SHARED) == 0
    assert "shared memory" in unsupported("one_to_many", (64, 64), (64, 64), 4, 8, H100_SHARED)
    assert "many right matrices" in unsupported("one_to_one", (8, 8), (8, 8), 4, 8, H100_SHARED)
    assert "not compiled" in unsupported("one_to_many", (8, 8), (8, 8), 3, 8, H100_SHARED)
    assert unsupported("n_to_m", (16, 16), (16, 16), 2, 16, H100_SHARED) is None


def test_resident_blocks():
    from xcorr_app.correlate._mma import resident_blocks

    assert resident_blocks(63, 50_000, H100_LIMITS) == 2  # 64 registers x 512: half the file
    assert resident_blocks(104, 50_000, H100_LIMITS) == 1
    assert resident_blocks(40, 120 * 1024, H100_LIMITS) == 1  # shared memory binds


def test_grid_plan_one_wave_and_least_work(rng):
    from xcorr_app.correlate._mma import WARPS, grid_plan

    assert grid_plan(128, 250, 1, 132) == (1, 125)  # 1 x 4000 at 32x32: two groups per block
    assert grid_plan(128, 16, 1, 132) == (8, 16)  # 1 x 256: one round of tiles per block
    assert grid_plan(128, 4, 16, 132) == (2, 4)  # n_to_m 16 x 64
    for _ in range(200):
        n_tiles, n_groups = int(rng.integers(1, 600)), int(rng.integers(1, 400))
        n_left, target = int(rng.integers(1, 40)), int(rng.integers(100, 300))
        splits, strides = grid_plan(n_tiles, n_groups, n_left, target)
        assert 1 <= splits <= max(1, -(-n_tiles // WARPS)) and 1 <= strides <= n_groups
        assert splits * strides * n_left <= max(target, n_left)  # one wave where it can be


def snake_tile(k, slot, n_slots):
    """Port of the kernel's ``snake_tile``."""
    return k * n_slots + (n_slots - 1 - slot if k & 1 else slot)


@pytest.mark.parametrize("row_splits", [1, 2, 4, 8])
def test_row_splits_share_each_tile_within_one_block(rng, row_splits):
    """The kernel's warp -> (tile, part) mapping: every tile is summed by ``row_splits`` warps
    of one block, parts 0 .. row_splits - 1; the partial sums of parts 1.. go to distinct slots
    that fill exactly the space ``shared_bytes`` reserves for them."""
    from xcorr_app.correlate._mma import ROW_SPLITS, WARPS

    assert row_splits in ROW_SPLITS
    tile_warps = WARPS // row_splits
    ty, tx = 2, 16  # floats of one slot: 32 lanes x ty x (tx / 8) x 4
    reserved = (shared_bytes((16, 16), (16, 16), ty, tx, row_splits=row_splits) -
                shared_bytes((16, 16), (16, 16), ty, tx)) // (4 * 32 * ty * (tx // 8) * 4)
    for _ in range(40):
        n_tiles, blocks = int(rng.integers(1, 300)), int(rng.integers(1, 40))
        n_slots = blocks * tile_warps
        owners = {}
        for bx in range(blocks):
            partial_slots = set()
            for wy in range(WARPS):
                part, slot = wy % row_splits, bx * tile_warps + wy // row_splits
                if part:  # the kernel's slot: s_partial of the tile, plus part - 1
                    q = (wy // row_splits) * (row_splits - 1) + part - 1
                    assert 0 <= q < reserved and q not in partial_slots
                    partial_slots.add(q)
                for k in range(-(-n_tiles // n_slots)):
                    tile = snake_tile(k, slot, n_slots)
                    if tile < n_tiles:
                        owners.setdefault(tile, []).append((bx, part))
            assert len(partial_slots) == reserved  # the reserved space is used, all of it
        assert sorted(owners) == list(range(n_tiles))
        for parts in owners.values():
            assert len({bx for bx, _ in parts}) == 1
            assert sorted(p for _, p in parts) == list(range(row_splits))


def test_row_splits_shared_memory():
    # the partial sums of 12 of 16 warps (4 splits), tile 2x8: 2 blocks of 4 floats per lane
    base = shared_bytes((16, 16), (16, 16), 2, 8)
    assert shared_bytes((16, 16), (16, 16), 2, 8, row_splits=4) == base + 12 * 32 * 8 * 4
    assert shared_bytes((16, 16), (16, 16), 4, 32, row_splits=2) == base - (
        shared_bytes((16, 16), (16, 16), 2, 8) - shared_bytes((16, 16), (16, 16), 4, 32)) + \
        8 * 32 * 64 * 4
    assert shared_bytes((16, 16), (16, 16), 2, 8, row_splits=1) == base
    assert "row_splits=3" in unsupported("one_to_many", (8, 8), (8, 8), 2, 8, H100_SHARED, 3)
