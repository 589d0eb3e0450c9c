// The GPU side of piecewise-rigid registration (launched by
// xcorr_app/alignment/piecewise/_field_resample.py; the NumPy definitions there are the
// reference, equal to float rounding):
//
//   patch_windows    the patch windows of every frame of a chunk, moved by the frame's integer
//                    rigid shift: (P, N, ph, pw) float32 gathered from (N, H, W) float32
//   windows_through  the same windows sampled through the smooth motion field (cubic
//                    convolution, Keys a = -0.5, taps clamped to the frame: "nearest")
//   warp_field       every frame of a chunk warped by its motion field (bilinear, or cubic
//                    convolution), pixels whose source lies outside the frame get `fill`
//
// The field at a pixel is evaluated in the kernel from the patch shifts, never stored per
// pixel: s(y, x) = sum_j (sum_i wy[y, i] * S[n, i, j, a]) * wx[x, j], the natural cubic spline
// weights wy (H, gy) and wx (W, gx) of xcorr_app/alignment/piecewise/_spline.py spline_weights
// (float64; wx passed transposed, wxt (gx, W): field_sample.cuh along_row), the patch field
// S (N, gy, gx, 2) float64 (NaN already 0).  One block per output row (warp_field: per tile of
// rows): the row's 2 * gx coefficients (the bracket) are computed once into shared memory, then
// each thread evaluates its pixels: the sums of the CPU's `wy @ S @ wx.T`, associated the same
// way.
// Coordinates and weights are float64, the pixels are read as float32 (the CPU converts the
// frames to float32 first) and summed in float64.
//
// Grids: x: rows, y: patches (windows) or 1, z or y: frames (at most 65535 per launch: the
// launcher offsets `n0`).

#include "field_sample.cuh"
#include "summed_area.cuh"

// out[r, j, k] = a[r * as0 + j * as1 + k * as2] + b[r * bs0 + j * bs1 + k * bs2] over (n0, n1,
// n2) in C order, element strides (0 where an operand broadcasts): the patch pass's small
// per-chunk field sums, by a kernel that ships built (three CuPy additions, each compiled for
// its own shapes, took 0.33 s of a first run)
__global__ void add_fields(const double* __restrict__ a, const double* __restrict__ b,
                           double* __restrict__ out, long long n1, long long n2, long long total,
                           long long as0, long long as1, long long as2, long long bs0,
                           long long bs1, long long bs2) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long k = i % n2, t = i / n2, j = t % n1, r = t / n1;
        out[i] = a[r * as0 + j * as1 + k * as2] + b[r * bs0 + j * bs1 + k * bs2];
    }
}

// out[i] = numpy.nan_to_num(field[i], nan=0): NaN (a frame not measured) 0, +-inf the largest
// finite double; the field as the other kernels read it, made by a kernel that ships built
// (CuPy's nan_to_num compiled two kernels on a first run, 0.3 s)
__global__ void finite_field(const double* __restrict__ field, double* __restrict__ out,
                             long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double v = field[i];
        out[i] = isnan(v) ? 0.0 : fmin(fmax(v, -1.7976931348623157e308), 1.7976931348623157e308);
    }
}

// out[p, n, r, c] = frames[n, sy[p / gx] + r - shift[n, 0], sx[p % gx] + c - shift[n, 1]]
// for n = n0 + blockIdx.z; the windows lie inside the frames (the grid's margin).  Grid
// (ceil(ph / (THREADS / 32)), P, frames): a warp a window row, lanes over its columns.  (A block
// a row, 145 columns over 128 threads, was slower.)
template <int THREADS>
__global__ void __launch_bounds__(THREADS) patch_windows(
        const float* __restrict__ frames, float* __restrict__ out,
        const long long* __restrict__ shift, const int* __restrict__ sy,
        const int* __restrict__ sx, int n0, int n_total, int h, int w, int gx, int ph, int pw) {
    const int r = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5), p = blockIdx.y;
    const int n = n0 + blockIdx.z, lane = threadIdx.x & 31;
    if (r >= ph) return;  // (a whole warp)
    const int y = sy[p / gx] + r - (int)shift[2 * (size_t)n];
    const int x0 = sx[p % gx] - (int)shift[2 * (size_t)n + 1];
    const float* src = frames + ((size_t)n * h + y) * w + x0;
    float* dst = out + (((size_t)p * n_total + n) * ph + r) * pw;
