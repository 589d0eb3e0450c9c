// Per-frame moments over an area, for the quality report (launched by
// xcorr_app/alignment/_quality_figures.py area_moments): for frame n of a chunk (n, h, w) of
// pixels T, over the rows [y0, y0 + rows) and the columns [x0, x0 + cols), the double sums of
// d, d * d and d * ref_j for J float32 reference images (J, rows, cols), d = v - p each pixel v
// as float32 (as the CPU's lines convert it) less the area's first pixel p, in one read of the
// frame: the correlations with the template and the residual's projections on its gradient
// follow from them.  (About p, a constant frame's spread is exactly 0, and a faint one's is not
// lost to the cancellation of large sums.)  (In place of CuPy passes and matrix products: a
// read of the chunk for each correlation and for the residual.)
//
// Grid (blocks, n), THREADS threads: block b takes the area's rows b * WARPS + warp, then every
// (blocks * WARPS)-th, a warp a row; it writes its sums to partial[(n * blocks + b) * (2 + J)
// + m], which the host adds up over the blocks in a fixed order (no atomics: the same sums every
// run).

#include "warp_reduce.cuh"

// One block's sums over its rows of a region: d, d * d and d * ref_j (J references of the
// region's shape), d each pixel as float32 less the pivot; then the block's warps added up in a
// fixed order into out[0 .. 2 + J) (no atomics: the same sums every run).
template <typename T, int J, int THREADS>
__device__ __forceinline__ void block_moments(const T* __restrict__ frame, int w, int y0, int x0,
                                              int rows, int cols,
                                              const float* __restrict__ refs,
                                              double* __restrict__ out) {
    constexpr int M = 2 + J;
    constexpr int WARPS = THREADS / 32;
    __shared__ double part[M][WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t plane = (size_t)rows * cols;
    const double pivot = (double)(float)frame[(size_t)y0 * w + x0];
    double acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0;
    for (int r = blockIdx.x * WARPS + warp; r < rows; r += gridDim.x * WARPS) {
        const T* row = frame + (size_t)(y0 + r) * w + x0;
        const float* ref = refs + (size_t)r * cols;
        for (int x = lane; x < cols; x += 32) {
            const double v = (double)(float)row[x] - pivot;
            acc[0] += v;
            acc[1] += v * v;
#pragma unroll
            for (int j = 0; j < J; ++j) acc[2 + j] += v * (double)ref[j * plane + x];
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const double s = warp_sum(acc[m]);
        if (lane == 0) part[m][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x < M) {  // the warps' sums in a fixed order, a thread a moment
        double s = 0.0;
        for (int i = 0; i < WARPS; ++i) s += part[threadIdx.x][i];
        out[threadIdx.x] = s;
    }
}

template <typename T, int J, int THREADS>
__global__ void __launch_bounds__(THREADS) area_moments(
        const T* __restrict__ frames, int h, int w, int y0, int x0, int rows, int cols,
        const float* __restrict__ refs, double* __restrict__ partial) {
    block_moments<T, J, THREADS>(frames + (size_t)blockIdx.y * h * w, w, y0, x0, rows, cols,
                                 refs, partial + ((size_t)blockIdx.y * gridDim.x + blockIdx.x)
                                 * (2 + J));
}

// The same moments for P regions of every frame at once (launched by
// xcorr_app/alignment/_quality_figures.py region_moments): region p of frame n is the block
// rows [starts[2p], + rows) by columns [starts[2p + 1], + cols) (inside the frame), its J
// references refs[(p * J + j) * rows * cols ...], its pivot its own first pixel.  The per-patch
// figures of a piecewise run's quality report, read in place from the chunk (no copy of the
// regions cut out: they overlap).
//
// Grid (blocks, n, P), THREADS threads: as area_moments; the sums go to
// partial[((n * P + p) * blocks + b) * (2 + J) + m].
template <typename T, int J, int THREADS>
__global__ void __launch_bounds__(THREADS) region_moments(
        const T* __restrict__ frames, int h, int w, const int* __restrict__ starts, int rows,
        int cols, const float* __restrict__ refs, double* __restrict__ partial) {
    const int p = blockIdx.z;
    block_moments<T, J, THREADS>(
        frames + (size_t)blockIdx.y * h * w, w, starts[2 * p], starts[2 * p + 1], rows, cols,
        refs + (size_t)p * J * rows * cols,
        partial + (((size_t)blockIdx.y * gridDim.z + p) * gridDim.x + blockIdx.x) * (2 + J));
}
