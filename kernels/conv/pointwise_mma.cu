// Pointwise (1x1, stride 1, unpadded) convolution on the tensor cores in 3xTF32: the GEMM
// out[n][m][p] = sum_k filt[m][k] * x[n][k][p] (M filters, K channels, P = H * W pixels) with
// columns q = n * P + p, as im2win_conv.cu's direct layout, but each k8 step of a warp's tile is
// mma.sync.m16n8k8 products instead of FFMAs.
//
// Accuracy (as kernels/correlate/mma_xcorr.cu): each operand v is split into hi = tf32(v) and
// lo = v - hi, a product is hi*hi + hi*lo + lo*hi (about 2^-21 of it); the tensor cores add
// without FFMA's rounding, so a stage's BLOCK_K products are summed in a register tile of their
// own and added to the total with FADD (the total then rounds as an FP32 sum of stage sums).
//
// Tiling: a block computes BLOCK_M x BLOCK_N outputs with WARPS_M x WARPS_N warps, each a
// (BLOCK_M / WARPS_M) x (BLOCK_N / WARPS_N) tile of m16n8 fragments.  K is staged BLOCK_K = 16
// at a time through STAGES shared-memory buffers filled by cp.async (4-byte copies, zero past
// the problem), STAGES - 1 ahead.  Both are stored k-major, rows padded so that lane (g, t4) of
// a fragment load reads bank 8 t4 + g (no conflict): B with BLOCK_N + 8 floats a row, A with
// BLOCK_M + POINTWISE_MMA_A_PAD (8; 4, which trades the loads' conflicts for fewer in A's
// 4-byte fills, measured the same on MobileNetV2's layers).  Split-K as
// im2win_conv: serial, in order (split_k.cuh).

#include "async_copy.cuh"
#include "int_math.cuh"
#include "split_k.cuh"
#include "tf32_mma.cuh"

#ifndef POINTWISE_MMA_A_PAD  // development probes compare 4
#define POINTWISE_MMA_A_PAD 8
#endif

namespace pointwise_mma_detail {

constexpr int BLOCK_K = 16;

__device__ __forceinline__ void split(float v, unsigned& hi, unsigned& lo) {
    const uint2 p = xcorr::split_tf32(v);
    hi = p.x;
    lo = p.y;
}

}  // namespace pointwise_mma_detail

