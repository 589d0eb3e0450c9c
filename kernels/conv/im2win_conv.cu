// im2win convolution (NCHW, float32): the window-order transform of the input and a tiled
// convolution over it (../shared/papers/im2win-gpu-convolution.md).
//
// im2win tensor, shape (N, C, HO, WP * HF) with WP = W + 2 * PX:
//     win[n][c][ho][wi * HF + kh] = x[n][c][ho * SY + kh - PY][wi - PX]   (0 outside the image)
// so the HF x WF window of output (ho, wo) is the contiguous run of HF * WF values starting at
// win[n][c][ho][wo * SX * HF].
//
// The convolution is one GEMM with M = CO filter rows, K = C * HF * WF and N * HO * WO columns
// q = (n, ho, wo):   out[n][co][ho][wo] = sum_k filt[co][k] * src[col(q) + off(k)]
// where the filter is used in place (k = (c, kh, kw), its own layout), col(q) = n * SN + ho * SH
// + wo * SW + BASE is where column q's window starts and off(k) (a table, -1 past K) where
// element k of a window lies from there.  Over the im2win tensor (the paper's method):
// SN = C * HO * WP * HF, SH = WP * HF, SW = SX * HF, BASE = 0, off(c, kh, kw) = c * HO * WP * HF
// + kw * HF + kh.  Directly over the input (im2win's window order computed on the fly, no
// transform): SN = C * H * W, SH = SY * W, SW = SX, BASE = -PY * W - PX, off = c * H * W +
// kh * W + kw, and with padding (PADDED) a second table pos(k) = kh << 16 | kw tells which window
// elements fall outside the image.
//
// Tiling (CUTLASS-style names): a block computes a BLOCK_M x BLOCK_N tile of outputs with
// (BLOCK_M / THREAD_M) x (BLOCK_N / THREAD_N) threads, each a THREAD_M x THREAD_N register tile
// updated by outer products (a warp: 4 x 8 threads, so its shared-memory reads are 64 and 128
// contiguous bytes).  The K loop takes BLOCK_K values per step through a ring of STAGES
// shared-memory buffers filled by cp.async (4-byte copies, zero-filled outside the problem),
// STAGES - 1 steps ahead of the FMAs, one barrier per step.  Register arrays are indexed with
// constants only.

#include "async_copy.cuh"
#include "int_math.cuh"
#include "split_k.cuh"

// ---------------------------------------------------------------------------- transform

// One block per row (n, c, ho) of the im2win tensor, its threads along the row: coalesced
// writes; the reads of neighbouring threads fall in HF neighbouring input rows.
extern "C" __global__ void im2win_transform(const float* __restrict__ x, float* __restrict__ win,
                                            int rows, int H, int W, int HF, int SY,
                                            int PY, int PX, int HO, int WP) {
    const int len = WP * HF;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const int nc = r / HO, ho = r - nc * HO;
        const float* plane = x + (long long)nc * H * W;
        float* dst = win + (long long)r * len;
        for (int e = threadIdx.x; e < len; e += blockDim.x) {
            int kh;
            const int wi = xcorr::div_floor(e, HF, kh);
            const int row = ho * SY + kh - PY, col = wi - PX;
            dst[e] = ((unsigned)row < (unsigned)H && (unsigned)col < (unsigned)W)
                         ? __ldg(plane + (long long)row * W + col) : 0.0f;
        }
    }
}

// ---------------------------------------------------------------------------- convolution

