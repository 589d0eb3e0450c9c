// Pointwise (1x1) convolution, NCHW float32, with the dynamic blocking of
// ../shared/papers/pointwise-conv-dynamic-blocking.tex:
//     out[n][f][p] = sum_c w[f][c] * x[n][c][p],   p = h * W + w,   columns q = (n, p)
//
// A block of 4 warps (the paper's Warp_num) computes BLOCK_F filters x BLOCK_P columns, as
// 2 x 2 warp tiles.  In a warp, C_NUM consecutive lanes share one thread tile of
// THREAD_F x THREAD_P outputs and split its channels: lane slot s sums channels
// s, s + C_NUM, ...; the 32 / C_NUM groups of a warp are laid out along the filters first
// (LAYOUT 1, the paper's L1, for F >= 48) or along the columns first (LAYOUT 2, L2).  Channels
// come in steps of BLOCK_K through shared memory, double-buffered (the next step's global loads
// in flight while this one is computed); at the end a segmented reduction (xor shuffles inside
// each group of C_NUM lanes) adds the slots up and slot 0 writes.  The tile sizes are chosen on
// the host by xcorr_app/conv/_dynamic_blocking.py plan() under the device's register and
// shared-memory limits.

template <int BLOCK_F, int BLOCK_P, int THREAD_F, int THREAD_P, int C_NUM, int LAYOUT>
__global__ void __launch_bounds__(128)
pointwise_conv(const float* __restrict__ w,  // (F, C)
               const float* __restrict__ x,  // (N, C, HW)
               float* __restrict__ out,      // (N, F, HW)
               int F, int C, int HW, long long Q) {  // Q = N * HW
    constexpr int THREADS = 128;
    constexpr int BLOCK_K = C_NUM > 8 ? C_NUM : 8;
    constexpr int GROUPS = 32 / C_NUM;
    constexpr int GF = (BLOCK_F / 2) / THREAD_F, GP = (BLOCK_P / 2) / THREAD_P;
    static_assert(GF * GP == GROUPS, "thread tiles must cover the warp tile");
    constexpr int W_LOADS = BLOCK_F * BLOCK_K / THREADS;
    constexpr int X_LOADS = BLOCK_K * BLOCK_P / 4 / THREADS;  // float4 per thread
    static_assert(W_LOADS >= 1 && W_LOADS * THREADS == BLOCK_F * BLOCK_K, "filter tile split");
    static_assert(X_LOADS >= 1 && X_LOADS * 4 * THREADS == BLOCK_K * BLOCK_P, "input split");
    __shared__ __align__(16) float Ws[2][BLOCK_K][BLOCK_F];
    __shared__ __align__(16) float Xs[2][BLOCK_K][BLOCK_P];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int group = lane / C_NUM, slot = lane % C_NUM;
    const int gf = LAYOUT == 1 ? group % GF : group / GP;
    const int gp = LAYOUT == 1 ? group / GF : group % GP;
    const int f_tile = (warp >> 1) * (BLOCK_F / 2) + gf * THREAD_F;  // within the block
    const int p_tile = (warp & 1) * (BLOCK_P / 2) + gp * THREAD_P;
    const int f0 = blockIdx.y * BLOCK_F;
    const long long q0 = (long long)blockIdx.x * BLOCK_P;
    const bool vec = (HW & 3) == 0;  // 4 consecutive aligned columns share n: 16-byte loads

    float w_reg[W_LOADS];
    float4 x_reg[X_LOADS];
    auto load = [&](int k0) {
#pragma unroll
        for (int i = 0; i < W_LOADS; ++i) {
            int e = tid + i * THREADS, kk = e % BLOCK_K, f = f0 + e / BLOCK_K, c = k0 + kk;
            w_reg[i] = (f < F && c < C) ? __ldg(w + (long long)f * C + c) : 0.f;
        }
#pragma unroll
        for (int i = 0; i < X_LOADS; ++i) {
            int e = tid + i * THREADS, kk = e / (BLOCK_P / 4), c = k0 + kk;
            long long q = q0 + (e % (BLOCK_P / 4)) * 4;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if (c < C) {
                if (vec && q + 3 < Q) {
                    long long n = q / HW, p = q - n * HW;
                    float4 t = __ldg(reinterpret_cast<const float4*>(
                        x + (n * C + c) * (long long)HW + p));
                    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
                } else {
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        long long qu = q + u;
                        if (qu < Q) {
                            long long n = qu / HW, p = qu - n * HW;
                            v[u] = __ldg(x + (n * C + c) * (long long)HW + p);
                        }
                    }
                }
            }
            x_reg[i] = make_float4(v[0], v[1], v[2], v[3]);
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < W_LOADS; ++i) {
            int e = tid + i * THREADS;
            Ws[buf][e % BLOCK_K][e / BLOCK_K] = w_reg[i];
        }
#pragma unroll
        for (int i = 0; i < X_LOADS; ++i) {
            int e = tid + i * THREADS;
            *reinterpret_cast<float4*>(&Xs[buf][e / (BLOCK_P / 4)][(e % (BLOCK_P / 4)) * 4]) =
                x_reg[i];
        }
    };

    float acc[THREAD_F][THREAD_P];
