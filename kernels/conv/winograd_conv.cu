// Fused Winograd convolution F(MY x MX, 3 x 3) for 3x3 filters at stride 1 (NCHW, float32):
// the input and filter transforms in the load stage, 16 GEMMs (one per transform element) in
// registers, the output transform in the epilogue; nothing but the output in global memory.
//
// The output is cut into tiles of MY x MX; tile p = (n, ty, tx) reads the EY x EX input patch
// d at (ty * MY - PY, tx * MX - PX) (EY = MY + 2, EX = MX + 2, zero outside the image), and
//     out tile = AT_y [ sum_c U[c] (.) V[c] ] AT_x^T,   V[c] = BT_y d[c] BT_x^T,
//     U[c][k] = G_y w[k][c] G_x^T
// with (.) an element-wise product: for each of the E = EY * EX elements e, a GEMM over the
// channels, M_e[k][p] = sum_c U_e[k][c] V_e[c][p].  F(2, 3) (Lavin and Gray's matrices, points
// 0, 1, -1): 16 multiplications per channel for 4 outputs instead of 36.
//
// Tiling (CUTLASS-style names): a block computes BLOCK_M filters x BLOCK_N tiles for all E
// elements.  Its threads form GROUPS groups, each owning E / GROUPS elements, a thread
// THREAD_M x THREAD_N sums of each (outer products; a warp is 4 x 8 threads): the more sums per
// element a thread holds, the fewer shared-memory reads per FMA, and the groups keep the
// registers per thread at 64 sums.  Per step of BLOCK_K channels, cp.async (4-byte copies,
// zero-filled outside the image and past C and K) brings each thread's raw input patch and raw
// filter into the places of their transforms, which the thread then transforms in place (its
// own copies, after its own wait: no barrier).  Two buffers: step t + 1 loads while step t
// multiplies; one barrier per step.  At the end the groups' sums meet in shared memory and
// each thread transforms and stores 1 / GROUPS of its position's.

#include "async_copy.cuh"
#include "int_math.cuh"
#include "split_k.cuh"

namespace xcorr {

// One-dimensional F(M, 3): input (BT d), output (AT m) and filter (G g) transforms.
template <int M> struct Winograd3;

template <> struct Winograd3<2> {
    static constexpr int N = 4;
    template <class T> __device__ static void input(const T* d, T* v) {
        v[0] = d[0] - d[2];
        v[1] = d[1] + d[2];
        v[2] = d[2] - d[1];
        v[3] = d[1] - d[3];
    }
    template <class T> __device__ static void output(const T* m, T* y) {
        y[0] = m[0] + m[1] + m[2];
        y[1] = m[1] - m[2] - m[3];
    }
    template <class T> __device__ static void filter(const T* g, T* u) {
        u[0] = g[0];
        u[1] = T(0.5) * (g[0] + g[1] + g[2]);
        u[2] = T(0.5) * (g[0] - g[1] + g[2]);
        u[3] = g[2];
    }
};

// A separable two-dimensional transform of a row-major (R_IN, C_IN) array: each row through fx
// (C_IN -> C_OUT values), then each column of that through fy (R_IN -> R_OUT).
template <int R_IN, int C_IN, int R_OUT, int C_OUT, class T, class FX, class FY>
__device__ __forceinline__ void separable(const T* a, T* b, FX fx, FY fy) {
    T r[R_IN * C_OUT];
#pragma unroll
    for (int i = 0; i < R_IN; ++i) fx(a + i * C_IN, r + i * C_OUT);
#pragma unroll
    for (int j = 0; j < C_OUT; ++j) {
        T col[R_IN], out[R_OUT];
#pragma unroll
        for (int i = 0; i < R_IN; ++i) col[i] = r[i * C_OUT + j];
        fy(col, out);
#pragma unroll
        for (int i = 0; i < R_OUT; ++i) b[i * C_OUT + j] = out[i];
    }
}

// The two-dimensional transforms: F(MY, 3) along y, F(MX, 3) along x.
template <int MY, int MX> struct Winograd2 {
    using WY = Winograd3<MY>;
    using WX = Winograd3<MX>;
    static constexpr int EY = WY::N, EX = WX::N, E = EY * EX;

    template <class T> __device__ static void input(const T* d, T* v) {  // (EY, EX) -> (EY, EX)
        separable<EY, EX, EY, EX>(d, v, [](const T* a, T* b) { WX::input(a, b); },
                                  [](const T* a, T* b) { WY::input(a, b); });
    }
    template <class T> __device__ static void output(const T* m, T* y) {  // (EY, EX) -> (MY, MX)
        separable<EY, EX, MY, MX>(m, y, [](const T* a, T* b) { WX::output(a, b); },
                                  [](const T* a, T* b) { WY::output(a, b); });
    }
    template <class T> __device__ static void filter(const T* g, T* u) {  // (3, 3) -> (EY, EX)
        separable<3, 3, EY, EX>(g, u, [](const T* a, T* b) { WX::filter(a, b); },
                                [](const T* a, T* b) { WY::filter(a, b); });
    }
};

}  // namespace xcorr

