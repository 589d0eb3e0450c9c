// The GPU side of piecewise-rigid registration (xcorr_app/alignment/_field_resample.py launches
// these; the NumPy definitions there are the reference, equal to float rounding):
//
//   patch_windows    the patch windows of every frame of a chunk, moved by the frame's integer
//                    rigid shift: (P, N, ph, pw) float32 gathered from (N, H, W) float32
//   windows_through  the same windows sampled through the smooth motion field (cubic
//                    convolution, Keys a = -0.5, taps clamped to the frame: "nearest")
//   warp_field       every frame of a chunk warped by its motion field (bilinear, or cubic
//                    convolution), pixels whose source lies outside the frame get `fill`
//
// The field at a pixel is evaluated in the kernel from the patch shifts, never stored per
// pixel: s(y, x) = sum_j (sum_i wy[y, i] * S[n, i, j, a]) * wx[x, j], the natural cubic
// spline weights wy (H, gy) and wx (W, gx) of _field_resample.spline_weights (float64), the
// patch field S (N, gy, gx, 2) float64 (NaN already 0).  One block per output row: the
// row's 2 * gx coefficients (the bracket) are computed once into shared memory, then each
// thread evaluates its pixels: the sums of the CPU's `wy @ S @ wx.T`, associated the same way.
// Coordinates and weights are float64, the pixels are read as float32 (the CPU converts the
// frames to float32 first) and summed in float64.
//
// Grids: x: rows, y: patches (windows) or 1, z or y: frames (at most 65535 per launch: the
// launcher offsets `n0`).

// Coefficient k of row y of frame n: (a = k / gx, j = k % gx) sum_i wy[y, i] S[n, i, j, a].
__device__ __forceinline__ double row_coefficient(const double* __restrict__ wy,
                                                  const double* __restrict__ s, int y, int n,
                                                  int gy, int gx, int k) {
    const int a = k / gx, j = k - a * gx;
    double acc = 0.0;
    for (int i = 0; i < gy; ++i)
        acc += wy[(size_t)y * gy + i] * s[(((size_t)n * gy + i) * gx + j) * 2 + a];
    return acc;
}

// The shared coefficients of row y of frame n: coef[a * gx + j] = sum_i wy[y, i] S[n, i, j, a].
// Every thread of the block must call it (it synchronizes).
__device__ __forceinline__ void row_coefficients(const double* __restrict__ wy,
                                                 const double* __restrict__ s, int y, int n,
                                                 int gy, int gx, double* coef) {
    for (int k = threadIdx.x; k < 2 * gx; k += blockDim.x)
        coef[k] = row_coefficient(wy, s, y, n, gy, gx, k);
    __syncthreads();
}

// sum_j coef[j] * wx[x, j]
__device__ __forceinline__ double along_row(const double* coef, const double* __restrict__ wx,
                                            int x, int gx) {
    double acc = 0.0;
    for (int j = 0; j < gx; ++j) acc += coef[j] * wx[(size_t)x * gx + j];
    return acc;
}

// Cubic convolution weights (Keys, a = -0.5) of the taps at -1, 0, 1, 2 for the fraction t, in
// the arithmetic A (float64 where the definition's numbers are met to float64 rounding, float32
// in the refinement: cubic_at<float>, within about 1e-7 of the pixels' range).
#define KEYS_A (-0.5)
template <typename A>
__device__ __forceinline__ A keys_outer(A d) {  // 1 <= |d| <= 2
    const A a = (A)KEYS_A;
    return ((a * d - (A)5.0 * a) * d + (A)8.0 * a) * d - (A)4.0 * a;
}
template <typename A>
__device__ __forceinline__ A keys_inner(A d) {  // |d| <= 1
    const A a = (A)KEYS_A;
    return ((a + (A)2.0) * d - (a + (A)3.0)) * d * d + (A)1.0;
}

