// Normalized correlation surfaces and their peaks for whole batches, in three passes over
// memory instead of the dozens a chain of array operations needs (the align pipeline's step
// after the correlation kernels or the FFT).
//
//  * strip_sums + sat_tables: summed-area tables T[f][y][x] = sum_{r < y, c < x} x[f][r][c] of
//    the frames and of their squares, in float64, with a zero first row and column.  Each
//    row's sums left of every 32-column strip first, then a block per strip runs down its
//    columns and its left edge (its warps own row segments and combine their sums in shared
//    memory) and scans each row across its lanes, writing every entry once.  A bounded search
//    only looks up rows y <= top and y >= top + 1 + gap: the table keeps just those
//    (table row j holds y = j for j <= top, y = j + gap after; gap = 0 keeps all H + 1).
//  * zncc_peaks: per shift k, ZNCC from the raw correlation sum c[k] and eight table look-ups
//    (the overlap of two equal-sized frames is a rectangle in each), written to the surface,
//    with the surface's maximum (value and first row-major index packed in one 64-bit key)
//    and minimum reduced per block and combined with one atomic per block.  CIRCULAR reads c
//    from an un-cropped circular FFT correlation at (k mod FFT size), so the crop costs nothing.
//  * second_peaks: the highest strict local maximum (>= its 8 neighbours, > one of them;
//    outside the surface counts as -inf) outside the (2 e + 1)^2 window around the peak.
//
// Float keys: ordered(v) maps IEEE floats to unsigned ints of the same order, so atomicMax /
// atomicMin on the keys are max / min on the values; 0 is below every key of a number.

// xcorr_app/registration/_normalize.py FLAT: an overlap with variance at most this share of its
// sum of squares is constant; EMPTY: one holding at most this share of its whole frame's
// variance is empty (the correlation sums are exact to about 1e-7 of the whole energy)
#define FLAT 1e-12
#define EMPTY 1e-4

#include "float_keys.cuh"
#include "summed_area.cuh"

// Per row, the sums of x and x*x left of each 32-column strip: left[f][y][s] =
// sum_{c < 32 s} x[f][y][c] (exclusive), a warp per row.  rows = frames * h.  (A lane per
// strip, summing its 32 columns, measured slower: each load touched 32 lines.)
template <int WARPS>
__global__ void strip_sums(const float* __restrict__ x, double* __restrict__ left1,
                           double* __restrict__ left2, int rows, int w, int strips) {
    const int row = blockIdx.x * WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // whole warps leave together
    const float* xr = x + (size_t)row * w;
    double* l1 = left1 + (size_t)row * strips;
    double* l2 = left2 + (size_t)row * strips;
    double run1 = 0.0, run2 = 0.0;
#pragma unroll 4
    for (int s = 0; s < strips; ++s) {
        if (lane == 0) {
            l1[s] = run1;
            l2[s] = run2;
        }
        const int c = s * 32 + lane;
        const double v = c < w ? (double)xr[c] : 0.0;
        double a = v, aa = v * v;
#pragma unroll
        for (int off = 16; off > 0; off /= 2) {  // (a butterfly: every lane gets the sum)
            a += __shfl_xor_sync(0xffffffffu, a, off);
            aa += __shfl_xor_sync(0xffffffffu, aa, off);
        }
        run1 += a;
        run2 += aa;
    }
}

