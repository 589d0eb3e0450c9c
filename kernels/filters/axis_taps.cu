// A correlation along one axis of an n-D array (xcorr_app/filters/_axis_taps.py, for
// xcorr_app/filters/_api.py taps_along): out[o, i, n] = sum_k taps[k] * in[o, start + i + k, n]
// (o over the axes before, n over those after), each tap a product and a sum in order, rounded
// as separate multiplies and adds round them (no fused multiply-add: the slices' numbers; the
// build decides whether subnormals are flushed).
// One pass where the slices' operations made two a tap (the 3-D Gauss-Newton steps' gaussian
// and Keys' shift: 54 passes over a volume).  Grid-stride, a thread an output.

__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <typename T>
__global__ void axis_taps(const T* __restrict__ in, T* __restrict__ out, long long outer,
                          int n_in, int length, long long inner, int start,
                          const T* __restrict__ taps, int count) {
    const long long total = outer * length * inner;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long n = t % inner, q = t / inner;
        const long long i = q % length, o = q / length;
        const T* p = in + (o * n_in + start + i) * inner + n;
        T acc = mul_rn(p[0], taps[0]);
        for (int k = 1; k < count; ++k) acc = add_rn(acc, mul_rn(p[k * inner], taps[k]));
        out[t] = acc;
    }
}