__device__ __forceinline__ int clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// Cubic convolution at (cy, cx) of an h x w image, taps clamped to the image, in the
// arithmetic A (the coordinates' floors in float64).  The sum runs over the tap rows k of
// (sum over the tap columns l of wx_l * v), in this order.
template <typename A, typename T>
__device__ __forceinline__ A cubic_at(const T* __restrict__ f, int h, int w, double cy,
                                      double cx) {
    // (far outside, every tap is clamped to the edge anyway: keeps the int conversion defined)
    cy = fmin(fmax(cy, -8.0), (double)h + 7.0);
    cx = fmin(fmax(cx, -8.0), (double)w + 7.0);
    const double fy = floor(cy), fx = floor(cx);
    const A ty = (A)(cy - fy), tx = (A)(cx - fx);
    const int y0 = (int)fy - 1, x0 = (int)fx - 1;
    const A wy0 = keys_outer(ty + (A)1.0), wy1 = keys_inner(ty), wy2 = keys_inner((A)1.0 - ty),
            wy3 = keys_outer((A)2.0 - ty);
    const A wx0 = keys_outer(tx + (A)1.0), wx1 = keys_inner(tx), wx2 = keys_inner((A)1.0 - tx),
            wx3 = keys_outer((A)2.0 - tx);
    const int c0 = clampi(x0, 0, w - 1), c1 = clampi(x0 + 1, 0, w - 1),
              c2 = clampi(x0 + 2, 0, w - 1), c3 = clampi(x0 + 3, 0, w - 1);
    A acc = (A)0.0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const T* row = f + (size_t)clampi(y0 + k, 0, h - 1) * w;
        A r = wx0 * (A)(float)row[c0];
        r += wx1 * (A)(float)row[c1];
        r += wx2 * (A)(float)row[c2];
        r += wx3 * (A)(float)row[c3];
        const A wk = k == 0 ? wy0 : (k == 1 ? wy1 : (k == 2 ? wy2 : wy3));
        acc += wk * r;
    }
    return acc;
}

// Bilinear at (cy, cx), inside [0, h - 1] x [0, w - 1] (the caller checks); a tap of weight
// 0 (a coordinate on a pixel) is not read, as in scipy.ndimage.map_coordinates(order=1), so a
// NaN beside it does not spread.
template <typename T>
__device__ __forceinline__ double bilinear_at(const T* __restrict__ f, int h, int w, double cy,
                                              double cx) {
    const double fy = floor(cy), fx = floor(cx);
    const double ty = cy - fy, tx = cx - fx;
    const int y0 = (int)fy, x0 = (int)fx;
    const int y1 = min(y0 + 1, h - 1), x1 = min(x0 + 1, w - 1);
    const T* r0 = f + (size_t)y0 * w;
    double top = (double)(float)r0[x0];
    if (tx != 0.0) top = (1.0 - tx) * top + tx * (double)(float)r0[x1];
    if (ty == 0.0) return top;
    const T* r1 = f + (size_t)y1 * w;
    double bottom = (double)(float)r1[x0];
    if (tx != 0.0) bottom = (1.0 - tx) * bottom + tx * (double)(float)r1[x1];
    return (1.0 - ty) * top + ty * bottom;
}

// Grid (ph, P, frames of this launch), THREADS threads over the window's columns.
// out[r, j, k] = a[r * as0 + j * as1 + k * as2] + b[r * bs0 + j * bs1 + k * bs2] over (n0, n1,
// n2) in C order, element strides (0 where an operand broadcasts): the patch pass's small
// per-chunk field sums, by a kernel that ships built (three CuPy additions, each compiled for
// its own shapes, took 0.33 s of a first run)
__global__ void add_fields(const double* __restrict__ a, const double* __restrict__ b,
                           double* __restrict__ out, long long n1, long long n2, long long total,
                           long long as0, long long as1, long long as2, long long bs0,
                           long long bs1, long long bs2) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long k = i % n2, t = i / n2, j = t % n1, r = t / n1;
        out[i] = a[r * as0 + j * as1 + k * as2] + b[r * bs0 + j * bs1 + k * bs2];
    }
}

// out[i] = numpy.nan_to_num(field[i], nan=0): NaN (a frame not measured) 0, +-inf the largest
// finite double; the field as the other kernels read it, made by a kernel that ships built
// (CuPy's nan_to_num compiled two kernels on a first run, 0.3 s)
__global__ void finite_field(const double* __restrict__ field, double* __restrict__ out,
                             long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double v = field[i];
        out[i] = isnan(v) ? 0.0 : fmin(fmax(v, -1.7976931348623157e308), 1.7976931348623157e308);
    }
}