// The tables of x and x*x in one pass over each 32-column strip.  grid (strips, frames), block
// (32, SEGMENTS): a lane a column, a warp a segment of rows.  The column prefix sums C[y][c]
// run down the rows (each segment starting from the sums of the segments above it, added in
// shared memory), and so does the strip's left edge T[y][32 s] from strip_sums; a row's table
// entries are then T[y][32 s] plus a shuffle scan of C[y][.] across the lanes, written once
// (a column pass and a row pass in place read and wrote the tables twice).
template <int SEGMENTS>
__global__ void sat_tables(const float* __restrict__ x, const double* __restrict__ left1,
                           const double* __restrict__ left2, double* __restrict__ s1,
                           double* __restrict__ s2, int h, int w, int top, int gap,
                           int strips) {
    __shared__ double part1[SEGMENTS][33], part2[SEGMENTS][33];  // [.][32]: the left edge
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int strip = blockIdx.x;
    const int col = strip * 32 + tx;
    const bool in = col < w;
    const int w1 = w + 1;
    const int rows = h + 1 - gap;
    const float* xf = x + (size_t)blockIdx.y * h * w;
    const double* e1 = left1 + (size_t)blockIdx.y * h * strips + strip;
    const double* e2 = left2 + (size_t)blockIdx.y * h * strips + strip;
    double* t1 = s1 + (size_t)blockIdx.y * rows * w1;
    double* t2 = s2 + (size_t)blockIdx.y * rows * w1;
    const int seg = (h + SEGMENTS - 1) / SEGMENTS;
    const int y0 = min(h, ty * seg), y1 = min(h, y0 + seg);
    double a = 0.0, aa = 0.0, l = 0.0, ll = 0.0;
#pragma unroll 4
    for (int y = y0; y < y1; ++y) {
        const double v = in ? (double)xf[(size_t)y * w + col] : 0.0;
        a += v;
        aa += v * v;
        l += e1[(size_t)y * strips];  // (the same address in every lane: one load)
        ll += e2[(size_t)y * strips];
    }
    part1[ty][tx] = a;
    part2[ty][tx] = aa;
    if (tx == 0) {
        part1[ty][32] = l;
        part2[ty][32] = ll;
    }
    __syncthreads();
    double run1 = 0.0, run2 = 0.0, edge1 = 0.0, edge2 = 0.0;  // the segments above this one
    for (int s = 0; s < ty; ++s) {
        run1 += part1[s][tx];
        run2 += part2[s][tx];
        edge1 += part1[s][32];
        edge2 += part2[s][32];
    }
    // table rows y0 + 1 .. y1 of this segment that are kept: (y0, top] and [top + 1 + gap, y1]
    const int keep_lo = max(y0 + 1, top + 1 + gap);
    const int last = y1 <= top ? y1 : (keep_lo <= y1 ? y1 : min(y1, top));
    if (ty == 0 && in) {
        t1[col + 1] = 0.0;
        t2[col + 1] = 0.0;
    }
    for (int y = y0; y < last; ++y) {  // rows past the last kept one are not needed
        const double v = in ? (double)xf[(size_t)y * w + col] : 0.0;
        run1 += v;
        run2 += v * v;
        edge1 += e1[(size_t)y * strips];
        edge2 += e2[(size_t)y * strips];
        double r1 = run1, r2 = run2;  // inclusive scan across the strip's columns
        warp_scan_pair(r1, r2, tx);
        if (in && (y + 1 <= top || y + 1 >= keep_lo)) {
            const size_t j = (size_t)table_row(y + 1, top, gap) * w1 + col + 1;
            t1[j] = edge1 + r1;
            t2[j] = edge2 + r2;
        }
    }
    if (blockIdx.x == 0 && tx == 0) {  // the zero first column
        for (int y = (ty == 0 ? 0 : y0 + 1); y <= y1; ++y) {
            if (y <= top || y >= top + 1 + gap) {
                t1[(size_t)table_row(y, top, gap) * w1] = 0.0;
                t2[(size_t)table_row(y, top, gap) * w1] = 0.0;
            }
        }
    }
}

// Sum over [y0, y1) x [x0, x1) from a table whose rows j0, j1 hold image rows y0, y1.  The
// table's first row and column are zero: those entries are not read (half the look-ups of a
// search whose overlaps touch the frame's top or left edge), the arithmetic is the same.
__device__ __forceinline__ double rect_sum(const double* t, int w1, int j0, int j1, int x0,
                                           int x1) {
    const double t11 = t[(size_t)j1 * w1 + x1];
    const double t01 = j0 == 0 ? 0.0 : t[(size_t)j0 * w1 + x1];
    const double t10 = x0 == 0 ? 0.0 : t[(size_t)j1 * w1 + x0];
    const double t00 = j0 == 0 || x0 == 0 ? 0.0 : t[(size_t)j0 * w1 + x0];
    return t11 - t01 - t10 + t00;
}

