// Register-tiled "column strip" cross-correlation: our addition beyond the thesis, for problems
// where the warp-shuffle kernels waste lanes (few x-shifts, e.g. bounded searches on large
// frames) or are limited by shuffles (one shuffle per FMA at best).
//
// out[z][ky - shift_y0][kx - shift_x0] = sum_n left[left_of(z)][n + k] * right[right_of(z)][n]
//
// A warp owns one tile of TY x TX shifts, 32 consecutive right columns (lane = column x) and a
// chunk of right rows; it sums over its rows for RIGHTS right matrices at once.  Each lane keeps
// a TY x TX window of left values, left[y + ky][x + kx] for the tile, in registers: stepping to
// the next right row needs only one new left row of TX values (coalesced across the lanes) and
// one right value per right matrix, for TY * TX * RIGHTS FMAs, and no shuffle at all.  The
// window is a circular buffer whose rotation is resolved at compile time (the row loop is
// unrolled by TY), so no value is ever moved between registers.  At the end the lanes' partial
// sums are reduced by xor-shuffles and added to the (zeroed) output with atomicAdd, because
// several column groups and row chunks contribute to the same shift.
#include "xcorr_forms.cuh"
#include "work_distribution.cuh"

namespace xcorr {

// Work item of both tiled kernels: (row chunk, tile of TY x TX shifts) with the tile fastest.
// Its first shifts, and the right rows of the chunk that meet a left row at one of its y-shifts.
template <int TY, int TX>
struct TileItem {
    int ky0, kx0, y_begin, y_end;
    __device__ __forceinline__ TileItem(int item, int n_tiles, int tiles_x, int shift_y0,
                                        int shift_x0, int rows_per_chunk, int right_h,
                                        int left_h) {
        int tile;
        const int chunk = div_floor(item, n_tiles, tile);
        int tx_index;
        const int ty_index = div_floor(tile, tiles_x, tx_index);
        ky0 = shift_y0 + ty_index * TY;
        kx0 = shift_x0 + tx_index * TX;
        y_begin = max(chunk * rows_per_chunk, max(0, -(ky0 + TY - 1)));
        y_end = min(min(chunk * rows_per_chunk + rows_per_chunk, right_h), left_h - ky0);
    }
};

}  // namespace xcorr

