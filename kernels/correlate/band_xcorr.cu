// "Warp per result" cross-correlation for small bounded searches over many pairs: our addition
// beyond the thesis, for the patch pass of piecewise-rigid registration (16 template patches of
// ~145x145 against their windows in 256 frames, every shift within +-4 px: 4096 results of 81
// shifts, each a sum over the whole patch).
//
// out[z][iy][ix] = sum_{y, x} left[left_of(z)][y + ky0 + iy][x + kx0 + ix] * right[right_of(z)][y][x]
// (zero outside either matrix; the layout of every kernel of the package).
//
// One warp sums one result, every shift of it (KY x KX <= 81 sums in registers), so nothing is
// added across warps: no atomics, no zeroed output, one store per shift.  Lane l owns C
// consecutive right columns x0 = 32 C g + C l ... (+ C - 1) of each column group g of 32 C
// columns.  The warp walks the left rows u; the right rows that meet left row u at one of the
// y-shifts, u - ky0 - KY + 1 .. u - ky0, stay in KY rows of C registers, moved down one row a
// step, so each left row costs one new right row (C loads), C + KX - 1 left loads and
// KY * KX * C multiply-adds: 405 FMAs for 18 loads and 40 moves at +-4 px and C = 5, where the
// column-strip kernel does 18 FMAs for 5 loads.  (A ring whose rotation is resolved at compile
// time, the row loop unrolled by KY, saves the moves, but ptxas then hoists the loads of later
// rows and needs 255 registers and spills; with the moves: 168 registers, three blocks an SM.)  The sums are
// reduced over the lanes at the end (xor-shuffles).  Left matrices are read through L1 (the
// patches of one left are read by the block's other warps and by the blocks beside it).
#include "xcorr_forms.cuh"

template <int FORM, int KY, int KX, int C>
__global__ void __launch_bounds__(128, 3)
band_xcorr(const float* __restrict__ left, const float* __restrict__ right,
           float* __restrict__ out, int left_h, int left_w, int right_h, int right_w, int out_h,
           int out_w, int shift_y0, int shift_x0, int m, int n_results) {
    using namespace xcorr;
    constexpr unsigned FULL = 0xffffffffu;
    constexpr int NL = C + KX - 1;  // left values of a lane's row segment
    const int lane = threadIdx.x;
    const int z = blockIdx.x * blockDim.y + threadIdx.y;
    if (z >= n_results) return;  // uniform across the warp
    const float* lp = left + (size_t)left_of<FORM>(z, m) * left_h * left_w;
    const float* rp = right + (size_t)right_of<FORM>(z, m) * right_h * right_w;
    // left rows that meet a right row at one of the y-shifts
    const int u_begin = max(0, shift_y0);
    const int u_end = min(left_h, right_h + shift_y0 + KY - 1);
    float acc[KY][KX] = {};

    for (int c0 = 0; c0 < right_w; c0 += 32 * C) {  // column groups (uniform)
        const int x0 = c0 + lane * C;  // this lane's first right column
        unsigned r_ok = 0, l_ok = 0;  // bit j: column j of the lane's segment lies inside
#pragma unroll
        for (int j = 0; j < C; ++j) r_ok |= (x0 + j < right_w ? 1u : 0u) << j;
#pragma unroll
        for (int j = 0; j < NL; ++j) {
            const int lx = x0 + shift_x0 + j;
            l_ok |= (lx >= 0 && lx < left_w ? 1u : 0u) << j;
        }
        float ring[KY][C];
        auto load_right = [&](float* dst, int y) {
            const bool row_ok = y >= 0 && y < right_h;  // uniform
            const float* p = rp + (size_t)y * right_w + x0;
#pragma unroll
            for (int j = 0; j < C; ++j) dst[j] = (row_ok && (r_ok >> j & 1u)) ? __ldg(p + j) : 0.0f;
        };
        // ring[i] holds right row u - ky0 - i; shifted by one slot a step
#pragma unroll
        for (int i = 1; i < KY; ++i) load_right(ring[i], u_begin - shift_y0 - i);
#pragma unroll 1
        for (int u = u_begin; u < u_end; ++u) {
            load_right(ring[0], u - shift_y0);
            float lv[NL];
            const float* p = lp + (size_t)u * left_w + x0 + shift_x0;
#pragma unroll
            for (int j = 0; j < NL; ++j) lv[j] = (l_ok >> j & 1u) ? __ldg(p + j) : 0.0f;
#pragma unroll
            for (int i = 0; i < KY; ++i)
#pragma unroll
                for (int j = 0; j < C; ++j)
#pragma unroll
                    for (int k = 0; k < KX; ++k)
                        acc[i][k] = fmaf(lv[j + k], ring[i][j], acc[i][k]);
#pragma unroll
            for (int i = KY - 1; i > 0; --i)
#pragma unroll
                for (int j = 0; j < C; ++j) ring[i][j] = ring[i - 1][j];
        }
    }
    // Reduce over the lanes; lane (a mod 32) stores sum a.
    float* op = out + (size_t)z * out_h * out_w;
#pragma unroll
    for (int i = 0; i < KY; ++i)
#pragma unroll
        for (int k = 0; k < KX; ++k) {
            float v = acc[i][k];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
            const int a = i * KX + k;
            if (lane == (a & 31) && i < out_h && k < out_w) op[i * out_w + k] = v;
        }
}
