// Per-frame statistics of a chunk of frames in two short passes, for the preparation of every
// frame before correlation (xcorr_app/alignment/rigid/_frame_stats.py): the float32 copy of
// the pixels, each frame's mean (summed in double, row by row, then over the rows in a fixed order:
// the result does not depend on the launch), whether a frame has NaN or Inf pixels, and whether
// it is constant; then the subtraction of each frame's mean.  These replace a chain of CuPy
// element-wise and CUB reduction kernels, each compiled on first use (about 6 s of NVRTC on a
// fresh machine, two CUB reductions alone 5 s): the three kernels here compile together once.

#include "warp_reduce.cuh"

// Block-wide sum and or of (s, flags); the result is valid in thread 0.  THREADS is a multiple
// of 32 and at most 1024.
template <int THREADS>
__device__ __forceinline__ void block_reduce(double& s, int& flags) {
    __shared__ double sums[THREADS / 32];
    __shared__ int ors[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    s = warp_sum(s);
    flags = warp_or(flags);
    if (lane == 0) {
        sums[warp] = s;
        ors[warp] = flags;
    }
    __syncthreads();
    if (warp == 0) {
        s = lane < THREADS / 32 ? sums[lane] : 0.0;
        flags = lane < THREADS / 32 ? ors[lane] : 0;
        s = warp_sum(s);
        flags = warp_or(flags);
    }
}

// One warp per row: grid (ceil(h / (THREADS / 32)), n), THREADS threads.  Reads row y of frame
// n of `in` (pixels of type T), writes it as float32 to `out` when WRITE, and the row's sum
// (double) and flags (bit 0: a NaN or Inf pixel, bit 1: a pixel other than the frame's first)
// to row_sum and row_flags at n * h + y; with `weighted` also the row's sum of the pixels
// weighted by wx[x] (double) to row_wsum (the filtered frame's mean: frame_totals).  The
// comparisons are those of the float32 values (NaN differs).  (A block of 256 threads a row, as
// before, spent its time on the block's reduction.)
template <typename T, bool WRITE, int THREADS>
__global__ void __launch_bounds__(THREADS) frame_row_stats(
        const T* __restrict__ in, float* __restrict__ out, double* __restrict__ row_sum,
        int* __restrict__ row_flags, const double* __restrict__ wx,
        double* __restrict__ row_wsum, int weighted, int h, int w) {
    const int lane = threadIdx.x & 31;
    const int y = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5), n = blockIdx.y;
    if (y >= h) return;  // (a whole warp)
    const size_t row = ((size_t)n * h + y) * (size_t)w;
    const float first = (float)in[(size_t)n * h * w];
    double s = 0.0, ws = 0.0;
    int flags = 0;
#pragma unroll 4
    for (int x = lane; x < w; x += 32) {
        const float v = (float)in[row + x];
        if (WRITE) out[row + x] = v;
        s += (double)v;
        if (weighted) ws += (double)v * wx[x];
        flags |= isfinite(v) ? 0 : 1;
        flags |= (v != first) ? 2 : 0;
    }
    s = warp_sum(s);
    flags = warp_or(flags);
    if (weighted) ws = warp_sum(ws);
    if (lane == 0) {
        row_sum[(size_t)n * h + y] = s;
        row_flags[(size_t)n * h + y] = flags;
        if (weighted) row_wsum[(size_t)n * h + y] = ws;
    }
}

// One block per frame: grid (n,), THREADS threads.  Sums the frame's h row sums (each thread a
// fixed stride of rows, then the block's fixed tree) and writes mean = sum / count as float32,
// finite and constant (bool, one byte each).  With `weighted`, also the mean of the
// frame less its float32 mean filtered by a separable filter whose boundary-mapped taps add up
// to wy[y] wx[x] at each pixel (frame_row_stats' row_wsum): fmean = (sum_y wy[y] row_wsum[y] -
// mean * wtotal) / count, wtotal = sum(wy) sum(wx): the mean of the filter's output known
// before the filter runs (float rounding of its taps and outputs aside).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) frame_totals(
        const double* __restrict__ row_sum, const int* __restrict__ row_flags, int h,
        double count, float* __restrict__ mean, bool* __restrict__ finite,
        bool* __restrict__ constant, const double* __restrict__ wy,
        const double* __restrict__ row_wsum, int weighted, double wtotal,
        float* __restrict__ fmean) {
    const int n = blockIdx.x;
    double s = 0.0, ws = 0.0;
    int flags = 0;
    for (int y = threadIdx.x; y < h; y += THREADS) {
        s += row_sum[(size_t)n * h + y];
        flags |= row_flags[(size_t)n * h + y];
        if (weighted) ws += wy[y] * row_wsum[(size_t)n * h + y];
    }
    block_reduce<THREADS>(s, flags);
    if (weighted) {
        __syncthreads();  // (block_reduce's shared arrays again)
        int unused = 0;
        block_reduce<THREADS>(ws, unused);
    }
    if (threadIdx.x == 0) {
        const float m = (float)(s / count);
        mean[n] = m;
        finite[n] = (flags & 1) == 0;
        constant[n] = (flags & 2) == 0;
        if (weighted) fmean[n] = (float)((ws - (double)m * wtotal) / count);
    }
}