template <int FORM, int TY, int TX, int RIGHTS>
__global__ void __launch_bounds__(128, 4)
tiled_xcorr(const float* __restrict__ left, const float* __restrict__ right,
            float* __restrict__ out, int left_h, int left_w, int right_h, int right_w, int out_h,
            int out_w, int shift_y0, int shift_x0, int n_left, int m, int rows_per_chunk,
            int n_tiles, int tiles_x, int n_items) {
    using namespace xcorr;
    constexpr unsigned FULL = 0xffffffffu;
    const int lane = threadIdx.x;
    const int x = blockIdx.y * 32 + lane;  // right column of this lane
    const int right_groups = (m + RIGHTS - 1) / RIGHTS;
    const int n_pair_groups = n_left * right_groups;
    const size_t left_size = (size_t)left_h * left_w, right_size = (size_t)right_h * right_w;
    const size_t out_size = (size_t)out_h * out_w;

    // Items are (row chunk, shift tile) with the tile fastest: the warps of a block, and the
    // blocks running together, read the same right rows and overlapping left rows.
    for (int item = blockIdx.x * blockDim.y + threadIdx.y; item < n_items;
         item += gridDim.x * blockDim.y) {
        const TileItem<TY, TX> it(item, n_tiles, tiles_x, shift_y0, shift_x0, rows_per_chunk,
                                  right_h, left_h);
        const int ky0 = it.ky0, kx0 = it.kx0, y_begin = it.y_begin, y_end = it.y_end;
        // Columns of this warp that meet the left at one of the tile's x-shifts (uniform test).
        const int c_begin = max(blockIdx.y * 32, max(0, -(kx0 + TX - 1)));
        const int c_end = min(min(blockIdx.y * 32 + 32, right_w), left_w - kx0);
        if (y_begin >= y_end || c_begin >= c_end) continue;
        const bool lane_ok = x < right_w;
        bool col_ok[TX];
#pragma unroll
        for (int j = 0; j < TX; ++j) col_ok[j] = x + kx0 + j >= 0 && x + kx0 + j < left_w;

        for (int zg = blockIdx.z; zg < n_pair_groups; zg += gridDim.z) {
            int rg;
            const int li = div_floor(zg, right_groups, rg);
            const int r0 = rg * RIGHTS;
            const float* lp = left + (size_t)li * left_size;  // li = 0 with one left
            const float* rp[RIGHTS];
            bool rok[RIGHTS];
            right_group<FORM, RIGHTS>(right, li, r0, m, right_size, rp, rok);
            float acc[RIGHTS][TY][TX] = {};  // all zero
            float win[TY][TX];  // circular over rows: slot (i + s) % TY holds shift row i
            // Left row `row` into a window slot; the row test is uniform across the warp.
            auto load_row = [&](float* dst, int row) {
                const bool row_ok = row >= 0 && row < left_h;
                const float* p = lp + (size_t)row * left_w + x + kx0;
#pragma unroll
                for (int j = 0; j < TX; ++j) dst[j] = (row_ok && col_ok[j]) ? p[j] : 0.0f;
            };
            // Step s of a group of TY right rows starting at y (s is a constant after unrolling).
            auto step = [&](int y, int s) {
                load_row(win[(s + TY - 1) % TY], y + s + ky0 + TY - 1);
                float r[RIGHTS];
#pragma unroll
                for (int ri = 0; ri < RIGHTS; ++ri)
                    r[ri] = (lane_ok && rok[ri]) ? rp[ri][(size_t)(y + s) * right_w + x] : 0.0f;
#pragma unroll
                for (int i = 0; i < TY; ++i)
#pragma unroll
                    for (int j = 0; j < TX; ++j)
#pragma unroll
                        for (int ri = 0; ri < RIGHTS; ++ri)
                            acc[ri][i][j] = fmaf(win[(i + s) % TY][j], r[ri], acc[ri][i][j]);
            };
#pragma unroll
            for (int i = 0; i < TY - 1; ++i) load_row(win[i], y_begin + ky0 + i);
            int y = y_begin;
            for (; y + TY <= y_end; y += TY) {  // whole groups: no test between the steps
#pragma unroll
                for (int s = 0; s < TY; ++s) step(y, s);
            }
#pragma unroll
            for (int s = 0; s < TY - 1; ++s) {  // the last, partial group
                if (y + s >= y_end) break;  // uniform across the warp
                step(y, s);
            }
            // Reduce over the 32 columns; lane (a mod 32) adds accumulator a.
#pragma unroll
            for (int ri = 0; ri < RIGHTS; ++ri)
#pragma unroll
                for (int i = 0; i < TY; ++i)
#pragma unroll
                    for (int j = 0; j < TX; ++j) {
                        float v = acc[ri][i][j];
#pragma unroll
                        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
                        const int a = (ri * TY + i) * TX + j;
                        const int iy = ky0 + i - shift_y0, ix = kx0 + j - shift_x0;
                        if (lane == (a & 31) && rok[ri] && iy < out_h && ix < out_w)
                            atomicAdd(out + ((size_t)li * m + r0 + ri) * out_size +
                                          (size_t)iy * out_w + ix, v);
                    }
        }
    }
}

