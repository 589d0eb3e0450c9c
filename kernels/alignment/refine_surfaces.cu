// The patch pass's refinement, fused (xcorr_app/alignment/piecewise/_patches.py refine_shifts;
// launched by xcorr_app/alignment/piecewise/_refine_gpu.py refine_surfaces_gpu).
//
// Per window (p, n), one block: what xcorr_app/alignment/piecewise/_patches.py windows_through()
// and tapered(), the n_to_mn correlation within +-1 px, xcorr_app/registration/_normalize.py zncc()
// and the peak search did in five launches and four CuPy operations over (P, N, ph, pw) arrays, in
// one pass over the window (written once to `win`, read back by the same block, from L2):
//   v = the window sampled through the field as windows_through, its taps in float32, the
//       field's sums and the sample's position in float32 too (cubic_shifted<float>: within
//       about 1e-6 px of the float64 position; written to win)
//   t = (v - mean(v)) * taper, the float32 operations of tapered (v itself where has_taper is 0)
//   z[ky + 1][kx + 1], ky, kx in -1..1: the ZNCC of template patch L = tpl[p] against t:
//     c = sum over the overlap of L[q + k] t[q] (float32 over at most BAND_ROWS rows of a
//     column, float64 across; rounded to float32 as the correlation kernels' output is), the
//     right side's sum and sum of squares over the overlap (float64: the window's total less
//     its edge rows and columns, plus the corners), the left side's mean, variance and bad
//     flag given per patch and shift (xcorr_app/registration/_normalize.py zncc_left, host)
//   iy, ix: the first maximum of z in row-major order (float keys, as zncc_peaks.cu)
// With has_last, a window whose last pass's correction `last` (P, N, 2) is under `converged` px
// on both axes gets the flat surface (1 at the centre, 0.5 around it) and no sampling.
// Grid (P, frames of this launch).  Sampling, a strip of `strip` rows at a time: the threads
// over the strip's items (a column, a band of consecutive rows: refine_bands), each walking its
// column down the band with the column's field weights in registers (the grid's width at run
// time: over the strip's pixels in row-major order).  Sums: the threads over the items of the
// window, each walking its column down the band holding three rows of
// L's three columns in registers (three reads a pixel, not nine, and the overlap's bounds
// checked once a column and row, not nine times a pixel).
// Dynamic shared memory: strip * 2 * gx floats (the strip's row coefficients, interleaved,
// rounded to float32 from `rows`: field_rows below, made by one launch before); the column
// weights wxt (gx, w) float32.
// (Float64 taps and 27 float64 sums a thread in one loop took 88 registers, two blocks an SM;
// the taps in float32, the edges' sums in a loop of their own and the cross sums of a row in
// float32 take 64 registers, four blocks an SM: faster, bound by its instructions a pixel.)

#include "field_sample.cuh"
#include "float_keys.cuh"

// xcorr_app/registration/_normalize.py FLAT: an overlap with variance at most this share of its
// sum of squares is constant
#define REFINE_FLAT 1e-12
#define REFINE_SUMS 27  // 9 cross sums, the total, four edges and four corners (each x and x^2)
// the rows of a column summed in float32 before they are added to the float64 sums (the
// sampling of one row of 512 px by 32 lanes summed 16 in float32 as well)
#ifndef BAND_ROWS
#define BAND_ROWS 16
#endif
// warps an SM the registers must allow (32: 64 registers a thread; at 24, 80 registers, and at
// 48 spills: slower)
#ifndef REFINE_SM_WARPS
#define REFINE_SM_WARPS 32
#endif

// The refinement's window value at (r, c) as tapered makes it: (v - mean) * taper, float32
// operations one by one (v itself where has_taper is 0).
__device__ __forceinline__ float refine_tapered(const float* wnd, const float* __restrict__ taper,
                                                int has_taper, float mean, int r, int c,
                                                int pw) {
    const float t = wnd[(size_t)r * pw + c];
    return has_taper ? __fmul_rn(__fsub_rn(t, mean), taper[(size_t)r * pw + c]) : t;
}