template <int BLOCK_M, int BLOCK_N, int WARPS_M, int WARPS_N, int STAGES>
__global__ void __launch_bounds__(WARPS_M * WARPS_N * 32)
pointwise_mma(const float* __restrict__ filt,  // (M, K)
              const float* __restrict__ x,     // (N, K, P)
              float* __restrict__ out,         // (N, M, P)
              int* __restrict__ locks,         // gridDim.z > 1: one per tile, 0 between launches
              int M, int K, int P, int Q, int SPLIT_STEPS) {
    using namespace pointwise_mma_detail;
    constexpr int THREADS = WARPS_M * WARPS_N * 32;
    constexpr int WM = BLOCK_M / WARPS_M, WN = BLOCK_N / WARPS_N;
    constexpr int MT = WM / 16, NT = WN / 8;  // m16n8 fragments of a warp's tile
    constexpr int LDA = BLOCK_M + POINTWISE_MMA_A_PAD, LDB = BLOCK_N + 8;
    constexpr int A_COPIES = BLOCK_M * BLOCK_K / THREADS, B_COPIES = BLOCK_K * BLOCK_N / THREADS;
    static_assert(WM % 16 == 0 && WN % 8 == 0, "whole m16n8 fragments per warp");
    static_assert(THREADS % BLOCK_K == 0 && THREADS % BLOCK_N == 0, "copies split evenly");
    static_assert(A_COPIES * THREADS == BLOCK_M * BLOCK_K &&
                  B_COPIES * THREADS == BLOCK_K * BLOCK_N, "whole copies per thread");
    __shared__ __align__(16) float As[STAGES][BLOCK_K][LDA];
    __shared__ __align__(16) float Bs[STAGES][BLOCK_K][LDB];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int m0 = blockIdx.y * BLOCK_M, q0 = blockIdx.x * BLOCK_N;

    // A copies: k = tid % BLOCK_K of rows tid / BLOCK_K + i * (THREADS / BLOCK_K)
    const int ak = tid % BLOCK_K, am = tid / BLOCK_K;
    // B copies: column tid % BLOCK_N, k rows tid / BLOCK_N + i * (THREADS / BLOCK_N)
    const int bq = tid % BLOCK_N, bk = tid / BLOCK_N;
    const float* colp = x;
    const bool col_ok = q0 + bq < Q;
    if (col_ok) {
        int p;
        const int n = xcorr::div_floor(q0 + bq, P, p);
        colp = x + ((long long)n * K * P + p);
    }
    auto issue = [&](int step, int stage) {
        const int k0 = step * BLOCK_K;
#pragma unroll
        for (int i = 0; i < A_COPIES; ++i) {
            const int m = am + i * (THREADS / BLOCK_K);
            const bool ok = m0 + m < M && k0 + ak < K;
            cp_async4_zfill(&As[stage][ak][m], filt + ((long long)(m0 + m) * K + k0 + ak), ok);
        }
#pragma unroll
        for (int i = 0; i < B_COPIES; ++i) {
            const int k = bk + i * (THREADS / BLOCK_N);
            const bool ok = col_ok && k0 + k < K;
            cp_async4_zfill(&Bs[stage][k][bq], colp + (long long)(k0 + k) * P, ok);
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    const int first = blockIdx.z * SPLIT_STEPS;
    const int steps = min((K + BLOCK_K - 1) / BLOCK_K - first, SPLIT_STEPS);  // this split's
    staged_steps<STAGES>(first, steps, issue, [&](const int stage) {
        float part[MT][NT][4];  // this stage's sums, added to acc with FADD
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) part[i][j][r] = 0.f;
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; kk += 8) {
            unsigned ahi[MT][4], alo[MT][4], bhi[NT][2], blo[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const int m = wm0 + i * 16 + g;
                split(As[stage][kk + t4][m], ahi[i][0], alo[i][0]);
                split(As[stage][kk + t4][m + 8], ahi[i][1], alo[i][1]);
                split(As[stage][kk + t4 + 4][m], ahi[i][2], alo[i][2]);
                split(As[stage][kk + t4 + 4][m + 8], ahi[i][3], alo[i][3]);
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int q = wn0 + j * 8 + g;
                split(Bs[stage][kk + t4][q], bhi[j][0], blo[j][0]);
                split(Bs[stage][kk + t4 + 4][q], bhi[j][1], blo[j][1]);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    xcorr::mma_tf32(part[i][j], alo[i], bhi[j][0], bhi[j][1]);
                    xcorr::mma_tf32(part[i][j], ahi[i], blo[j][0], blo[j][1]);
                    xcorr::mma_tf32(part[i][j], ahi[i], bhi[j][0], bhi[j][1]);
                }
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] += part[i][j][r];
    });

    int* lock = locks + (blockIdx.y * gridDim.x + blockIdx.x);
    const bool add = blockIdx.z > 0;  // split-K: add to the splits before this one
    if (gridDim.z > 1) wait_for_turn(lock, blockIdx.z);
    // fragment element r of (i, j): row g + 8 (r / 2), column 2 t4 + r % 2
    const long long mp = (long long)M * P;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int q = q0 + wn0 + j * 8 + 2 * t4 + c;
            if (q >= Q) continue;
            int p;
            const int n = xcorr::div_floor(q, P, p);
            float* o = out + (n * mp + p);
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int m = m0 + wm0 + i * 16 + g + 8 * h;
                    if (m >= M) continue;
                    float* dst = o + (long long)m * P;
                    if (add)
                        atomicAdd(dst, acc[i][j][2 * h + c]);
                    else
                        *dst = acc[i][j][2 * h + c];
                }
        }
    if (gridDim.z > 1) pass_turn(lock, blockIdx.z + 1 == gridDim.z ? 0 : blockIdx.z + 1);
}