template <int BLOCK_M, int BLOCK_N, int BLOCK_K, int THREAD_M, int THREAD_N>
struct Im2winTile {
    static constexpr int THREADS_M = BLOCK_M / THREAD_M, THREADS_N = BLOCK_N / THREAD_N;
    static constexpr int THREADS = THREADS_M * THREADS_N;
    static constexpr int WARPS_N = THREADS_N / 8;               // a warp: 4 (m) x 8 (n) threads
    static constexpr int LDA = BLOCK_M + 4;                     // As row pitch: conflict-free fills
    static constexpr int A_COPIES = BLOCK_M * BLOCK_K / THREADS;  // rows THREADS / 8 apart
    static constexpr int B_COPIES = BLOCK_K * BLOCK_N / THREADS;  // k rows per thread, one column
    static_assert(THREADS_N % 8 == 0 && THREADS_M % 4 == 0, "warps of 4 x 8 threads");
    static_assert(THREAD_M % 4 == 0 && THREAD_N % 4 == 0, "16-byte shared-memory reads");
    static_assert(BLOCK_K == 8 && BLOCK_M % (THREADS / 8) == 0, "A tile: 8 k of each row");
    static_assert(THREADS % BLOCK_N == 0 && B_COPIES % 4 == 0, "B tile split");
};

template <int BLOCK_M, int BLOCK_N, int BLOCK_K, int THREAD_M, int THREAD_N, int STAGES,
          bool PADDED>
__global__ void __launch_bounds__((BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N),
                                  512 / ((BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N)))
