// Per-frame statistics of a chunk of frames in two short passes, for the preparation of every
// frame before correlation (xcorr_app/alignment/_frame_stats.py): the float32 copy of the
// pixels, each frame's mean (summed in double, row by row, then over the rows in a fixed order:
// the result does not depend on the launch), whether a frame has NaN or Inf pixels, and whether
// it is constant; then the subtraction of each frame's mean.  These replace a chain of CuPy
// element-wise and CUB reduction kernels, each compiled on first use (about 6 s of NVRTC on a
// fresh machine, two CUB reductions alone 5 s): the three kernels here compile together once.

template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ int warp_or(int v) {
    for (int o = 16; o > 0; o >>= 1) v |= __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

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

// One block per row: grid (h, n), THREADS threads.  Reads row y of frame n of `in` (pixels of
// type T), writes it as float32 to `out` when WRITE, and the row's sum (double) and flags
// (bit 0: a NaN or Inf pixel, bit 1: a pixel other than the frame's first) to row_sum and
// row_flags at n * h + y.  The comparisons are those of the float32 values (NaN differs).
template <typename T, bool WRITE, int THREADS>
__global__ void __launch_bounds__(THREADS) frame_row_stats(
        const T* __restrict__ in, float* __restrict__ out, double* __restrict__ row_sum,
        int* __restrict__ row_flags, int h, int w) {
    const int y = blockIdx.x, n = blockIdx.y;
    const size_t row = ((size_t)n * h + y) * (size_t)w;
    const float first = (float)in[(size_t)n * h * w];
    double s = 0.0;
    int flags = 0;
    for (int x = threadIdx.x; x < w; x += THREADS) {
        const float v = (float)in[row + x];
        if (WRITE) out[row + x] = v;
        s += (double)v;
        flags |= isfinite(v) ? 0 : 1;
        flags |= (v != first) ? 2 : 0;
    }
    block_reduce<THREADS>(s, flags);
    if (threadIdx.x == 0) {
        row_sum[(size_t)n * h + y] = s;
        row_flags[(size_t)n * h + y] = flags;
    }
}

// One block per frame: grid (n,), THREADS threads.  Sums the frame's h row sums (each thread a
// fixed stride of rows, then the block's fixed tree) and writes mean = sum / count as float32,
// finite and constant (bool, one byte each).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) frame_totals(
        const double* __restrict__ row_sum, const int* __restrict__ row_flags, int h,
        double count, float* __restrict__ mean, bool* __restrict__ finite,
        bool* __restrict__ constant) {
    const int n = blockIdx.x;
    double s = 0.0;
    int flags = 0;
    for (int y = threadIdx.x; y < h; y += THREADS) {
        s += row_sum[(size_t)n * h + y];
        flags |= row_flags[(size_t)n * h + y];
    }
    block_reduce<THREADS>(s, flags);
    if (threadIdx.x == 0) {
        mean[n] = (float)(s / count);
        finite[n] = (flags & 1) == 0;
        constant[n] = (flags & 2) == 0;
    }
}

// f[n, :, :] -= mean[n] for every pixel (grid-stride over n * plane pixels).
__global__ void subtract_frame_means(float* __restrict__ f, const float* __restrict__ mean,
                                     long long plane, long long total) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        f[i] -= mean[i / plane];
}
