// Separable correlation of float32 frames in one pass over memory: the vertical taps, then the
// horizontal ones (xcorr_app/filters/_api.py _separable's order: each
// scipy.ndimage.correlate1d), through shared memory.  Ours, for the preparation's gaussian
// prefilter: the two 1-D passes of the reuse kernels read and wrote every frame twice, the
// horizontal one with column reuse by shuffles.
//
// Block (32, 8): SEP_TILES tiles of 64 x 64 outputs of one frame, one below the other (grid:
// x tiles, groups of SEP_TILES y tiles, frames).  A tile's input rows y0 - cy .. y0 + TILE_H -
// 1 + (F - 1 - cy) and columns x0 - cx .. x0 + TILE_W - 1 + (F - 1 - cx), each mapped by the
// boundary mode (constant: cval), are staged in shared memory (a warp a row) by asynchronous
// copies, the next tile's while this one is filtered (two staging buffers); each column of
// them is filtered vertically (float32 FMAs, taps in order; a lane a column, the taps' window
// slid over 8 rows in registers) into a third array, then each row horizontally (a thread 8
// consecutive outputs, likewise) back into the staging buffer, stored a warp a row.  A column
// outside the frame takes the vertical result of its mapped column (constant: cval), as the
// second 1-D pass would read the first's output.  F: the taps of each axis (odd, at most 11;
// the same count both ways).  With has_sub, sub[frame] is subtracted from every
// output of the frame as it is stored (float32: the numbers of a subtraction after the filter).
// Dynamic shared memory: xcorr_app/filters/_separable.py shared_bytes(F).
// (A tile a block, staged by plain loads and then filtered, waited on its loads: over half of
// its cycles stalled on them.)
#include "async_copy.cuh"
#include "boundary.cuh"

#define SEP_TILE_W 64
#define SEP_TILE_H 64
#define SEP_THREADS 256
#define SEP_TILES 4

template <int F>
__global__ void __launch_bounds__(SEP_THREADS) separable_correlate(
        const float* __restrict__ in, float* __restrict__ out, const float* __restrict__ taps,
        int h, int w, int mode, float cval, const float* __restrict__ sub, int has_sub) {
    using namespace xcorr;
    constexpr int R = F / 2;  // origin 0: cy = cx = F / 2
    constexpr int SW = SEP_TILE_W + F - 1, SH = SEP_TILE_H + F - 1;
    constexpr int WARPS = SEP_THREADS / 32, SEG = 8;  // outputs a thread slides over
    constexpr int COLS = (SW + 31) / 32;  // staged columns a lane
    extern __shared__ float sep_smem[];
    // two staging buffers [SH][SW + 1], then the vertical pass's [SEP_TILE_H][SW + 1]
    typedef float Row[SW + 1];
    Row* s_stage = reinterpret_cast<Row*>(sep_smem);
    Row* s_v = s_stage + 2 * SH;
    __shared__ float s_taps[2 * F];
    const int lane = threadIdx.x, warp = threadIdx.y, t = warp * 32 + lane;
    const int x0 = blockIdx.x * SEP_TILE_W;
    const int tiles = (h + SEP_TILE_H - 1) / SEP_TILE_H;
    const int first = blockIdx.y * SEP_TILES;
    const int last = min(tiles, first + SEP_TILES);
    const size_t plane = (size_t)h * w;
    const float* f = in + blockIdx.z * plane;
    float* o = out + blockIdx.z * plane;
    const float off = has_sub ? sub[blockIdx.z] : 0.0f;  // subtracted from the frame's outputs
    if (t < 2 * F) s_taps[t] = taps[t];
    int cols[COLS];  // the lane's staged columns, mapped (-1: outside, constant mode)
#pragma unroll
    for (int q = 0; q < COLS; ++q) cols[q] = boundary_index(x0 - R + lane + 32 * q, w, mode);
    // the staged input of tile `tile` into buffer s (a warp a row), one commit group
    auto stage = [&](Row* s, int tile) {
        const int y0 = tile * SEP_TILE_H;
        for (int r = warp; r < SH; r += WARPS) {
            const int ry = boundary_index(y0 - R + r, h, mode);
            const float* row = f + (size_t)(ry < 0 ? 0 : ry) * w;
#pragma unroll
            for (int q = 0; q < COLS; ++q) {
                const int c = lane + 32 * q;
                if (c >= SW) break;
                if (ry < 0 || cols[q] < 0) s[r][c] = cval;
                else cp_async4(&s[r][c], row + cols[q]);
            }
        }
        cp_async_commit();
    };
    if (first < last) stage(s_stage, first);
    for (int tile = first; tile < last; ++tile) {
        Row* s_in = s_stage + ((tile - first) & 1) * SH;
        if (tile + 1 < last) {  // the next tile's copies in flight while this one is filtered
            stage(s_stage + ((tile + 1 - first) & 1) * SH, tile + 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int y0 = tile * SEP_TILE_H;
        // vertical: a lane a staged column, a warp SEG rows, the taps' window slid down the rows
#pragma unroll
        for (int q = 0; q < COLS; ++q) {
            const int c = lane + 32 * q;
            if (c >= SW) break;
            const bool outside = mode == MODE_CONSTANT && cols[q] < 0;  // cval in the 2nd pass
            for (int r0 = warp * SEG; r0 < SEP_TILE_H; r0 += WARPS * SEG) {
                float v[SEG + F - 1];
#pragma unroll
                for (int k = 0; k < SEG + F - 1; ++k) v[k] = s_in[r0 + k][c];
#pragma unroll
                for (int i = 0; i < SEG; ++i) {
                    float acc = 0.0f;
#pragma unroll
                    for (int k = 0; k < F; ++k) acc = fmaf(s_taps[k], v[i + k], acc);
                    s_v[r0 + i][c] = outside ? cval : acc;
                }
            }
        }
        __syncthreads();
        // horizontal: a thread SEG consecutive outputs of a row, the window slid along it (lanes
        // over rows: no bank conflicts), into the staging array, then stored a warp a row
        constexpr int SEGS = SEP_TILE_W / SEG;
        for (int task = t; task < SEP_TILE_H * SEGS; task += SEP_THREADS) {
            const int r = task % SEP_TILE_H, c0 = (task / SEP_TILE_H) * SEG;
            float v[SEG + F - 1];
#pragma unroll
            for (int k = 0; k < SEG + F - 1; ++k) v[k] = s_v[r][c0 + k];
#pragma unroll
            for (int i = 0; i < SEG; ++i) {
                float acc = 0.0f;
#pragma unroll
                for (int k = 0; k < F; ++k) acc = fmaf(s_taps[F + k], v[i + k], acc);
                s_in[r][c0 + i] = acc;  // (s_in is read no more: the vertical pass is done)
            }
        }
        __syncthreads();
        for (int r = warp; r < SEP_TILE_H && y0 + r < h; r += WARPS) {
            float* dst = o + (size_t)(y0 + r) * w + x0;
#pragma unroll
            for (int q = 0; q < SEP_TILE_W / 32; ++q) {
                const int c = lane + 32 * q;
                if (x0 + c < w) dst[c] = has_sub ? s_in[r][c] - off : s_in[r][c];
            }
        }
        __syncthreads();  // (this buffer is staged again, and s_v written, by the next tiles)
    }
}
