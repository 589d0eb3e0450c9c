// Development probe (device): the host time of one kernel launch from C++, the floor under any
// Python launch path (issue 24).  Build and run: nvcc -O2 -o /tmp/lf tools/launch_floor.cu && /tmp/lf
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>

__global__ void empty3(const float* a, const float* b, float* c, int n) {
    if (n < 0) c[0] = a[0] + b[0];
}

template <class F> double per_launch_us(F launch, int n, cudaStream_t s) {
    for (int i = 0; i < 1000; ++i) launch();
    cudaStreamSynchronize(s);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
        launch();
        if (i % 100 == 99) cudaStreamSynchronize(s);  // keep the queue short, as the Python probe
    }
    auto t1 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(s);
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

// the enqueue alone: blocks of 100 launches, each timed from an empty queue, the synchronize
// outside the timing (the figure above is the GPU's pace where that is slower than the host)
template <class F> double enqueue_us(F launch, int n, cudaStream_t s) {
    for (int i = 0; i < 1000; ++i) launch();
    cudaStreamSynchronize(s);
    double total = 0.0;
    for (int b = 0; b < n / 100; ++b) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 100; ++i) launch();
        total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        cudaStreamSynchronize(s);
    }
    return total / (n / 100 * 100);
}

int main() {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *a, *b, *c;
    cudaMalloc(&a, 1024); cudaMalloc(&b, 1024); cudaMalloc(&c, 1024);
    int n = 1;
    void* args[] = {&a, &b, &c, &n};
    for (int rep = 0; rep < 3; ++rep) {
        double rt = per_launch_us([&] { empty3<<<1, 32, 0, s>>>(a, b, c, n); }, 20000, s);
        double drv = per_launch_us([&] { cudaLaunchKernel((const void*)empty3, dim3(1), dim3(32), args, 0, s); }, 20000, s);
        double ms = per_launch_us([&] { cudaMemsetAsync(c, 0, 1024, s); }, 20000, s);
        std::printf("C++ host us per call: <<<>>> %.2f  cudaLaunchKernel %.2f  cudaMemsetAsync %.2f\n", rt, drv, ms);
        double drv_alone = enqueue_us([&] { cudaLaunchKernel((const void*)empty3, dim3(1), dim3(32), args, 0, s); }, 20000, s);
        std::printf("C++ enqueue alone us per call: cudaLaunchKernel %.2f\n", drv_alone);
    }
    // back to back with the GPU's pace: no syncs inside, events
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0, s);
    for (int i = 0; i < 2000; ++i) cudaLaunchKernel((const void*)empty3, dim3(1), dim3(32), args, 0, s);
    cudaEventRecord(e1, s); cudaEventSynchronize(e1);
    float msv; cudaEventElapsedTime(&msv, e0, e1);
    std::printf("C++ back to back empty kernel: %.2f us per launch (events)\n", 1000.0 * msv / 2000);
    return 0;
}
