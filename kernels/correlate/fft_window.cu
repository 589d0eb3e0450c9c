// The circular cross-correlation of the GPU fft plan at a small window of shifts only
// (xcorr_app/correlate/_fft_window.py), in place of the conjugate product and the whole inverse
// rfft2: an aligner searching +-14 px of 512x512 frames reads 29x29 of the 540x540 values the
// inverse makes.  For spectra of the zero-padded fy x fx planes (the half spectrum, wh = fx / 2 + 1
// columns), Q = scale * left * conj(right) and
//     c[y, x] = Re sum_u e^{2 pi i u y / fy} H[u, x],
//     H[u, x] = sum_{v < wh} w_v Q[u, v] e^{2 pi i v x / fx}
// (w_v = 2 but 1 at v = 0 and, fx even, at v = fx / 2: the Hermitian half's weights; the real
// part drops what cuFFT's C2R drops, the imaginary parts of those two columns).
//
//  * window_rows: H for x in -xmax..xmax of every row (b, u) of the right spectra, the product
//    made as the rows are read.  With Q = a + ib and the twiddle w_v (cos, sin) of x, the four
//    sums A = sum a cos, B = sum b sin, C = sum a sin, D = sum b cos give both x and -x:
//    H[u, x] = (A - B) + i (C + D), H[u, -x] = (A + B) + i (D - C): 4 FMAs for two outputs.
//    Block (32, groups): a lane RB rows (lane + 32 r), a warp PAIRS values of x (x = g PAIRS + p,
//    zero twiddles beyond xmax); both spectra's rows and the twiddles copied to shared memory VT
//    columns v at a time (cp.async, the next stage's while this one's are summed).  The sums in
//    float32 from the highest frequency down: the low frequencies' large terms (a frame's
//    mean, padded) come last, so they do not set the rounding of all the rest (summed from v =
//    0 up, ZNCC surfaces of frames with a mean of 0.5 and a deviation of 0.04 were 1.5e-4 off
//    the whole inverse's; in float64 the sums took more than half the whole inverse's time).
//    Out: h[(b fy + u) * 2X + j] = Re H[u, j - xmax], + X: Im (X = 2 xmax + 1), float64.
//    tw: (wh, groups * PAIRS) float2 (w_v cos, w_v sin of 2 pi v x / fx).
//  * window_columns: out[b, i, j] = c[y0 + i, x0 + j] = sum_u cos H_re - sin H_im (float64) for
//    the window's ho x wo shifts, y and -y from the same two sums.  step: (fy,) double2 (cos,
//    sin of 2 pi u / fy).

#include "async_copy.cuh"

// warps (groups of x) a window_rows block at most
#define WINDOW_GROUPS 4

template <int RB, int PAIRS, int VT>
__global__ void __launch_bounds__(32 * WINDOW_GROUPS) window_rows(
        const float2* __restrict__ left, long long left_stride, const float2* __restrict__ right,
        const float2* __restrict__ tw, double* __restrict__ h, long long rows_total, int fy,
        int wh, int xmax, float scale) {
    constexpr int ROWS = 32 * RB;
    // (+1: a lane's row 2 VT + 2 words from the next lane's, its 8-byte reads conflict-free)
    __shared__ __align__(16) float2 r_s[2][ROWS][VT + 1];
    __shared__ __align__(16) float2 l_s[2][ROWS][VT + 1];
    __shared__ __align__(16) float2 tw_s[2][VT][WINDOW_GROUPS * PAIRS];
    __shared__ long long lrow[ROWS];  // each row's left spectrum row (-1: past the end)
    const int lane = threadIdx.x, g = threadIdx.y;
    const int gp = (int)blockDim.y * PAIRS, nthreads = 32 * (int)blockDim.y;
    const int tid = g * 32 + lane;
    const long long row0 = (long long)blockIdx.x * ROWS;
    const long long b0 = row0 / fy;
    const int u0 = (int)(row0 - b0 * fy);
    for (int r = tid; r < ROWS; r += nthreads) {
        const int bb = (u0 + r) / fy, u = u0 + r - bb * fy;
        lrow[r] = row0 + r < rows_total ? (b0 + bb) * left_stride + (long long)u * wh : -1;
    }
    __syncthreads();

    float A[RB][PAIRS], B[RB][PAIRS], C[RB][PAIRS], D[RB][PAIRS];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int p = 0; p < PAIRS; ++p) A[r][p] = B[r][p] = C[r][p] = D[r][p] = 0.0f;

    // the columns from the last stage to the first (see above): stage s's copied into buffer
    // s & 1 (zeros past the spectra's end) while stage s - 1's are summed
    const int stages = (wh + VT - 1) / VT;
    for (int s = 0; s <= stages; ++s) {
        if (s < stages) {  // (its buffer's last reader, stage s - 2, ended at a barrier)
            const int buf = s & 1, v0 = (stages - 1 - s) * VT;
            for (int k = tid; k < ROWS * VT; k += nthreads) {
                const int r = k / VT, vv = k - r * VT, v = v0 + vv;
                const bool ok = v < wh && lrow[r] >= 0;
                cp_async8_zfill(&r_s[buf][r][vv], right + (ok ? (row0 + r) * wh + v : 0), ok);
                cp_async8_zfill(&l_s[buf][r][vv], left + (ok ? lrow[r] + v : 0), ok);
            }
            for (int k = tid; k < VT * gp; k += nthreads) {
                const int vv = k / gp, j = k - vv * gp, v = v0 + vv;
                cp_async8_zfill(&tw_s[buf][vv][j], tw + (v < wh ? (long long)v * gp + j : 0),
                                v < wh);
            }
            cp_async_commit();
        }
        if (s == 0) continue;
        const int buf = (s - 1) & 1;
        if (s < stages) {
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int vv = VT - 1; vv >= 0; --vv) {
            float qx[RB], qy[RB];
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                // (a + ib)(c - id) = (ac + bd) + i(bc - ad), as conj_product
                const float2 a = l_s[buf][lane + 32 * r][vv], b = r_s[buf][lane + 32 * r][vv];
                qx[r] = scale * (a.x * b.x + a.y * b.y);
                qy[r] = scale * (a.y * b.x - a.x * b.y);
            }
#pragma unroll
            for (int p = 0; p < PAIRS; ++p) {
                const float2 e = tw_s[buf][vv][g * PAIRS + p];
#pragma unroll
                for (int r = 0; r < RB; ++r) {
                    A[r][p] = fmaf(qx[r], e.x, A[r][p]);
                    B[r][p] = fmaf(qy[r], e.y, B[r][p]);
                    C[r][p] = fmaf(qx[r], e.y, C[r][p]);
                    D[r][p] = fmaf(qy[r], e.x, D[r][p]);
                }
            }
        }
        __syncthreads();  // (buffer buf is the stage after next's)
    }
    const int X = 2 * xmax + 1;
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        const long long m = row0 + lane + 32 * r;
        if (m >= rows_total) continue;
        double* o = h + m * 2 * X;