template <int THREADS>
__device__ __forceinline__ void reduce_to_frame(unsigned long long best, unsigned int low,
                                                unsigned long long* peak_key,
                                                unsigned int* min_key) {
    __shared__ unsigned long long best_w[THREADS / 32];
    __shared__ unsigned int low_w[THREADS / 32];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        const unsigned long long b = __shfl_down_sync(0xffffffffu, best, off);
        const unsigned int l = __shfl_down_sync(0xffffffffu, low, off);
        best = b > best ? b : best;
        low = l < low ? l : low;
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
        best_w[warp] = best;
        low_w[warp] = low;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < THREADS / 32; ++i) {
            best = best_w[i] > best ? best_w[i] : best;
            low = low_w[i] < low ? low_w[i] : low;
        }
        atomicMax(peak_key, best);
        atomicMin(min_key, low);
    }
}

// One block per (surface row iy, frame f = f0 + blockIdx.y), THREADS threads striding over
// the row (f0: the launcher's batches of at most 65535 frames, the grid's y limit).
// corr: CIRCULAR ? (frames, corr_h, corr_w) circular correlation with c[k] at
//       (ky mod corr_h, kx mod corr_w) : (frames, ho, wo) dense.
// a1, a2: tables of the left (reference) frames, a_stride elements apart (0: one for all),
// frame f against left f / per_left (1: one each; the patch pass: P left patches, each
// against its own N = per_left frames); b1, b2: tables of the right frames.  Both are h x w.
template <bool CIRCULAR, bool NORMALIZE, int THREADS>
__global__ void zncc_peaks(const float* __restrict__ corr, int corr_h, int corr_w,
                           const double* __restrict__ a1, const double* __restrict__ a2,
                           long long a_stride, const double* __restrict__ b1,
                           const double* __restrict__ b2, float* __restrict__ z,
                           unsigned long long* __restrict__ peak_key,
                           unsigned int* __restrict__ min_key, int h, int w, int ho, int wo,
                           int ky0, int kx0, double min_n, int top, int gap, int per_left,
                           int f0) {
    const int iy = blockIdx.x, f = f0 + (int)blockIdx.y;
    const int ky = iy + ky0;
    const int w1 = w + 1;
    const int ya = max(0, -ky), yb = max(ya, min(h, h - ky));  // overlap rows, right coords
    const size_t table = (size_t)(h + 1 - gap) * w1;
    const double* A1 = a1 + (long long)(f / per_left) * a_stride;
    const double* A2 = a2 + (long long)(f / per_left) * a_stride;
    const double* B1 = b1 + f * table;
    const double* B2 = b2 + f * table;
    const float* c_row;
    if (CIRCULAR) {
        int my = ky % corr_h;
        my += my < 0 ? corr_h : 0;
        c_row = corr + ((size_t)f * corr_h + my) * corr_w;
    } else {
        c_row = corr + ((size_t)f * ho + iy) * wo;
    }
    float* z_row = z + ((size_t)f * ho + iy) * wo;
    int mx = 0;  // (kx0 + ix) mod corr_w, advanced with ix
    if (CIRCULAR) {
        mx = (kx0 + (int)threadIdx.x) % corr_w;
        mx += mx < 0 ? corr_w : 0;
    }
    unsigned long long best = 0ull;
    unsigned int low = 0xffffffffu;
    double ea = 0.0, eb = 0.0;  // (each whole frame's variance, from its tables' corners)
    if (NORMALIZE) {
        const int last = table_row(h, top, gap);
        const double all = (double)h * (double)w;
        const double sa = rect_sum(A1, w1, 0, last, 0, w), sb = rect_sum(B1, w1, 0, last, 0, w);
        ea = rect_sum(A2, w1, 0, last, 0, w) - sa * sa / all;
        eb = rect_sum(B2, w1, 0, last, 0, w) - sb * sb / all;
    }
    for (int ix = threadIdx.x; ix < wo; ix += THREADS) {
        const int kx = ix + kx0;
        const int xa = max(0, -kx), xb = max(xa, min(w, w - kx));
        const double c = CIRCULAR ? (double)c_row[mx] : (double)c_row[ix];
        const double n = (double)(yb - ya) * (double)(xb - xa);
        float v;
        if (NORMALIZE && !(n >= min_n)) {
            v = -1.0f;  // too little overlap (none: the look-ups would leave the tables)
        } else if (NORMALIZE) {
            const int la = table_row(ya + ky, top, gap), lb = table_row(yb + ky, top, gap);
            const int ra = table_row(ya, top, gap), rb = table_row(yb, top, gap);
            const double sa = rect_sum(A1, w1, la, lb, xa + kx, xb + kx);
            const double saa = rect_sum(A2, w1, la, lb, xa + kx, xb + kx);
            const double sb = rect_sum(B1, w1, ra, rb, xa, xb);
            const double sbb = rect_sum(B2, w1, ra, rb, xa, xb);
            const double nn = fmax(n, 1.0);
            const double num = c - sa * sb / nn;
            const double va = saa - sa * sa / nn, vb = sbb - sb * sb / nn;
            const double var = fmax(va, 0.0) * fmax(vb, 0.0);
            const bool flat = va <= FLAT * saa || vb <= FLAT * sbb  // constant up to rounding
                              || va <= EMPTY * ea || vb <= EMPTY * eb;
            v = (var > 0.0 && !flat) ? (float)(num / sqrt(var)) : -1.0f;
        } else {
            v = n > 0.0 ? (float)c : 0.0f;  // no overlap: 0, as the zero-padded FFT gives
        }
        z_row[ix] = v;
        const unsigned int k = ordered_key(v);
        const unsigned long long key =
            ((unsigned long long)k << 32) | (0xffffffffu - (unsigned int)(iy * wo + ix));
        best = key > best ? key : best;
        low = k < low ? k : low;
        if (CIRCULAR) {
            mx += THREADS;
            while (mx >= corr_w) mx -= corr_w;
        }
    }
    reduce_to_frame<THREADS>(best, low, peak_key + f, min_key + f);
}

