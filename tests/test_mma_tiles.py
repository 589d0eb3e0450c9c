"""The tensor-core kernel's index arithmetic, ported to Python (CPU): every product a tile must
sum lies in the rows and column chunks it walks, and every shared-memory read of the staged
left matrix stays inside its zero padding.  The GPU tests check the kernel itself against the
float64 reference (tests/test_gpu_mma.py)."""

import numpy as np
import pytest

from xcorr_app.gpu_mma import (MATRICES, MMA_TILES, SHIFTS, buffers_for, matrix_stride,
                               shared_bytes, unsupported)
from xcorr_app.pointwise_plan import H100_LIMITS
from xcorr_app.shifts import first_shift, output_shape

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
    from xcorr_app.gpu_mma import resident_blocks

    assert resident_blocks(63, 50_000, H100_LIMITS) == 2  # 64 registers x 512: half the file
    assert resident_blocks(104, 50_000, H100_LIMITS) == 1
    assert resident_blocks(40, 120 * 1024, H100_LIMITS) == 1  # shared memory binds


def test_grid_plan_one_wave_and_least_work(rng):
    from xcorr_app.gpu_mma import WARPS, grid_plan

    assert grid_plan(128, 250, 1, 132) == (1, 125)  # 1 x 4000 at 32x32: two groups per block
    assert grid_plan(128, 16, 1, 132) == (8, 16)  # 1 x 256: one round of tiles per block
    assert grid_plan(128, 4, 16, 132) == (2, 4)  # n_to_m 16 x 64
    for _ in range(200):
        n_tiles, n_groups = int(rng.integers(1, 600)), int(rng.integers(1, 400))
        n_left, target = int(rng.integers(1, 40)), int(rng.integers(100, 300))
        splits, strides = grid_plan(n_tiles, n_groups, n_left, target)
        assert 1 <= splits <= max(1, -(-n_tiles // WARPS)) and 1 <= strides <= n_groups
        assert splits * strides * n_left <= max(target, n_left)  # one wave where it can be
