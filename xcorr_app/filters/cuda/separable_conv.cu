// Separable correlation of float32 frames in one pass over memory: the vertical taps, then the
// horizontal ones (filters/_api.py _separable's order: each scipy.ndimage.correlate1d), through
// shared memory.  Ours, for the preparation's gaussian prefilter: the two 1-D passes of the
// reuse kernels read and wrote every frame twice (9.4 ms for 4096 frames of 512x512 with
// 9 taps, H200 2026-11-24), the horizontal one with column reuse by shuffles.
//
// Block (32, 8): one tile of 64 x 64 outputs of one frame (grid: x tiles, y tiles,
// frames).  The input rows y0 - cy .. y0 + TILE_H - 1 + (F - 1 - cy) and columns x0 - cx ..
// x0 + TILE_W - 1 + (F - 1 - cx), each mapped by the boundary mode (constant: cval), are staged
// in shared memory; each column of them is filtered vertically (float32 FMAs, taps in order)
// into a second array, each output row horizontally from it.  A column outside the frame takes
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
    __shared__ float s_in[SH][SW + 1];
    __shared__ float s_v[SEP_TILE_H][SW + 1];
    __shared__ float s_taps[2 * F];
    const int t = threadIdx.y * 32 + threadIdx.x;
    const int x0 = blockIdx.x * SEP_TILE_W, y0 = blockIdx.y * SEP_TILE_H;
    const size_t plane = (size_t)h * w;
    const float* f = in + blockIdx.z * plane;
    if (t < 2 * F) s_taps[t] = taps[t];
    for (int i = t; i < SH * SW; i += SEP_THREADS) {  // the staged input, mapped
        const int r = i / SW, c = i - r * SW;
        const int ry = boundary_index(y0 - R + r, h, mode);
        const int cx = boundary_index(x0 - R + c, w, mode);
        s_in[r][c] = (ry < 0 || cx < 0) ? cval : f[(size_t)ry * w + cx];
    }
    __syncthreads();
    for (int i = t; i < SEP_TILE_H * SW; i += SEP_THREADS) {  // vertical
        const int r = i / SW, c = i - r * SW;
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < F; ++k) acc = fmaf(s_taps[k], s_in[r + k][c], acc);
        // a column outside the frame: constant mode reads cval there in the second pass
        s_v[r][c] = (mode == MODE_CONSTANT && boundary_index(x0 - R + c, w, mode) < 0) ? cval
                                                                                       : acc;
    }
    __syncthreads();
    float* o = out + blockIdx.z * plane;
    for (int i = t; i < SEP_TILE_H * SEP_TILE_W; i += SEP_THREADS) {  // horizontal
        const int r = i / SEP_TILE_W, c = i - r * SEP_TILE_W;
        const int y = y0 + r, x = x0 + c;
        if (y >= h || x >= w) continue;
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < F; ++k) acc = fmaf(s_taps[F + k], s_v[r][c + k], acc);
        o[(size_t)y * w + x] = acc;
    }
}
