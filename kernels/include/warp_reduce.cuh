// Warp-wide reductions by shuffles: the result is valid in lane 0 (every lane of the warp
// must take part).
#pragma once

template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ int warp_or(int v) {
    for (int o = 16; o > 0; o >>= 1) v |= __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// acc (each thread's M sums) added over the block: each warp's by shuffles, then the warps' in
// order (the same numbers every run); sum m's partial goes to partial[m * m_stride + blockIdx.x
// * block_stride] (row_sums wants sum-major, a host loop block-major).  M <= THREADS.
template <int M, int THREADS>
__device__ __forceinline__ void store_block_sums(const double (&acc)[M], double* partial,
                                                 long long m_stride, long long block_stride) {
    constexpr int WARPS = THREADS / 32;
    static_assert(M <= THREADS, "one thread writes each sum");
    __shared__ double part[M][WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const double s = warp_sum(acc[m]);
        if (lane == 0) part[m][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x < M) {
        double s = 0.0;
        for (int w = 0; w < WARPS; ++w) s += part[threadIdx.x][w];
        partial[threadIdx.x * m_stride + blockIdx.x * block_stride] = s;
    }
}