// ---------------------------------------------------------------------------- convolution

template <int BLOCK_M, int BLOCK_N, int BLOCK_K, int THREAD_M, int THREAD_N, int GROUPS,
          int MY, int MX>
struct WinogradTile {
    using W2 = xcorr::Winograd2<MY, MX>;
    static constexpr int E = W2::E, GROUP_E = E / GROUPS;  // elements of a group of threads
    static constexpr int THREADS_M = BLOCK_M / THREAD_M, THREADS_N = BLOCK_N / THREAD_N;
    static constexpr int GROUP_THREADS = THREADS_M * THREADS_N, THREADS = GROUP_THREADS * GROUPS;
    static constexpr int WARPS_N = THREADS_N / 8;  // a warp: 4 x 8 threads
    static constexpr int PATCHES = BLOCK_K * BLOCK_N;            // input patches of a step
    static constexpr int PATCH_ROUNDS = (PATCHES + THREADS - 1) / THREADS;
    static constexpr int FILTERS = BLOCK_K * BLOCK_M;             // 3x3 filters of a step
    static constexpr int FILTER_ROUNDS = (FILTERS + THREADS - 1) / THREADS;
    // U rows (one per channel of the step) 4 floats longer than E * BLOCK_M: a warp's writes of
    // raw filters (8 channels x 4 filters) fall in different banks
    static constexpr int U_PITCH = E * BLOCK_M + 4;
    static constexpr int U_FLOATS = BLOCK_K * (E * BLOCK_M + 4), V_FLOATS = BLOCK_K * E * BLOCK_N;
    // the epilogue: every thread's sums go through shared memory (the buffers are free by
    // then) and each thread transforms 1 / GROUPS of its position's
    static constexpr int SWAP_FLOATS = E * THREAD_M * THREAD_N * GROUP_THREADS;
    static constexpr int PIPE_FLOATS = 2 * (U_FLOATS + V_FLOATS);  // two buffers of each
    static constexpr int SHARED_BYTES =
        (PIPE_FLOATS > SWAP_FLOATS ? PIPE_FLOATS : SWAP_FLOATS) * 4;
    static_assert(THREADS_N % 8 == 0 && THREADS_M % 4 == 0, "warps of 4 x 8 threads");
    static_assert(THREAD_M % 4 == 0 && THREAD_N % 4 == 0, "16-byte shared-memory reads");
    static_assert(THREADS % BLOCK_N == 0 && (PATCHES % THREADS == 0 || THREADS % PATCHES == 0),
                  "patches");
    static_assert(THREADS % BLOCK_K == 0 && (FILTERS % THREADS == 0 || THREADS % FILTERS == 0),
                  "filters");
    static_assert(E >= 9, "a raw 3x3 filter fits the place of its transform");
    static_assert(GROUPS > 1 && E % GROUPS == 0 && THREAD_M * THREAD_N % GROUPS == 0,
                  "element groups (their sums meet in shared memory)");
};

