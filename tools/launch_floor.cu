// Development probe (device): the host time of one kernel launch from C++, the floor under any
// Python launch path (issue 24), and of the other ways to enqueue one kernel with new pointers:
// the driver's cuLaunchKernel (parameter array or packed buffer), and a one-kernel CUDA graph
// whose node's parameters are set before each launch (cuGraphExecKernelNodeSetParams +
// cuGraphLaunch).  Build and run: nvcc -O2 -o /tmp/lf tools/launch_floor.cu -lcuda && /tmp/lf
#include <cuda.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>

__global__ void empty3(const float* a, const float* b, float* c, int n) {
    if (n < 0) c[0] = a[0] + b[0];
}

__global__ void spin(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
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
    // the driver API, and a one-kernel graph whose parameters change before every launch
    CUfunction fn;
    cudaGetFuncBySymbol(&fn, (const void*)empty3);
    CUstream cs = (CUstream)s;
    struct { float *a, *b, *c; int n; } packed = {a, b, c, n};
    size_t packed_size = sizeof packed;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &packed_size, CU_LAUNCH_PARAM_END};
    cudaGraph_t graph;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    empty3<<<1, 32, 0, s>>>(a, b, c, n);
    cudaStreamEndCapture(s, &graph);
    cudaGraphNode_t node;
    size_t n_nodes = 1;
    cudaGraphGetNodes(graph, &node, &n_nodes);
    cudaGraphExec_t exec;
    cudaGraphInstantiate(&exec, graph, 0);
    CUDA_KERNEL_NODE_PARAMS kp = {};
    kp.func = fn; kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 32; kp.blockDimY = kp.blockDimZ = 1; kp.kernelParams = args;
    int flip = 0;
    for (int rep = 0; rep < 3; ++rep) {
        double d_args = enqueue_us([&] { cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, cs, args, nullptr); }, 20000, s);
        double d_buf = enqueue_us([&] { cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, cs, nullptr, extra); }, 20000, s);
        double g_only = enqueue_us([&] { cudaGraphLaunch(exec, s); }, 20000, s);
        double g_set = enqueue_us([&] {
            packed.c = (flip ^= 1) ? c : a;  // new pointers each call, as a plan call has
            args[2] = flip ? (void*)&c : (void*)&a;
            cuGraphExecKernelNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &kp);
            cuGraphLaunch((CUgraphExec)exec, cs); }, 20000, s);
        args[2] = &c;
        std::printf("C++ enqueue alone us per call: cuLaunchKernel (params) %.2f  (buffer) %.2f  "
                    "cudaGraphLaunch %.2f  set params + cuGraphLaunch %.2f\n", d_args, d_buf,
                    g_only, g_set);
    }
    // the packed-buffer launch on the legacy default stream (what a Python caller's current
    // stream is by default) and on the created one, of the empty kernel and of one that keeps
    // the GPU busy ~3 us (is a launch dearer when the GPU is idle, or on the legacy stream?)
    {
        CUfunction spin_fn;
        cudaGetFuncBySymbol(&spin_fn, (const void*)spin);
        long long cycles = 5000;  // ~2.5-3 us at 1.7-2 GHz
        struct { long long c; } spin_args = {cycles};
        size_t spin_size = sizeof spin_args;
        void* spin_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &spin_args, CU_LAUNCH_PARAM_BUFFER_SIZE,
                              &spin_size, CU_LAUNCH_PARAM_END};
        for (CUstream st : {cs, (CUstream)0}) {
            cudaStream_t rs = (cudaStream_t)st;
            double e = enqueue_us([&] { cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, st, nullptr, extra); }, 20000, rs);
            double b = enqueue_us([&] { cuLaunchKernel(spin_fn, 1, 1, 1, 32, 1, 1, 0, st, nullptr, spin_extra); }, 20000, rs);
            cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
            cudaEventRecord(e0, rs);
            for (int i = 0; i < 2000; ++i) cuLaunchKernel(spin_fn, 1, 1, 1, 32, 1, 1, 0, st, nullptr, spin_extra);
            cudaEventRecord(e1, rs); cudaEventSynchronize(e1);
            float msv; cudaEventElapsedTime(&msv, e0, e1);
            std::printf("C++ cuLaunchKernel (buffer) on the %s stream: enqueue alone, empty kernel %.2f us, "
                        "a ~3 us kernel %.2f us; back to back of it %.2f us (events)\n",
                        st ? "created non-blocking" : "legacy default", e, b, 1000.0 * msv / 2000);
        }
    }
    {
        cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
        cudaEventRecord(e0, s);
        for (int i = 0; i < 2000; ++i) {
            cuGraphExecKernelNodeSetParams((CUgraphExec)exec, (CUgraphNode)node, &kp);
            cuGraphLaunch((CUgraphExec)exec, cs);
        }
        cudaEventRecord(e1, s); cudaEventSynchronize(e1);
        float msv; cudaEventElapsedTime(&msv, e0, e1);
        std::printf("C++ back to back set params + graph launch: %.2f us per launch (events)\n", 1000.0 * msv / 2000);
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
