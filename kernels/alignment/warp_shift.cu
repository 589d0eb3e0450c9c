// Every frame of a chunk shifted by its (dy, dx), bilinear (xcorr_app/alignment/warp/_warp.py
// shift_frames launches it on the GPU; its NumPy lines are the definition, and this is the
// same arithmetic, so both devices give the same float32 bits):
//
//   ys = y - dy (float64), y0 = floor(ys), wy = (float)(ys - y0); the same along x;
//   out = sum over the taps (y0 + a, x0 + b), a, b in {0, 1}, in the order (0,0) (0,1) (1,0)
//         (1,1) (a tap of weight 0 left out: 0 * inf is NaN),
//         of wgt * f[clamp(y0 + a), clamp(x0 + b)], wgt = (wy_a * wx_b) * inside,
//         wy_0 = 1 - wy, wy_1 = wy (float32); plus (1 - sum of wgt) * fill only where a tap
//         of non-zero weight wy_a * wx_b lies outside (elsewhere no fill term: a NaN or
//         infinite fill would poison every pixel); there a NaN or infinite fill is the pixel
//         itself (the blend's limit: its rest may round to 0, and 0 * inf is NaN)
//
// each step a float32 operation rounded on its own (the definition's array operations: no
// fused multiply-add); a NaN shift counts as 0 and an infinite one as one far outside the
// frame (NumPy's nan_to_num).  Output frame n reads frame n * fstep and shift n * sstep (a
// step 0: one frame, or one shift, for all, as the definition broadcasts them).  Grid (rows,
// frames of this launch), THREADS over the columns; at most 65535 frames per launch (the
// launcher offsets n0).  O: float, or the frames' integer type (--keep-dtype: stored_as).

#include "finite_shift.cuh"

template <typename T>
__device__ __forceinline__ float pixel(const T* __restrict__ f, long long y, long long x, int h,
                                       int w) {
    y = y < 0 ? 0 : (y > h - 1 ? h - 1 : y);
    x = x < 0 ? 0 : (x > w - 1 ? w - 1 : x);
    return (float)f[(size_t)y * w + x];
}

// The definition's bilinear sample of frame f at the source ys (a row) and xs (a column), the
// shift's NaN and Inf already made finite: the four taps' weighted pixels (.x) and the sum of
// the inside taps' weights (.y), each step a float32 operation rounded on its own; `edge`: a
// tap of non-zero weight lies outside.  FINITE: non-finite pixels read as 0 (the template's
// sums).
template <bool FINITE, typename T>
__device__ __forceinline__ float2 bilinear_taps(const T* __restrict__ f, int h, int w, double ys,
                                                double xs, bool& edge) {
    const double fy = floor(ys), fx = floor(xs);
    const float wy = (float)(ys - fy), wx = (float)(xs - fx);
    const long long y0 = (long long)fy, x0 = (long long)fx;
    const float wy_[2] = {__fsub_rn(1.0f, wy), wy};
    const float wx_[2] = {__fsub_rn(1.0f, wx), wx};
    const bool vy[2] = {y0 >= 0 && y0 < h, y0 + 1 >= 0 && y0 + 1 < h};
    const bool vx[2] = {x0 >= 0 && x0 < w, x0 + 1 >= 0 && x0 + 1 < w};
    float acc = 0.0f, weight = 0.0f;
    edge = false;
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const float tap = __fmul_rn(wy_[a], wx_[b]);
            const float wgt = __fmul_rn(tap, (vy[a] && vx[b]) ? 1.0f : 0.0f);
            edge = edge || (tap != 0.0f && !(vy[a] && vx[b]));
            float v = pixel(f, y0 + a, x0 + b, h, w);
            if (FINITE && !isfinite(v)) v = 0.0f;
            if (wgt != 0.0f) acc = __fadd_rn(acc, __fmul_rn(wgt, v));  // (0 * inf: no NaN)
            weight = __fadd_rn(weight, wgt);
        }
    return make_float2(acc, weight);
}

