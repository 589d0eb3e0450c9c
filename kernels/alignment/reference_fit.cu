// The sums of one Gauss-Newton step of every frame of a chunk against the reference's cubic
// B-spline (xcorr_app/alignment/refine/_refine_reference.py fit_sums, its NumPy definition):
// over the frame's pixels q of its fitted rectangle (inside the frame and, moved by the frame's
// shift s, inside the reference, `margin` px from both edges), with V = the spline at q + s and
// Vy, Vx its derivatives (the spline's own: the weights are the same for every pixel of a frame,
// its shift's fractions), and F the prefiltered frame at q, the 14 sums
//   V V, V, V Vy, V Vx, 1, Vy, Vx, Vy Vy, Vy Vx, Vx Vx, F V, F, F Vy, F Vx
// in double.  The spline's taps all lie inside the coefficients (margin >= 2).
//
// spline_axis makes the spline's coefficients first (spline_coefficients there): the exact
// inverse filter cut to 2 R + 1 taps, along one axis at a time, the image mirrored at its edges.
//
// frames (n, h, w) float32, coef (h, w) float32; the shifts are the columns dy, dx (`col_dy`,
// `col_dy + 1`) of the chunk's result block (n, ncols) double; partial (n, 14, blocks): block b's
// sums of frame n.  Grid (blocks, n), THREADS threads: block b takes the band of BAND_ROWS rows
// of the rectangle from its row b * BAND_ROWS, its threads the columns.  Then reference_fit_step, a thread a frame, adds
// the blocks in order (the same numbers every run), solves the step and writes the block.

#include "cholesky4.cuh"
#include "warp_reduce.cuh"

// rows of a block's band (the sliding taps' three rows of warm-up are an eighth of it)
#define BAND_ROWS 24

// The cubic B-spline's weights of the taps at -1, 0, 1, 2 about the fraction t, and of its
// derivative.
__device__ __forceinline__ void bspline_weights(double t, double (&v)[4], double (&d)[4]) {
    const double u = 1.0 - t;
    v[0] = u * u * u / 6.0;
    v[1] = ((3.0 * t - 6.0) * t * t + 4.0) / 6.0;
    v[2] = (((-3.0 * t + 3.0) * t + 3.0) * t + 1.0) / 6.0;
    v[3] = t * t * t / 6.0;
    d[0] = -u * u / 2.0;
    d[1] = (3.0 * t - 4.0) * t / 2.0;
    d[2] = ((-3.0 * t + 2.0) * t + 1.0) / 2.0;
    d[3] = t * t / 2.0;
}

// out[y, x] = sum_k taps[k] * in[mirror(y + k - R), x] along AXIS 0 (or along x for AXIS 1) of
// an (h, w) image, the taps in order, each a product then a sum (NumPy's order); mirrored as
// NumPy's pad "reflect" (d c b | a b c d | c b a), repeated for short axes.  A thread a pixel.
template <typename IN, typename OUT, int AXIS>
__global__ void spline_axis(const IN* __restrict__ in, OUT* __restrict__ out,
                            const double* __restrict__ taps, int radius, int h, int w) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)h * w) return;
    const int y = (int)(i / w), x = (int)(i % w);
    const int n = AXIS == 0 ? h : w, at = AXIS == 0 ? y : x;
    const int period = 2 * (n - 1);
    double acc = 0.0;
    for (int k = -radius; k <= radius; ++k) {
        int j = at + k;
        if (period > 0) {
            j = abs(j) % period;
            if (j >= n) j = period - j;
        } else {
            j = 0;
        }
        const double v = (double)in[AXIS == 0 ? (size_t)j * w + x : (size_t)y * w + j];
        acc = __dadd_rn(acc, __dmul_rn(taps[k + radius], v));
    }
    out[i] = (OUT)acc;
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) reference_fit_sums(
        const float* __restrict__ frames, const float* __restrict__ coef,
        const double* __restrict__ block, int ncols, int col_dy, double* __restrict__ partial,
        int h, int w, int margin) {
    const int n = blockIdx.y;
    const double sy = block[(size_t)n * ncols + col_dy], sx = block[(size_t)n * ncols + col_dy + 1];
    double acc[14];
#pragma unroll
    for (int m = 0; m < 14; ++m) acc[m] = 0.0;
    // (a shift far outside leaves no rectangle: clamped before the conversion to int)
    if (isfinite(sy) && isfinite(sx) && fabs(sy) < h && fabs(sx) < w) {
        const int y0 = max(margin, (int)ceil(margin - sy));
        const int y1 = min(h - 1 - margin, (int)floor(h - 1 - margin - sy));
        const int x0 = max(margin, (int)ceil(margin - sx));
        const int x1 = min(w - 1 - margin, (int)floor(w - 1 - margin - sx));
        const double fy = floor(sy), fx = floor(sx);
        const int iy = (int)fy - 1, ix = (int)fx - 1;  // the first tap's offset
        double wy[4], dy[4], wx[4], dx[4];
        bspline_weights(sy - fy, wy, dy);
        bspline_weights(sx - fx, wx, dx);
        const float* fr = frames + (size_t)n * h * w;
        // block b: a band of BAND_ROWS rows; a thread a column walking down it, the taps of the
        // four rows of coefficients under the pixel along x kept as it goes (r: the spline's,
        // rd: its derivative's), one row of them new a pixel
        const int band0 = y0 + blockIdx.x * BAND_ROWS;
        const int band1 = min(y1, band0 + BAND_ROWS - 1);
        for (int x = x0 + threadIdx.x; x <= x1 && band0 <= band1; x += THREADS) {
            double r[4], rd[4];
            const float* c = coef + (size_t)(band0 + iy) * w + (x + ix);
#pragma unroll
            for (int i = 0; i < 3; ++i) {
                double a = 0.0, b = 0.0;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const double k = (double)c[(size_t)i * w + j];
                    a += wx[j] * k;
                    b += dx[j] * k;
                }
                r[i + 1] = a;
                rd[i + 1] = b;
            }
            for (int y = band0; y <= band1; ++y) {
#pragma unroll
                for (int i = 0; i < 3; ++i) {
                    r[i] = r[i + 1];
                    rd[i] = rd[i + 1];
                }
                const float* c3 = coef + (size_t)(y + iy + 3) * w + (x + ix);
                double a = 0.0, b = 0.0;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const double k = (double)c3[j];
                    a += wx[j] * k;
                    b += dx[j] * k;
                }
                r[3] = a;
                rd[3] = b;
                double v = 0.0, vy = 0.0, vx = 0.0;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    v += wy[i] * r[i];
                    vy += dy[i] * r[i];
                    vx += wy[i] * rd[i];
                }
                const double f = (double)fr[(size_t)y * w + x];
                acc[0] += v * v;
                acc[1] += v;
                acc[2] += v * vy;
                acc[3] += v * vx;
                acc[4] += 1.0;
                acc[5] += vy;
                acc[6] += vx;
                acc[7] += vy * vy;
                acc[8] += vy * vx;
                acc[9] += vx * vx;
                acc[10] += f * v;
                acc[11] += f;
                acc[12] += f * vy;
                acc[13] += f * vx;
            }
        }
    }
    store_block_sums<14, THREADS>(acc, partial + (size_t)n * 14 * gridDim.x, gridDim.x, 1);
}

