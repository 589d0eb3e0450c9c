// Serial split-K shared by the convolution kernels.
#pragma once

// Serial split-K (CUTLASS's "serial" reduction): with gridDim.z > 1, split z of a tile sums
// steps [z * SPLIT_STEPS, (z + 1) * SPLIT_STEPS) and adds them to the output after split z - 1
// has, in order (deterministic: one split at a time adds to a tile, so its atomic adds, which
// need no round trip, happen in a fixed order).  locks[tile] counts the splits done; the last
// one sets it back to 0, so the buffer is ready for the next launch.  Blocks start in order of
// their index, so a waiting block only waits for blocks that have started.
__device__ __forceinline__ void wait_for_turn(int* lock, int turn) {
    if (threadIdx.x == 0) {
        int v;
        do {
            asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(lock) : "memory");
        } while (v != turn);
    }
    __syncthreads();
}

__device__ __forceinline__ void pass_turn(int* lock, int next) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(lock), "r"(next) : "memory");
}