// The same maximum and minimum keys over an existing surface (phase correlation).
template <int THREADS>
__global__ void surface_extrema(const float* __restrict__ z, unsigned long long* peak_key,
                                unsigned int* min_key, int ho, int wo, int rows, int f0) {
    const int f = f0 + (int)blockIdx.y;
    unsigned long long best = 0ull;
    unsigned int low = 0xffffffffu;
    const int row1 = min(ho, ((int)blockIdx.x + 1) * rows);
    for (int iy = (int)blockIdx.x * rows + (threadIdx.x >> 5); iy < row1; iy += THREADS / 32) {
        const float* z_row = z + ((size_t)f * ho + iy) * wo;
        for (int ix = threadIdx.x & 31; ix < wo; ix += 32) {
            const unsigned int k = ordered_key(z_row[ix]);
            const unsigned long long key =
                ((unsigned long long)k << 32) | (0xffffffffu - (unsigned int)(iy * wo + ix));
            best = key > best ? key : best;
            low = k < low ? k : low;
        }
    }
    reduce_to_frame<THREADS>(best, low, peak_key + f, min_key + f);
}

// Highest strict local maximum outside the window around each surface's peak.  A lane's row
// neighbours come from the lanes beside it (a shuffle); the rows above and below are read only
// where the row neighbours and the best so far leave the pixel a candidate (the same result).
template <int THREADS>
__global__ void second_peaks(const float* __restrict__ z,
                             const unsigned long long* __restrict__ peak_key,
                             unsigned int* __restrict__ second_key, int ho, int wo,
                             int exclusion, int f0) {
    const int iy = blockIdx.x, f = f0 + (int)blockIdx.y;
    const int lane = threadIdx.x & 31;
    const unsigned int flat = 0xffffffffu - (unsigned int)(peak_key[f] & 0xffffffffull);
    const int py = (int)(flat / (unsigned int)wo), px = (int)(flat - (unsigned int)py * wo);
    const float* zf = z + (size_t)f * ho * wo;
    const float* zr = zf + (size_t)iy * wo;
    const bool row_in_window = abs(iy - py) <= exclusion;
    unsigned int best = 0u;
    for (int x0 = threadIdx.x & ~31; x0 < wo; x0 += THREADS) {  // (whole warps: the shuffles)
        const int ix = x0 + lane;
        const bool valid = ix < wo;
        const float c = valid ? zr[ix] : 0.0f;
        float left = __shfl_up_sync(0xffffffffu, c, 1);
        float right = __shfl_down_sync(0xffffffffu, c, 1);
        if (lane == 0 && valid && ix > 0) left = zr[ix - 1];
        if (lane == 31 && valid && ix + 1 < wo) right = zr[ix + 1];
        bool geq = true, gt = false;
        if (ix > 0) {
            geq = c >= left;
            gt = c > left;
        } else {
            gt = true;  // outside is -inf
        }
        if (ix + 1 < wo) {
            geq = geq && c >= right;
            gt = gt || c > right;
        } else {
            gt = true;
        }
        const unsigned int k = ordered_key(c);
        if (!valid || !geq || k <= best || (row_in_window && abs(ix - px) <= exclusion)) continue;
#pragma unroll
        for (int dy = -1; dy <= 1; dy += 2) {
#pragma unroll
            for (int dx = -1; dx <= 1; ++dx) {
                const int y = iy + dy, x = ix + dx;
                if (y < 0 || y >= ho || x < 0 || x >= wo) {
                    gt = true;
                } else {
                    const float nb = zf[(size_t)y * wo + x];
                    geq = geq && c >= nb;
                    gt = gt || c > nb;
                }
            }
        }
        if (geq && gt) best = k;
    }
    __shared__ unsigned int best_w[THREADS / 32];
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        const unsigned int b = __shfl_down_sync(0xffffffffu, best, off);
        best = b > best ? b : best;
    }
    if ((threadIdx.x & 31) == 0) best_w[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < THREADS / 32; ++i) best = best_w[i] > best ? best_w[i] : best;
        if (best) atomicMax(second_key + f, best);
    }
}