// out[p, n, r, c] = frames[n, sy[p / gx] + r - shift[n, 0], sx[p % gx] + c - shift[n, 1]]
// for n = n0 + blockIdx.z; the windows lie inside the frames (the grid's margin).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) patch_windows(
        const float* __restrict__ frames, float* __restrict__ out,
        const long long* __restrict__ shift, const int* __restrict__ sy,
        const int* __restrict__ sx, int n0, int n_total, int h, int w, int gx, int ph, int pw) {
    const int r = blockIdx.x, p = blockIdx.y, n = n0 + blockIdx.z;
    const int y = sy[p / gx] + r - (int)shift[2 * (size_t)n];
    const int x0 = sx[p % gx] - (int)shift[2 * (size_t)n + 1];
    const float* src = frames + ((size_t)n * h + y) * w + x0;
    float* dst = out + (((size_t)p * n_total + n) * ph + r) * pw;
    for (int c = threadIdx.x; c < pw; c += THREADS) dst[c] = src[c];
}

// Grid (ph, P, frames of this launch), THREADS threads over the window's columns.
// out[p, n, r, c] = cubic(frames[n]) at q - s(q), q = (sy[p / gx] + r, sx[p % gx] + c).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) windows_through(
        const float* __restrict__ frames, float* __restrict__ out,
        const double* __restrict__ wy, const double* __restrict__ wx,
        const double* __restrict__ s, const int* __restrict__ sy, const int* __restrict__ sx,
        int n0, int n_total, int h, int w, int gy, int gx, int ph, int pw) {
    extern __shared__ double coef[];  // 2 * gx
    const int r = blockIdx.x, p = blockIdx.y, n = n0 + blockIdx.z;
    const int y = sy[p / gx] + r, xs = sx[p % gx];
    row_coefficients(wy, s, y, n, gy, gx, coef);
    const float* f = frames + (size_t)n * h * w;
    float* dst = out + (((size_t)p * n_total + n) * ph + r) * pw;
    for (int c = threadIdx.x; c < pw; c += THREADS) {
        const int x = xs + c;
        const double cy = (double)y - along_row(coef, wx, x, gx);
        const double cx = (double)x - along_row(coef + gx, wx, x, gx);
        dst[c] = (float)cubic_at<double>(f, h, w, cy, cx);
    }
}

// Grid (oh, frames of this launch), THREADS threads over the output's columns.
// out[n, r, c] = frame n at q - s(q), q = (oy + r, ox + c) (the crop's origin); `fill` where
// q - s(q) lies outside [0, h - 1] x [0, w - 1].  CUBIC: cubic convolution, except for frames
// whose `finite[n]` is 0 (NaN or Inf pixels: bilinear, so those pixels do not spread);
// `finite` is read only when `check_finite` is non-zero (else every frame counts as finite).
template <typename T, bool CUBIC, int THREADS>
__global__ void __launch_bounds__(THREADS) warp_field(
        const T* __restrict__ frames, float* __restrict__ out, const double* __restrict__ wy,
        const double* __restrict__ wx, const double* __restrict__ s,
        const bool* __restrict__ finite, int check_finite, int n0, int h, int w, int gy, int gx,
        int oy, int ox, int oh, int ow, float fill) {
    extern __shared__ double coef[];  // 2 * gx
    const int r = blockIdx.x, n = n0 + blockIdx.y;
    const int y = oy + r;
    row_coefficients(wy, s, y, n, gy, gx, coef);
    const T* f = frames + (size_t)n * h * w;
    float* dst = out + ((size_t)n * oh + r) * ow;
    const bool cubic = CUBIC && (check_finite == 0 || finite[n]);
    for (int c = threadIdx.x; c < ow; c += THREADS) {
        const int x = ox + c;
        const double cy = (double)y - along_row(coef, wx, x, gx);
        const double cx = (double)x - along_row(coef + gx, wx, x, gx);
        float v = fill;
        if (cy >= 0.0 && cy <= (double)(h - 1) && cx >= 0.0 && cx <= (double)(w - 1))
            v = (float)(cubic ? cubic_at<double>(f, h, w, cy, cx) : bilinear_at(f, h, w, cy, cx));
        dst[c] = v;
    }
}

