// im2win convolution (NCHW, float32): the window-order transform of the input and a tiled
// convolution over it (../shared/papers/im2win-gpu-convolution.md).
//
// im2win tensor, shape (N, C, HO, WP * HF) with WP = W + 2 * PAD:
//     win[n][c][ho][wi * HF + kh] = x[n][c][ho * S + kh - PAD][wi - PAD]   (0 outside the image)
// so the HF x WF window of output (ho, wo) is the contiguous run of HF * WF values starting at
// win[n][c][ho][wo * S * HF], in the order j = kw * HF + kh.  The filter is reordered once to
// the same order, f'[co][c * HF * WF + kw * HF + kh] (rows padded to a multiple of 4 with
// zeros for 16-byte loads), and the convolution is one GEMM over k = (c, j):
//     out[n][co][ho][wo] = sum_k f'[co][k] * win[n][c(k)][ho][wo * S * HF + j(k)]
// with M = CO rows and N * HO * WO columns q = (n, ho, wo).
//
// Tiling (CUTLASS-style names): a block computes a BLOCK_M x BLOCK_N tile of outputs with
// (BLOCK_M / THREAD_M) x (BLOCK_N / THREAD_N) threads, each a THREAD_M x THREAD_N register tile
// updated by outer products.  The K loop takes BLOCK_K values per step: the filter tile
// (16-byte loads along k) and the im2win tile are staged through registers into shared memory
// that is double-buffered, so the global loads of step t + 1 are in flight while step t is
// computed, with one barrier per step.  Register arrays are indexed with constants only.

// ---------------------------------------------------------------------------- transform

// One thread per (n, c, ho, wi): writes the HF values win[n][c][ho][wi * HF + 0 .. HF - 1].
extern "C" __global__ void im2win_transform(const float* __restrict__ x, float* __restrict__ win,
                                            int N, int C, int H, int W, int HF, int S, int PAD,
                                            int HO, int WP) {
    long long total = (long long)N * C * HO * WP;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        int wi = (int)(t % WP);
        long long r = t / WP;
        int ho = (int)(r % HO);
        long long nc = r / HO;
        const float* plane = x + nc * H * W;
        float* dst = win + (nc * HO + ho) * (long long)WP * HF + (long long)wi * HF;
        int col = wi - PAD;
        bool col_ok = col >= 0 && col < W;
        for (int kh = 0; kh < HF; ++kh) {
            int row = ho * S + kh - PAD;
            dst[kh] = (col_ok && row >= 0 && row < H) ? plane[(long long)row * W + col] : 0.0f;
        }
    }
}

// ---------------------------------------------------------------------------- convolution

