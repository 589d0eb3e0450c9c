// Per-frame moments over an area, for the quality report (launched by
// xcorr_app/alignment/_quality_figures.py area_moments): for frame n of a chunk (n, h, w) of
// pixels T, over the rows [y0, y0 + rows) and the columns [x0, x0 + cols), the double sums of
// d, d * d and d * ref_j for J float32 reference images (J, rows, cols), d = v - p each pixel v
// as float32 (as the CPU's lines convert it) less the area's first pixel p, in one read of the
// frame: the correlations with the template and the residual's projections on its gradient
// follow from them.  (About p, a constant frame's spread is exactly 0, and a faint one's is not
// lost to the cancellation of large sums.)  (In place of CuPy passes and matrix products: a
// read of the chunk for each correlation and for the residual.)
//
// Grid (blocks, n), THREADS threads: block b takes the area's rows b * WARPS + warp, then every
// (blocks * WARPS)-th, a warp a row; it writes its sums to partial[(n * blocks + b) * (2 + J)
// + m], which the host adds up over the blocks in a fixed order (no atomics: the same sums every
// run).

#include "field_sample.cuh"
#include "finite_shift.cuh"
#include "warp_reduce.cuh"

// The sums one pixel adds to a set of moments: d, d * d and d * r, in this order
// (shifted_moments keeps two sets a pixel).
__device__ __forceinline__ void add_moments(double* acc, double d, double r) {
    acc[0] += d;
    acc[1] += d * d;
    acc[2] += d * r;
}