// Register-tiled "lane per pair" cross-correlation: our addition for many small matrices
// (one-to-many, n-to-mn and n-to-m at 16-64 squared), where a warp of 32 shifts or 32 columns
// leaves lanes idle and a shuffle or an atomic per FMA or two caps the FMA rate.
//
// The 32 lanes of a warp take 32 right matrices of one left (r = 32 * blockIdx.y + lane, left
// blockIdx.z) and the same tile of TY x TX shifts, so every loop bound and every left value is
// uniform across the warp.  For each right row y of its chunk a thread walks the left columns u
// four at a time (a "quad") and sums
//
//   acc[i][j] += left[y + ky0 + i][u] * right[y][u - kx0 - j]
//
// per quad with one 16-byte load of its own right row (4 columns), TY 16-byte shared loads of
// left values (the same address in all lanes: a broadcast) and 4 * TY * TX FMAs.  The right
// values of the last TX - 1 columns stay in a ring of registers whose rotation is resolved at
// compile time (the quad loop is unrolled by the ring's PHASES).
//
// Layouts, chosen so that every load is aligned and needs no bounds test:
// * the right matrices come rearranged by the launcher (arrange_rights) as float4 chunks with the
//   matrix index fastest, right_q[g][y][c][r] = right[y][4c - PAD_LEFT .. 4c + 3 - PAD_LEFT] of
//   matrix r (g: the left's group for n-to-mn, else 0; r padded to a multiple of 32; zeros
//   outside the row), so a warp's load is one coalesced 512-byte line;
// * the left matrix is staged in shared memory as float4 chunks of 4 columns, column chunks
//   outermost, with TY - 1 zero rows above and below and at least 3 zero columns either side;
//   the column origin is offset so that each quad's first column starts a chunk.
// A quad may start up to 3 columns before the first left column that meets the tile and end up
// to 3 after the last: those products meet a zero on one side and add nothing.
// The sums leave through shared memory, one matrix's tile at a time, so the stores are rows of
// TX consecutive floats rather than 32 scattered words.  With one row chunk the sums are stored;
// with several (rows_per_chunk < right_h, to fill the GPU when there are few pairs) they are
// added to the zeroed output.
namespace xcorr {
constexpr int PAIR_PAD_LEFT = 8;  // zero columns before each rearranged right row (>= TX)
// float4 chunks of one rearranged right row: PAD_LEFT zeros, the row, TX - 1 zeros, rounded up
template <int TX>
__host__ __device__ constexpr int pair_row_chunks(int right_w) {
    return (PAIR_PAD_LEFT + right_w + TX - 1 + 3) / 4;
}
// the left's staged layout: column c of the stage is left column c - pair_col_origin(shift_x0)
__device__ __forceinline__ int pair_col_origin(int shift_x0) { return 4 + ((-shift_x0) & 3); }
__device__ __forceinline__ int pair_col_chunks(int left_w, int shift_x0) {
    return (pair_col_origin(shift_x0) + left_w + 3 + 3) / 4;
}
}  // namespace xcorr

