// The GPU side of piecewise-rigid registration (xcorr_app/alignment/_field_resample.py launches
// these; the NumPy definitions there are the reference, equal to float rounding):
//
//   patch_windows    the patch windows of every frame of a chunk, moved by the frame's integer
//                    rigid shift: (P, N, ph, pw) float32 gathered from (N, H, W) float32
//   windows_through  the same windows sampled through the smooth motion field (cubic
//                    convolution, Keys a = -0.5, taps clamped to the frame: "nearest")
//   warp_field       every frame of a chunk warped by its motion field (bilinear, or cubic
//                    convolution), pixels whose source lies outside the frame get `fill`
//
// The field at a pixel is evaluated in the kernel from the patch shifts, never stored per
// pixel: s(y, x) = sum_j (sum_i wy[y, i] * S[n, i, j, a]) * wx[x, j], the natural cubic
// spline weights wy (H, gy) and wx (W, gx) of _field_resample.spline_weights (float64), the
// patch field S (N, gy, gx, 2) float64 (NaN already 0).  One block per output row: the
// row's 2 * gx coefficients (the bracket) are computed once into shared memory, then each
// thread evaluates its pixels: the sums of the CPU's `wy @ S @ wx.T`, associated the same way.
// Coordinates and weights are float64, the pixels are read as float32 (the CPU converts the
// frames to float32 first) and summed in float64.
//
// Grids: x: rows, y: patches (windows) or 1, z or y: frames (at most 65535 per launch: the
// launcher offsets `n0`).

// The shared coefficients of row y of frame n: coef[a * gx + j] = sum_i wy[y, i] S[n, i, j, a].
// Every thread of the block must call it (it synchronizes).
__device__ __forceinline__ void row_coefficients(const double* __restrict__ wy,
                                                 const double* __restrict__ s, int y, int n,
                                                 int gy, int gx, double* coef) {
    for (int k = threadIdx.x; k < 2 * gx; k += blockDim.x) {
        const int a = k / gx, j = k - a * gx;
        double acc = 0.0;
        for (int i = 0; i < gy; ++i)
            acc += wy[(size_t)y * gy + i] * s[(((size_t)n * gy + i) * gx + j) * 2 + a];
        coef[k] = acc;
    }
    __syncthreads();
}

// sum_j coef[j] * wx[x, j]
__device__ __forceinline__ double along_row(const double* coef, const double* __restrict__ wx,
                                            int x, int gx) {
    double acc = 0.0;
    for (int j = 0; j < gx; ++j) acc += coef[j] * wx[(size_t)x * gx + j];
    return acc;
}

// Cubic convolution weights (Keys, a = -0.5) of the taps at -1, 0, 1, 2 for the fraction t.
#define KEYS_A (-0.5)
__device__ __forceinline__ double keys_outer(double d) {  // 1 <= |d| <= 2
    return ((KEYS_A * d - 5.0 * KEYS_A) * d + 8.0 * KEYS_A) * d - 4.0 * KEYS_A;
}
__device__ __forceinline__ double keys_inner(double d) {  // |d| <= 1
    return ((KEYS_A + 2.0) * d - (KEYS_A + 3.0)) * d * d + 1.0;
}

__device__ __forceinline__ int clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// Cubic convolution at (cy, cx) of an h x w image, taps clamped to the image.  The sum runs
// over the tap rows k of (sum over the tap columns l of wx_l * v), in this order.
template <typename T>
__device__ __forceinline__ double cubic_at(const T* __restrict__ f, int h, int w, double cy,
                                           double cx) {
    // (far outside, every tap is clamped to the edge anyway: keeps the int conversion defined)
    cy = fmin(fmax(cy, -8.0), (double)h + 7.0);
    cx = fmin(fmax(cx, -8.0), (double)w + 7.0);
    const double fy = floor(cy), fx = floor(cx);
    const double ty = cy - fy, tx = cx - fx;
    const int y0 = (int)fy - 1, x0 = (int)fx - 1;
    const double wy0 = keys_outer(ty + 1.0), wy1 = keys_inner(ty), wy2 = keys_inner(1.0 - ty),
                 wy3 = keys_outer(2.0 - ty);
    const double wx0 = keys_outer(tx + 1.0), wx1 = keys_inner(tx), wx2 = keys_inner(1.0 - tx),
                 wx3 = keys_outer(2.0 - tx);
    const int c0 = clampi(x0, 0, w - 1), c1 = clampi(x0 + 1, 0, w - 1),
              c2 = clampi(x0 + 2, 0, w - 1), c3 = clampi(x0 + 3, 0, w - 1);
    double acc = 0.0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const T* row = f + (size_t)clampi(y0 + k, 0, h - 1) * w;
        double r = wx0 * (double)(float)row[c0];
        r += wx1 * (double)(float)row[c1];
        r += wx2 * (double)(float)row[c2];
        r += wx3 * (double)(float)row[c3];
        const double wk = k == 0 ? wy0 : (k == 1 ? wy1 : (k == 2 ? wy2 : wy3));
        acc += wk * r;
    }
    return acc;
}