// One block's sums over its rows of a region: d, d * d and d * ref_j (J references, rows of
// ref_stride floats, planes ref_plane apart, from the region's first pixel), d each pixel as
// float32 less the pivot; the block's warps take the rows first_row, first_row + row_step, ...
// (a warp a row); then the warps added up in a fixed order into out[0 .. 2 + J) (no atomics:
// the same sums every run).
template <typename T, int J, int THREADS>
__device__ __forceinline__ void block_moments(const T* __restrict__ frame, int w, int y0, int x0,
                                              int rows, int cols, double pivot,
                                              const float* __restrict__ refs, int ref_stride,
                                              size_t ref_plane, int first_row, int row_step,
                                              double* __restrict__ out) {
    constexpr int M = 2 + J;
    constexpr int WARPS = THREADS / 32;
    __shared__ double part[M][WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0;
    for (int r = first_row + warp; r < rows; r += row_step) {
        const T* row = frame + (size_t)(y0 + r) * w + x0;
        const float* ref = refs + (size_t)r * ref_stride;
        for (int x = lane; x < cols; x += 32) {
            const double v = (double)(float)row[x] - pivot;
            acc[0] += v;
            acc[1] += v * v;
#pragma unroll
            for (int j = 0; j < J; ++j) acc[2 + j] += v * (double)ref[j * ref_plane + x];
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const double s = warp_sum(acc[m]);
        if (lane == 0) part[m][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x < M) {  // the warps' sums in a fixed order, a thread a moment
        double s = 0.0;
        for (int i = 0; i < WARPS; ++i) s += part[threadIdx.x][i];
        out[threadIdx.x] = s;
    }
}

template <typename T, int J, int THREADS>
__global__ void __launch_bounds__(THREADS) area_moments(
        const T* __restrict__ frames, int h, int w, int y0, int x0, int rows, int cols,
        const float* __restrict__ refs, double* __restrict__ partial) {
    constexpr int WARPS = THREADS / 32;
    const T* frame = frames + (size_t)blockIdx.y * h * w;
    block_moments<T, J, THREADS>(frame, w, y0, x0, rows, cols,
                                 (double)(float)frame[(size_t)y0 * w + x0], refs, cols,
                                 (size_t)rows * cols, blockIdx.x * WARPS, gridDim.x * WARPS,
                                 partial + ((size_t)blockIdx.y * gridDim.x + blockIdx.x)
                                 * (2 + J));
}

// The same moments over the tiles of an area (launched by
// xcorr_app/alignment/_quality_figures.py TileRegions.moments): the area starts at (oy, ox) of
// each h x w frame; its tiles are the rows [ys[a], ys[a + 1]) by the columns [xs[b], xs[b + 1])
// (area coordinates, a < ty, b < tx), its J references (J, ys[ty], xs[tx]) float32; every
// tile's pivot the area's first pixel (pivoted 0: none, for the template's own sums), so that
// the tiles of a region add up to the region's sums (tile_regions).  The per-patch figures of a
// piecewise run's quality report: the patch regions overlap, their tiles do not, so each pixel
// is read once.
//
// Grid (ty, n), THREADS threads, (THREADS + tx) * (2 + J) doubles of dynamic shared memory: a
// block a row of tiles of a frame.  A thread a column (coalesced rows), its sums over the tile
// row's rows; then each (tile, moment) adds its columns' sums in order, a thread each (no
// atomics: the same sums every run).  The sums go to partial[((n * ty + a) * tx + b) * (2 + J)
// + m].
template <typename T, int J, int THREADS>
__global__ void __launch_bounds__(THREADS) tile_moments(
        const T* __restrict__ frames, int h, int w, int oy, int ox, const int* __restrict__ ys,
        int ty, const int* __restrict__ xs, int tx, const float* __restrict__ refs, int pivoted,
        double* __restrict__ partial) {
    constexpr int M = 2 + J;
    extern __shared__ double shared[];
    double* cols = shared;                 // [M][THREADS]: the columns' sums of this stretch
    double* tiles = shared + M * THREADS;  // [tx * M]: the tiles' running sums
    const int a = blockIdx.x, y0 = ys[a], y1 = ys[a + 1], width = xs[tx];
    const size_t plane = (size_t)ys[ty] * width;
    const T* frame = frames + (size_t)blockIdx.y * h * w;
    const double pivot = pivoted ? (double)(float)frame[(size_t)oy * w + ox] : 0.0;
    for (int i = threadIdx.x; i < tx * M; i += THREADS) tiles[i] = 0.0;
    for (int c0 = 0; c0 < width; c0 += THREADS) {
        const int x = c0 + threadIdx.x;
        double acc[M];
#pragma unroll
        for (int m = 0; m < M; ++m) acc[m] = 0.0;
        if (x < width) {
#pragma unroll 4
            for (int r = y0; r < y1; ++r) {  // (unrolled: several rows' loads in flight)
                const double v = (double)(float)frame[(size_t)(oy + r) * w + ox + x] - pivot;
                const float* ref = refs + (size_t)r * width + x;
                acc[0] += v;
                acc[1] += v * v;
#pragma unroll
                for (int j = 0; j < J; ++j) acc[2 + j] += v * (double)ref[j * plane];
            }
        }
#pragma unroll
        for (int m = 0; m < M; ++m) cols[m * THREADS + threadIdx.x] = acc[m];
        __syncthreads();
        const int c1 = min(c0 + THREADS, width);
        for (int i = threadIdx.x; i < tx * M; i += THREADS) {
            const int b = i / M, m = i - b * M;
            const int lo = max(xs[b], c0), hi = min(xs[b + 1], c1);
            double s = tiles[i];
            for (int c = lo; c < hi; ++c) s += cols[m * THREADS + c - c0];
            tiles[i] = s;
        }
        __syncthreads();
    }
    double* out = partial + ((size_t)blockIdx.y * ty + a) * tx * M;
    for (int i = threadIdx.x; i < tx * M; i += THREADS) out[i] = tiles[i];
}

// A piecewise run's chunk warped by its fields and its report's three sets of tile sums, in
// one pass (launched by xcorr_app/alignment/_quality_figures.py TileRegions.warp_moments): out
// (n, oh, ow) float32 the frames' pixels (by + r, bx + c) warped by the field as warp_field
// warps them (bilinear, fill 0: the same values), and over the tiles of the area (its corner
// (ay, ax) of out; tiles [ys[a], ys[a + 1]) x [xs[b], xs[b + 1]) in area coordinates) the sums
//   m 0-2: of the frames as they came (T) against t_ref (rows, cols),
//   m 3-5: of the warped frames (the values written) against t,
//   m 6-9: of the prepared frames (float32 h x w) warped through the same taps, never
//          written, against the gradient's planes g_ref (2, rows, cols);
// d each pixel less a pivot (the frame's area corner as it came for 0-5, the prepared frame's
// for 6-9: the figures do not see it, it keeps the sums' digits).  A pixel's products in
// float32, of d scaled by the power of two that brings its pivot to [0.5, 1) (no overflow at
// any scale of the frames but for d past 2^64 times its pivot), against the float32
// references, summed in float32 down a band of at most `band` rows, then in float64: the
// report's figures
// need no more digits, and float64 arithmetic a pixel (its conversions most of all) made the
// pass twice the warp's time.  In place of warp_field and a kernel that evaluated the field
// again and read the warped frames back.
// Grid (segments * stretches, frames of this launch: n = n0 + blockIdx.y), THREADS threads:
// a block rows [seg[k], seg[k + 1]) of out by a stretch of THREADS columns, a thread a column
// (its field weights in registers) walking down them in bands of `band` rows whose field
// coefficients the block makes first; the segments [first, first + ty) are the area's tile
// rows (the others, out's rows outside the area, are warped only).  Then a warp each (tile,
// moment) of the stretch over its columns (a fixed order: the same sums every run) into
// partial[((n * ty + a) * stretches + stretch) * tx + b) * 10 + m], 0 for the tiles the
// stretch misses: tile_regions adds a tile's stretches with its rows.  Dynamic shared memory
// (band * 2 * gx + 10 * THREADS) doubles; 32-bit offsets within a frame (the launcher's frames
// are under 2^31 pixels).
template <typename T, int GX, int THREADS>
__global__ void __launch_bounds__(THREADS, 8) warp_report(
        const T* __restrict__ frames, const float* __restrict__ prepared,
        float* __restrict__ out, int h, int w, int by, int bx, int oh, int ow,
        const int* __restrict__ seg, int first, int ay, int ax, const int* __restrict__ ys,
        int ty, const int* __restrict__ xs, int tx, const float* __restrict__ t_ref,
        const float* __restrict__ g_ref,
        const double* __restrict__ wy, const double* __restrict__ wxt,
        const double* __restrict__ s, int gy, int gx, int band, int stretches, int n0,
        double* __restrict__ partial) {
    constexpr int M = 10;
    constexpr int WARPS = THREADS / 32;
    extern __shared__ double shared[];
    double* coef = shared;                // [band][2 gx]: the band's rows' field coefficients
    double* cols = coef + band * 2 * gx;  // [M][THREADS]: the columns' sums
    const int k = blockIdx.x / stretches, stretch = blockIdx.x - k * stretches;
    const int c0 = stretch * THREADS, a = k - first;
    const bool area = a >= 0 && a < ty;  // (uniform in the block)
    const int r_lo = seg[k], r_hi = seg[k + 1];
    const int width = xs[tx];
    const int plane = ys[ty] * width;
    const int n = n0 + blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c = c0 + threadIdx.x, x = bx + c;
    const bool measured = area && c >= ax && c < ax + width;
    const T* f = frames + (size_t)n * h * w;
    const float* p = prepared + (size_t)n * h * w;
    float* dst = out + (size_t)n * oh * ow + c;
    const int corner = (by + ay) * w + bx + ax;
    const float pf = (float)f[corner], pp = p[corner];
    int ef, ep;  // (the pivots' exponents: d * 2^-e about 1 where d is about the pivot)
    frexpf(isfinite(pf) ? pf : 0.0f, &ef);
    frexpf(isfinite(pp) ? pp : 0.0f, &ep);
    ef = max(-120, min(ef, 120));  // (a scale of float32's normal range)
    ep = max(-120, min(ep, 120));
    const float sf = ldexpf(1.0f, -ef), sp = ldexpf(1.0f, -ep);
    double wxr[GX > 0 ? GX : 1];  // the column's weights
    if constexpr (GX > 0) {
        if (c < ow) {
#pragma unroll
            for (int j = 0; j < GX; ++j) wxr[j] = wxt[j * w + x];
        }
    }
    if (area) {
#pragma unroll
        for (int m = 0; m < M; ++m) cols[m * THREADS + threadIdx.x] = 0.0;
    }
    for (int r0 = r_lo; r0 < r_hi; r0 += band) {
        const int rn = min(band, r_hi - r0);
        __syncthreads();  // (the band before read its coefficients)
        for (int q = threadIdx.x; q < rn * 2 * gx; q += THREADS) {
            const int rr = q / (2 * gx);
            coef[q] = row_coefficient2(wy, s, by + r0 + rr, n, gy, gx, q - rr * 2 * gx);
        }
        __syncthreads();
        if (c >= ow) continue;
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; ++m) acc[m] = 0.0f;
        for (int rr = 0; rr < rn; ++rr) {
            const int r = r0 + rr, y = by + r;
            const double2 d = field_at<GX>(reinterpret_cast<const double2*>(coef + rr * 2 * gx),
                                           wxr, wxt, x, w, gx);
            const double cy = (double)y - d.x, cx = (double)x - d.y;
            const bool inside = cy >= 0.0 && cy <= (double)(h - 1) && cx >= 0.0
                                && cx <= (double)(w - 1);
            BilinearTaps tap;
            float v = 0.0f;  // (fill 0)
            if (inside) {
                tap = bilinear_taps(h, w, cy, cx);
                v = (float)bilinear_of(f, tap);
            }
            dst[(size_t)r * ow] = v;
            if (!measured) continue;
            float moved = 0.0f;
            if (inside) {  // (warp_field's taps, a weight 0's not read)
                const float fy = (float)tap.ty, fx = (float)tap.tx;
                float top = p[tap.r0 + tap.x0];
                if (tap.tx != 0.0) top = (1.0f - fx) * top + fx * p[tap.r0 + tap.x1];
                if (tap.ty != 0.0) {
                    float bottom = p[tap.r1 + tap.x0];
                    if (tap.tx != 0.0) bottom = (1.0f - fx) * bottom + fx * p[tap.r1 + tap.x1];
                    top = (1.0f - fy) * top + fy * bottom;
                }
                moved = top;
            }
            const float vf = ((float)f[y * w + x] - pf) * sf;
            const float vg = (v - pf) * sf;
            const float vm = (moved - pp) * sp;
            const int at = (r - ay) * width + (c - ax);
            const float t = t_ref[at], g0 = g_ref[at], g1 = g_ref[plane + at];
            acc[0] += vf;
            acc[1] = fmaf(vf, vf, acc[1]);
            acc[2] = fmaf(vf, t, acc[2]);
            acc[3] += vg;
            acc[4] = fmaf(vg, vg, acc[4]);
            acc[5] = fmaf(vg, t, acc[5]);
            acc[6] += vm;
            acc[7] = fmaf(vm, vm, acc[7]);
            acc[8] = fmaf(vm, g0, acc[8]);
            acc[9] = fmaf(vm, g1, acc[9]);
        }
        if (measured) {  // (the band's sums, unscaled, into the column's float64 sums)
            const double uf = ldexp(1.0, ef), up = ldexp(1.0, ep);
            const double unscale[M] = {uf, uf * uf, uf, uf, uf * uf, uf, up, up * up, up, up};
#pragma unroll
            for (int m = 0; m < M; ++m)
                cols[m * THREADS + threadIdx.x] += (double)acc[m] * unscale[m];
        }
    }
    if (!area) return;  // (uniform: out's rows outside the area are warped only)
    __syncthreads();
    const int c1 = min(c0 + THREADS, ow);
    double* sums = partial + (((size_t)n * ty + a) * stretches + stretch) * tx * M;
    int b0 = 0;  // the stretch's tiles [b0, b1) (the others 0: a warp's sums cost more)
    while (b0 < tx && ax + xs[b0 + 1] <= c0) ++b0;
    int b1 = b0;
    while (b1 < tx && ax + xs[b1] < c1) ++b1;
    for (int i = threadIdx.x; i < tx * M; i += THREADS)
        if (i < b0 * M || i >= b1 * M) sums[i] = 0.0;
    for (int q = warp; q < (b1 - b0) * M; q += WARPS) {
        const int b = b0 + q / M, m = q - (q / M) * M;
        const int lo = max(ax + xs[b], c0), hi = min(ax + xs[b + 1], c1);
        double v = 0.0;
        for (int i = lo + lane; i < hi; i += 32) v += cols[m * THREADS + i - c0];
        v = warp_sum(v);
        if (lane == 0) sums[b * M + m] = v;
    }
}

// The sums of R regions of tiles (launched by tile_regions beside tile_moments): region r of
// frame n is the tiles [spans[4r], spans[4r + 1]) by [spans[4r + 2], spans[4r + 3]) of its
// (ty, tx, m) sums, added in row order (the same sums every run); out (n, R, m).
// Grid (n), THREADS threads: a thread a (region, moment).
template <int THREADS>
__global__ void __launch_bounds__(THREADS) tile_regions(
        const double* __restrict__ tiles, int ty, int tx, int m, const int* __restrict__ spans,
        int regions, double* __restrict__ out) {
    const double* t = tiles + (size_t)blockIdx.x * ty * tx * m;
    for (int i = threadIdx.x; i < regions * m; i += THREADS) {
        const int r = i / m, k = i - r * m;
        const int* s = spans + 4 * r;
        double sum = 0.0;
        for (int a = s[0]; a < s[1]; ++a)
            for (int b = s[2]; b < s[3]; ++b) sum += t[((size_t)a * tx + b) * m + k];
        out[((size_t)blockIdx.x * regions + r) * m + k] = sum;
    }
}

// The rigid quality report's two correlations of a chunk in one read (launched by
// xcorr_app/alignment/_quality_figures.py shifted_moments): the moments area_moments gives of
// frame n over the area [y0, y0 + rows) x [x0, x0 + cols) as it came (`before`) and of the same
// area of the frame shifted by shifts[n] = (dy, dx) (`after`), against the one reference `ref`
// (rows, cols), and that shifted area less its first pixel written to `out` (n, rows, cols)
// float32 (the report filters it for the residual and the rotation probe, and sums it for the
// mean image's sharpness: none of them sees an offset, and a filter of values near 0 keeps
// float32's digits for the texture).  The shift is bilinear with fill 0 and a NaN shift 0, as
// warp_shift's:
// - WHOLE: warp_shift's bit for bit, and the whole shifted frame written to `whole` (n, h, w)
//   float32 as well: the run's aligned output, made by the report's read instead of a warp of
//   its own.  Each column's float64 source is made once a block and tile of columns in shared
//   memory, each row's once a row (a float64 source a pixel cost most of warp_shift's time).
// - else the area alone, a shift's taps weighed once a frame (its fraction as float32,
//   floor(-d) its integer part): the same figures, not always the same last bit, and fewer
//   operations a pixel.
// Grid (blocks, n), THREADS threads: the rows of block_moments (the frame's rows with
// WHOLE); partial sums to before and after as area_moments writes them (n, blocks, 3), the
// warps added in a fixed order.
constexpr int SHIFT_TILE = 2048;  // (columns whose sources a WHOLE block holds at once)

// warp_shift's pixel from its row's source (y0 its floor, wy_ its two weights, vy whether
// each tap row is inside) and its column's (x0, wx), fill 0: the same float32 operations in
// the same order (a tap of weight 0 read not at all: it adds nothing)
template <typename T>
__device__ __forceinline__ float shifted_pixel(const T* __restrict__ frame, int h, int w, int y0,
                                               const float (&wy_)[2], const bool (&vy)[2],
                                               int x0, float wx) {
    const float wx_[2] = {__fsub_rn(1.0f, wx), wx};
    const bool vx[2] = {x0 >= 0 && x0 < w, x0 + 1 >= 0 && x0 + 1 < w};
    float acc = 0.0f, weight = 0.0f;
    bool edge = false;
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
            const float tap = __fmul_rn(wy_[a], wx_[b]);
            const bool valid = vy[a] && vx[b];
            const float wgt = __fmul_rn(tap, valid ? 1.0f : 0.0f);
            edge = edge || (tap != 0.0f && !valid);
            if (wgt != 0.0f)
                acc = __fadd_rn(acc, __fmul_rn(wgt, (float)frame[(size_t)(y0 + a) * w + x0 + b]));
            weight = __fadd_rn(weight, wgt);
        }
    return edge ? __fadd_rn(acc, __fmul_rn(__fsub_rn(1.0f, weight), 0.0f)) : acc;
}

// A row's (or column's) source: its floor (clamped far outside: every tap there is) and its
// float32 fraction, as warp_shift's bilinear_taps makes them
struct Source {
    int at;
    float frac;
};
__device__ __forceinline__ Source source_of(int i, double shift) {
    const double s = (double)i - shift, f = floor(s);
    return {(int)fmax(fmin(f, 1073741824.0), -1073741824.0), (float)(s - f)};
}

// The area-only pixel (y, x) where a tap lies outside the frame (sy, sx its first tap): the
// inside taps alone, blended towards the fill 0 where a tap of weight > 0 is outside
// (warp_shift's edge), in warp_shift's order
template <typename T>
__device__ __forceinline__ float shifted_edge(const T* __restrict__ frame, int h, int w, int sy,
                                              int sx, const float (&tap)[4]) {
    float acc = 0.0f, weight = 0.0f;
    bool edge = false;
    for (int k = 0; k < 4; ++k) {
        const int ty = sy + (k >> 1), tx = sx + (k & 1);
        const bool inside = ty >= 0 && ty < h && tx >= 0 && tx < w;
        const float wgt = inside ? tap[k] : 0.0f;
        edge = edge || (tap[k] != 0.0f && !inside);
        if (wgt != 0.0f) acc = __fadd_rn(acc, __fmul_rn(wgt, (float)frame[(size_t)ty * w + tx]));
        weight = __fadd_rn(weight, wgt);
    }
    return edge ? __fadd_rn(acc, __fmul_rn(__fsub_rn(1.0f, weight), 0.0f)) : acc;
}

// (two pixels a lane in flight for the area alone, six blocks an SM: it waits on its loads,
// and more warps hide them better than more loads a warp; WHOLE needs more registers a
// thread, five blocks without spills; docs/performance.md)
template <typename T, bool WHOLE, int THREADS>
__global__ void __launch_bounds__(THREADS, WHOLE ? 5 : 6) shifted_moments(
        const T* __restrict__ frames, int h, int w, int y0, int x0, int rows, int cols,
        const double* __restrict__ shifts, const float* __restrict__ ref,
        float* __restrict__ out, double* __restrict__ before, double* __restrict__ after,
        float* __restrict__ whole) {
    constexpr int WARPS = THREADS / 32;
    constexpr int UNROLL = WHOLE ? 1 : 2;
    __shared__ double part[6][WARPS];
    __shared__ Source column[WHOLE ? SHIFT_TILE : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t n = blockIdx.y;
    const T* frame = frames + n * h * w;
    const double dy = finite_shift(shifts[2 * n]), dx = finite_shift(shifts[2 * n + 1]);
    // the area alone: the frame's taps, and its integer part (a source row or column is y +
    // oy, x + ox); beyond any frame: every tap outside, as an infinite shift's
    const double fy = floor(-dy), fx = floor(-dx);
    const int oy = (int)fmax(fmin(fy, 536870912.0), -536870912.0);
    const int ox = (int)fmax(fmin(fx, 536870912.0), -536870912.0);
    float tap[4];
    {
        const float wy = (float)(-dy - fy), wx = (float)(-dx - fx);
        const float wy_[2] = {__fsub_rn(1.0f, wy), wy}, wx_[2] = {__fsub_rn(1.0f, wx), wx};
#pragma unroll
        for (int k = 0; k < 4; ++k) tap[k] = __fmul_rn(wy_[k >> 1], wx_[k & 1]);
    }
    // inside the frame: the four taps in warp_shift's order, a tap of weight 0 left out (0 *
    // inf is NaN)
    auto inside = [&](const T* __restrict__ s0, int sx) -> float {
        const float v[4] = {(float)s0[sx], (float)s0[sx + 1], (float)s0[sx + w],
                            (float)s0[sx + w + 1]};
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (tap[k] != 0.0f) acc = __fadd_rn(acc, __fmul_rn(tap[k], v[k]));
        return acc;
    };
    // WHOLE: a row's source, its weights and which of its two tap rows are inside
    float wy_[2];
    bool vy[2];
    auto row_taps = [&](int y) -> int {
        const Source s = source_of(y, dy);
        wy_[0] = __fsub_rn(1.0f, s.frac);
        wy_[1] = s.frac;
        vy[0] = s.at >= 0 && s.at < h;
        vy[1] = s.at + 1 >= 0 && s.at + 1 < h;
        return s.at;
    };
    double pivot_g;
    if (WHOLE) {
        const int sy = row_taps(y0);
        const Source sx = source_of(x0, dx);
        pivot_g = (double)shifted_pixel(frame, h, w, sy, wy_, vy, sx.at, sx.frac);
    } else {
        const int sy = y0 + oy, sx = x0 + ox;
        pivot_g = (double)(sy >= 0 && sy + 1 < h && sx >= 0 && sx + 1 < w
                               ? inside(frame + (size_t)sy * w, sx)
                               : shifted_edge(frame, h, w, sy, sx, tap));
    }
    const float pivot = (float)pivot_g;
    const double pivot_f = (double)(float)frame[(size_t)y0 * w + x0];
    double acc[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    // an area pixel's share: its shifted value g less the pivot out, both moments' terms
    auto measure = [&](const T* __restrict__ row, const float* __restrict__ t,
                       float* __restrict__ dst, int x, float f, float g) {
        dst[x] = __fsub_rn(g, pivot);
        const double tv = (double)t[x];
        const double v = (double)f - pivot_f, u = (double)g - pivot_g;
        add_moments(acc, v, tv);
        add_moments(acc + 3, u, tv);
    };
    if (WHOLE) {  // every row and column of the frame, a pixel a lane at a time
        for (int t0 = 0; t0 < w; t0 += SHIFT_TILE) {
            const int t1 = min(w, t0 + SHIFT_TILE);
            __syncthreads();  // (the last tile's sources read)
            for (int x = t0 + threadIdx.x; x < t1; x += THREADS) column[x - t0] = source_of(x, dx);
            __syncthreads();
            for (int y = blockIdx.x * WARPS + warp; y < h; y += gridDim.x * WARPS) {
                const int sy = row_taps(y);
                const int r = y - y0;
                const bool in_rows = r >= 0 && r < rows;
                const T* row = frame + (size_t)y * w - x0;
                const float* t = ref + (size_t)(in_rows ? r : 0) * cols - x0;
                float* dst = out + (n * rows + (in_rows ? r : 0)) * cols - x0;
                float* all = whole + (n * h + y) * w;
                for (int x = t0 + lane; x < t1; x += 32) {
                    const Source s = column[x - t0];
                    const float g = shifted_pixel(frame, h, w, sy, wy_, vy, s.at, s.frac);
                    all[x] = g;
                    if (in_rows && x >= x0 && x < x0 + cols)
                        measure(row, t, dst, x, (float)row[x + x0], g);
                }
            }
        }
    } else {  // the area's rows, a lane's UNROLL pixels 32 apart sampled first, then summed
        for (int r = blockIdx.x * WARPS + warp; r < rows; r += gridDim.x * WARPS) {
            const int sy = y0 + r + oy;
            const bool rows_inside = sy >= 0 && sy + 1 < h;
            const T* s0 = frame + (size_t)(rows_inside ? sy : 0) * w;
            const T* row = frame + (size_t)(y0 + r) * w + x0;
            const float* t = ref + (size_t)r * cols;
            float* dst = out + (n * rows + r) * cols;
            for (int x1 = lane; x1 < cols; x1 += 32 * UNROLL) {
                float g[UNROLL], f[UNROLL];
#pragma unroll
                for (int k = 0; k < UNROLL; ++k) {
                    const int x = x1 + 32 * k;
                    if (x < cols) {
                        const int sx = x0 + x + ox;
                        g[k] = rows_inside && sx >= 0 && sx + 1 < w
                                   ? inside(s0, sx) : shifted_edge(frame, h, w, sy, sx, tap);
                        f[k] = (float)row[x];
                    }
                }
#pragma unroll
                for (int k = 0; k < UNROLL; ++k)
                    if (x1 + 32 * k < cols) measure(row, t, dst, x1 + 32 * k, f[k], g[k]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 6; ++m) {
        const double s = warp_sum(acc[m]);
        if (lane == 0) part[m][warp] = s;
    }
    __syncthreads();
    if (threadIdx.x < 6) {  // the warps' sums in a fixed order, a thread a moment
        double s = 0.0;
        for (int i = 0; i < WARPS; ++i) s += part[threadIdx.x][i];
        const size_t at = (n * gridDim.x + blockIdx.x) * 3 + threadIdx.x % 3;
        (threadIdx.x < 3 ? before : after)[at] = s;
    }
}
