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
// uniform across the warp.  A thread sums, for each right row y of its chunk and each left column
// u, the outer product of a column of TY left values (read from shared memory, the same address
// in all lanes: a broadcast) and a sliding window of TX right values of its own matrix, held in
// registers: one right load and TY shared loads for TY * TX FMAs, no shuffle.  The window is a
// circular buffer whose rotation is resolved at compile time (the column loop is unrolled by TX).
//
//   acc[i][j] += left[y + ky0 + i][u] * right[y][u - kx0 - j]
//
// The right matrices come rearranged by the launcher with the matrix index fastest,
// right_t[g][y][TX - 1 + x][r] (g: the left's group for n-to-mn, else 0; r padded to a multiple
// of 32; TX - 1 zero columns on either side), so a warp's right load is one coalesced 128-byte
// line and needs no bounds test.  The left matrix is staged in shared memory column-major, with
// TY - 1 zero rows above and below, so rows outside the left read as 0 without a test.  The sums
// leave through shared memory, one matrix's tile at a time, so the stores are rows of TX
// consecutive floats rather than 32 scattered words.  With one row chunk the sums are stored;
// with several (rows_per_chunk < right_h, to fill the GPU when there are few pairs) they are
// added to the zeroed output.
#ifndef XCORR_PAIR_BLOCKS  // development probes (tools/pair_probe.py variants) override it
#define XCORR_PAIR_BLOCKS 4
#endif
template <int FORM, int TY, int TX>
__global__ void __launch_bounds__(128, TY * TX >= 64 ? 3 : XCORR_PAIR_BLOCKS)  // 8 x 8: 64 sums
pair_tiled_xcorr(const float* __restrict__ left, const float* __restrict__ right_t,
                 float* __restrict__ out, int left_h, int left_w, int right_h, int right_w,
                 int out_h, int out_w, int shift_y0, int shift_x0, int m, int rows_per_chunk,
                 int n_tiles, int tiles_x, int n_items, int m_pad) {
    using namespace xcorr;
    // [left_w][hp]: column u, padded row p = row + TY - 1; then each warp's TY * TX * 33 sums
    extern __shared__ float s_left[];
    const int lane = threadIdx.x;
    const int hp = left_h + 2 * (TY - 1);
    const int li = blockIdx.z;
    const float* lp = left + (size_t)li * left_h * left_w;  // li = 0 with one left
    for (int k = threadIdx.y * 32 + lane; k < hp * left_w; k += blockDim.x * blockDim.y) {
        int u;
        const int row = div_floor(k, left_w, u) - (TY - 1);
        s_left[u * hp + row + TY - 1] =
            (row >= 0 && row < left_h) ? lp[(size_t)row * left_w + u] : 0.0f;
    }
    __syncthreads();
    float* s_out = s_left + hp * left_w + threadIdx.y * (TY * TX * 33);  // this warp's sums

    const int r = blockIdx.y * 32 + lane;
    const int wp = right_w + 2 * (TX - 1);  // padded right row
    const size_t out_size = (size_t)out_h * out_w;
    // right_t[g][y][TX - 1 + c][r] at rp + (y * wp + c) * m_pad
    const float* rp = right_t + ((size_t)(FORM == N_TO_MN ? li : 0) * right_h * wp + TX - 1) *
                                    m_pad + r;
    float* op = out + ((size_t)li * m + r) * out_size;
    const bool chunked = rows_per_chunk < right_h;

    for (int item = blockIdx.x * blockDim.y + threadIdx.y; item < n_items;
         item += gridDim.x * blockDim.y) {
        const TileItem<TY, TX> it(item, n_tiles, tiles_x, shift_y0, shift_x0, rows_per_chunk,
                                  right_h, left_h);
        const int ky0 = it.ky0, kx0 = it.kx0, y_begin = it.y_begin, y_end = it.y_end;
        // left columns that meet a right column at one of the tile's x-shifts
        const int u_begin = max(0, kx0), u_end = min(left_w, kx0 + TX - 1 + right_w);
        float acc[TY][TX] = {};  // all zero
        for (int y = y_begin; y < y_end && u_begin < u_end; ++y) {
            // rrow[c * m_pad]: right[y][c - kx0], zero outside the row
            const float* rrow = rp + ((size_t)y * wp - kx0) * m_pad;
            const float* lcol = s_left + y + ky0 + TY - 1;  // lcol[u * hp + i]: left[y+ky0+i][u]
            // window slot (s - j) mod TX holds right[y][u - kx0 - j] at step s (u = u_begin + s)
            float win[TX];
#pragma unroll
            for (int j = 1; j < TX; ++j) win[TX - j] = __ldg(rrow + (size_t)(u_begin - j) * m_pad);
            auto step = [&](int u, int s) {  // s: a constant after unrolling
                win[s] = __ldg(rrow + (size_t)u * m_pad);
                float lv[TY];
#pragma unroll
                for (int i = 0; i < TY; ++i) lv[i] = lcol[u * hp + i];
#pragma unroll
                for (int i = 0; i < TY; ++i)
#pragma unroll
                    for (int j = 0; j < TX; ++j)
                        acc[i][j] = fmaf(lv[i], win[(s - j + TX) % TX], acc[i][j]);
            };
            int u = u_begin;
            for (; u + TX <= u_end; u += TX) {
#pragma unroll
                for (int s = 0; s < TX; ++s) step(u + s, s);
            }
#pragma unroll
            for (int s = 0; s < TX - 1; ++s) {  // the last, partial group (uniform test)
                if (u + s >= u_end) break;
                step(u + s, s);
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
// right[g][r][y][x] (r < m) to right_t[g][y][TX - 1 + x][r] (r < m_pad), zeros in the padding.
// A block moves 32 matrices x 32 positions of the padded rows through a shared tile, so both the
// reads (along positions) and the writes (along matrices) are coalesced.
// Grid: x = position blocks of 32 (rh * (rw + 2 (TX - 1)) positions), y = m_pad / 32, z = groups.
template <int TX>
__global__ void __launch_bounds__(256)
arrange_rights(const float* __restrict__ right, float* __restrict__ right_t, int m, int m_pad,
               int right_h, int right_w) {
    using namespace xcorr;
    __shared__ float tile[32][33];
    const int wp = right_w + 2 * (TX - 1);
    const int n_pos = right_h * wp;
    const int p0 = blockIdx.x * 32, r0 = blockIdx.y * 32, g = blockIdx.z;
    const size_t right_size = (size_t)right_h * right_w;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        const int r = r0 + k, p = p0 + threadIdx.x;
        float v = 0.0f;
        if (r < m && p < n_pos) {
            int xp;
            const int y = div_floor(p, wp, xp);
            const int x = xp - (TX - 1);
            if (x >= 0 && x < right_w)
                v = right[((size_t)g * m + r) * right_size + (size_t)y * right_w + x];
        }
        tile[k][threadIdx.x] = v;
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        const int p = p0 + k;
        if (p < n_pos)
            right_t[((size_t)g * n_pos + p) * m_pad + r0 + threadIdx.x] = tile[threadIdx.x][k];
    }
}