// Template patch L's columns c - 1, c, c + 1 of row yy (0 outside the patch: outside the
// overlap of that shift).
__device__ __forceinline__ void template_row(const float* __restrict__ L, int yy, int c, int ph,
                                             int pw, bool left, bool right, float& a, float& b,
                                             float& e) {
    const bool in = yy >= 0 && yy < ph;
    const float* row = L + (size_t)yy * pw + c;
    a = in && left ? row[-1] : 0.0f;
    b = in ? row[0] : 0.0f;
    e = in && right ? row[1] : 0.0f;
}

// The bands of rows the cross sums split a window's rows into, a thread walking a column down
// a band (an item) at a time: the count from WARPS to 4 WARPS (bands of at least 8 rows) whose
// busiest thread walks the fewest rows, its items' set-up counted as two rows (ties: fewer
// bands).  (WARPS bands, a warp's lanes over the columns: on 75 columns 3 columns of 19 rows a
// lane, 23% of the lanes idle; 5 bands: 3 items of 15 rows.)
template <int THREADS>
__device__ __forceinline__ int refine_bands(int ph, int pw) {
    constexpr int WARPS = THREADS / 32;
    int best = WARPS, best_cost = 0x7fffffff;
    for (int b = WARPS; b <= 4 * WARPS; ++b) {
        const int rows = (ph + b - 1) / b;
        if (b > WARPS && rows < 8) break;
        const int cost = (b * pw + THREADS - 1) / THREADS * (rows + 2);
        if (cost < best_cost) {
            best = b;
            best_cost = cost;
        }
    }
    return best;
}

// Sums v[k] over the block into tot[k] (shared); every thread calls it (it synchronizes).
template <int THREADS, int V>
__device__ __forceinline__ void block_sums(double (&v)[V], double* red, double* tot) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < V; ++k) {
#pragma unroll
        for (int off = 16; off > 0; off /= 2) v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
        if (lane == 0) red[warp * V + k] = v[k];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < V; k += THREADS) {
        double acc = 0.0;
        for (int i = 0; i < THREADS / 32; ++i) acc += red[i * V + k];
        tot[k] = acc;
    }
    __syncthreads();
}

// rows[(n * h + y) * 2 gx + 2 j + a] = sum_i wy[y, i] S[n0 + n, i, j, a] (row_coefficient):
// the field's row coefficients, interleaved as along_row2_fixed reads them, of every row of the
// frames n0 .. n0 + gridDim.y - 1; grid (ceil(h * 2 gx / 128), frames), 128 threads.  Made once
// for the refinement's launch: its blocks computed them per warp and window row, 7-9% of its
// instructions and a wait on dependent loads a row.
__global__ void field_rows(const double* __restrict__ wy, const double* __restrict__ s,
                           double* __restrict__ rows, int n0, int h, int gy, int gx) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= h * 2 * gx) return;
    const int y = k / (2 * gx), kk = k - y * 2 * gx;
    rows[(size_t)blockIdx.y * h * 2 * gx + k] =
        row_coefficient2(wy, s, y, n0 + (int)blockIdx.y, gy, gx, kk);
}

// The field's weights of one column x (wxt (gx, w) float32, transposed), and the field at a
// row of that column from the row's interleaved coefficients cf (2 gx floats, shared memory):
// sum_j cf[j] wx[x, j] for both axes, the sums of along_row2_fixed in its order.  GX > 0: the
// weights held in registers, the coefficients read 16 bytes at a time where GX is even (a
// row's 2 GX floats then start 16-byte aligned).
template <int GX>
struct ColumnWeights {
    float v[GX];
    __device__ __forceinline__ ColumnWeights(const float* __restrict__ wxt, int x, int w, int) {
#pragma unroll
        for (int j = 0; j < GX; ++j) v[j] = wxt[j * w + x];  // (32-bit offsets: gx w < 2^31)
    }
    __device__ __forceinline__ float2 field(const float* cf) const {
        float a = 0.0f, b = 0.0f;
        if constexpr (GX % 2 == 0) {
            const float4* c4 = reinterpret_cast<const float4*>(cf);
#pragma unroll
            for (int j = 0; j < GX; j += 2) {
                const float4 c = c4[j / 2];
                a += c.x * v[j];
                b += c.y * v[j];
                a += c.z * v[j + 1];
                b += c.w * v[j + 1];
            }
        } else {
            const float2* c2 = reinterpret_cast<const float2*>(cf);
#pragma unroll
            for (int j = 0; j < GX; ++j) {
                const float2 c = c2[j];
                a += c.x * v[j];
                b += c.y * v[j];
            }
        }
        return make_float2(a, b);
    }
};

