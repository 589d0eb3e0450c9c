// Tensor-core cross-correlation in 3xTF32 ("mma"): our addition beyond the thesis, for many
// small right matrices per left (one_to_many, n_to_mn, n_to_m).
//
// out[z][ky - shift_y0][kx - shift_x0] = sum_{y,x} right[z][y][x] * left[y + ky][x + kx]
//
// For one right row y, one y-shift ky and 8 consecutive x-shifts kx0 + n, the sums over 8
// consecutive right columns x0 + k of 16 right matrices i are a matrix product
//
//     D[i][n] += sum_k A[i][k] * B[k][n],   A[i][k] = right[i][y][x0 + k]
//                                           B[k][n] = left[y + ky][x0 + kx0 + k + n]  (Toeplitz)
//
// of exactly the shape of one mma.sync.m16n8k8 TF32 instruction (whose k we order so that lane
// (g, t4) holds columns 2 t4 and 2 t4 + 1).  A warp owns TY y-shifts x TXB blocks of 8 x-shifts
// of 16 right matrices (a group) and walks the right rows and their column chunks of 8; each
// step loads one A fragment (two float2 of right values per lane) and feeds it to TY x TXB
// products, each with its own B fragment: lane (g, t4) needs the left values at
// u = x0 + kx0 + 8 b + g + 2 t4 and u + 1, which the block stages side by side for every u, so a
// B fragment is one 16-byte shared load.
//
// Accuracy: TF32 keeps 10 mantissa bits, so each operand v is split into hi = tf32(v) and
// lo = v - hi, and a product is hi*hi + hi*lo + lo*hi ("3xTF32", CUTLASS's accurate mode): an
// error of about 2^-21 of the product, against the 1e-5 the tests ask of the sum.  The tensor
// cores add a product's terms in FP32 without the round-to-nearest of FFMA, so each right row's
// hi * hi sums are kept apart and added to the total with FADD; without that, positive inputs
// (images) drift by up to 4e-5 on 64x64 matrices.
//
// Shared memory: the left matrix once per block, padded with zeros (TY - 1 rows above and
// below, mma_pad columns on each side), as uint4 (hi(u), hi(u + 1), lo(u), lo(u + 1)) per
// column u; and two buffers of 16 right matrices, the group being summed and the next one
// arriving by cp.async (or, for right matrices too large for two, one buffer), rows padded
// with zeros to whole chunks of 8 and matrices spaced so that the 8 matrices a load touches
// start in different banks (mma_matrix_stride).
#include "xcorr_forms.cuh"
#include "int_math.cuh"
#include "async_copy.cuh"
#include "tf32_mma.cuh"

#ifndef XCORR_MMA_ROW_SUMS  // development probes turn it off
#define XCORR_MMA_ROW_SUMS 1
#endif

