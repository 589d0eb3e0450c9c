// Asynchronous global -> shared copies (cp.async, sm_80 and up) shared by the kernels that
// stage their inputs through shared memory.
#pragma once

// 16 bytes global -> shared (dst: a shared-memory address), cached in L2 only, with a hint that
// L2 fetch 256 bytes around it (the warp's next row segments and its neighbours' are there):
// the 3x3 and 5x5 filters measured faster with it
#ifndef XCORR_STAGED_L2_PREFETCH  // development probes override it ("" for no hint)
#define XCORR_STAGED_L2_PREFETCH ".L2::256B"
#endif
__device__ __forceinline__ void cp_async16_shared(unsigned dst, const void* gmem) {
    asm volatile("cp.async.cg.shared.global" XCORR_STAGED_L2_PREFETCH " [%0], [%1], 16;\n"
                 ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 4 bytes global -> shared, or 4 zero bytes when !valid: the source is not read then, so it may
// point anywhere (CUTLASS's zfill copies rely on the same)
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0) : "memory");
}

// 8 bytes global -> shared, or 8 zero bytes when !valid (the source is not read then)
__device__ __forceinline__ void cp_async8_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n"
                 ::"r"(dst), "l"(gmem), "r"(valid ? 8 : 0) : "memory");
}

// 16 bytes global -> shared, or 16 zero bytes when !valid (the source is not read then)
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}

// The steps [first, first + steps) of a loop over K through STAGES shared-memory buffers:
// issue(step, stage) queues that step's cp.async copies into buffer `stage`, compute(stage)
// reads a buffer once its copies have landed for the whole block, while the copies of the next
// STAGES - 1 steps are in flight (the loop of the pointwise and im2win GEMMs)
template <int STAGES, typename Issue, typename Compute>
__device__ __forceinline__ void staged_steps(int first, int steps, Issue&& issue,
                                             Compute&& compute) {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < steps) issue(first + s, s);
        cp_async_commit();
    }
    for (int t = 0; t < steps; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // step t has landed for all; step t - 1's buffer is free
        const int next = t + STAGES - 1;
        if (next < steps) issue(first + next, next % STAGES);
        cp_async_commit();
        compute(t % STAGES);
    }
}