// GX: the grid's width at compile time (1 to 8: xcorr_app/alignment/piecewise/_refine_gpu.py
// REFINE_GX; 0: any, read from gx): the field's sums a pixel unrolled (with the width read at
// run time the loop's control and set-up were a fifth of the sampling's instructions a pixel)
template <int THREADS, int GX>
__global__ void __launch_bounds__(THREADS, REFINE_SM_WARPS * 32 / THREADS) refine_surfaces(
        const float* __restrict__ frames, float* win, const double* __restrict__ rows,
        const float* __restrict__ wxt,
        const int* __restrict__ sy, const int* __restrict__ sx,
        const float* __restrict__ taper, int has_taper, const float* __restrict__ tpl,
        const double* __restrict__ lmean, const double* __restrict__ lvar,
        const bool* __restrict__ lbad, float* __restrict__ z, long long* __restrict__ iy_out,
        long long* __restrict__ ix_out, int n0, int n_total, int h, int w, int gx, int ph,
        int pw, int strip, const double* __restrict__ last, int has_last, double converged) {
    constexpr int WARPS = THREADS / 32;
    extern __shared__ __align__(16) float coef[];  // strip * 2 * gx: the strip's rows'
                                                   // coefficients
    __shared__ double red[WARPS * REFINE_SUMS];
    __shared__ double tot[REFINE_SUMS];
    __shared__ double acc[11 * THREADS];
    __shared__ float zs[9];
    const int p = blockIdx.x, n = n0 + (int)blockIdx.y;
    if (has_last) {  // a window converged (its last correction under `converged` on both
                     // axes) is not measured again: a flat surface about its centre, whose
                     // subpixel offset is 0 exactly (the block leaves before any barrier)
        const size_t surface = (size_t)p * n_total + n;
        if (fabs(last[surface * 2]) < converged && fabs(last[surface * 2 + 1]) < converged) {
            if (threadIdx.x < 9) z[surface * 9 + threadIdx.x] = threadIdx.x == 4 ? 1.0f : 0.5f;
            if (threadIdx.x == 0) {
                iy_out[surface] = 1;
                ix_out[surface] = 1;
            }
            return;
        }
    }
    const int ys = sy[p / gx], xs = sx[p % gx];
    const float* f = frames + (size_t)n * h * w;
    float* wnd = win + ((size_t)p * n_total + n) * ph * pw;

    // the window through the field, a strip of rows at a time: the strip's row coefficients
    // into shared memory (one copy of consecutive doubles from `rows`), then the threads over
    // items of the strip (a column down a band of rows, the bands as the cross sums' below),
    // each holding its column's weights of the field in registers (ColumnWeights) while it
    // walks down the band.  (The threads over the pixels in row-major order read the column's
    // gx weights a pixel: 8 loads and their addresses of the sampling's 165 instructions a
    // pixel at 8x8.  A warp a row, lanes over its columns, left a quarter of a 74-px row's
    // lanes idle and paid the row's set-up every 2.3 pixels a lane.)
    double one[1] = {0.0};
    for (int r0 = 0; r0 < ph; r0 += strip) {
        const int rn = min(strip, ph - r0);
        const double* src = rows + ((size_t)blockIdx.y * h + ys + r0) * 2 * gx;
        if (r0 > 0) __syncthreads();  // (the last strip's coefficients read)
        for (int k = threadIdx.x; k < rn * 2 * gx; k += THREADS) coef[k] = (float)src[k];
        __syncthreads();
        if constexpr (GX == 0) {  // (the width at run time: the threads over the pixels in
                                  // row-major order; a column's weights held, it spilled)
            const int dr = THREADS / pw, dc = THREADS - dr * pw;  // a thread's step
            int r = (int)threadIdx.x / pw, c = (int)threadIdx.x - r * pw;
            while (r < rn) {
                const int y = ys + r0 + r, x = xs + c;
                const float2 d = along_row2_fixed<0>(
                    reinterpret_cast<const float2*>(coef + r * 2 * gx), wxt, x, w, gx);
                const float v = cubic_shifted<float>(f, h, w, y, x, d.x, d.y);
                wnd[(r0 + r) * pw + c] = v;
                one[0] += (double)v;
                r += dr;
                c += dc;
                if (c >= pw) {
                    c -= pw;
                    ++r;
                }
            }
        } else {
            const int nb = refine_bands<THREADS>(rn, pw), band = (rn + nb - 1) / nb;
            for (int i = threadIdx.x; i < nb * pw; i += THREADS) {
                const int b = i / pw, c = i - b * pw;
                const int rb = b * band, re = min(rn, rb + band);
                const int x = xs + c;
                const ColumnWeights<GX> cw(wxt, x, w, gx);
                const float* cf = coef + rb * 2 * gx;
                float* o = wnd + (r0 + rb) * pw + c;
                for (int y = ys + r0 + rb, ye = y + (re - rb); y < ye; ++y) {
                    const float2 d = cw.field(cf);
                    const float v = cubic_shifted<float>(f, h, w, y, x, d.x, d.y);
                    *o = v;
                    one[0] += (double)v;
                    cf += 2 * GX;
                    o += pw;
                }
            }
        }
    }
    block_sums<THREADS, 1>(one, red, tot);  // (also makes the window's writes visible)
    const float mean = (float)(tot[0] / ((double)ph * (double)pw));

    // the correlation sums within +-1 px and the window's sums (11 values a thread: the edges'
    // sums come after, so that the main loop holds fewer float64 registers)
    const float* L = tpl + (size_t)p * ph * pw;
    // the window's sums in float32 are of t less the window's mean (0 when tapered: t is
    // centred already): float32 sums of an untapered t's squares lose its variance (a flat
    // window's must stay 0 to within the float64 sums' rounding:
    // xcorr_app/registration/_normalize.py FLAT)
    const float shift = has_taper ? 0.0f : mean;
    {
        // each thread's float64 sums in shared memory between the columns (in registers they
        // spilled: 80 registers were not enough beside the loop's)
        volatile double* mine = acc + threadIdx.x;  // (volatile: kept in memory)
#pragma unroll
        for (int k = 0; k < 11; ++k) mine[k * THREADS] = 0.0;
        // the items: a column down a band of rows, the bands as refine_bands chooses
        const int nb = refine_bands<THREADS>(ph, pw), band = (ph + nb - 1) / nb;
        for (int i = threadIdx.x; i < nb * pw; i += THREADS) {
            const int b = i / pw, c = i - b * pw;
            const int r0 = b * band, r1 = min(ph, r0 + band);
            if (r0 >= r1) continue;
            const bool left = c > 0, right = c + 1 < pw;
            float a0, a1, a2, b0, b1, b2;  // rows r - 1 and r
            template_row(L, r0 - 1, c, ph, pw, left, right, a0, a1, a2);
            template_row(L, r0, c, ph, pw, left, right, b0, b1, b2);
            for (int rb = r0; rb < r1; rb += BAND_ROWS) {
                // a column's cross sums over at most BAND_ROWS rows in float32, added to the
                // float64 sums after; the cross sums end rounded to float32 anyway
                float u[11];
#pragma unroll
                for (int k = 0; k < 11; ++k) u[k] = 0.0f;
                const int re = min(r1, rb + BAND_ROWS);
                for (int r = rb; r < re; ++r) {
                    float e0, e1, e2;  // row r + 1
                    template_row(L, r + 1, c, ph, pw, left, right, e0, e1, e2);
                    const float t = refine_tapered(wnd, taper, has_taper, mean, r, c, pw);
                    u[0] = __fmaf_rn(a0, t, u[0]);
                    u[1] = __fmaf_rn(a1, t, u[1]);
                    u[2] = __fmaf_rn(a2, t, u[2]);
                    u[3] = __fmaf_rn(b0, t, u[3]);
                    u[4] = __fmaf_rn(b1, t, u[4]);
                    u[5] = __fmaf_rn(b2, t, u[5]);
                    u[6] = __fmaf_rn(e0, t, u[6]);
                    u[7] = __fmaf_rn(e1, t, u[7]);
                    u[8] = __fmaf_rn(e2, t, u[8]);
                    a0 = b0; a1 = b1; a2 = b2;
                    b0 = e0; b1 = e1; b2 = e2;
                    const float dt = t - shift;
                    u[9] += dt;
                    u[10] = __fmaf_rn(dt, dt, u[10]);
                }
#pragma unroll
                for (int k = 0; k < 11; ++k) mine[k * THREADS] += (double)u[k];
            }
        }
        double v[11];
#pragma unroll
        for (int k = 0; k < 11; ++k) v[k] = mine[k * THREADS];
        block_sums<THREADS, 11>(v, red, tot);
    }
    {   // the edge rows and columns (each x and x^2): tot[11..18]; the corners: tot[19..26]
        double e[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) e[k] = 0.0;
#pragma unroll 1  // (a few iterations; unrolled, they spilled)
        for (int c = threadIdx.x; c < pw; c += THREADS) {
            const double a = (double)refine_tapered(wnd, taper, has_taper, mean, 0, c, pw);
            const double b = (double)refine_tapered(wnd, taper, has_taper, mean, ph - 1, c, pw);
            e[0] += a; e[1] += a * a; e[2] += b; e[3] += b * b;
        }
#pragma unroll 1  // (a few iterations; unrolled, they spilled)
        for (int r = threadIdx.x; r < ph; r += THREADS) {
            const double a = (double)refine_tapered(wnd, taper, has_taper, mean, r, 0, pw);
            const double b = (double)refine_tapered(wnd, taper, has_taper, mean, r, pw - 1, pw);
            e[4] += a; e[5] += a * a; e[6] += b; e[7] += b * b;
        }
        if (threadIdx.x < 4) {  // the corners: top left, top right, bottom left, bottom right
            const int k = threadIdx.x;
            const double a = (double)refine_tapered(wnd, taper, has_taper, mean,
                                                    k < 2 ? 0 : ph - 1, k % 2 ? pw - 1 : 0, pw);
            tot[19 + 2 * k] = a;  // (read after block_sums' barriers)
            tot[20 + 2 * k] = a * a;
        }
        block_sums<THREADS, 8>(e, red, tot + 11);  // (the last block_sums synchronized red)
    }

    const size_t surface = (size_t)p * n_total + n;
    if (threadIdx.x < 9) {
        const int k = threadIdx.x, ky = k / 3 - 1, kx = k % 3 - 1;
        const double npix = (double)ph * (double)pw, m = (double)shift;
        const double s1 = tot[9], s2 = tot[10];  // of t - shift
        const double total[2] = {s1 + npix * m, s2 + m * (2.0 * s1 + npix * m)};
        double sum[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // e = 0: the values, 1: their squares
            double a = total[e];
            if (ky < 0) a -= tot[11 + e];
            if (ky > 0) a -= tot[13 + e];
            if (kx < 0) a -= tot[15 + e];
            if (kx > 0) a -= tot[17 + e];
            if (ky < 0 && kx < 0) a += tot[19 + e];
            if (ky < 0 && kx > 0) a += tot[21 + e];
            if (ky > 0 && kx < 0) a += tot[23 + e];
            if (ky > 0 && kx > 0) a += tot[25 + e];
            sum[e] = a;
        }
        const double nn = fmax((double)((ph - abs(ky)) * (pw - abs(kx))), 1.0);
        const size_t q = (size_t)p * 9 + k;
        const double num = (double)(float)tot[k] - lmean[q] * sum[0];
        double vb = sum[1] - sum[0] * sum[0] / nn;
        bool ok = !lbad[q] && vb > REFINE_FLAT * sum[1];
        vb = fmax(vb, 0.0) * lvar[q];
        ok = ok && vb > 0.0;
        const float zk = ok ? (float)(num / sqrt(vb)) : -1.0f;
        zs[k] = zk;
        z[surface * 9 + k] = zk;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long best = 0;
        for (int k = 0; k < 9; ++k) {
            const unsigned long long key =
                ((unsigned long long)ordered_key(zs[k]) << 32) | (0xffffffffu - (unsigned int)k);
            best = key > best ? key : best;
        }
        const int k = (int)(0xffffffffu - (unsigned int)(best & 0xffffffffull));
        iy_out[surface] = k / 3;
        ix_out[surface] = k % 3;
    }
}