// The sums behind the predicted precision of lucas_kanade="auto"
// (xcorr_app/alignment/refine/_lk_decision.py predicted_precision) of float32 frames f and their
// gaussian-smoothed copies `smooth`, both (n, h, w), h and w at least 3.  One block per row: grid
// (h, n), THREADS threads.  Writes, at sums[(n * h + y) * 3]: the row's sum of |Laplacian|
// (Immerkaer's 3x3 difference kernel in double, in NumPy's order of the expression; the edge rows
// and columns have none), its sum of gy^2 + gx^2 of `smooth` (np.gradient's differences: central
// inside, one-sided on the edges; double) and its count of NaN or Inf pixels of f.  The host adds
// the rows up.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) precision_sums(
        const float* __restrict__ f, const float* __restrict__ smooth, double* __restrict__ sums,
        int h, int w) {
    __shared__ double part[2][THREADS / 32];
    __shared__ int bads[THREADS / 32];
    const int y = blockIdx.x, n = blockIdx.y;
    const float* fr = f + ((size_t)n * h + y) * (size_t)w;    // row y of frame n
    const float* sm = smooth + ((size_t)n * h + y) * (size_t)w;
    const bool inside = y > 0 && y < h - 1;
    double lap = 0.0, energy = 0.0;
    int bad = 0;
    for (int x = threadIdx.x; x < w; x += THREADS) {
        bad += isfinite(fr[x]) ? 0 : 1;
        if (inside && x > 0 && x < w - 1) {
            const float* a = fr - w + x;  // the rows above and below, at column x
            const float* c = fr + w + x;
            double l = (double)a[-1] - 2.0 * (double)a[0];
            l = l + (double)a[1];
            l = l - 2.0 * (double)fr[x - 1];
            l = l + 4.0 * (double)fr[x];
            l = l - 2.0 * (double)fr[x + 1];
            l = l + (double)c[-1];
            l = l - 2.0 * (double)c[0];
            l = l + (double)c[1];
            lap += fabs(l);
        }
        const double gy = y == 0 ? (double)sm[w + x] - (double)sm[x]
                        : y == h - 1 ? (double)sm[x] - (double)sm[x - w]
                        : ((double)sm[w + x] - (double)sm[x - w]) / 2.0;
        const double gx = x == 0 ? (double)sm[1] - (double)sm[0]
                        : x == w - 1 ? (double)sm[x] - (double)sm[x - 1]
                        : ((double)sm[x + 1] - (double)sm[x - 1]) / 2.0;
        energy += gy * gy + gx * gx;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    lap = warp_sum(lap);
    energy = warp_sum(energy);
    bad = warp_sum(bad);
    if (lane == 0) {
        part[0][warp] = lap;
        part[1][warp] = energy;
        bads[warp] = bad;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the warps' sums in a fixed order
        double a = 0.0, b = 0.0;
        int k = 0;
        for (int i = 0; i < THREADS / 32; ++i) {
            a += part[0][i];
            b += part[1][i];
            k += bads[i];
        }
        double* out = sums + ((size_t)n * h + y) * 3;
        out[0] = a;
        out[1] = b;
        out[2] = (double)k;
    }
}

// f[n, :, :] -= mean[n] for every pixel of frame n = n0 + blockIdx.y (grid-stride over the
// frame's plane pixels).  (A grid-stride over every pixel of the chunk, the frame found by a
// 64-bit division a pixel, was slower: that division is an emulated subroutine.)
// (Unrolled by 4: the loads of four iterations in flight together.)
__global__ void subtract_frame_means(float* __restrict__ f, const float* __restrict__ mean,
                                     long long plane, long long n0) {
    const long long n = n0 + blockIdx.y;
    const float m = mean[n];
    float* g = f + n * plane;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += stride)
        g[i] -= m;
}

