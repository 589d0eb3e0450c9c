// Separable correlation of float32 frames in one pass over memory: the vertical taps, then the
// horizontal ones (filters/_api.py _separable's order: each scipy.ndimage.correlate1d), through
// shared memory.  Ours, for the preparation's gaussian prefilter: the two 1-D passes of the
// reuse kernels read and wrote every frame twice (9.4 ms for 4096 frames of 512x512 with
// 9 taps, H200 2026-11-24), the horizontal one with column reuse by shuffles.
//
// Block (32, 8): one tile of 64 x 64 outputs of one frame (grid: x tiles, y tiles,
// frames).  The input rows y0 - cy .. y0 + TILE_H - 1 + (F - 1 - cy) and columns x0 - cx ..
// x0 + TILE_W - 1 + (F - 1 - cx), each mapped by the boundary mode (constant: cval), are staged
// in shared memory (a warp a row); each column of them is filtered vertically (float32 FMAs,
// taps in order; a lane a column, the taps' window slid over 8 rows in registers) into a
// second array, then each row horizontally (a thread 8 consecutive outputs, likewise) back
// into the first, stored a warp a row.  A column outside the frame takes
// the vertical result of its mapped column (constant: cval), as the second 1-D pass would read
// the first's output.  F: the taps of each axis (odd, at most 11; the same count both ways).
#include "boundary.cuh"

#define SEP_TILE_W 64
#define SEP_TILE_H 64
#define SEP_THREADS 256

template <int F>
__global__ void __launch_bounds__(SEP_THREADS) separable_correlate(
        const float* __restrict__ in, float* __restrict__ out, const float* __restrict__ taps,
        int h, int w, int mode, float cval) {
    using namespace xcorr;
    constexpr int R = F / 2;  // origin 0: cy = cx = F / 2
    constexpr int SW = SEP_TILE_W + F - 1, SH = SEP_TILE_H + F - 1;
    constexpr int WARPS = SEP_THREADS / 32, SEG = 8;  // outputs a thread slides over
    constexpr int COLS = (SW + 31) / 32;  // staged columns a lane
    __shared__ float s_in[SH][SW + 1];
    __shared__ float s_v[SEP_TILE_H][SW + 1];
    __shared__ float s_taps[2 * F];
    const int lane = threadIdx.x, warp = threadIdx.y, t = warp * 32 + lane;
    const int x0 = blockIdx.x * SEP_TILE_W, y0 = blockIdx.y * SEP_TILE_H;
    const size_t plane = (size_t)h * w;
    const float* f = in + blockIdx.z * plane;
    if (t < 2 * F) s_taps[t] = taps[t];
    int cols[COLS];  // the lane's staged columns, mapped (-1: outside, constant mode)
#pragma unroll
    for (int q = 0; q < COLS; ++q) cols[q] = boundary_index(x0 - R + lane + 32 * q, w, mode);
#pragma unroll  // (the rows' loads in flight together)
    for (int r = warp; r < SH; r += WARPS) {  // the staged input: a warp a row
        const int ry = boundary_index(y0 - R + r, h, mode);
        const float* row = f + (size_t)(ry < 0 ? 0 : ry) * w;
#pragma unroll
        for (int q = 0; q < COLS; ++q) {
            const int c = lane + 32 * q;
            if (c < SW) s_in[r][c] = (ry < 0 || cols[q] < 0) ? cval : row[cols[q]];
        }
    }
    __syncthreads();
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
    float* o = out + blockIdx.z * plane;
    for (int r = warp; r < SEP_TILE_H && y0 + r < h; r += WARPS) {
        float* dst = o + (size_t)(y0 + r) * w + x0;
#pragma unroll
        for (int q = 0; q < SEP_TILE_W / 32; ++q) {
            const int c = lane + 32 * q;
            if (x0 + c < w) dst[c] = s_in[r][c];
        }
    }
}