// An aligned pixel as O: a float as it is; an integer type rounded to nearest (ties to even,
// as NumPy's rint), clipped to its range, NaN as 0: xcorr_app/io as_dtype, in the warp itself
// so that a --keep-dtype chunk needs no float32 copy on the device nor a pass on the host.
template <typename O> struct integer_range;
template <> struct integer_range<unsigned char> { static constexpr float lo = 0.0f, hi = 255.0f; };
template <> struct integer_range<unsigned short> {
    static constexpr float lo = 0.0f, hi = 65535.0f;
};
template <> struct integer_range<short> { static constexpr float lo = -32768.0f, hi = 32767.0f; };

template <typename O>
__device__ __forceinline__ O stored_as(float v) {
    if (isnan(v)) return (O)0;
    return (O)rintf(fminf(fmaxf(v, integer_range<O>::lo), integer_range<O>::hi));
}
template <>
__device__ __forceinline__ float stored_as<float>(float v) { return v; }

// Grid (oh rows, frames): the window [oy, oy + oh) x [ox, ox + ow) of every shifted frame
// (the whole frame, or the area the quality report reads: the crop costs nothing), written
// C-contiguous (n, oh, ow).
template <typename T, typename O, int THREADS>
__global__ void __launch_bounds__(THREADS) warp_shift(
        const T* __restrict__ frames, O* __restrict__ out,
        const double* __restrict__ shifts, int n0, int fstep, int sstep, int h, int w,
        int oy, int ox, int oh, int ow, float fill) {
    const int y = oy + (int)blockIdx.x, n = n0 + blockIdx.y;
    const double* shift = shifts + 2 * (size_t)n * sstep;
    const double ys = (double)y - finite_shift(shift[0]);
    const double sx = finite_shift(shift[1]);
    const T* f = frames + (size_t)n * fstep * h * w;
    O* dst = out + ((size_t)n * oh + blockIdx.x) * ow;
    const bool finite_fill = isfinite(fill);
    for (int j = threadIdx.x; j < ow; j += THREADS) {
        bool edge;
        const float2 t = bilinear_taps<false>(f, h, w, ys, (double)(ox + j) - sx, edge);
        const float blend = __fadd_rn(t.x, __fmul_rn(__fsub_rn(1.0f, t.y), fill));
        dst[j] = stored_as<O>(edge ? (finite_fill ? blend : fill) : t.x);
    }
}

// The template's sums (xcorr_app/alignment/warp/_warp.py add_shifted; its NumPy lines are the
// definition): for every pixel, over the frames idx[0..count) in that order, the frame's
// value shifted as warp_shift does with fill 0 (non-finite pixels read as 0, a float32
// conversion first, as the definition's astype), added in float64 to total, and the
// coverage (the same warp of a frame of ones: the float32 sum of the taps' weights) to
// coverage.  One launch a chunk instead of about sixteen CuPy operations per eight frames
// (their host time added up over a long run).  Grid (rows), THREADS over columns.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) warp_sum(
        const T* __restrict__ frames, const int* __restrict__ idx,
        const double* __restrict__ shifts, int count, int h, int w,
        double* __restrict__ total, double* __restrict__ coverage) {
    const int y = blockIdx.x;
    for (int x = threadIdx.x; x < w; x += THREADS) {
        double t = 0.0, c = 0.0;
        for (int k = 0; k < count; ++k) {
            const double* s = shifts + 2 * (size_t)k;
            bool edge;  // (the fill 0 adds nothing either way)
            const float2 v = bilinear_taps<true>(frames + (size_t)idx[k] * h * w, h, w,
                                                 (double)y - finite_shift(s[0]),
                                                 (double)x - finite_shift(s[1]), edge);
            const float rest = __fmul_rn(__fsub_rn(1.0f, v.y), 0.0f);  // the fill's term
            t += (double)__fadd_rn(v.x, rest);
            c += (double)__fadd_rn(v.y, rest);  // (a frame of ones: the taps' sum is the weight)
        }
        total[(size_t)y * w + x] += t;
        coverage[(size_t)y * w + x] += c;
    }
}