// Bilinear at (cy, cx), inside [0, h - 1] x [0, w - 1] (the caller checks); a tap of weight
// 0 (a coordinate on a pixel) is not read, as in scipy.ndimage.map_coordinates(order=1), so a
// NaN beside it does not spread.
template <typename T>
__device__ __forceinline__ double bilinear_at(const T* __restrict__ f, int h, int w, double cy,
                                              double cx) {
    const double fy = floor(cy), fx = floor(cx);
    const double ty = cy - fy, tx = cx - fx;
    const int y0 = (int)fy, x0 = (int)fx;
    const int y1 = min(y0 + 1, h - 1), x1 = min(x0 + 1, w - 1);
    const T* r0 = f + (size_t)y0 * w;
    double top = (double)(float)r0[x0];
    if (tx != 0.0) top = (1.0 - tx) * top + tx * (double)(float)r0[x1];
    if (ty == 0.0) return top;
    const T* r1 = f + (size_t)y1 * w;
    double bottom = (double)(float)r1[x0];
    if (tx != 0.0) bottom = (1.0 - tx) * bottom + tx * (double)(float)r1[x1];
    return (1.0 - ty) * top + ty * bottom;
}

// Grid (ph, P, frames of this launch), THREADS threads over the window's columns.
// out[p, n, r, c] = frames[n, sy[p / gx] + r - shift[n, 0], sx[p % gx] + c - shift[n, 1]]
// for n = n0 + blockIdx.z; the windows lie inside the frames (the grid's margin).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) patch_windows(
        const float* __restrict__ frames, float* __restrict__ out,
        const long long* __restrict__ shift, const int* __restrict__ sy,
        const int* __restrict__ sx, int n0, int n_total, int h, int w, int gx, int ph, int pw) {
    const int r = blockIdx.x, p = blockIdx.y, n = n0 + blockIdx.z;
    const int y = sy[p / gx] + r - (int)shift[2 * (size_t)n];
    const int x0 = sx[p % gx] - (int)shift[2 * (size_t)n + 1];
    const float* src = frames + ((size_t)n * h + y) * w + x0;
    float* dst = out + (((size_t)p * n_total + n) * ph + r) * pw;
    for (int c = threadIdx.x; c < pw; c += THREADS) dst[c] = src[c];
}

// Grid (ph, P, frames of this launch), THREADS threads over the window's columns.
// out[p, n, r, c] = cubic(frames[n]) at q - s(q), q = (sy[p / gx] + r, sx[p % gx] + c).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) windows_through(
        const float* __restrict__ frames, float* __restrict__ out,
        const double* __restrict__ wy, const double* __restrict__ wx,
        const double* __restrict__ s, const int* __restrict__ sy, const int* __restrict__ sx,
        int n0, int n_total, int h, int w, int gy, int gx, int ph, int pw) {
    extern __shared__ double coef[];  // 2 * gx
    const int r = blockIdx.x, p = blockIdx.y, n = n0 + blockIdx.z;
    const int y = sy[p / gx] + r, xs = sx[p % gx];
    row_coefficients(wy, s, y, n, gy, gx, coef);
    const float* f = frames + (size_t)n * h * w;
    float* dst = out + (((size_t)p * n_total + n) * ph + r) * pw;
    for (int c = threadIdx.x; c < pw; c += THREADS) {
        const int x = xs + c;
        const double cy = (double)y - along_row(coef, wx, x, gx);
        const double cx = (double)x - along_row(coef + gx, wx, x, gx);
        dst[c] = (float)cubic_at(f, h, w, cy, cx);
    }
}

// Grid (oh, frames of this launch), THREADS threads over the output's columns.
// out[n, r, c] = frame n at q - s(q), q = (oy + r, ox + c) (the crop's origin); `fill` where
// q - s(q) lies outside [0, h - 1] x [0, w - 1].  CUBIC: cubic convolution, except for frames
// whose `finite[n]` is 0 (NaN or Inf pixels: bilinear, so those pixels do not spread);
// `finite` is read only when `check_finite` is non-zero (else every frame counts as finite).
template <typename T, bool CUBIC, int THREADS>
__global__ void __launch_bounds__(THREADS) warp_field(
        const T* __restrict__ frames, float* __restrict__ out, const double* __restrict__ wy,
        const double* __restrict__ wx, const double* __restrict__ s,
        const bool* __restrict__ finite, int check_finite, int n0, int h, int w, int gy, int gx,
        int oy, int ox, int oh, int ow, float fill) {
    extern __shared__ double coef[];  // 2 * gx
    const int r = blockIdx.x, n = n0 + blockIdx.y;
    const int y = oy + r;
    row_coefficients(wy, s, y, n, gy, gx, coef);
    const T* f = frames + (size_t)n * h * w;
    float* dst = out + ((size_t)n * oh + r) * ow;
    const bool cubic = CUBIC && (check_finite == 0 || finite[n]);
    for (int c = threadIdx.x; c < ow; c += THREADS) {
        const int x = ox + c;
        const double cy = (double)y - along_row(coef, wx, x, gx);
        const double cx = (double)x - along_row(coef + gx, wx, x, gx);
        float v = fill;
        if (cy >= 0.0 && cy <= (double)(h - 1) && cx >= 0.0 && cx <= (double)(w - 1))
            v = (float)(cubic ? cubic_at(f, h, w, cy, cx) : bilinear_at(f, h, w, cy, cx));
        dst[c] = v;
    }
}