#ifndef XCORR_PAIR_BLOCKS  // development probes override it
#define XCORR_PAIR_BLOCKS 4
#endif
template <int FORM, int TY, int TX>
__global__ void __launch_bounds__(128, TY * TX >= 64 ? 2 : XCORR_PAIR_BLOCKS)  // 8 x 8: 64 sums
pair_tiled_xcorr(const float* __restrict__ left, const float4* __restrict__ right_q,
                 float* __restrict__ out, int left_h, int left_w, int right_h, int right_w,
                 int out_h, int out_w, int shift_y0, int shift_x0, int m, int rows_per_chunk,
                 int n_tiles, int tiles_x, int n_items, int m_pad) {
    using namespace xcorr;
    static_assert(TX % 4 == 0 && TX - 1 <= PAIR_PAD_LEFT, "quads of 4 columns");
    constexpr int RING = (TX - 1 + 3) / 4 * 4 + 4;  // the last TX - 1 right values and a quad
    constexpr int PHASES = RING / 4;
    // s_left4[cc * hp + p]: columns 4cc .. 4cc + 3 of the stage, padded row p = row + TY - 1;
    // then each warp's TY * TX * 33 sums
    extern __shared__ float4 s_left4[];
    const int lane = threadIdx.x;
    const int hp = left_h + 2 * (TY - 1);
    const int origin = pair_col_origin(shift_x0);
    const int n_cols = 4 * pair_col_chunks(left_w, shift_x0);
    const int li = blockIdx.z;
    const float* lp = left + (size_t)li * left_h * left_w;  // li = 0 with one left
    float* s_left = reinterpret_cast<float*>(s_left4);
    for (int k = threadIdx.y * 32 + lane; k < hp * n_cols; k += blockDim.x * blockDim.y) {
        int c;
        const int p = div_floor(k, n_cols, c);
        const int row = p - (TY - 1), u = c - origin;
        s_left[((c >> 2) * hp + p) * 4 + (c & 3)] =
            (row >= 0 && row < left_h && u >= 0 && u < left_w) ? lp[(size_t)row * left_w + u]
                                                               : 0.0f;
    }
    __syncthreads();
    float* s_out = s_left + hp * n_cols + threadIdx.y * (TY * TX * 33);  // this warp's sums

    const int r = blockIdx.y * 32 + lane;
    const int row_chunks = pair_row_chunks<TX>(right_w);
    const size_t out_size = (size_t)out_h * out_w;
    // right_q[g][y][c][r] at rp + (y * row_chunks + c) * m_pad
    const float4* rp = right_q + (size_t)(FORM == N_TO_MN ? li : 0) * right_h * row_chunks * m_pad + r;
    float* op = out + ((size_t)li * m + r) * out_size;
    const bool chunked = rows_per_chunk < right_h;

    for (int item = blockIdx.x * blockDim.y + threadIdx.y; item < n_items;
         item += gridDim.x * blockDim.y) {
        const TileItem<TY, TX> it(item, n_tiles, tiles_x, shift_y0, shift_x0, rows_per_chunk,
                                  right_h, left_h);
        const int ky0 = it.ky0, kx0 = it.kx0, y_begin = it.y_begin, y_end = it.y_end;
        // left columns that meet a right column at one of the tile's x-shifts, as quads: right
        // chunk q0 / 4 holds the right value of column u0 at x-shift kx0 (u0 = q0 + kx0 - PAD)
        const int u_begin = max(0, kx0), u_end = min(left_w, kx0 + TX - 1 + right_w);
        const int q0 = (u_begin - kx0 + PAIR_PAD_LEFT) & ~3;
        const int n_quads = ((u_end - kx0 + PAIR_PAD_LEFT + 3) >> 2) - (q0 >> 2);
        const int u0 = q0 + kx0 - PAIR_PAD_LEFT;  // >= -3; u0 + origin is a multiple of 4
        float acc[TY][TX] = {};  // all zero
        for (int y = y_begin; y < y_end && u_begin < u_end; ++y) {
            const float4* rrow = rp + ((size_t)y * row_chunks + (q0 >> 2)) * m_pad;
            const float4* lq = s_left4 + ((u0 + origin) >> 2) * hp + y + ky0 + TY - 1;
            // ring slot (t + RING - 4) mod RING holds right value q0 + t (t >= 4 - RING)
            float w[RING];
#pragma unroll
            for (int c = 1; c <= PHASES - 1; ++c) {
                const float4 v = __ldg(rrow - (size_t)c * m_pad);
                const int b = RING - 4 - 4 * c;
                w[b] = v.x, w[b + 1] = v.y, w[b + 2] = v.z, w[b + 3] = v.w;
            }
            auto quad = [&](const float4 v, int n, int ph) {  // ph = n mod PHASES: a constant
                const int b = (4 * ph + RING - 4) % RING;  // after unrolling
                w[b] = v.x, w[b + 1] = v.y, w[b + 2] = v.z, w[b + 3] = v.w;
#pragma unroll
                for (int i = 0; i < TY; ++i) {
                    const float4 l4 = lq[n * hp + i];
                    const float lv[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
                    for (int s = 0; s < 4; ++s)
#pragma unroll
                        for (int j = 0; j < TX; ++j)
                            acc[i][j] = fmaf(lv[s], w[(4 * ph + s - j + RING - 4) % RING],
                                             acc[i][j]);
                }
            };
            int n = 0;
            for (; n + PHASES <= n_quads; n += PHASES) {
#pragma unroll
                for (int ph = 0; ph < PHASES; ++ph)
                    quad(__ldg(rrow + (size_t)(n + ph) * m_pad), n + ph, ph);
            }
#pragma unroll
            for (int ph = 0; ph < PHASES - 1; ++ph) {  // the last, partial round (uniform test)
                if (n + ph >= n_quads) break;
                quad(__ldg(rrow + (size_t)(n + ph) * m_pad), n + ph, ph);
            }
        }
        // Out through shared memory: lane l's sums go to s_out[(i * TX + j) * 33 + l] (33: no
        // bank conflicts), then the warp writes one matrix's TY x TX block at a time, lane e
        // taking sum e: rows of TX consecutive floats instead of 32 scattered words.
        __syncwarp();
#pragma unroll
        for (int i = 0; i < TY; ++i)
#pragma unroll
            for (int j = 0; j < TX; ++j) s_out[(i * TX + j) * 33 + lane] = acc[i][j];
        __syncwarp();
        const int lanes = min(32, m - (r - lane));  // matrices of this lane group
        for (int l = 0; l < lanes; ++l) {
            float* ol = op + (size_t)(l - lane) * out_size;  // matrix r - lane + l
#pragma unroll
            for (int e0 = 0; e0 < TY * TX; e0 += 32) {
                const int e = e0 + lane;
                int j;
                const int i = div_floor(e, TX, j);  // TX a power of two: a shift
                const int iy = ky0 + i - shift_y0, ix = kx0 + j - shift_x0;
                if (e < TY * TX && iy < out_h && ix < out_w) {
                    const float v = s_out[e * 33 + l];
                    float* p = ol + (size_t)iy * out_w + ix;
                    if (chunked)
                        atomicAdd(p, v);
                    else
                        *p = v;
                }
            }
        }
    }
}

// The launcher's rearrangement of the right matrices for pair_tiled_xcorr, in one pass:
// right[g][r][y][x] (r < m) to right_q[g][y][c][r][k] = right[g][r][y][4c + k - PAD_LEFT]
// (r < m_pad; zeros outside the row and in the padding), c < pair_row_chunks<TX>(right_w).
// A block moves 32 matrices x 32 positions (8 chunks) of the padded rows through a shared tile,
// so both the reads (along positions) and the writes (along matrices, 4 floats each) are
// coalesced.  Grid: x = position blocks of 32 (right_h * 4 * chunks positions), y = m_pad / 32,
// z = groups.
template <int TX>
__global__ void __launch_bounds__(256)
arrange_rights(const float* __restrict__ right, float* __restrict__ right_q, int m, int m_pad,
               int right_h, int right_w) {
    using namespace xcorr;
    __shared__ float tile[32][36];  // 36: conflict-free both ways
    const int wp = 4 * pair_row_chunks<TX>(right_w);
    const int n_pos = right_h * wp;
    const int p0 = blockIdx.x * 32, r0 = blockIdx.y * 32, g = blockIdx.z;
    const size_t right_size = (size_t)right_h * right_w;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        const int r = r0 + k, p = p0 + threadIdx.x;
        float v = 0.0f;
        if (r < m && p < n_pos) {
            int xp;
            const int y = div_floor(p, wp, xp);
            const int x = xp - PAIR_PAD_LEFT;
            if (x >= 0 && x < right_w)
                v = right[((size_t)g * m + r) * right_size + (size_t)y * right_w + x];
        }
        tile[k][threadIdx.x] = v;
    }
    __syncthreads();
    // 8 chunks x 32 matrices x 4 floats; e = (chunk, matrix, k) with k fastest
    for (int e = threadIdx.y * 32 + threadIdx.x; e < 1024; e += blockDim.x * blockDim.y) {
        const int cc = e >> 7, rr = (e >> 2) & 31, k = e & 3;
        const int p = p0 + 4 * cc + k;
        if (p < n_pos)
            right_q[(((size_t)g * (n_pos >> 2) + (p >> 2)) * m_pad + r0 + rr) * 4 + k] =
                tile[rr][4 * cc + k];
    }
}