// out[n, :, :] = (float)in[n, :, :] - mean[n] for frame n = n0 + blockIdx.y: the float32 copy
// of the pixels (type T) less the frame's mean in one pass, the numbers of the copy and then
// subtract_frame_means (the same float32 operations), after frame_row_stats without WRITE.
// (The copy written by frame_row_stats and subtracted in place read and wrote the float32
// frames once more: 8.6 GB of a 4096-frame chunk run of 512x512.)
template <typename T>
__global__ void convert_subtract(const T* __restrict__ in, float* __restrict__ out,
                                 const float* __restrict__ mean, long long plane, long long n0) {
    const long long n = n0 + blockIdx.y;
    const float m = mean[n];
    const T* a = in + n * plane;
    float* g = out + n * plane;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += stride)
        g[i] = (float)a[i] - m;
}

// The measuring pass's result rows (xcorr_app/alignment/rigid/_measure.py rows(); the columns:
// xcorr_app/alignment/rigid/_columns.py COLUMNS):
// [dy dx | peak | confidence | constant | finite | fft_dy fft_dx | fft_iy fft_ix | border] as
// float64, from eight C-contiguous pieces of N rows (widths 2 1 1 1 1 2 2 1) of the types
// coded 3 bits each in `codes` (0 double, 1 bool, 2 float, 3 long long, 7 absent: NaN), in
// place of CuPy's concatenate and astype, whose copy kernels compiled on a first run.
__device__ __forceinline__ double load_as_double(const void* p, int code, long long k) {
    switch (code) {
        case 0: return ((const double*)p)[k];
        case 1: return ((const bool*)p)[k] ? 1.0 : 0.0;
        case 2: return (double)((const float*)p)[k];
        case 3: return (double)((const long long*)p)[k];
        default: return __longlong_as_double(0x7ff8000000000000LL);  // NaN
    }
}

__global__ void pack_rows(const void* s, const void* pk, const void* cf, const void* constant,
                          const void* finite, const void* fs, const void* fi, const void* border,
                          int codes, long long n, double* __restrict__ out) {
    const void* piece[8] = {s, pk, cf, constant, finite, fs, fi, border};
    const int width[8] = {2, 1, 1, 1, 1, 2, 2, 1};
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        double* row = out + i * 11;
        int c = 0;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int code = (codes >> (3 * j)) & 7;
#pragma unroll
            for (int k = 0; k < width[j]; ++k)
                row[c++] = load_as_double(piece[j], code, i * width[j] + k);
        }
    }
}

// out[n] = in[n] * 2^-e, e the exponent of frame n's largest magnitude peak[n] (peak = m * 2^e,
// m in [0.5, 1), by frexp; e = 0 where the peak is not finite or 0), frame n = n0 + blockIdx.y:
// scale_free's exact power-of-two scale on the GPU, the CPU's numbers (its ldexp of a T one,
// then a T multiply; denormal frames, whose 2^-e overflows T, by two exact multiplies, halves
// of -e).  (As an ElementwiseKernel and a CuPy multiply: two compilations at first use.)
template <typename T>
__global__ void scale_by_power_of_two(const T* __restrict__ in, T* __restrict__ out,
                                      const double* __restrict__ peak, long long plane,
                                      long long n0) {
    const long long n = n0 + blockIdx.y;
    const double p = peak[n];
    int e = 0;
    if (isfinite(p) && p > 0.0) frexp(p, &e);
    const int k = -e;
    const bool split = k >= (sizeof(T) == 4 ? 128 : 1024);
    const T scale = (T)ldexp(1.0, split ? k / 2 : k);
    const T rest = (T)ldexp(1.0, split ? k - k / 2 : 0);
    const T* a = in + n * plane;
    T* g = out + n * plane;
    const long long stride = (long long)gridDim.x * blockDim.x;
#pragma unroll 4
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += stride)
        g[i] = split ? a[i] * scale * rest : a[i] * scale;
}

// The area [y0, y0 + rows) x [x0, x0 + cols) of frames (n, h, w) of pixels T as float32
// (n, rows, cols), contiguous (astype and a slice's copy as CuPy operations compile a kernel
// per type and layout at first use); a thread a pixel of the output, grid-strided.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) area_float(
        const T* __restrict__ frames, long long n, int h, int w, int y0, int x0, int rows,
        int cols, float* __restrict__ out) {
    const long long total = n * rows * cols;
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < total;
         i += (long long)gridDim.x * THREADS) {
        const long long k = i / ((long long)rows * cols);
        const int r = (int)((i / cols) % rows), x = (int)(i % cols);
        out[i] = (float)frames[(k * h + y0 + r) * w + x0 + x];
    }
}