#pragma unroll 4
    for (int c = lane; c < pw; c += 32) dst[c] = src[c];
}

// patch_windows, and with them the summed-area tables of every window and of its squares
// (s1, s2: (P * n_total, ph + 1 - gap, pw + 1) float64, window p * n_total + n) as
// xcorr_app/registration/_surfaces.py summed_area_tables makes them for the search's bound
// (top, gap: table_layout), in one pass over the window: a thread a column, walking down it,
// writes the pixels and the column's running sums at the kept rows; then a warp a kept row adds
// them up along the row.  (In place of the gather, then the tables' two kernels over the
// windows once more.)
// Grid (P, frames of this launch); blockDim.x a multiple of 32, at most THREADS.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) patch_windows_tables(
        const float* __restrict__ frames, float* __restrict__ out, double* __restrict__ s1,
        double* __restrict__ s2, const long long* __restrict__ shift,
        const int* __restrict__ sy, const int* __restrict__ sx, int n0, int n_total, int h,
        int w, int gx, int ph, int pw, int top, int gap) {
    const int p = blockIdx.x, n = n0 + blockIdx.y;
    const int y0 = sy[p / gx] - (int)shift[2 * (size_t)n];
    const int x0 = sx[p % gx] - (int)shift[2 * (size_t)n + 1];
    const float* src = frames + ((size_t)n * h + y0) * w + x0;
    const size_t window = (size_t)p * n_total + n;
    float* dst = out + window * ph * pw;
    const int rows = ph + 1 - gap, w1 = pw + 1;
    double* t1 = s1 + window * rows * w1;
    double* t2 = s2 + window * rows * w1;
    for (int c = threadIdx.x; c < pw; c += blockDim.x) {
        double a = 0.0, aa = 0.0;
        t1[c + 1] = 0.0;
        t2[c + 1] = 0.0;
#pragma unroll 4
        for (int y = 0; y < ph; ++y) {
            const float v = src[(size_t)y * w + c];
            dst[(size_t)y * pw + c] = v;
            const double d = v;
            a += d;
            aa += d * d;
            if (y + 1 <= top || y + 1 >= top + 1 + gap) {
                const size_t j = (size_t)table_row(y + 1, top, gap) * w1 + c + 1;
                t1[j] = a;
                t2[j] = aa;
            }
        }
    }
    for (int j = threadIdx.x; j < rows; j += blockDim.x) {  // the zero first column
        t1[(size_t)j * w1] = 0.0;
        t2[(size_t)j * w1] = 0.0;
    }
    __syncthreads();  // (the block's writes, read back along the rows)
    const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int j = threadIdx.x >> 5; j < rows; j += warps)
        scan_row_pair(t1 + (size_t)j * w1, t2 + (size_t)j * w1, w1, lane);
}

// Grid (ph, P, frames of this launch), THREADS threads over the window's columns.
// out[p, n, r, c] = cubic(frames[n]) at q - s(q), q = (sy[p / gx] + r, sx[p % gx] + c).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) windows_through(
        const float* __restrict__ frames, float* __restrict__ out,
        const double* __restrict__ wy, const double* __restrict__ wxt,
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
        const double cy = (double)y - along_row(coef, wxt, x, w, gx);
        const double cx = (double)x - along_row(coef + gx, wxt, x, w, gx);
        dst[c] = (float)cubic_at<double>(f, h, w, cy, cx);
    }
}