template <int BLOCK_M, int BLOCK_N, int BLOCK_K, int THREAD_M, int THREAD_N>
__global__ void __launch_bounds__((BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N), 2)
im2win_conv(const float* __restrict__ filt,  // (M, K4): reordered, rows padded to K4
            const float* __restrict__ win,   // (N, C, HO, WP * HF)
            float* __restrict__ out,         // (N, M, HO, WO)
            int M, int K, int K4, int KK, int HF, int S, int HO, int WO, int WPHF,
            long long Q) {                   // Q = N * HO * WO columns
    constexpr int THREADS = (BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N);
    constexpr int A_LOADS = BLOCK_M * BLOCK_K / 4 / THREADS;   // float4 per thread per step
    constexpr int B_LOADS = BLOCK_K * BLOCK_N / THREADS;       // floats per thread per step
    static_assert(A_LOADS >= 1 && A_LOADS * 4 * THREADS == BLOCK_M * BLOCK_K, "A tile split");
    static_assert(B_LOADS >= 1 && B_LOADS * THREADS == BLOCK_K * BLOCK_N, "B tile split");
    static_assert(BLOCK_K % 4 == 0 && THREAD_M % 4 == 0 && THREAD_N % 4 == 0, "float4 tiles");
    __shared__ __align__(16) float As[2][BLOCK_K][BLOCK_M];
    __shared__ __align__(16) float Bs[2][BLOCK_K][BLOCK_N];

    const int tid = threadIdx.x;
    const int tx = tid % (BLOCK_N / THREAD_N), ty = tid / (BLOCK_N / THREAD_N);
    const int m0 = blockIdx.y * BLOCK_M;
    const long long q0 = (long long)blockIdx.x * BLOCK_N;
    const long long planeHW = (long long)HO * WPHF;  // one (n, c) plane of the im2win tensor
    const long long C_planes = K / KK;               // channels

    // B loads: this thread always loads column bq (fixed) and rows bk0 + i * B_ROW_STEP
    constexpr int B_ROW_STEP = THREADS / BLOCK_N > 0 ? THREADS / BLOCK_N : 1;
    const int bq = tid % BLOCK_N, bk0 = tid / BLOCK_N;
    long long col_base = -1;  // win offset of column q0 + bq at k = 0, or -1 past the end
    {
        long long q = q0 + bq;
        if (q < Q) {
            long long hw = (long long)HO * WO;
            long long n = q / hw;
            int rem = (int)(q - n * hw);
            int ho = rem / WO, wo = rem - ho * WO;
            col_base = (n * C_planes * HO + ho) * (long long)WPHF + (long long)wo * S * HF;
        }
    }
    // A loads: float4 number a = tid + i * THREADS of the tile: row a / (BLOCK_K/4), k quad a % ..
    float4 a_reg[A_LOADS];
    float b_reg[B_LOADS];

    auto load_tiles = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            int a = tid + i * THREADS;
            int row = a / (BLOCK_K / 4), kq = (a % (BLOCK_K / 4)) * 4;
            int m = m0 + row, k = k0 + kq;
            a_reg[i] = (m < M && k < K4)
                           ? *reinterpret_cast<const float4*>(filt + (long long)m * K4 + k)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            int k = k0 + bk0 + i * B_ROW_STEP;
            float v = 0.f;
            if (col_base >= 0 && k < K) {
                int c = k / KK, j = k - c * KK;
                v = __ldg(win + col_base + c * planeHW + j);
            }
            b_reg[i] = v;
        }
    };
    auto store_tiles = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            int a = tid + i * THREADS;
            int row = a / (BLOCK_K / 4), kq = (a % (BLOCK_K / 4)) * 4;
            As[buf][kq + 0][row] = a_reg[i].x;
            As[buf][kq + 1][row] = a_reg[i].y;
            As[buf][kq + 2][row] = a_reg[i].z;
            As[buf][kq + 3][row] = a_reg[i].w;
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) Bs[buf][bk0 + i * B_ROW_STEP][bq] = b_reg[i];
    };

    // the thread's rows and columns: quads of 4, the quads THREAD_* / 4 apart in the tile
    // (conflict-free 16-byte shared-memory reads: a quarter warp reads 128 consecutive bytes)
    auto row_of = [&](int i) { return (i / 4) * (BLOCK_M * 4 / THREAD_M) + ty * 4 + i % 4; };
    auto col_of = [&](int j) { return (j / 4) * (BLOCK_N * 4 / THREAD_N) + tx * 4 + j % 4; };
    float acc[THREAD_M][THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) acc[i][j] = 0.f;

    const int steps = (K4 + BLOCK_K - 1) / BLOCK_K;
    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
        const int buf = t & 1;
        if (t + 1 < steps) load_tiles((t + 1) * BLOCK_K);  // in flight during the FMAs below
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; ++kk) {
            float a[THREAD_M], b[THREAD_N];
#pragma unroll
            for (int i = 0; i < THREAD_M; i += 4) {
                float4 v = *reinterpret_cast<const float4*>(&As[buf][kk][row_of(i)]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < THREAD_N; j += 4) {
                float4 v = *reinterpret_cast<const float4*>(&Bs[buf][kk][col_of(j)]);
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (t + 1 < steps) store_tiles(buf ^ 1);  // the other buffer: read by nobody now
        __syncthreads();
    }

    // stores: 4 consecutive columns at once where they lie in one image, aligned (16 bytes)
    const long long hw = (long long)HO * WO;
#pragma unroll
    for (int j = 0; j < THREAD_N; j += 4) {
        long long q = q0 + col_of(j);
        if (q >= Q) continue;
        long long n = q / hw;
        long long pix = q - n * hw;
        float* o = out + n * (long long)M * hw + pix;
        bool quad = (hw & 3) == 0 && q + 3 < Q;  // q is a multiple of 4: the 4 share n
#pragma unroll
        for (int i = 0; i < THREAD_M; ++i) {
            int m = m0 + row_of(i);
            if (m >= M) continue;
            float* dst = o + (long long)m * hw;
            if (quad) {
                *reinterpret_cast<float4*>(dst) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            } else {
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    long long qu = q + u;
                    if (qu >= Q) break;
                    long long nu = qu / hw;
                    out[nu * (long long)M * hw + (long long)m * hw + (qu - nu * hw)] =
                        acc[i][j + u];
                }
            }
        }
    }
}