#pragma unroll
    for (int i = 0; i < THREAD_F; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_P; ++j) acc[i][j] = 0.f;

    const int steps = (C + BLOCK_K - 1) / BLOCK_K;
    load(0);
    store(0);
    __syncthreads();
    for (int t = 0; t < steps; ++t) {
        const int buf = t & 1;
        if (t + 1 < steps) load((t + 1) * BLOCK_K);
#pragma unroll
        for (int r = 0; r < BLOCK_K / C_NUM; ++r) {
            const int kk = slot + r * C_NUM;
            float a[THREAD_F], b[THREAD_P];
#pragma unroll
            for (int i = 0; i < THREAD_F; ++i) a[i] = Ws[buf][kk][f_tile + i];
#pragma unroll
            for (int j = 0; j < THREAD_P; ++j) b[j] = Xs[buf][kk][p_tile + j];
#pragma unroll
            for (int i = 0; i < THREAD_F; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_P; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (t + 1 < steps) store(buf ^ 1);
        __syncthreads();
    }

    // segmented reduction: the C_NUM slots of each group hold partial sums of one tile
#pragma unroll
    for (int off = C_NUM / 2; off > 0; off >>= 1)
#pragma unroll
        for (int i = 0; i < THREAD_F; ++i)
#pragma unroll
            for (int j = 0; j < THREAD_P; ++j)
                acc[i][j] += __shfl_xor_sync(0xffffffffu, acc[i][j], off);
    if (slot != 0) return;
    // stores: each row of the thread tile as 16-byte pieces where 4 columns share an image
    // (whole 32-byte sectors per lane; scattered 4-byte stores cost 8 times the traffic)
    constexpr int VEC = THREAD_P % 4 == 0 ? 4 : 1;
#pragma unroll
    for (int j = 0; j < THREAD_P; j += VEC) {
        long long q = q0 + p_tile + j;
        if (q >= Q) continue;
        long long n = q / HW, p = q - n * HW;
        float* o = out + n * (long long)F * HW + p;
        const bool quad = VEC == 4 && vec && q + 3 < Q;
#pragma unroll
        for (int i = 0; i < THREAD_F; ++i) {
            int f = f0 + f_tile + i;
            if (f >= F) continue;
            if (quad) {
                *reinterpret_cast<float4*>(o + (long long)f * HW) = make_float4(
                    acc[i][j], acc[i][j + (VEC > 1)], acc[i][j + 2 * (VEC > 1)],
                    acc[i][j + 3 * (VEC > 1)]);
            } else {
#pragma unroll
                for (int u = 0; u < VEC; ++u) {
                    long long qu = q + u;
                    if (qu >= Q) break;
                    long long nu = qu / HW;
                    out[nu * (long long)F * HW + (long long)f * HW + (qu - nu * HW)] =
                        acc[i][j + u];
                }
            }
        }
    }
}
