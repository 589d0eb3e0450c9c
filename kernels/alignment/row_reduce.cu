// Per-row reductions of a C-contiguous (rows, cols) array of T, a warp a row, for the 3-D path
// (xcorr_app/alignment/volume/_rows.py): row_sums, each row's double sum (or of squares);
// row_first_max, the column and value of each row's first maximum as NumPy's argmax finds it
// (NaN above every number); and knock_out, the boxes around the peaks that bounded_peak clears
// before it looks for the runner-up.  Shipped built: CuPy's reductions along an axis compile at
// first use (CUB's block reduction by NVRTC: most of a cold `xcorr align --volumes`).
//
// Grid ceil(rows / (THREADS / 32)), THREADS threads; lane 0 of each warp writes its row's result.

#include "warp_reduce.cuh"

// (SQUARES: the sums of the squares, each squared in T as NumPy's square gives it)
template <typename T, bool SQUARES, int THREADS>
__global__ void __launch_bounds__(THREADS) row_sums(
        const T* __restrict__ a, long long rows, int cols, double* __restrict__ sums) {
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
    if (r >= rows) return;  // (a whole warp at once: the shuffles see every lane)
    const T* row = a + r * cols;
    double s = 0.0;
    for (int x = lane; x < cols; x += 32) {
        const T v = row[x];
        s += SQUARES ? (double)(v * v) : (double)v;
    }
    s = warp_sum(s);
    if (lane == 0) sums[r] = s;
}

// Whether (c at column ic) comes before (b at ib) as argmax's answer: NaN first, then the larger,
// then the earlier of equals.
__device__ __forceinline__ bool comes_first(float c, int ic, float b, int ib) {
    const bool cn = isnan(c), bn = isnan(b);
    if (cn != bn) return cn;
    if (cn || c == b) return ic < ib;
    return c > b;
}

template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS) row_first_max(
        const T* __restrict__ a, long long rows, int cols, int* __restrict__ column,
        T* __restrict__ value) {
    const int lane = threadIdx.x & 31;
    const long long r = (long long)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const T* row = a + r * cols;
    float best = __int_as_float(0xff800000);  // -inf (NVRTC has no math.h: no INFINITY)
    int at = 0x7fffffff;  // (a lane without a column never comes first: any column is earlier)
    for (int x = lane; x < cols; x += 32) {
        const float v = (float)row[x];
        if (comes_first(v, x, best, at)) { best = v; at = x; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v = __shfl_down_sync(0xffffffffu, best, o);
        const int x = __shfl_down_sync(0xffffffffu, at, o);
        if (comes_first(v, x, best, at)) { best = v; at = x; }
    }
    if (lane == 0) {
        column[r] = at;
        value[r] = (T)best;
    }
}

// xcorr_app/alignment/volume/_dft3.py bounded_peak's knock-out: in volume b = blockIdx.y of
// win (B, z, y, x), every voxel within e of its peak at[3 b .. 3 b + 2] along each axis set to
// value; along an axis searched whole (wrap bit a of `wraps`, z = 4, y = 2, x = 1) around the
// circle, along a bounded one only inside the window (as CuPy's fancy indexing of
// bounded_peak's np.unique / clipped ranges did).
// A thread a voxel of the (2 e + 1)^3 box, grid (ceil(box / THREADS), B).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) knock_out(
        float* __restrict__ win, int z, int y, int x, const long long* __restrict__ at, int e,
        int wraps, float value) {
    const int side = 2 * e + 1;
    const int k = blockIdx.x * THREADS + threadIdx.x;
    if (k >= side * side * side) return;
    const long long b = blockIdx.y;
    const int n[3] = {z, y, x};
    long long idx[3];
    const int d[3] = {k / (side * side) - e, (k / side) % side - e, k % side - e};
#pragma unroll
    for (int a = 0; a < 3; ++a) {
        long long i = at[3 * b + a] + d[a];
        if (wraps & (4 >> a)) {
            i %= n[a];
            if (i < 0) i += n[a];
        } else if (i < 0 || i >= n[a]) {
            return;
        }
        idx[a] = i;
    }
    win[((b * z + idx[0]) * y + idx[1]) * x + idx[2]] = value;
}