// One thread per surface: the peak's position (first maximum in row-major order), its value, and
// the confidence of xcorr_app/registration/_peaks.py's confidence_ratio from the peak, second-peak
// and minimum keys (a constant surface: 1; no second peak: inf; second equal to the peak: 1; else
// peak / max(|second|, tiny), NaN propagating as NumPy's maximum does).  One kernel for what took a
// dozen CuPy operations, each compiled on a first run.
__global__ void decode_peaks(const unsigned long long* __restrict__ peak_key,
                             const unsigned int* __restrict__ min_key,
                             const unsigned int* __restrict__ second_key, int wo, int n,
                             long long* __restrict__ iy, long long* __restrict__ ix,
                             double* __restrict__ peak, double* __restrict__ conf) {
    const int f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n) return;
    const unsigned long long pk = peak_key[f];
    const long long flat = (long long)(0xffffffffull - (pk & 0xffffffffull));
    iy[f] = flat / wo;
    ix[f] = flat % wo;
    const unsigned int hi = (unsigned int)(pk >> 32);
    const double p = key_value(hi);
    const bool nothing = second_key[f] == 0u;
    const double s = key_value(second_key[f]);
    const double a = fabs(nothing ? 1.0 : s);
    const double tiny = 2.2250738585072014e-308;  // np.finfo(np.float64).tiny
    double ratio = p / (isnan(a) ? a : (a > tiny ? a : tiny));
    if (s == p) ratio = 1.0;
    if (nothing) ratio = __longlong_as_double(0x7ff0000000000000LL);  // +inf
    if (hi == min_key[f]) ratio = 1.0;
    peak[f] = p;
    conf[f] = ratio;
}