template <int BLOCK_M, int BLOCK_N, int BLOCK_K, int THREAD_M, int THREAD_N, int GROUPS,
          int MY, int MX>
__global__ void __launch_bounds__((BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N) * GROUPS,
                                  512 / ((BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N) * GROUPS))
winograd_conv(const float* __restrict__ w,  // (K, C, 3, 3)
              const float* __restrict__ x,  // (N, C, H, W)
              float* __restrict__ out,      // (N, K, HO, WO)
              int* __restrict__ locks,      // gridDim.z > 1: one per tile, 0 between launches
              int K, int C, int H, int W, int HO, int WO, int TY, int TX, int P, int PY,
              int PX, int SPLIT_STEPS) {
    using T = WinogradTile<BLOCK_M, BLOCK_N, BLOCK_K, THREAD_M, THREAD_N, GROUPS, MY, MX>;
    using W2 = typename T::W2;
    constexpr int E = T::E, GE = T::GROUP_E, EX = W2::EX, EY = W2::EY;
    extern __shared__ __align__(16) float smem[];
    float* const Us = smem;                    // [2][BLOCK_K][U_PITCH]: [e][BLOCK_M] a row
    float* const Vs = smem + 2 * T::U_FLOATS;  // [2][BLOCK_K][E][BLOCK_N]

    const int tid = threadIdx.x, lane = tid & 31;
    const int group = tid / T::GROUP_THREADS, gtid = tid % T::GROUP_THREADS, warp = gtid >> 5;
    const int tx = (warp % T::WARPS_N) * 8 + (lane & 7);
    const int ty = (warp / T::WARPS_N) * 4 + (lane >> 3);
    const int k0 = blockIdx.y * BLOCK_M;
    const int p0 = blockIdx.x * BLOCK_N;
    const int hw = H * W;  // one channel plane (below 2^31: checked by the host)

    // this thread's patches: tile p0 + lp, channels lc + i * (THREADS / BLOCK_N) of each step
    const int lp = tid % BLOCK_N, lc = tid / BLOCK_N;
    const bool loads = T::PATCHES >= T::THREADS || tid < T::PATCHES;
    long long patch = 0;  // offset of the patch's top-left value in image n, channel 0
    unsigned inside = 0;  // bit r * EX + s: value (r, s) of the patch lies in the image
    {
        const int p = p0 + lp;
        if (p < P) {
            int rem, tx_;
            const int n = xcorr::div_floor(p, TY * TX, rem);
            const int ty_ = xcorr::div_floor(rem, TX, tx_);
            const int r0 = ty_ * MY - PY, s0 = tx_ * MX - PX;
            patch = n * (long long)C * hw + (long long)r0 * W + s0;
#pragma unroll
            for (int r = 0; r < EY; ++r)
#pragma unroll
                for (int s = 0; s < EX; ++s)
                    if ((unsigned)(r0 + r) < (unsigned)H && (unsigned)(s0 + s) < (unsigned)W)
                        inside |= 1u << (r * EX + s);
        }
    }
    // this thread's filters: k0 + (tid + i * THREADS) / BLOCK_K over channel (tid + ...) %
    // BLOCK_K of each step: consecutive threads copy consecutive 9-float runs of w
    const int lkc = tid % BLOCK_K, lm = tid / BLOCK_K;  // THREADS % BLOCK_K == 0
    constexpr int M_APART = T::THREADS / BLOCK_K;        // rows between rounds
    const bool loads_filters = T::FILTERS >= T::THREADS || tid < T::FILTERS;
    auto issue = [&](int step, int buf) {
        const int c0 = step * BLOCK_K;
        float* vs = Vs + buf * T::V_FLOATS;
#pragma unroll
        for (int i = 0; i < T::PATCH_ROUNDS; ++i) {
            if (!loads) break;
            const int cl = lc + i * (T::THREADS / BLOCK_N);
            const unsigned copy = c0 + cl < C ? inside : 0u;  // one bit test per copy
            // zero-filled copies do not read their source: it may lie outside the input
            const float* src = x + (patch + (long long)(c0 + cl) * hw);
#pragma unroll
            for (int r = 0; r < EY; ++r)
#pragma unroll
                for (int s = 0; s < EX; ++s)
                    cp_async4_zfill(vs + (cl * E + r * EX + s) * BLOCK_N + lp, src + r * W + s,
                                    copy >> (r * EX + s) & 1u);
        }
        // the raw filters, each in the first 9 places of its transform
        float* us = Us + buf * T::U_FLOATS + lkc * T::U_PITCH + lm;
#pragma unroll
        for (int i = 0; i < T::FILTER_ROUNDS; ++i) {
            if (!loads_filters) break;
            const bool ok = k0 + lm + i * M_APART < K && c0 + lkc < C;
            const float* src = w + ((long long)(k0 + lm + i * M_APART) * C + c0 + lkc) * 9;
#pragma unroll
            for (int e = 0; e < 9; ++e)
                cp_async4_zfill(us + e * BLOCK_M + i * M_APART, src + e, ok);
        }
    };
    // the thread's own filters and patches of buffer buf, raw to transformed, in place
    auto transform = [&](int buf) {
        float* us = Us + buf * T::U_FLOATS + lkc * T::U_PITCH + lm;
#pragma unroll
        for (int i = 0; i < T::FILTER_ROUNDS; ++i) {
            if (!loads_filters) break;
            float* v = us + i * M_APART;
            float g[9], t[E];
#pragma unroll
            for (int e = 0; e < 9; ++e) g[e] = v[e * BLOCK_M];
            W2::filter(g, t);
#pragma unroll
            for (int e = 0; e < E; ++e) v[e * BLOCK_M] = t[e];
        }
        float* vs = Vs + buf * T::V_FLOATS;
#pragma unroll
        for (int i = 0; i < T::PATCH_ROUNDS; ++i) {
            if (!loads) break;
            float* v = vs + (lc + i * (T::THREADS / BLOCK_N)) * E * BLOCK_N + lp;
            float d[E], t[E];
#pragma unroll
            for (int e = 0; e < E; ++e) d[e] = v[e * BLOCK_N];
            W2::input(d, t);
#pragma unroll
            for (int e = 0; e < E; ++e) v[e * BLOCK_N] = t[e];
        }
    };

    float acc[GE][THREAD_M][THREAD_N];  // elements group * GE + el
#pragma unroll
    for (int e = 0; e < GE; ++e)
#pragma unroll
        for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
            for (int j = 0; j < THREAD_N; ++j) acc[e][i][j] = 0.f;

    const int first = blockIdx.z * SPLIT_STEPS;
    const int steps = min((C + BLOCK_K - 1) / BLOCK_K - first, SPLIT_STEPS);  // this split's
    if (steps > 0) {
        issue(first, 0);
        cp_async_commit();
        cp_async_wait<0>();
        transform(0);
    }
    __syncthreads();
    // the thread's filters: quads ty * 4 + THREADS_M * 4 apart; its tiles: quads tx * 4 +
    // THREADS_N * 4 apart
    const int a_at = group * GE * BLOCK_M + ty * 4;
    const int b_at = group * GE * BLOCK_N + tx * 4;
    for (int t = 0; t < steps; ++t) {
        const int buf = t & 1;
        // buffer buf ^ 1 was last read by step t - 1, before the barrier that ended it
        if (t + 1 < steps) issue(first + t + 1, buf ^ 1);
        cp_async_commit();
        const float* us = Us + buf * T::U_FLOATS + a_at;
        const float* vs = Vs + buf * T::V_FLOATS + b_at;
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; ++kk) {
#pragma unroll
            for (int e = 0; e < GE; ++e) {
                float a[THREAD_M], b[THREAD_N];
#pragma unroll
                for (int i = 0; i < THREAD_M; i += 4) {
                    const float4 q = *reinterpret_cast<const float4*>(
                        us + kk * T::U_PITCH + e * BLOCK_M + i * T::THREADS_M);
                    a[i] = q.x; a[i + 1] = q.y; a[i + 2] = q.z; a[i + 3] = q.w;
                }
#pragma unroll
                for (int j = 0; j < THREAD_N; j += 4) {
                    const float4 q = *reinterpret_cast<const float4*>(
                        vs + (kk * E + e) * BLOCK_N + j * T::THREADS_N);
                    b[j] = q.x; b[j + 1] = q.y; b[j + 2] = q.z; b[j + 3] = q.w;
                }
#pragma unroll
                for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                    for (int j = 0; j < THREAD_N; ++j)
                        acc[e][i][j] = fmaf(a[i], b[j], acc[e][i][j]);
            }
        }
        if (t + 1 < steps) {
            cp_async_wait<0>();
            transform(buf ^ 1);
        }
        __syncthreads();
    }

    // epilogue: the output transform of sums (i, j) (filter i, tile j of the thread's), stored
    // or, split z > 0, added
    int* lock = locks + (blockIdx.y * gridDim.x + blockIdx.x);
    const bool add = blockIdx.z > 0;  // split-K: add to the splits before this one
    const long long khw = (long long)K * HO * WO;
    auto finish = [&](int i, int j, const float* m) {
        const int pj = (j / 4) * (T::THREADS_N * 4) + tx * 4 + j % 4;  // quads THREADS_N * 4 apart
        const int p = p0 + pj, k = k0 + (i / 4) * (T::THREADS_M * 4) + ty * 4 + i % 4;
        if (p >= P || k >= K) return;
        int rem, tx_;
        const int n = xcorr::div_floor(p, TY * TX, rem);
        const int ty_ = xcorr::div_floor(rem, TX, tx_);
        const int oy = ty_ * MY, ox = tx_ * MX;
        float y[MY * MX];
        W2::output(m, y);
        float* o = out + (n * khw + (long long)k * HO * WO + (long long)oy * WO + ox);
#pragma unroll
        for (int r = 0; r < MY; ++r)
#pragma unroll
            for (int s = 0; s < MX; ++s) {
                if (oy + r < HO && ox + s < WO) {
                    if (add)
                        atomicAdd(o + r * WO + s, y[r * MX + s]);
                    else
                        o[r * WO + s] = y[r * MX + s];
                }
            }
    };
    // the groups' sums meet in shared memory (free after the last barrier); group g finishes
    // sums [g, g + 1) * PAIRS of each thread position
    constexpr int PAIRS = THREAD_M * THREAD_N / GROUPS;
    float* const swap = smem + gtid;  // [E][THREAD_M][THREAD_N][GROUP_THREADS]
#pragma unroll
    for (int e = 0; e < GE; ++e)
#pragma unroll
        for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
            for (int j = 0; j < THREAD_N; ++j)
                swap[(((group * GE + e) * THREAD_M + i) * THREAD_N + j) * T::GROUP_THREADS] =
                    acc[e][i][j];
    __syncthreads();
    if (gridDim.z > 1) wait_for_turn(lock, blockIdx.z);
#pragma unroll
    for (int q = 0; q < PAIRS; ++q) {
        const int ij = group * PAIRS + q;
        float m[E];
#pragma unroll
        for (int e = 0; e < E; ++e) m[e] = swap[(e * THREAD_M * THREAD_N + ij) * T::GROUP_THREADS];
        finish(ij / THREAD_N, ij % THREAD_N, m);
    }
    if (gridDim.z > 1) pass_turn(lock, blockIdx.z + 1 == gridDim.z ? 0 : blockIdx.z + 1);
}