im2win_conv(const float* __restrict__ filt,  // (M, K): the filter in its own layout
            const float* __restrict__ src,   // im2win tensor or input
            const int* __restrict__ off,     // (K rounded up to 16): off(k), -1 past K
            const int* __restrict__ pos,     // PADDED: kh << 16 | kw of k
            float* __restrict__ out,         // (N, M, HO, WO)
            int* __restrict__ locks,         // gridDim.z > 1: one per tile, 0 between launches
            int M, int K, int HO, int WO, int Q, long long SN, int SH, int SW, int BASE,
            int SY, int SX, int PY, int PX, int H, int W, int SPLIT_STEPS) {
    using T = Im2winTile<BLOCK_M, BLOCK_N, BLOCK_K, THREAD_M, THREAD_N>;
    constexpr int LDA = T::LDA, B_COPIES = T::B_COPIES;
    __shared__ __align__(16) float As[STAGES][BLOCK_K][LDA];
    __shared__ __align__(16) float Bs[STAGES][BLOCK_K][BLOCK_N];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tx = (warp % T::WARPS_N) * 8 + (lane & 7);
    const int ty = (warp / T::WARPS_N) * 4 + (lane >> 3);
    const int m0 = blockIdx.y * BLOCK_M;
    const int q0 = blockIdx.x * BLOCK_N;
    const int hw = HO * WO;

    // A copies: k = k0 + (tid & 7) of rows arow + i * THREADS / 8 (8 consecutive k per row)
    const int akk = tid & 7, arow = tid >> 3;
    const float* a_src = filt + ((long long)(m0 + arow) * K + akk);
    const int a_rows_ok = M - m0 - arow;  // copy i has a row when i * THREADS / 8 < a_rows_ok
    // B copies: column bq of the tile, k rows bk0 .. bk0 + B_COPIES - 1 of each step
    const int bq = tid % BLOCK_N, bk0 = (tid / BLOCK_N) * B_COPIES;
    const float* colp = src;
    bool col_ok = false;
    int hb = 0, wb = 0;  // PADDED: top-left of the column's window in the image
    {
        int q = q0 + bq;
        if (q < Q) {
            int rem;
            int n = xcorr::div_floor(q, hw, rem);
            int wo;
            int ho = xcorr::div_floor(rem, WO, wo);
            colp = src + (n * SN + (long long)ho * SH + (long long)wo * SW + BASE);
            col_ok = true;
            hb = ho * SY - PY;
            wb = wo * SX - PX;
        }
    }
    auto issue = [&](int step, int stage) {
        const int k0 = step * BLOCK_K;
        const bool k_ok = k0 + akk < K;
#pragma unroll
        for (int i = 0; i < T::A_COPIES; ++i) {
            const bool ok = k_ok && i * (T::THREADS / 8) < a_rows_ok;
            cp_async4_zfill(&As[stage][akk][arow + i * (T::THREADS / 8)],
                            a_src + ((long long)i * (T::THREADS / 8) * K + k0), ok);
        }
#pragma unroll
        for (int i4 = 0; i4 < B_COPIES; i4 += 4) {  // the table: the same 16 bytes for a warp
            const int4 o4 = __ldg(reinterpret_cast<const int4*>(off + k0 + bk0 + i4));
            int4 p4 = make_int4(0, 0, 0, 0);
            if constexpr (PADDED) p4 = __ldg(reinterpret_cast<const int4*>(pos + k0 + bk0 + i4));
            const int ko[4] = {o4.x, o4.y, o4.z, o4.w}, kp[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                bool ok = col_ok && ko[u] >= 0;
                if constexpr (PADDED) {
                    const int r = hb + (kp[u] >> 16), c = wb + (kp[u] & 0xffff);
                    ok = ok && (unsigned)r < (unsigned)H && (unsigned)c < (unsigned)W;
                }
                cp_async4_zfill(&Bs[stage][bk0 + i4 + u][bq], colp + ko[u], ok);
            }
        }
    };

    // the thread's rows and columns: quads of 4, the quads THREAD_* / 4 apart in the tile
    auto row_of = [&](int i) { return (i / 4) * (T::THREADS_M * 4) + ty * 4 + i % 4; };
    auto col_of = [&](int j) { return (j / 4) * (T::THREADS_N * 4) + tx * 4 + j % 4; };
    float acc[THREAD_M][THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) acc[i][j] = 0.f;

    const int first = blockIdx.z * SPLIT_STEPS;
    const int steps = min((K + BLOCK_K - 1) / BLOCK_K - first, SPLIT_STEPS);  // this split's
    staged_steps<STAGES>(first, steps, issue, [&](const int stage) {
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; ++kk) {
            float a[THREAD_M], b[THREAD_N];
#pragma unroll
            for (int i = 0; i < THREAD_M; i += 4) {
                float4 v = *reinterpret_cast<const float4*>(&As[stage][kk][row_of(i)]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < THREAD_N; j += 4) {
                float4 v = *reinterpret_cast<const float4*>(&Bs[stage][kk][col_of(j)]);
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    });

    int* lock = locks + (blockIdx.y * gridDim.x + blockIdx.x);
    const bool add = blockIdx.z > 0;  // split-K: add to the splits before this one
    if (gridDim.z > 1) wait_for_turn(lock, blockIdx.z);
    // stores: 4 consecutive columns at once where they lie in one image, aligned (16 bytes)
    const long long mhw = (long long)M * hw;
    auto column = [&](int qq) {  // output of column qq in filter row 0
        int pix;
        const int n = xcorr::div_floor(qq, hw, pix);
        return out + (n * mhw + pix);
    };
#pragma unroll
    for (int j = 0; j < THREAD_N; j += 4) {
        const int q = q0 + col_of(j);
        if (q >= Q) continue;
        if ((hw & 3) == 0 && q + 3 < Q) {  // q is a multiple of 4: the 4 share n
            float* o = column(q);
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i) {
                const int m = m0 + row_of(i);
                if (m >= M) continue;
                float* dst = o + (long long)m * hw;
                if (add) {
#pragma unroll
                    for (int u = 0; u < 4; ++u) atomicAdd(dst + u, acc[i][j + u]);
                } else {
                    *reinterpret_cast<float4*>(dst) =
                        make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
                }
            }
            continue;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            if (q + u >= Q) break;
            float* o = column(q + u);
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i) {
                const int m = m0 + row_of(i);
                if (m < M) {
                    if (add)
                        atomicAdd(o + (long long)m * hw, acc[i][j + u]);
                    else
                        o[(long long)m * hw] = acc[i][j + u];
                }
            }
        }
    }
    if (gridDim.z > 1) pass_turn(lock, blockIdx.z + 1 == gridDim.z ? 0 : blockIdx.z + 1);
}
