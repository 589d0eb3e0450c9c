// The 3-D linear refinement's sums on the GPU (xcorr_app/alignment/volume/_linear.py):
// overlap_sums, sum R(x + l) M(x) over the overlap at the 27 integer lags l = centre + o, o in
// {-1, 0, 1}^3 (z slowest), in one read of both volumes (the CPU takes them from the circular
// correlation less the wrapped-around boxes: on a GPU about 130 small reductions a volume, each
// a launch and a wait); fit_products, the sums of the products of the Gauss-Newton fit's five
// columns and a column of ones over a box.  Each block writes its partial sums to
// partial[k * gridDim.x + blockIdx.x]; row_sums (row_reduce.cu) adds them in order: the same
// numbers every run (no atomics).  Grid-stride, THREADS threads a block.

#include "warp_reduce.cuh"

// ref and vol (z, y, x) float32, C-contiguous; each product in float32 (as NumPy's a * b before
// its float64 sum), added in double.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) overlap_sums(
        const float* __restrict__ ref, const float* __restrict__ vol, int z, int y, int x,
        int cz, int cy, int cx, double* __restrict__ partial) {
    double acc[27];
#pragma unroll
    for (int k = 0; k < 27; ++k) acc[k] = 0.0;
    const long long total = (long long)z * y * x;
    for (long long t = (long long)blockIdx.x * THREADS + threadIdx.x; t < total;
         t += (long long)gridDim.x * THREADS) {
        const int i = (int)(t % x);
        const long long row = t / x;
        const int j = (int)(row % y), k = (int)(row / y);
        const float m = vol[t];
#pragma unroll
        for (int dz = 0; dz < 3; ++dz) {
            const int rz = k + cz + dz - 1;
#pragma unroll
            for (int dy = 0; dy < 3; ++dy) {
                const int ry = j + cy + dy - 1;
                const bool inside = rz >= 0 && rz < z && ry >= 0 && ry < y;
                const float* line = ref + ((long long)rz * y + ry) * x;
#pragma unroll
                for (int dx = 0; dx < 3; ++dx) {
                    const int rx = i + cx + dx - 1;
                    if (inside && rx >= 0 && rx < x)
                        acc[(dz * 3 + dy) * 3 + dx] += (double)__fmul_rn(line[rx], m);
                }
            }
        }
    }
    store_block_sums<27, THREADS>(acc, partial, gridDim.x, 1);
}

// Over the box (bz, by, bx) at lo1 of the (.., y1, x1) arrays ref, gz, gy, gx and at lo2 of
// the (.., y2, x2) array moved: the sums of v[a] * v[b], a <= b, of v = (ref, gz, gy, gx,
// moved, 1) (20 sums: the pair (1, 1), the box's size, is left out), in double.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) fit_products(
        const float* __restrict__ ref, const float* __restrict__ gz,
        const float* __restrict__ gy, const float* __restrict__ gx, int y1, int x1,
        const float* __restrict__ moved, int y2, int x2, int bz, int by, int bx,
        int oz1, int oy1, int ox1, int oz2, int oy2, int ox2, double* __restrict__ partial) {
    double acc[20];
#pragma unroll
    for (int k = 0; k < 20; ++k) acc[k] = 0.0;
    const long long total = (long long)bz * by * bx;
    for (long long t = (long long)blockIdx.x * THREADS + threadIdx.x; t < total;
         t += (long long)gridDim.x * THREADS) {
        const int i = (int)(t % bx);
        const long long row = t / bx;
        const int j = (int)(row % by), k = (int)(row / by);
        const long long a1 = ((long long)(k + oz1) * y1 + (j + oy1)) * x1 + (i + ox1);
        const long long a2 = ((long long)(k + oz2) * y2 + (j + oy2)) * x2 + (i + ox2);
        const double v[6] = {(double)ref[a1], (double)gz[a1], (double)gy[a1], (double)gx[a1],
                             (double)moved[a2], 1.0};
        int n = 0;
#pragma unroll
        for (int a = 0; a < 6; ++a) {
#pragma unroll
            for (int b = a; b < 6; ++b) {
                if (a == 5 && b == 5) continue;
                acc[n++] += v[a] * v[b];
            }
        }
    }
    store_block_sums<20, THREADS>(acc, partial, gridDim.x, 1);
}

// VolumeSums' items of a float32 (z, y, x) volume at flat index i (x along its last axis of
// X >= 2): KIND 0 the value, 1 its square, 2 its product with its x neighbour (the next, the
// previous at the last column), each product in float32 as NumPy's.
template <int KIND>
__device__ __forceinline__ double volume_item(const float* __restrict__ v, long long i, int xi,
                                              int X) {
    const float a = v[i];
    if (KIND == 0) return (double)a;
    if (KIND == 1) return (double)__fmul_rn(a, a);
    return (double)__fmul_rn(a, v[xi < X - 1 ? i + 1 : i - 1]);
}

// marginal_sums: out[p * cols + c] = sum over r of volume_item(v at (p * rows + r) * cols + c),
// in r's order (the volume seen as (planes, rows, cols): a marginal over any one axis).  A
// thread an output, grid-stride, its loads unrolled (in flight together: few outputs, long
// rows).  CuPy's sums along an axis compile at first use: seconds of a cold 3-D run.
template <int KIND, int THREADS>
__global__ void __launch_bounds__(THREADS) marginal_sums(
        const float* __restrict__ v, long long planes, long long rows, long long cols, int X,
        double* __restrict__ out) {
    const long long total = planes * cols;
    for (long long t = (long long)blockIdx.x * THREADS + threadIdx.x; t < total;
         t += (long long)gridDim.x * THREADS) {
        const long long p = t / cols, c = t % cols;
        const long long base = p * rows * cols + c;
        const int cx = (int)(c % X);  // (cols a multiple of X: the column's x; 1: the row's r)
        double s = 0.0;
#pragma unroll 8
        for (long long r = 0; r < rows; ++r)
            s += volume_item<KIND>(v, base + r * cols, cols == 1 ? (int)r : cx, X);
        out[t] = s;
    }
}

// corner_values: out[(a * nb + b) * nc + c] = volume_item at (iz[a], iy[b], ix[c]) of the
// (z, y, x) volume (the corner blocks VolumeSums keeps; CuPy's fancy indexing compiles two
// kernels at first use).
template <int KIND, int THREADS>
__global__ void __launch_bounds__(THREADS) corner_values(
        const float* __restrict__ v, int y, int x, const int* __restrict__ iz,
        const int* __restrict__ iy, const int* __restrict__ ix, int na, int nb, int nc,
        double* __restrict__ out) {
    const long long total = (long long)na * nb * nc;
    for (long long t = (long long)blockIdx.x * THREADS + threadIdx.x; t < total;
         t += (long long)gridDim.x * THREADS) {
        const int c = (int)(t % nc);
        const long long ab = t / nc;
        const int b = (int)(ab % nb), a = (int)(ab / nb);
        out[t] = volume_item<KIND>(v, ((long long)iz[a] * y + iy[b]) * x + ix[c], ix[c], x);
    }
}