#pragma unroll
        for (int p = 0; p < PAIRS; ++p) {
            const int x = g * PAIRS + p;
            if (x > xmax) continue;
            o[xmax + x] = (double)A[r][p] - (double)B[r][p];
            o[X + xmax + x] = (double)C[r][p] + (double)D[r][p];
            if (x > 0) {
                o[xmax - x] = (double)A[r][p] + (double)B[r][p];
                o[X + xmax - x] = (double)D[r][p] - (double)C[r][p];
            }
        }
    }
}

// A block a plane, its WARPS warps each down a run of the fy rows u of H, a lane a column j of
// the window (32 at a time): for |y| = k in 0..ymax, A_k = sum cos(2 pi u k / fy) H_re[u, j],
// B_k = sum sin(...) H_im[u, j] give both c[k, j] = A_k - B_k and c[-k, j] = A_k + B_k; the
// twiddles of row u are the powers of its step e^{2 pi i u / fy} (step[u], float64: within
// about 20 ulp at k = 19), the warps' sums added in shared memory.  (A warp a plane down all fy
// rows, the twiddles loaded, waited a load's latency a row.)
template <int WARPS, int YP>
__global__ void __launch_bounds__(WARPS * 32) window_columns(
        const double* __restrict__ h, const double2* __restrict__ step, float* __restrict__ out,
        int fy, int ho, int wo, int xmax, int x0, int y0, int ymax) {
    __shared__ double part[WARPS - 1][2 * YP][32];
    const long long b = blockIdx.x;
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, X = 2 * xmax + 1;
    const double* hb = h + b * fy * 2 * X;
    const int run = (fy + WARPS - 1) / WARPS, ua = w * run, ub = min(fy, ua + run);
    for (int j0 = 0; j0 < wo; j0 += 32) {
        const int j = j0 + lane, jj = xmax + x0 + min(j, wo - 1);
        double A[YP], B[YP];
#pragma unroll
        for (int k = 0; k < YP; ++k) A[k] = B[k] = 0.0;
#pragma unroll 4
        for (int u = ua; u < ub; ++u) {
            const double hr = hb[(long long)u * 2 * X + jj];
            const double hi = hb[(long long)u * 2 * X + X + jj];
            const double2 e = step[u];
            double c = 1.0, sn = 0.0;
#pragma unroll
            for (int k = 0; k < YP; ++k) {
                if (k <= ymax) {
                    A[k] = fma(c, hr, A[k]);
                    B[k] = fma(sn, hi, B[k]);
                    const double c2 = fma(c, e.x, -sn * e.y);
                    sn = fma(c, e.y, sn * e.x);
                    c = c2;
                }
            }
        }
        if (j0 > 0) __syncthreads();  // (the last columns' parts read)
        if (w > 0) {
#pragma unroll
            for (int k = 0; k < YP; ++k) {
                part[w - 1][k][lane] = A[k];
                part[w - 1][YP + k][lane] = B[k];
            }
        }
        __syncthreads();
        if (w > 0 || j >= wo) continue;
        float* o = out + b * ho * wo + j;
#pragma unroll
        for (int k = 0; k < YP; ++k) {
            double a = A[k], bs = B[k];
            for (int q = 0; q < WARPS - 1; ++q) {
                a += part[q][k][lane];
                bs += part[q][YP + k][lane];
            }
            const int i = k - y0;  // y = k
            if (i >= 0 && i < ho) o[(long long)i * wo] = (float)(a - bs);
            const int i2 = -k - y0;  // y = -k
            if (k > 0 && i2 >= 0 && i2 < ho) o[(long long)i2 * wo] = (float)(a + bs);
        }
    }
}