namespace xcorr {

constexpr int MMA_WARPS = 16;
constexpr int MMA_MATRICES = 16;  // M of m16n8k8: right matrices of a group
constexpr int MMA_SHIFTS = 8;     // N of m16n8k8: x-shifts of a block

// Zero columns on each side of the staged left matrix: a tile's first step may start up to
// 8 TXB + 6 columns left of column 0, and its last reaches 8 TXB + 5 past the last column.
template <int TXB>
__host__ __device__ constexpr int mma_pad() { return MMA_SHIFTS * TXB + 8; }

// Floats from one staged right matrix to the next: its rows of `cols` (a multiple of 8), then
// up to 31 more, so that the stride is 8 mod 32 and lanes g = 0 .. 3 read different banks.
__host__ __device__ constexpr int mma_matrix_stride(int rows, int cols) {
    return rows * cols + ((8 - rows * cols) % 32 + 32) % 32;
}

// acc += x, element by element
template <int TY, int TXB>
__device__ __forceinline__ void add_sums(float (&acc)[TY][TXB][4], const float (&x)[TY][TXB][4]) {
#pragma unroll
    for (int i = 0; i < TY; ++i)
#pragma unroll
        for (int j = 0; j < TXB; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += x[i][j][e];
}

// Tile of warp slot `slot` (of n_slots) in round k: a snake order, so that each warp gets a
// mix of the long middle rows of shifts and the short edge rows.
__device__ __forceinline__ int snake_tile(int k, int slot, int n_slots) {
    return k * n_slots + ((k & 1) ? n_slots - 1 - slot : slot);
}

// The 16 right matrices of group grp (zeros past m and past each row) into a staging buffer of
// mma_matrix_stride(right_h, cols) floats per matrix, by cp.async (one commit group): 16 bytes
// at a time where the rows need no padding (right_w a multiple of 8: whole matrices are then
// contiguous and 16-byte aligned on both sides), else 4.
__device__ __forceinline__ void mma_stage_rights(float* dst, const float* rp, int r0, int m,
                                                 int right_h, int right_w, int cols,
                                                 int stride, int tid, int n_threads) {
    const int per_matrix = right_h * cols;
    if (right_w == cols) {
        const int quads = per_matrix >> 2;
        for (int k = tid; k < MMA_MATRICES * quads; k += n_threads) {
            int q;
            const int n = div_floor(k, quads, q);
            const bool ok = r0 + n < m;
            cp_async16_zfill(dst + n * stride + 4 * q,
                             ok ? rp + (size_t)n * per_matrix + 4 * q : rp, ok);
        }
        cp_async_commit();
        return;
    }
    for (int k = tid; k < MMA_MATRICES * per_matrix; k += n_threads) {
        int rem, x;
        const int n = div_floor(k, per_matrix, rem);
        const int y = div_floor(rem, cols, x);
        const bool ok = r0 + n < m && x < right_w;
        cp_async4_zfill(dst + n * stride + rem,
                        ok ? rp + (size_t)n * right_h * right_w + (size_t)y * right_w + x : rp,
                        ok);
    }
    cp_async_commit();
}

}  // namespace xcorr

template <int FORM, int TY, int TXB>
__global__ void __launch_bounds__(xcorr::MMA_WARPS * 32, 1)
mma_xcorr(const float* __restrict__ left, const float* __restrict__ right,
          float* __restrict__ out, int left_h, int left_w, int right_h, int right_w, int out_h,
          int out_w, int shift_y0, int shift_x0, int m, int n_groups, int tiles_x, int n_tiles,
          int chunks, int buffers, int row_splits) {
    using namespace xcorr;
    constexpr int PAD = mma_pad<TXB>();
    extern __shared__ uint4 mma_smem[];
    const int lane = threadIdx.x, g = lane >> 2, t4 = lane & 3;
    const int tid = threadIdx.y * 32 + lane, n_threads = MMA_WARPS * 32;
    const int hp = left_h + 2 * (TY - 1), wp = left_w + 2 * PAD;
    const int cols = 8 * chunks, stride = mma_matrix_stride(right_h, cols);
    uint4* s_left = mma_smem;
    float* const s_rights = reinterpret_cast<float*>(mma_smem + hp * wp);  // `buffers` of them
    const int buffer_floats = MMA_MATRICES * stride;
    const int li = blockIdx.z;
    const size_t right_size = (size_t)right_h * right_w, out_size = (size_t)out_h * out_w;
    // right matrices of group grp and their first result
    auto group_z0 = [&](int grp) {
        return (size_t)(FORM == ONE_TO_MANY ? 0 : li) * m + grp * MMA_MATRICES;
    };
    auto group_rights = [&](int grp) {
        return right + (FORM == N_TO_MN ? group_z0(grp) : (size_t)grp * MMA_MATRICES) * right_size;
    };
    if (blockIdx.y < n_groups)
        mma_stage_rights(s_rights, group_rights(blockIdx.y), blockIdx.y * MMA_MATRICES, m,
                         right_h, right_w, cols, stride, tid, n_threads);
    const float* lp = left + (size_t)li * left_h * left_w;  // li = 0 with one left
    for (int k = tid; k < hp * wp; k += n_threads) {
        int c;
        const int row = div_floor(k, wp, c) - (TY - 1), col = c - PAD;
        const bool row_ok = row >= 0 && row < left_h;
        const float v0 = row_ok && col >= 0 && col < left_w ? lp[(size_t)row * left_w + col] : 0.0f;
        const float v1 = row_ok && col + 1 >= 0 && col + 1 < left_w
                             ? lp[(size_t)row * left_w + col + 1] : 0.0f;
        const uint2 p0 = split_tf32(v0), p1 = split_tf32(v1);
        s_left[k] = make_uint4(p0.x, p1.x, p0.y, p1.y);
    }
    // row_splits warps share a tile: warp part p sums the right rows y_begin + p, + row_splits,
    // ...; parts 1, 2, ... leave their sums in shared memory (after the right-matrix buffers,
    // [MMA_WARPS - tile_warps][SUMS][32] floats) for part 0 to add in part order and store.
    const int tile_warps = MMA_WARPS / row_splits, part = threadIdx.y % row_splits;
    const int slot = blockIdx.x * tile_warps + threadIdx.y / row_splits;
    const int n_slots = gridDim.x * tile_warps;
    constexpr int SUMS = TY * TXB * 4;
    float* const s_partial = s_rights + buffers * buffer_floats +  // this tile's parts 1, 2, ...
                             (threadIdx.y / row_splits) * (row_splits - 1) * SUMS * 32 + lane;

    int buf = 0;
    for (int grp = blockIdx.y; grp < n_groups; grp += gridDim.y) {
        const int r0 = grp * MMA_MATRICES;
        const size_t z0 = group_z0(grp);
        __syncthreads();  // every warp is done with the buffer the next copies go to
        if (buffers == 2) {  // the next group into the other buffer while this one is summed
            const int next = grp + gridDim.y;
            if (next < n_groups)
                mma_stage_rights(s_rights + (buf ^ 1) * buffer_floats, group_rights(next),
                                 next * MMA_MATRICES, m, right_h, right_w, cols, stride, tid,
                                 n_threads);
            else
                cp_async_commit();  // an empty group keeps the count of the wait below
            cp_async_wait<1>();  // this group's copies (all but the newest group) have landed
        } else {  // one buffer (large right matrices): this group, now
            if (grp != blockIdx.y)
                mma_stage_rights(s_rights, group_rights(grp), r0, m, right_h, right_w, cols,
                                 stride, tid, n_threads);
            cp_async_wait<0>();
        }
        __syncthreads();
        const float* sr = s_rights + buf * buffer_floats + g * stride + 2 * t4;

        // The round count is the same for every warp: all of them meet the barriers below.
        for (int round = 0; round * n_slots < n_tiles; ++round) {
            const int tile = snake_tile(round, slot, n_slots);
            const bool active = tile < n_tiles;  // the same for the parts of a tile
            int tx_index;
            const int ty_index = active ? div_floor(tile, tiles_x, tx_index) : 0;
            if (!active) tx_index = 0;
            const int ky0 = shift_y0 + ty_index * TY;
            const int kx0 = shift_x0 + tx_index * MMA_SHIFTS * TXB;
            // right rows and columns that meet the left at one of the tile's shifts
            const int y_begin = max(0, -(ky0 + TY - 1));
            const int y_end = active ? min(right_h, left_h - ky0) : 0;
            const int x_begin = max(0, -(kx0 + MMA_SHIFTS * TXB - 1));
            const int x_end = min(right_w, left_w - kx0);
            const int c_begin = x_begin >> 3;
            const int n_steps = x_end > x_begin ? ((x_end + 7) >> 3) - c_begin : 0;
            float acc[TY][TXB][4] = {};
            // hi * lo + lo * hi of every row: at most 2^-11 of the products, so the truncating
            // adds of their own sums cost nothing measurable and they need no per-row sums (a
            // second chain of dependent products, added to the total at the end)
            float small[TY][TXB][4] = {};
            for (int y = y_begin + part; y < y_end && n_steps > 0; y += row_splits) {
#if XCORR_MMA_ROW_SUMS
                float part_sum[TY][TXB][4] = {};   // the hi * hi products of this row
#else
                float (&part_sum)[TY][TXB][4] = acc;
#endif
                const float* rrow = sr + y * cols + 8 * c_begin;
                // lrow[i * wp + 8 (s + b)]: the B fragment of step s, block b, y-shift ky0 + i
                const uint4* lrow = s_left + (y + ky0 + TY - 1) * wp + PAD + kx0 + 8 * c_begin +
                                    g + 2 * t4;
#pragma unroll 2
                for (int s = 0; s < n_steps; ++s) {
                    const float2 lo8 = *reinterpret_cast<const float2*>(rrow + 8 * s);
                    const float2 hi8 =
                        *reinterpret_cast<const float2*>(rrow + 8 * s + 8 * stride);
                    const float a[4] = {lo8.x, hi8.x, lo8.y, hi8.y};  // (g, t4) ... (g + 8, t4 + 4)
                    unsigned a_hi[4], a_lo[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const uint2 p = split_tf32(a[e]);
                        a_hi[e] = p.x, a_lo[e] = p.y;
                    }
                    uint4 b[TY][TXB];
#pragma unroll
                    for (int i = 0; i < TY; ++i)
#pragma unroll
                        for (int j = 0; j < TXB; ++j) b[i][j] = lrow[i * wp + 8 * (s + j)];
                    // the three terms, small first, each over all products
#pragma unroll
                    for (int i = 0; i < TY; ++i)
#pragma unroll
                        for (int j = 0; j < TXB; ++j)
                            mma_tf32(small[i][j], a_lo, b[i][j].x, b[i][j].y);
#pragma unroll
                    for (int i = 0; i < TY; ++i)
#pragma unroll
                        for (int j = 0; j < TXB; ++j)
                            mma_tf32(small[i][j], a_hi, b[i][j].z, b[i][j].w);
#pragma unroll
                    for (int i = 0; i < TY; ++i)
#pragma unroll
                        for (int j = 0; j < TXB; ++j)
                            mma_tf32(part_sum[i][j], a_hi, b[i][j].x, b[i][j].y);
                }
#if XCORR_MMA_ROW_SUMS
                add_sums(acc, part_sum);
#endif
            }
            add_sums(acc, small);
            if (row_splits > 1) {  // the same for the whole block
                float (&sums)[SUMS] = reinterpret_cast<float (&)[SUMS]>(acc);
                if (active && part > 0) {
#pragma unroll
                    for (int k = 0; k < SUMS; ++k)
                        s_partial[((part - 1) * SUMS + k) * 32] = sums[k];
                }
                __syncthreads();
                if (active && part == 0) {
                    for (int q = 0; q < row_splits - 1; ++q)  // parts 1, 2, ... in turn
#pragma unroll
                        for (int k = 0; k < SUMS; ++k) sums[k] += s_partial[(q * SUMS + k) * 32];
                }
                __syncthreads();  // read before the next round's parts write
            }
            if (!active || part != 0) continue;
            // D[i][n]: lane (g, t4) holds matrices g and g + 8 at x-shifts 2 t4 and 2 t4 + 1
#pragma unroll
            for (int i = 0; i < TY; ++i) {
                const int iy = ky0 + i - shift_y0;
                if (iy >= out_h) break;
#pragma unroll
                for (int j = 0; j < TXB; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int n = g + 8 * (e >> 1);
                        const int ix = kx0 + MMA_SHIFTS * j + 2 * t4 + (e & 1) - shift_x0;
                        if (r0 + n < m && ix < out_w)
                            out[(z0 + n) * out_size + (size_t)iy * out_w + ix] = acc[i][j][e];
                    }
            }
        }
        buf ^= buffers - 1;
    }
    cp_async_wait<0>();  // nothing may be in flight into shared memory when the block exits
}
