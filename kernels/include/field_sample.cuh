// The motion field at a pixel and the samplers of piecewise-rigid registration, shared by
// kernels/alignment/patch_field.cu and kernels/alignment/refine_surfaces.cu (the definitions,
// NumPy: xcorr_app/alignment/piecewise/_field_resample.py cubic_sample and bilinear_sample).
#pragma once

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

// Coefficient k of row y of frame n in the interleaved order along_row2 reads (k = 2 j + a).
__device__ __forceinline__ double row_coefficient2(const double* __restrict__ wy,
                                                   const double* __restrict__ s, int y, int n,
                                                   int gy, int gx, int k) {
    return row_coefficient(wy, s, y, n, gy, gx, (k & 1) * gx + (k >> 1));
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

// sum_j coef[j] * wx[x, j], the weights transposed: wxt (gx, w) = wx.T, so that the lanes of
// a warp (consecutive x) read consecutive doubles.  (In wx's own (w, gx) layout a lane's read
// of one weight took a sector of its own: half the fused refinement's global sectors at 4x4,
// and at 8x8 it was bound by L1.)
__device__ __forceinline__ double along_row(const double* coef, const double* __restrict__ wxt,
                                            int x, int w, int gx) {
    double acc = 0.0;
    for (int j = 0, k = x; j < gx; ++j, k += w) acc += coef[j] * wxt[k];
    return acc;
}

// along_row for both axes at once, the row's coefficients interleaved: cf[j] = (coefficient j
// of axis 0, of axis 1); one read of wx[x, j] for both sums.  GX > 0: the grid's width known at
// compile time (the loop unrolled, no loop control a pixel; the same sums in the same order);
// GX = 0: the width gx read at run time.  In the arithmetic of the weights A (float64: P
// double2; the refinement's float32: P float2, the field within about 1e-6 px).
template <int GX, typename P, typename A>
__device__ __forceinline__ P along_row2_fixed(const P* cf, const A* __restrict__ wxt, int x,
                                              int w, int gx) {
    A a = (A)0.0, b = (A)0.0;
    if constexpr (GX > 0) {
#pragma unroll
        for (int j = 0; j < GX; ++j) {
            const P c = cf[j];
            const A v = wxt[j * w + x];  // (32-bit offsets: gx * w < 2^31)
            a += c.x * v;
            b += c.y * v;
        }
    } else {
        // (not unrolled: unrolled by the compiler, its remainder's values spilled)
#pragma unroll 1
        for (int j = 0, k = x; j < gx; ++j, k += w) {
            const P c = cf[j];
            const A v = wxt[k];
            a += c.x * v;
            b += c.y * v;
        }
    }
    P r;
    r.x = a;
    r.y = b;
    return r;
}

// The field at a pixel from its row's interleaved coefficients (along_row2_fixed's sums in
// its order) and its column's weights wx[j * STEP] = wx[x, j] held by the thread (GX > 0: in
// registers, or shared memory where registers are short; UNROLL terms at a time, the order the
// same) or read (GX = 0: along_row2_fixed<0>): a thread a column down many rows
// (patch_field.cu warp_field, quality_moments.cu warp_report).
template <int GX, int STEP = 1, int UNROLL = 8>
__device__ __forceinline__ double2 field_at(const double2* cf, const double* wx,
                                            const double* __restrict__ wxt, int x, int w,
                                            int gx) {
    if constexpr (GX > 0) {
        double a = 0.0, b = 0.0;
#pragma unroll UNROLL
        for (int j = 0; j < GX; ++j) {
            const double2 k2 = cf[j];
            const double v = wx[j * STEP];
            a += k2.x * v;
            b += k2.y * v;
        }
        return make_double2(a, b);
    } else {
        return along_row2_fixed<0>(cf, wxt, x, w, gx);
    }
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

// The four weights for the fraction t (taps at -1, 0, 1, 2).
template <typename A>
__device__ __forceinline__ void keys_taps(A t, A (&wt)[4]) {
    wt[0] = keys_outer(t + (A)1.0);
    wt[1] = keys_inner(t);
    wt[2] = keys_inner((A)1.0 - t);
    wt[3] = keys_outer((A)2.0 - t);
}

// float (the refinement's taps): the same weights as polynomials in t, 11 operations where
// keys_outer and keys_inner took 15 (-t^3/2 + t^2 - t/2, 3t^3/2 - 5t^2/2 + 1, -3t^3/2 + 2t^2
// + t/2, t^3/2 - t^2/2: Keys' a = -0.5 expanded; equal to float rounding)
template <>
__device__ __forceinline__ void keys_taps<float>(float t, float (&wt)[4]) {
    const float t2 = t * t, half = 0.5f * t2;
    wt[0] = t * fmaf(t, fmaf(-0.5f, t, 1.0f), -0.5f);
    wt[1] = fmaf(t2, fmaf(1.5f, t, -2.5f), 1.0f);
    wt[2] = t * fmaf(t, fmaf(-1.5f, t, 2.0f), 0.5f);
    wt[3] = fmaf(half, t, -half);
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
    A wy[4], wx[4];
    keys_taps(ty, wy);
    keys_taps(tx, wx);
    const int c0 = clampi(x0, 0, w - 1), c1 = clampi(x0 + 1, 0, w - 1),
              c2 = clampi(x0 + 2, 0, w - 1), c3 = clampi(x0 + 3, 0, w - 1);
    A acc = (A)0.0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const T* row = f + (size_t)clampi(y0 + k, 0, h - 1) * w;
        A r = wx[0] * (A)(float)row[c0];
        r += wx[1] * (A)(float)row[c1];
        r += wx[2] * (A)(float)row[c2];
        r += wx[3] * (A)(float)row[c3];
        acc += wy[k] * r;
    }
    return acc;
}

// The position y - d of the integer pixel y shifted by the float32 d, as an integer part i and a
// fraction t in [0, 1): i = y + floor(-d), t = -d - floor(-d) (from the shift alone: within
// about 1e-6 px of the float64 position for shifts of a few pixels).
__device__ __forceinline__ void shifted_position(int y, float d, int& i, float& t) {
    const float m = -d, fm = floorf(m);
    i = y + (int)fm;
    t = m - fm;
    if (t >= 1.0f) {  // (a tiny negative m rounds its fraction up to 1)
        t = 0.0f;
        i += 1;
    }
}

// Cubic convolution at (y - dy, x - dx) for the integer pixel (y, x) and a float32 shift
// (dy, dx), in the arithmetic A, without float64: the sample's integer part y + floor(-dy) and
// fraction -dy - floor(-dy) come from the shift alone (shifted_position; y - dy in float64 and
// its conversions, quarter-rate on the GPU, took a fifth of the refinement's instructions a
// pixel).  Where the 16 taps lie inside the image, cubic_at's sums in its order without the
// clamps (one address, the rows w apart; the clamps and the taps' 16 64-bit addresses were
// about 240 of the refinement's 560 instructions a window pixel); elsewhere cubic_at itself.
template <typename A, typename T>
__device__ __forceinline__ A cubic_shifted(const T* __restrict__ f, int h, int w, int y, int x,
                                           float dy, float dx) {
    int iy, ix;
    float fty, ftx;
    shifted_position(y, dy, iy, fty);
    shifted_position(x, dx, ix, ftx);
    const A ty = (A)fty, tx = (A)ftx;
    if (iy < 1 || iy > h - 3 || ix < 1 || ix > w - 3)
        return cubic_at<A>(f, h, w, (double)iy + (double)ty, (double)ix + (double)tx);
    A wy[4], wx[4];
    keys_taps(ty, wy);
    keys_taps(tx, wx);
    // (a 32-bit offset inside the frame: one 64-bit address a tap row, not 64-bit products)
    const T* row = f + ((iy - 1) * w + (ix - 1));
    A acc = (A)0.0;
#pragma unroll
    for (int k = 0; k < 4; ++k, row += w) {
        A r = wx[0] * (A)(float)row[0];
        r += wx[1] * (A)(float)row[1];
        r += wx[2] * (A)(float)row[2];
        r += wx[3] * (A)(float)row[3];
        acc += wy[k] * r;
    }
    return acc;
}

// Bilinear at (cy, cx), inside [0, h - 1] x [0, w - 1] (the caller checks); a tap of weight
// 0 (a coordinate on a pixel) is not read, as in scipy.ndimage.map_coordinates(order=1), so a
// NaN beside it does not spread.  bilinear_taps and bilinear_of: the same sums, the taps'
// places and fractions apart from the reads (quality_moments.cu warp_report reads two images
// through one set of taps; 32-bit offsets: frames under 2^31 pixels).
struct BilinearTaps {
    int r0, r1, x0, x1;  // (offsets of the two rows, the two columns)
    double ty, tx;
};

__device__ __forceinline__ BilinearTaps bilinear_taps(int h, int w, double cy, double cx) {
    const double fy = floor(cy), fx = floor(cx);
    BilinearTaps t;
    t.ty = cy - fy;
    t.tx = cx - fx;
    const int y0 = (int)fy;
    t.x0 = (int)fx;
    t.x1 = min(t.x0 + 1, w - 1);
    t.r0 = y0 * w;
    t.r1 = min(y0 + 1, h - 1) * w;
    return t;
}

template <typename T>
__device__ __forceinline__ double bilinear_of(const T* __restrict__ f, const BilinearTaps& t) {
    double top = (double)(float)f[t.r0 + t.x0];
    if (t.tx != 0.0) top = (1.0 - t.tx) * top + t.tx * (double)(float)f[t.r0 + t.x1];
    if (t.ty == 0.0) return top;
    double bottom = (double)(float)f[t.r1 + t.x0];
    if (t.tx != 0.0) bottom = (1.0 - t.tx) * bottom + t.tx * (double)(float)f[t.r1 + t.x1];
    return (1.0 - t.ty) * top + t.ty * bottom;
}

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
