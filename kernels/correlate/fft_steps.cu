// The element-wise steps of the GPU fft plan (xcorr_app/correlate/_fft.py), as kernels of ours so
// that they ship built (xcorr_app/_cuda/shipped.py) instead of compiling as CuPy ElementwiseKernels
// on a first run: the zero padding before rfft2, the conjugate product of the spectra, the crop of
// the circular correlation.  I is the element index type: unsigned int while the arrays allow (a
// 64-bit division per element is an emulated subroutine), else unsigned long long.
//
//  * conj_product: out[b0, b1, j] = scale * left[b0, b1, j] * conj(right[b0, b1, j]) over
//    batch axes (n0, n1) of planes of p elements, each operand's batch strides in elements (0
//    where it broadcasts); out may be right (read before written by the same thread).  scale:
//    the inverse FFT's 1/n, folded in here so that the inverse runs unnormalized.
//  * fft_pad:  padded[b, y, x] = a[b, y, x] inside the (h, w) matrices, else 0 (V elements
//    a thread).
//  * fft_crop: out[b, y, x] = circ[b, (y + oy) mod fy, (x + ox) mod fx] where the shift has an
//    overlap (y_lo <= y < y_hi, x_lo <= x < x_hi), else 0.

template <typename R> struct Complex;
template <> struct Complex<float> { typedef float2 type; };
template <> struct Complex<double> { typedef double2 type; };

template <typename R, typename I>
__global__ void conj_product(const typename Complex<R>::type* __restrict__ left,
                             const typename Complex<R>::type* right,
                             typename Complex<R>::type* out, I n1, I p, I total,
                             I ls0, I ls1, I rs0, I rs1, R scale) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (I)gridDim.x * blockDim.x) {
        const I plane = i / p, j = i - plane * p;
        const I b0 = plane / n1, b1 = plane - b0 * n1;
        const typename Complex<R>::type l = left[b0 * ls0 + b1 * ls1 + j];
        const typename Complex<R>::type r = right[b0 * rs0 + b1 * rs1 + j];
        typename Complex<R>::type o;
        o.x = scale * (l.x * r.x + l.y * r.y);  // (a + ib)(c - id) = (ac + bd) + i(bc - ad)
        o.y = scale * (l.y * r.x - l.x * r.y);
        out[i] = o;
    }
}

// V: the elements a thread moves at once (4: float4 loads and stores, where w and fx are
// multiples of 4 and both arrays 16-byte aligned; total counts vectors).  (One element a thread,
// its two divisions made a pass over the padded planes instruction-bound.)
template <int V> struct PadVector { typedef float type; };
template <> struct PadVector<4> { typedef float4 type; };
__device__ __forceinline__ void set_zero(float& v) { v = 0.0f; }
__device__ __forceinline__ void set_zero(float4& v) { v = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

template <typename I, int V>
__global__ void fft_pad(const float* __restrict__ a, int h, int w, int fy, int fx, I total,
                        float* __restrict__ padded) {
    typedef typename PadVector<V>::type vec;
    const int fxv = fx / V;
    const vec* av = reinterpret_cast<const vec*>(a);
    vec* pv = reinterpret_cast<vec*>(padded);
    vec zero;
    set_zero(zero);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (I)gridDim.x * blockDim.x) {
        const int x = (int)(i % (I)fxv) * V;
        const I t = i / (I)fxv;
        const int y = (int)(t % (I)fy);
        const I b = t / (I)fy;
        pv[i] = (y < h && x < w) ? av[((b * (I)h + (I)y) * (I)w + (I)x) / V] : zero;
    }
}

template <typename I>
__global__ void fft_crop(const float* __restrict__ circ, int fy, int fx, int ho, int wo, int oy,
                         int ox, int y_lo, int y_hi, int x_lo, int x_hi, I total,
                         float* __restrict__ out) {
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (I)gridDim.x * blockDim.x) {
        const int x = (int)(i % (I)wo);
        const I t = i / (I)wo;
        const int y = (int)(t % (I)ho);
        const I b = t / (I)ho;
        const int sy = (y + oy) % fy, sx = (x + ox) % fx;
        const bool valid = y >= y_lo && y < y_hi && x >= x_lo && x < x_hi;
        out[i] = valid ? circ[(b * (I)fy + (I)sy) * (I)fx + (I)sx] : 0.0f;
    }
}
