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