// The template's side of the refinement, made on the device once per pass (launched by
// xcorr_app/alignment/piecewise/_refine_gpu.py refine_template_gpu): for template patch
// p = blockIdx.x of tpl (P, ph, pw) float32,
//   out[p] = (tpl[p] - mean) * taper, the float32 operations of
//            xcorr_app/alignment/piecewise/_patches.py tapered() (mean: the patch's float64 mean
//            rounded to float32; tpl[p] itself where has_taper is 0)
//   lmean, lvar, lbad[p, ky + 1, kx + 1] for ky, kx in -1..1:
//            xcorr_app/registration/_normalize.py zncc_left of out[p] for a window of its own
//            size within +-1 px: the overlap (the patch less its last row for ky = -1, its
//            first for ky = 1, columns likewise) n = (ph - |ky|)(pw - |kx|),
//            its sum and sum of squares in float64 (the total less the edge row and column,
//            plus their corner), mean = sum / max(n, 1), var = max(sum2 - sum^2 / max(n, 1), 0),
//            bad = n < max(0.25 ph pw, 1) or the variance at most REFINE_FLAT of sum2.
// The same numbers as NumPy's up to float64 rounding (its sums run in another order).  These
// were made on the host (a wait for the device and NumPy's work while the GPU idled at the
// start of every patch pass).  Grid (P,), THREADS threads.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) refine_template(
        const float* __restrict__ tpl, const float* __restrict__ taper, int has_taper,
        float* __restrict__ out, double* __restrict__ lmean, double* __restrict__ lvar,
        bool* __restrict__ lbad, int ph, int pw) {
    __shared__ double red[THREADS / 32 * 10];
    __shared__ double tot[10];
    const int p = blockIdx.x, size = ph * pw;
    const float* L = tpl + (size_t)p * size;
    float* o = out + (size_t)p * size;
    double m[1] = {0.0};
    for (int i = threadIdx.x; i < size; i += THREADS) m[0] += (double)L[i];
    block_sums<THREADS, 1>(m, red, tot);
    const float mean = (float)(tot[0] / (double)size);
    __syncthreads();  // (tot is written again below)
    // sums of v and v^2: [0] the total, [1] row 0, [2] row ph - 1, [3] column 0, [4] column pw - 1
    double s[10] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = threadIdx.x; i < size; i += THREADS) {
        const int r = i / pw, c = i - r * pw;
        const float v = has_taper ? __fmul_rn(__fsub_rn(L[i], mean), taper[i]) : L[i];
        o[i] = v;
        const double d = (double)v, d2 = d * d;
        const bool in[5] = {true, r == 0, r == ph - 1, c == 0, c == pw - 1};
#pragma unroll
        for (int k = 0; k < 5; ++k) {
            s[2 * k] += in[k] ? d : 0.0;
            s[2 * k + 1] += in[k] ? d2 : 0.0;
        }
    }
    block_sums<THREADS, 10>(s, red, tot);
    if (threadIdx.x >= 9) return;
    const int ky = (int)threadIdx.x / 3 - 1, kx = (int)threadIdx.x % 3 - 1;
    // the excluded row and column (ky = -1: the last row, 1: the first; 0: none)
    const int er = ky < 0 ? 2 : ky > 0 ? 1 : 0, ec = kx < 0 ? 4 : kx > 0 ? 3 : 0;
    double sa = tot[0], saa = tot[1];
    if (er) {
        sa -= tot[2 * er];
        saa -= tot[2 * er + 1];
    }
    if (ec) {
        sa -= tot[2 * ec];
        saa -= tot[2 * ec + 1];
    }
    if (er && ec) {  // their corner, taken twice
        const int i = (er == 1 ? 0 : ph - 1) * pw + (ec == 3 ? 0 : pw - 1);
        const float v = has_taper ? __fmul_rn(__fsub_rn(L[i], mean), taper[i]) : L[i];
        sa += (double)v;
        saa += (double)v * (double)v;
    }
    const double n = (double)((ph - abs(ky)) * (pw - abs(kx)));
    const double nn = fmax(n, 1.0);
    const double va = saa - sa * sa / nn;
    const int k = p * 9 + threadIdx.x;
    lmean[k] = sa / nn;
    lvar[k] = fmax(va, 0.0);
    lbad[k] = n < fmax(0.25 * (double)size, 1.0) || va <= REFINE_FLAT * saa;
}