// Grid (tiles of THREADS columns by `band` rows, frames of this launch).
// out[n, r, c] = frame n at q - s(q), q = (oy + r, ox + c) (the crop's origin); `fill` where
// q - s(q) lies outside [0, h - 1] x [0, w - 1].  CUBIC: cubic convolution, except for frames
// whose `finite[n]` is 0 (NaN or Inf pixels: bilinear, so those pixels do not spread);
// `finite` is read only when `check_finite` is non-zero (else every frame counts as finite).
// GX: the grid's width at compile time (0: any, read from gx): the field's sums a pixel
// unrolled, the column's weights in registers (the width read at run time was slower, the
// more so the wider the grid).
template <typename T, bool CUBIC, int THREADS, int GX>
__global__ void __launch_bounds__(THREADS) warp_field(
        const T* __restrict__ frames, float* __restrict__ out, const double* __restrict__ wy,
        const double* __restrict__ wxt, const double* __restrict__ s,
        const bool* __restrict__ finite, int check_finite, int n0, int h, int w, int gy, int gx,
        int oy, int ox, int oh, int ow, float fill, int band) {
    // a block a tile of THREADS output columns by `band` rows, a thread a column walking down
    // it: the tile's rows' coefficients (coef[r][2 j + a], the sums along_row takes, in its
    // order) made once into shared memory, the column's weights wx[x, j] held in registers
    // (GX > 0).  (Slower before it: a warp a row, its lanes reading the row's gx weights of
    // every pixel; before that, a block a row.)
    extern __shared__ double coef_all[];  // band * 2 * gx
    const int tiles = (ow + THREADS - 1) / THREADS;
    const int tile = blockIdx.x % tiles, r0 = (blockIdx.x / tiles) * band;
    const int n = n0 + blockIdx.y, rn = min(band, oh - r0);
    for (int k = threadIdx.x; k < rn * 2 * gx; k += THREADS) {
        const int rr = k / (2 * gx);
        coef_all[k] = row_coefficient2(wy, s, oy + r0 + rr, n, gy, gx, k - rr * 2 * gx);
    }
    __syncthreads();
    const int c = tile * THREADS + threadIdx.x;
    if (c >= ow) return;
    const int x = ox + c;
    double wxr[GX > 0 ? GX : 1];  // the column's weights
    if constexpr (GX > 0) {
#pragma unroll
        for (int j = 0; j < GX; ++j) wxr[j] = wxt[j * w + x];
    }
    const T* f = frames + (size_t)n * h * w;
    float* dst = out + ((size_t)n * oh + r0) * ow + c;
    const bool cubic = CUBIC && (check_finite == 0 || finite[n]);
    for (int rr = 0; rr < rn; ++rr, dst += ow) {
        const double2* cf = reinterpret_cast<const double2*>(coef_all + rr * 2 * gx);
        const double2 d = field_at<GX>(cf, wxr, wxt, x, w, gx);
        const double cy = (double)(oy + r0 + rr) - d.x;
        const double cx = (double)x - d.y;
        float v = fill;
        if (cy >= 0.0 && cy <= (double)(h - 1) && cx >= 0.0 && cx <= (double)(w - 1))
            v = (float)(cubic ? cubic_at<double>(f, h, w, cy, cx) : bilinear_at(f, h, w, cy, cx));
        *dst = v;
    }
}

// ---- The patch pass's untrusted patches, on the device (the NumPy definitions:
// xcorr_app/alignment/piecewise/_low_patches.py low_patches and fill_low) -------------------------
//
// One block per frame n, one thread per patch p (P = gy * gx <= blockDim.x <= 1024); dynamic
// shared memory: 4 * P doubles and P ints.
//   with SCORES: low[n, p] = border | any(!isfinite(d[n, p, :])) | !isfinite(peak)
//                            | !(conf > 1) | (use_min && conf < min_conf)
//                (peak, conf, border laid out (P, n_total): index p * n_total + n)
//   else:        low[n, p] as given
//   out[n, p, :] = d where not low; the low ones take the median of their good neighbours (the
//   8 around, the values of the round before: all of a round's patches at once), round after
//   round outwards until none is left or none gains a neighbour; 0 where none ever does.
//   With ROWS also rows[n, p, :] = (out0 + b0, out1 + b1, peak, border ? 0 : conf, low): the
//   pass's rows, (b0, b1) = base[n, :] where has_base (the frame's rigid shift: the rows hold
//   the field), else 0 (peak, conf and border are read with ROWS or SCORES, else not).
// The median of the k good values of each axis: (v[(k - 1) / 2] + v[k / 2]) * 0.5 of the sorted
// values, NumPy's nanmedian; sorted by a network of 19 compare-and-swaps (NaN last), picked by
// constant indices: the eight values stay in registers.

#define FILL_NETWORK(X) X(0, 2) X(1, 3) X(4, 6) X(5, 7) X(0, 4) X(1, 5) X(2, 6) X(3, 7) \
    X(0, 1) X(2, 3) X(4, 5) X(6, 7) X(2, 4) X(3, 5) X(1, 4) X(3, 6) X(1, 2) X(3, 4) X(5, 6)

__device__ __forceinline__ void nan_last_swap(double& a, double& b) {
    const bool after = isnan(a) ? !isnan(b) : (!isnan(b) && a > b);
    if (after) {
        const double t = a;
        a = b;
        b = t;
    }
}