// ---- The patch pass's refinement, fused (alignment/_patches.refine_shifts) ----------------------
//
// Per window (p, n), one block: what windows_through, _patches.tapered, the n_to_mn correlation
// within +-1 px, normalize.zncc and the peak search did in five launches and four CuPy
// operations over (P, N, ph, pw) arrays, in one pass over the window (written once to `win`,
// read back by the same block, from L2):
//   v = the window sampled through the field as windows_through, its taps in float32
//       (cubic_at<float>; written to win)
//   t = (v - mean(v)) * taper, the float32 operations of tapered (v itself where has_taper is 0)
//   z[ky + 1][kx + 1], ky, kx in -1..1: the ZNCC of template patch L = tpl[p] against t:
//     c = sum over the overlap of L[q + k] t[q] (float32 within a row of a lane, float64 across,
//     rounded to float32 as the correlation kernels' output is), the right side's sum and sum of squares over the overlap (float64:
//     the window's total less its edge rows and columns, plus the corners), the left side's
//     mean, variance and bad flag given per patch and shift (normalize.zncc_left, host)
//   iy, ix: the first maximum of z in row-major order (float keys, as zncc_peaks.cu)
// Grid (P, frames of this launch); warps over the window's rows, lanes over its columns.
// Dynamic shared memory: WARPS * 2 * gx doubles (each warp's row coefficients).
// (Measured, H100, 2026-11-23: 0.87 ms a launch of 1024 windows of 143x143 with float64 taps
// and 27 float64 sums a thread in one loop (88 registers, two blocks an SM); the five launches
// it replaced took about 1.3 ms.  Now the taps in float32 (cubic_at<float>) and the edges' sums in
// a loop of their own, the cross sums of a row in float32: 64 registers, four blocks an SM.)

#include "float_keys.cuh"

// normalize.FLAT: an overlap with variance at most this share of its sum of squares is constant
#define REFINE_FLAT 1e-12
#define REFINE_SUMS 27  // 9 cross sums, the total, four edges and four corners (each x and x^2)