// One Gauss-Newton step of frame = a * V(q + s) + b a thread a frame, from its sums: a and b
// fitted at s (the least squares of the frame on V and 1), then the system of the columns V, 1,
// a Vy, a Vx against the residual solved for (da, db, dy, dx); the block's dy, dx move by the
// last two where the row was measured (finite, not constant, not on the search border, finite
// shifts), the fit had at least 16 pixels, a gain above 0 (else not this scene), a positive definite system, and the
// step is at most max_step px along either axis.  before (n, 2): the block's dy, dx as they
// were (every frame's).  THREADS threads, ceil(n / THREADS) blocks.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) reference_fit_step(
        const double* __restrict__ partial, int blocks, double* __restrict__ block, int ncols,
        int col_dy, int col_finite, int col_constant, int col_border, int n, double max_step,
        double* __restrict__ before) {
    const int f = blockIdx.x * THREADS + threadIdx.x;
    if (f >= n) return;
    double* row = block + (size_t)f * ncols;
    const double sy = row[col_dy], sx = row[col_dy + 1];
    before[2 * f] = sy;
    before[2 * f + 1] = sx;
    if (!(row[col_finite] == 1.0 && row[col_constant] == 0.0 && row[col_border] == 0.0
          && isfinite(sy) && isfinite(sx)))
        return;
    double g[14];
    for (int m = 0; m < 14; ++m) {
        double s = 0.0;
        for (int b = 0; b < blocks; ++b) s += partial[((size_t)f * 14 + m) * blocks + b];
        g[m] = s;
    }
    const double k = g[4], st = g[1], stt = g[0], sf = g[11], stf = g[10];
    if (!(k >= 16.0)) return;
    const double var = stt - st * st / k;
    if (!(var > 0.0)) return;
    const double a = (stf - st * sf / k) / var;
    const double b = (sf - a * st) / k;
    if (!(isfinite(a) && a > 0.0 && isfinite(b))) return;
    // the sums of the pairs of V, 1, Vy, Vx (symmetric), and of each with the frame
    const int pair[4][4] = {{0, 1, 2, 3}, {1, 4, 5, 6}, {2, 5, 7, 8}, {3, 6, 8, 9}};
    const double scale[4] = {1.0, 1.0, a, a};
    double m[4][4], r[4], x[4], inv_diag[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) m[i][j] = g[pair[i][j]] * scale[i] * scale[j];
        r[i] = scale[i] * (g[10 + i] - a * g[pair[i][0]] - b * g[pair[i][1]]);
    }
    if (!cholesky_solve4(m, r, x, inv_diag)) return;
    if (!(isfinite(x[2]) && isfinite(x[3]) && fabs(x[2]) <= max_step && fabs(x[3]) <= max_step))
        return;
    row[col_dy] = sy + x[2];
    row[col_dy + 1] = sx + x[3];
}