// The median of the non-NaN values among v[0..7] (NaN if none), NumPy's order of operations.
__device__ __forceinline__ double median8(double (&v)[8]) {
#define FILL_SWAP(i, j) nan_last_swap(v[i], v[j]);
    FILL_NETWORK(FILL_SWAP)
#undef FILL_SWAP
    int k = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) k += isnan(v[i]) ? 0 : 1;
    const int ilo = (k > 0 ? k - 1 : 0) / 2, ihi = k / 2;
    double lo = v[0], hi = v[0];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        if (i == ilo) lo = v[i];
        if (i == ihi) hi = v[i];
    }
    return (lo + hi) * 0.5;
}

template <bool SCORES, bool ROWS>
__global__ void fill_low_patches(const double* __restrict__ d, double* __restrict__ out,
                                 bool* __restrict__ low, const double* __restrict__ peak,
                                 const double* __restrict__ conf,
                                 const bool* __restrict__ border, double* __restrict__ rows,
                                 const double* __restrict__ base, int has_base,
                                 int use_min, double min_conf, int n_total, int gy, int gx) {
    extern __shared__ double fill_shared[];
    const int P = gy * gx, p = threadIdx.x, n = blockIdx.x;
    double* cur = fill_shared;        // 2 * P: the values of this round (NaN: not good)
    double* next = fill_shared + 2 * P;
    int* bad = (int*)(fill_shared + 4 * P);
    const bool mine = p < P;
    const size_t q = (size_t)n * P + p, t = (size_t)p * n_total + n;
    if (mine) {
        const double v0 = d[2 * q], v1 = d[2 * q + 1];
        bool lo;
        if (SCORES) {
            const double pk = peak[t], cf = conf[t];
            lo = border[t] || !isfinite(v0) || !isfinite(v1) || !isfinite(pk) || !(cf > 1.0)
                 || (use_min && cf < min_conf);
            low[q] = lo;
        } else {
            lo = low[q];
        }
        const double nan = __longlong_as_double(0x7ff8000000000000LL);
        cur[2 * p] = lo ? nan : v0;
        cur[2 * p + 1] = lo ? nan : v1;
        bad[p] = lo ? 1 : 0;
    }
    __syncthreads();
    for (int round = 0; round < gy + gx; ++round) {
        if (!__syncthreads_or(mine && bad[p])) break;
        bool take = false;
        double m0 = 0.0, m1 = 0.0;
        if (mine && bad[p]) {
            const int py = p / gx, px = p - py * gx;
            double a[8], b[8];
            const double nan = __longlong_as_double(0x7ff8000000000000LL);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int j = k < 4 ? k : k + 1;  // the 3x3 around, less the centre
                const int yy = py + j / 3 - 1, xx = px + j % 3 - 1;
                const bool in = yy >= 0 && yy < gy && xx >= 0 && xx < gx;
                a[k] = in ? cur[2 * (yy * gx + xx)] : nan;
                b[k] = in ? cur[2 * (yy * gx + xx) + 1] : nan;
            }
            int good = 0;
#pragma unroll
            for (int k = 0; k < 8; ++k) good += isnan(a[k]) ? 0 : 1;
            if (good > 0) {
                take = true;
                m0 = median8(a);
                m1 = median8(b);
            }
        }
        if (!__syncthreads_or(take)) break;
        if (mine) {
            next[2 * p] = take ? m0 : cur[2 * p];
            next[2 * p + 1] = take ? m1 : cur[2 * p + 1];
            if (take) bad[p] = 0;
        }
        __syncthreads();
        double* s = cur;
        cur = next;
        next = s;
    }
    if (mine) {
        const double o0 = bad[p] ? 0.0 : cur[2 * p], o1 = bad[p] ? 0.0 : cur[2 * p + 1];
        out[2 * q] = o0;
        out[2 * q + 1] = o1;
        if (ROWS) {
            double* r = rows + 5 * q;  // (the field: the frame's rigid shift added, if given)
            r[0] = has_base ? o0 + base[2 * (size_t)n] : o0;
            r[1] = has_base ? o1 + base[2 * (size_t)n + 1] : o1;
            r[2] = peak[t];
            r[3] = border[t] ? 0.0 : conf[t];
            r[4] = low[q] ? 1.0 : 0.0;
        }
    }
}