// The refinement's window value at (r, c) as tapered makes it: (v - mean) * taper, float32
// operations one by one (v itself where has_taper is 0).
__device__ __forceinline__ float refine_tapered(const float* wnd, const float* __restrict__ taper,
                                                int has_taper, float mean, int r, int c,
                                                int pw) {
    const float t = wnd[(size_t)r * pw + c];
    return has_taper ? __fmul_rn(__fsub_rn(t, mean), taper[(size_t)r * pw + c]) : t;
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

template <int THREADS>
__global__ void __launch_bounds__(THREADS, 4) refine_surfaces(
        const float* __restrict__ frames, float* win, const double* __restrict__ wy,
        const double* __restrict__ wx, const double* __restrict__ s,
        const int* __restrict__ sy, const int* __restrict__ sx,
        const float* __restrict__ taper, int has_taper, const float* __restrict__ tpl,
        const double* __restrict__ lmean, const double* __restrict__ lvar,
        const bool* __restrict__ lbad, float* __restrict__ z, long long* __restrict__ iy_out,
        long long* __restrict__ ix_out, int n0, int n_total, int h, int w, int gy, int gx,
        int ph, int pw) {
    constexpr int WARPS = THREADS / 32;
    extern __shared__ double coef_all[];  // WARPS * 2 * gx
    __shared__ double red[WARPS * REFINE_SUMS];
    __shared__ double tot[REFINE_SUMS];
    __shared__ float zs[9];
    const int p = blockIdx.x, n = n0 + (int)blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    double* coef = coef_all + warp * 2 * gx;
    const int ys = sy[p / gx], xs = sx[p % gx];
    const float* f = frames + (size_t)n * h * w;
    float* wnd = win + ((size_t)p * n_total + n) * ph * pw;

    // the window through the field; its sum
    double one[1] = {0.0};
    for (int r = warp; r < ph; r += WARPS) {
        const int y = ys + r;
        for (int k = lane; k < 2 * gx; k += 32) coef[k] = row_coefficient(wy, s, y, n, gy, gx, k);
        __syncwarp();
        for (int c = lane; c < pw; c += 32) {
            const int x = xs + c;
            const double cy = (double)y - along_row(coef, wx, x, gx);
            const double cx = (double)x - along_row(coef + gx, wx, x, gx);
            const float v = cubic_at<float>(f, h, w, cy, cx);
            wnd[(size_t)r * pw + c] = v;
            one[0] += (double)v;
        }
        __syncwarp();
    }
    block_sums<THREADS, 1>(one, red, tot);  // (also makes the window's writes visible)
    const float mean = (float)(tot[0] / ((double)ph * (double)pw));

    // the correlation sums within +-1 px and the window's sums (11 values a thread: the edges'
    // sums come after, so that the main loop holds fewer float64 registers)
    const float* L = tpl + (size_t)p * ph * pw;
    {
        double v[11];
#pragma unroll
        for (int k = 0; k < 11; ++k) v[k] = 0.0;
        for (int r = warp; r < ph; r += WARPS) {
            // the row's cross sums in float32 (a lane's few products: ceil(pw / 32)), added
            // to the float64 sums once a row; the cross sums end rounded to float32 anyway
            float u[9];
#pragma unroll
            for (int k = 0; k < 9; ++k) u[k] = 0.0f;
            for (int c = lane; c < pw; c += 32) {
                const float t = refine_tapered(wnd, taper, has_taper, mean, r, c, pw);
#pragma unroll
                for (int ky = -1; ky <= 1; ++ky) {
                    const int yy = r + ky;
                    if (yy < 0 || yy >= ph) continue;
                    const float* row = L + (size_t)yy * pw;
#pragma unroll
                    for (int kx = -1; kx <= 1; ++kx) {
                        const int xx = c + kx;
                        if (xx < 0 || xx >= pw) continue;
                        u[(ky + 1) * 3 + kx + 1] = __fmaf_rn(row[xx], t, u[(ky + 1) * 3 + kx + 1]);
                    }
                }
                const double d = (double)t;
                v[9] += d;
                v[10] += d * d;
            }
#pragma unroll
            for (int k = 0; k < 9; ++k) v[k] += (double)u[k];
        }
        block_sums<THREADS, 11>(v, red, tot);
    }
    {   // the edge rows and columns and the corners (each x and x^2): tot[11..26]
        double e[16];
#pragma unroll
        for (int k = 0; k < 16; ++k) e[k] = 0.0;
        for (int c = threadIdx.x; c < pw; c += THREADS) {
            const double a = (double)refine_tapered(wnd, taper, has_taper, mean, 0, c, pw);
            const double b = (double)refine_tapered(wnd, taper, has_taper, mean, ph - 1, c, pw);
            e[0] += a; e[1] += a * a; e[2] += b; e[3] += b * b;
        }
        for (int r = threadIdx.x; r < ph; r += THREADS) {
            const double a = (double)refine_tapered(wnd, taper, has_taper, mean, r, 0, pw);
            const double b = (double)refine_tapered(wnd, taper, has_taper, mean, r, pw - 1, pw);
            e[4] += a; e[5] += a * a; e[6] += b; e[7] += b * b;
        }
        if (threadIdx.x < 4) {  // the corners: top left, top right, bottom left, bottom right
            const int k = threadIdx.x;
            const double a = (double)refine_tapered(wnd, taper, has_taper, mean,
                                                    k < 2 ? 0 : ph - 1, k % 2 ? pw - 1 : 0, pw);
#pragma unroll
            for (int q = 0; q < 4; ++q)  // (constant indices: e stays in registers)
                if (q == k) { e[8 + 2 * q] += a; e[9 + 2 * q] += a * a; }
        }
        block_sums<THREADS, 16>(e, red, tot + 11);  // (the last block_sums synchronized red)
    }

    const size_t surface = (size_t)p * n_total + n;
    if (threadIdx.x < 9) {
        const int k = threadIdx.x, ky = k / 3 - 1, kx = k % 3 - 1;
        double sum[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // e = 0: the values, 1: their squares
            double a = tot[9 + e];
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

// ---- The patch pass's untrusted patches, on the device (alignment/_patches.py low_patches and
// fill_low, the NumPy definitions) ----------------------------------------------------------------
//
// One block per frame n, one thread per patch p (P = gy * gx <= blockDim.x <= 1024); dynamic
// shared memory: 4 * P doubles and P ints.
//   with SCORES: low[n, p] = border | any(!isfinite(d[n, p, :])) | !isfinite(peak)
//                            | !(conf > 1) | (use_min && conf < min_conf)
//                (peak, conf, border laid out (P, n_total): index p * n_total + n)
//   else:        low[n, p] as given
//   out[n, p, :] = d where not low; the low ones take the median of their good neighbours (the
//   8 around, the values of the round before: all of a round's patches at once), round after
//   round outwards until none is left or none gains a neighbour; 0 where none ever does.
//   With ROWS also rows[n, p, :] = (out0, out1, peak, border ? 0 : conf, low): the pass's rows
//   (peak, conf and border are read with ROWS or SCORES, else not).
// The median of the k good values of each axis: (v[(k - 1) / 2] + v[k / 2]) * 0.5 of the sorted
// values, NumPy's nanmedian; sorted by a network of 19 compare-and-swaps (NaN last), picked by
// constant indices: the eight values stay in registers.

#define FILL_NETWORK(X) X(0, 2) X(1, 3) X(4, 6) X(5, 7) X(0, 4) X(1, 5) X(2, 6) X(3, 7) \
    X(0, 1) X(2, 3) X(4, 5) X(6, 7) X(2, 4) X(3, 5) X(1, 4) X(3, 6) X(1, 2) X(3, 4) X(5, 6)

__device__ __forceinline__ void nan_last_swap(double& a, double& b) {
    const bool after = isnan(a) ? !isnan(b) : (!isnan(b) && a > b);
    if (after) {
        const double t = a;
        a = b;
        b = t;
    }
}

// The median of the non-NaN values among v[0..7] (NaN if none), NumPy's order of operations.
__device__ __forceinline__ double median8(double (&v)[8]) {
#define FILL_SWAP(i, j) nan_last_swap(v[i], v[j]);
    FILL_NETWORK(FILL_SWAP)
#undef FILL_SWAP
    int k = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) k += isnan(v[i]) ? 0 : 1;
    const int ilo = (k > 0 ? k - 1 : 0) / 2, ihi = k / 2;
    double lo = v[0], hi = v[0];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (i == ilo) lo = v[i];
        if (i == ihi) hi = v[i];
    }
    return (lo + hi) * 0.5;
}

template <bool SCORES, bool ROWS>
__global__ void fill_low_patches(const double* __restrict__ d, double* __restrict__ out,
                                 bool* __restrict__ low, const double* __restrict__ peak,
                                 const double* __restrict__ conf,
                                 const bool* __restrict__ border, double* __restrict__ rows,
                                 int use_min, double min_conf, int n_total, int gy, int gx) {
    extern __shared__ double fill_shared[];
    const int P = gy * gx, p = threadIdx.x, n = blockIdx.x;
    double* cur = fill_shared;        // 2 * P: the values of this round (NaN: not good)
    double* next = fill_shared + 2 * P;
    int* bad = (int*)(fill_shared + 4 * P);
    const bool mine = p < P;
    const size_t q = (size_t)n * P + p, t = (size_t)p * n_total + n;
    if (mine) {
        const double v0 = d[2 * q], v1 = d[2 * q + 1];
        bool lo;
        if (SCORES) {
            const double pk = peak[t], cf = conf[t];
            lo = border[t] || !isfinite(v0) || !isfinite(v1) || !isfinite(pk) || !(cf > 1.0)
                 || (use_min && cf < min_conf);
            low[q] = lo;
        } else {
            lo = low[q];
        }
        const double nan = __longlong_as_double(0x7ff8000000000000LL);
        cur[2 * p] = lo ? nan : v0;
        cur[2 * p + 1] = lo ? nan : v1;
        bad[p] = lo ? 1 : 0;
    }
    __syncthreads();
    for (int round = 0; round < gy + gx; ++round) {
        if (!__syncthreads_or(mine && bad[p])) break;
        bool take = false;
        double m0 = 0.0, m1 = 0.0;
        if (mine && bad[p]) {
            const int py = p / gx, px = p - py * gx;
            double a[8], b[8];
            const double nan = __longlong_as_double(0x7ff8000000000000LL);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int j = k < 4 ? k : k + 1;  // the 3x3 around, less the centre
                const int yy = py + j / 3 - 1, xx = px + j % 3 - 1;
                const bool in = yy >= 0 && yy < gy && xx >= 0 && xx < gx;
                a[k] = in ? cur[2 * (yy * gx + xx)] : nan;
                b[k] = in ? cur[2 * (yy * gx + xx) + 1] : nan;
            }
            int good = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) good += isnan(a[k]) ? 0 : 1;
            if (good > 0) {
                take = true;
                m0 = median8(a);
                m1 = median8(b);
            }
        }
        if (!__syncthreads_or(take)) break;
        if (mine) {
            next[2 * p] = take ? m0 : cur[2 * p];
            next[2 * p + 1] = take ? m1 : cur[2 * p + 1];
            if (take) bad[p] = 0;
        }
        __syncthreads();
        double* s = cur;
        cur = next;
        next = s;
    }
    if (mine) {
        const double o0 = bad[p] ? 0.0 : cur[2 * p], o1 = bad[p] ? 0.0 : cur[2 * p + 1];
        out[2 * q] = o0;
        out[2 * q + 1] = o1;
        if (ROWS) {
            double* r = rows + 5 * q;
            r[0] = o0;
            r[1] = o1;
            r[2] = peak[t];
            r[3] = border[t] ? 0.0 : conf[t];
            r[4] = low[q] ? 1.0 : 0.0;
        }
    }
}
