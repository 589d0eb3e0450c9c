// The quality report's images (xcorr_app/alignment/_quality_figures.py): frames added up a
// pixel at a time (frame_sums), and the figures of one image, a pass each: the template's
// (template_figures) and a mean image's for its sharpness (image_figures).  As chains of CuPy
// operations they were some 20 kernels that NVRTC compiled at first use, a large share of a
// first GPU run; these ship built.
//
// The figures' grid (blocks), THREADS threads: block b takes the image's rows b * WARPS + warp, then every
// (blocks * WARPS)-th, a warp a row; it writes its M sums to partial[b * M + m], which the host
// adds up over the blocks in a fixed order (no atomics: the same sums every run).

#include "warp_reduce.cuh"

// numpy.gradient of unit spacing along an axis of n >= 2 samples, at k: the difference
// v[hi] - v[lo], halved inside (exactly NumPy's "/ 2.0"), one-sided at the ends.
struct GradientPair {
    int lo, hi;
    bool halve;
    __device__ __forceinline__ GradientPair(int k, int n)
        : lo(k == 0 ? 0 : k == n - 1 ? n - 2 : k - 1), hi(k == 0 ? 1 : k == n - 1 ? n - 1 : k + 1),
          halve(k != 0 && k != n - 1) {}
    template <typename V>
    __device__ __forceinline__ V of(V v_lo, V v_hi) const {
        const V d = v_hi - v_lo;
        return halve ? d * V(0.5) : d;
    }
};

// The template's figures (RegionFigures of one region): from the template's area `tmpl` and
// the same area prepared `prep` (rows, cols) float32,
//   t = tmpl - t_mean (float32, to t_out), q = (prep - q_mean) / q_den (double), the gradient
//   g of q (double; float32 to g_out: (2, rows, cols), along y then x),
// and the 9 sums: t, t*t, g_y, g_x (of the float32 g), qf*g_y, qf*g_x (qf = float32 q, the
// products in float32), and g_y*g_y, g_y*g_x, g_x*g_x (double): the CPU's numbers, summed
// in double.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) template_figures(
        const float* __restrict__ tmpl, const float* __restrict__ prep, int rows, int cols,
        float t_mean, double q_mean, double q_den, float* __restrict__ t_out,
        float* __restrict__ g_out, double* __restrict__ partial) {
    constexpr int M = 9;
    constexpr int WARPS = THREADS / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t plane = (size_t)rows * cols;
    double acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0;
    for (int r = blockIdx.x * WARPS + warp; r < rows; r += gridDim.x * WARPS) {
        for (int x = lane; x < cols; x += 32) {
            const size_t i = (size_t)r * cols + x;
            const float t = tmpl[i] - t_mean;
            t_out[i] = t;
            const GradientPair py(r, rows), px(x, cols);
            const float* col = prep + x;
            const float* row = prep + (size_t)r * cols;
            const double q = ((double)row[x] - q_mean) / q_den;
            const double gy = py.of(((double)col[(size_t)py.lo * cols] - q_mean) / q_den,
                                    ((double)col[(size_t)py.hi * cols] - q_mean) / q_den);
            const double gx = px.of(((double)row[px.lo] - q_mean) / q_den,
                                    ((double)row[px.hi] - q_mean) / q_den);
            const float gyf = (float)gy, gxf = (float)gx;
            g_out[i] = gyf;
            g_out[plane + i] = gxf;
            const float qf = (float)q;
            acc[0] += t;
            acc[1] += (double)t * (double)t;
            acc[2] += gyf;
            acc[3] += gxf;
            acc[4] += (double)(qf * gyf);
            acc[5] += (double)(qf * gxf);
            acc[6] += gy * gy;
            acc[7] += gy * gx;
            acc[8] += gx * gx;
        }
    }
    store_block_sums<M, THREADS>(acc, partial, 1, M);
}

// A mean image's figures for its sharpness: v = float32(img * scale) (rows, cols), d = v less
// the first pixel's v, and the 4 sums d, d*d (double) and gy*gy, gx*gx of v's float32 gradient
// (the squares in float32, as the CPU's).
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) image_figures(
        const T* __restrict__ img, int rows, int cols, double scale,
        double* __restrict__ partial) {
    constexpr int M = 4;
    constexpr int WARPS = THREADS / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const double pivot = (double)(float)((double)__ldg(img) * scale);
    double acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0;
    for (int r = blockIdx.x * WARPS + warp; r < rows; r += gridDim.x * WARPS) {
        for (int x = lane; x < cols; x += 32) {
            const GradientPair py(r, rows), px(x, cols);
            const T* col = img + x;
            const T* row = img + (size_t)r * cols;
            const double v = (double)(float)((double)row[x] * scale);
            const double d = v - pivot;
            const float gy = py.of((float)((double)col[(size_t)py.lo * cols] * scale),
                                   (float)((double)col[(size_t)py.hi * cols] * scale));
            const float gx = px.of((float)((double)row[px.lo] * scale),
                                   (float)((double)row[px.hi] * scale));
            acc[0] += d;
            acc[1] += d * d;
            acc[2] += (double)(gy * gy);
            acc[3] += (double)(gx * gx);
        }
    }
    store_block_sums<M, THREADS>(acc, partial, 1, M);
}

// acc[i] += frames[k][y0 + i / cols][x0 + i % cols] (as float32) for each frame k of n (h x w
// pixels of T each) in order, those with ok[k] (ok: null for all), over the rows x cols area at
// (y0, x0): a thread a pixel of the area.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) frame_sums(
        const T* __restrict__ frames, int n, int h, int w, int y0, int x0, int rows, int cols,
        const bool* __restrict__ ok, double* __restrict__ acc) {
    const long long plane = (long long)rows * cols, frame = (long long)h * w;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < plane;
         i += (long long)gridDim.x * THREADS) {
        const long long at = (long long)(y0 + i / cols) * w + x0 + i % cols;
        double s = acc[i];
        for (int k = 0; k < n; ++k)
            if (ok == nullptr || ok[k]) s += (double)(float)frames[k * frame + at];
        acc[i] = s;
    }
}
