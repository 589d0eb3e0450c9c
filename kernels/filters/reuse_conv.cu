// 2-D correlation of image stacks with column reuse, row reuse and a direct edge path
// ("Memory Transaction Optimization" and "Putting Together" of the convolution-reuse papers).
//
// out[f][y][x] = sum_{i < fh, j < fw} taps[i][j] * in[f][y + i - cy][x + j - cx]
// with scipy.ndimage's boundary modes for indices outside the frame (cy = fh/2 + origin_y).
//
// Interior (every tap inside the frame): a warp computes a sub-block of 32 output columns (lane =
// column) and up to rows_per_block output rows.
//   * Column reuse: the FW taps of a row are cut into sub-filters of 5, 3, 2 and 1 columns.  A
//     lane loads only the first and last column of each sub-filter; the columns between come from
//     neighbouring lanes by __shfl_xor_sync.  Which of its two values a lane provides depends on
//     its lane id; the pack/unpack exchange (both values in one 64-bit word shifted right by a
//     lane-dependent 0 or 32 bits) picks it without indexing a register array dynamically
//     (the papers' Algorithms 1 and 2): 2 loads + 1 shuffle for 3 columns, 2 + 3 for 5.
//   * Row reuse: each input row is loaded once and multiplied with every filter row that needs
//     it; the FH partial sums of the output rows in flight live in a register array acc[FH] that
//     shifts by one after each input row (acc[0] is then complete and stored).
//   * Taps: the papers keep the filter in shared memory (TAPS_SHARED = true).  Our default passes
//     it by value as a kernel parameter, so every FMA reads its tap straight from the constant
//     bank (an FFMA operand, no load instruction).
// Edge (some tap outside the frame) and the columns left over after the last full 32-column
// sub-block: a direct path, one thread per output, that maps indices with the boundary mode, so
// no padded copy of the input is ever allocated.  Its blocks follow the interior blocks in the
// same launch (grid x), as in the papers' Algorithm 3.
//
// FH x FW are compile-time capacities: sizes up to 11 are compiled exactly; larger filters use
// the next compiled size, and the taps beyond (fh, fw) are skipped by warp-uniform tests, so a
// NaN just outside the true window never reaches an output.  2-D filters go up to 31 x 31, 1-D
// ones (the passes of separable filters) up to 63: columns (FW = 1) at every height, rows
// (FH = 1) at the capacities 35, 39, ..., 63 (xcorr_app/filters/_reuse.py LINE_CAPACITIES).
//
// Grid: x = interior column blocks (WARPS sub-blocks each) then edge blocks, y = row blocks,
// z = frames.  Block (32, WARPS).  DTYPE: 0 float32, 1 float16, 2 uint16, 3 uint8 (converted on
// load; accumulation and output are float32).
#include "async_copy.cuh"
#include "boundary.cuh"
#include "int_math.cuh"

namespace xcorr {

template <int DTYPE> struct Pixel;
template <> struct Pixel<0> {
    using type = float;
    static __device__ __forceinline__ float load(const float* p) { return __ldg(p); }
};
template <> struct Pixel<1> {
    using type = unsigned short;  // IEEE half bits
    static __device__ __forceinline__ float load(const unsigned short* p) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(__ldg(p)));
        return f;
    }
};
template <> struct Pixel<2> {
    using type = unsigned short;
    static __device__ __forceinline__ float load(const unsigned short* p) {
        return static_cast<float>(__ldg(p));
    }
};
template <> struct Pixel<3> {
    using type = unsigned char;
    static __device__ __forceinline__ float load(const unsigned char* p) {
        return static_cast<float>(__ldg(p));
    }
};

// Sizes compiled exactly; a larger filter runs on the next compiled capacity.
constexpr int EXACT_MAX = 11;

// Resident blocks of 128 threads asked of ptxas: many for the memory-bound small filters, fewer
// where the register arrays (acc[FH], v[FW], four rows in flight) need more registers.
__host__ __device__ constexpr int reuse_min_blocks(int fh, int fw, bool taps_shared, int vec,
                                                   bool async) {
#ifdef XCORR_REUSE_MIN_BLOCKS
    return XCORR_REUSE_MIN_BLOCKS;
#endif
    if (async && vec == 2) return fh * fw <= 25 ? 8 : 5;
    // 1-D passes beyond 31 taps (up to 63): acc[FH] and the FH rows in flight, or v[FW] and
    // two rows of loads, take up to 168 registers (the most blocks that compile without spills)
    if ((fh == 1 || fw == 1) && fh * fw > 31) return fh * fw <= 35 ? 5 : (fh * fw <= 47 ? 4 : 3);
    if (async) return (fh == 3 || fh == 5) && fw == fh ? 12 : (fh * fw <= 25 && fw > 1 ? 10 : 8);
    return vec == 4 ? (fh * fw <= 9 ? 6 : (fh * fw <= 25 && fh <= 5 ? 5 : 4))
                    : ((fh * fw <= 9 && fw <= 5 && !taps_shared) ? 8 : (fh * fw <= 49 ? 5 : 4));
}

template <int FH, int FW> struct Taps { float w[FH * FW]; };

// Pack/unpack exchange (papers' Algorithms 1 and 2): lanes whose bit MASK is clear give `hi`,
// the others `lo`; each lane receives its xor-partner's choice.  The choice is a shift of the
// packed 64-bit word, never a dynamic register index.
template <int MASK>
__device__ __forceinline__ float exchange(float lo, float hi, int lane) {
    const unsigned long long packed =
        (static_cast<unsigned long long>(__float_as_uint(hi)) << 32) | __float_as_uint(lo);
    const int shift = ((lane + MASK) & MASK) * (32 / MASK);  // 32 when bit MASK is clear
    const float give = __uint_as_float(static_cast<unsigned>(packed >> shift));
    return __shfl_xor_sync(0xffffffffu, give, MASK);
}

// Width of the sub-filter that starts with `rem` columns left: 5s first, then 3, 2 or 1
// (4 = 3 + 1), so any width is covered.
__host__ __device__ constexpr int sub_filter_width(int rem) { return rem >= 5 ? 5 : (rem == 4 ? 3 : rem); }

// Column reuse, part 1: load the first and last column of every sub-filter into v (the lane's
// input columns, v[j] = row[lane + j]; `row` points at the lane's column 0, every column inside
// the frame).
template <int DTYPE, int FW, int C>
__device__ __forceinline__ void fetch_columns(float (&v)[FW],
                                              const typename Pixel<DTYPE>::type* row) {
    constexpr int K = sub_filter_width(FW - C);
    if constexpr (K > 0) {
        v[C] = Pixel<DTYPE>::load(row + C);
        if constexpr (K >= 2) v[C + K - 1] = Pixel<DTYPE>::load(row + C + K - 1);
        fetch_columns<DTYPE, FW, C + K>(v, row);
    }
}

// Same, for a sub-block at an edge: `row` is the row start, the lane's column 0 is the virtual
// column c0, and each loaded column is mapped by the boundary mode (-1: outside, cval).
template <int DTYPE, int FW, int C>
__device__ __forceinline__ void fetch_columns_mapped(float (&v)[FW],
                                                     const typename Pixel<DTYPE>::type* row,
                                                     int c0, int w, int mode, float cval) {
    constexpr int K = sub_filter_width(FW - C);
    if constexpr (K > 0) {
        const int first = boundary_index(c0 + C, w, mode);
        v[C] = first >= 0 ? Pixel<DTYPE>::load(row + first) : cval;
        if constexpr (K >= 2) {
            const int last = boundary_index(c0 + C + K - 1, w, mode);
            v[C + K - 1] = last >= 0 ? Pixel<DTYPE>::load(row + last) : cval;
        }
        fetch_columns_mapped<DTYPE, FW, C + K>(v, row, c0, w, mode, cval);
    }
}

// Column reuse, part 2: the columns between the ends of each sub-filter come from neighbouring
// lanes (which loaded the same virtual column as one of their ends) by the pack/unpack exchange.
// With mapped columns the lanes exchange values of the same virtual column, so the mapping is
// transparent to the shuffles.
template <int FW, int C>
__device__ __forceinline__ void exchange_columns(float (&v)[FW], int lane) {
    constexpr int K = sub_filter_width(FW - C);
    if constexpr (K > 0) {
        if constexpr (K == 3) {
            v[C + 1] = exchange<1>(v[C], v[C + 2], lane);  // Algorithm 2
        } else if constexpr (K == 5) {
            v[C + 2] = exchange<2>(v[C], v[C + 4], lane);  // Algorithm 1
            v[C + 1] = exchange<1>(v[C], v[C + 2], lane);  // Algorithm 2 on {0, 2}
            v[C + 3] = exchange<1>(v[C + 2], v[C + 4], lane);  // and on {2, 4}
        }
        exchange_columns<FW, C + K>(v, lane);
    }
}

// Loads per input row of the column reuse: the two ends of each sub-filter (one for width 1).
__host__ __device__ constexpr int loads_per_row(int fw) {
    int n = 0;
    for (int c = 0; c < fw; c += sub_filter_width(fw - c)) n += sub_filter_width(fw - c) >= 2 ? 2 : 1;
    return n;
}

// Rows in flight: the plain loops keep the loads of this many input rows issued ahead (a
// register ring, so a warp has several rows of memory requests outstanding while it computes),
// a multiple of FH where the code stays small, so the shift of acc[] is register renaming.
__host__ __device__ constexpr int reuse_prefetch(int fh, int fw, int vec) {
#ifdef XCORR_REUSE_PREFETCH  // development probes override the choice
    return XCORR_REUSE_PREFETCH;
#endif
    if (vec == 4) return fh * fw <= 25 ? fh * ((2 + fh - 1) / fh) : 2;  // 512-byte rows
    if (fh * fw > 121) return 1;  // compute-bound: registers go to acc[] and v[]
    if (fh * fw <= 9 && fw > 1) return 2;  // measured best for 3x3 (sm_90)
    if (fw == 1) return fh * ((8 + fh - 1) / fh);
    // about 16 (64-register kernels, see reuse_min_blocks) or 24 registers of loaded values,
    // whole multiples of FH where FH fits
    const int budget = (fh * fw <= 9 && fw <= 5) ? 16 : 24;
    const int ahead = budget / loads_per_row(fw) > 2 ? budget / loads_per_row(fw) : 2;
    return fh <= ahead ? fh * (ahead / fh) : 2;
}

// Row reuse: input row v (the lane's FW columns) feeds output row r - FH + 1 + i with filter row
// FH - 1 - i, for every i; acc[0] is then complete.
template <int FH, int FW, bool TAPS_SHARED, bool ROWS_EXACT, int Q>
__device__ __forceinline__ void row_reuse(float (&acc)[FH][Q], const float (&v)[FW + Q - 1],
                                          const Taps<FH, FW>& taps, const float* s_taps,
                                          int fh) {
#pragma unroll
    for (int i = 0; i < FH; ++i) {
        const int fi = FH - 1 - i;
        if (!ROWS_EXACT && fi >= fh) continue;
#pragma unroll
        for (int j = 0; j < FW; ++j) {
            const float t = TAPS_SHARED ? s_taps[fi * FW + j] : taps.w[fi * FW + j];
#pragma unroll
            for (int q = 0; q < Q; ++q) acc[i][q] = fmaf(t, v[q + j], acc[i][q]);
        }
    }
}

template <int FH, int Q>
__device__ __forceinline__ void shift_rows(float (&acc)[FH][Q]) {
#pragma unroll
    for (int i = 0; i + 1 < FH; ++i) {
#pragma unroll
        for (int q = 0; q < Q; ++q) acc[i][q] = acc[i + 1][q];
    }
#pragma unroll
    for (int q = 0; q < Q; ++q) acc[FH - 1][q] = 0.0f;
}

// One warp's sub-block: output rows [y0, y0 + rows), output column x = x0 + lane.  Plain: every
// tap of the sub-block is inside the frame; the loads run reuse_prefetch rows ahead.  MAPPED (a
// sub-block at an edge): input rows (warp-uniform) and the lanes' columns are mapped by the
// boundary mode, and lanes past the frame's last column compute but do not store.
template <int DTYPE, int FH, int FW, bool TAPS_SHARED, bool MAPPED>
__device__ __forceinline__ void reuse_sub_block(const typename Pixel<DTYPE>::type* frame,
                                                float* oframe, const Taps<FH, FW>& taps,
                                                const float* s_taps, int h, int w, int fh,
                                                int fw, int cy, int cx, int mode, float cval,
                                                int y0, int rows, int x0, int lane) {
    // Padded capacities: rows past fh are skipped, columns past fw zeroed (never 0 * NaN).
    // Column passes (FW = 1) are compiled for every FH, so their rows are always exact.
    constexpr bool ROWS_EXACT = FH <= EXACT_MAX || FW == 1;
    constexpr bool COLS_EXACT = FW <= EXACT_MAX;
    const int c0 = x0 + lane - cx;  // virtual input column of the lane's tap column 0
    float acc[FH][1] = {};
    const int n_in = rows + FH - 1;
    float* dst = oframe + (size_t)y0 * w + x0 + lane;
    auto finish_row = [&](float (&v)[FW], int r) {
        if constexpr (!COLS_EXACT) {
#pragma unroll
            for (int j = 0; j < FW; ++j) v[j] = j < fw ? v[j] : 0.0f;
        }
        row_reuse<FH, FW, TAPS_SHARED, ROWS_EXACT, 1>(acc, v, taps, s_taps, fh);
        if (r >= FH - 1 && (!MAPPED || x0 + lane < w)) dst[(size_t)(r - FH + 1) * w] = acc[0][0];
        shift_rows<FH, 1>(acc);
    };
    if constexpr (MAPPED) {
        for (int r = 0; r < n_in; ++r) {
            const int ry = boundary_index(y0 - cy + r, h, mode);
            float v[FW];
            if (ry >= 0) {
                fetch_columns_mapped<DTYPE, FW, 0>(v, frame + (size_t)ry * w, c0, w, mode, cval);
                exchange_columns<FW, 0>(v, lane);
            } else {  // constant mode, row outside the frame
#pragma unroll
                for (int j = 0; j < FW; ++j) v[j] = cval;
            }
            finish_row(v, r);
        }
    } else {
        constexpr int D = reuse_prefetch(FH, FW, 1);
        const auto* src = frame + (size_t)(y0 - cy) * w + c0;  // the lane's first tap
        float ring[D][FW] = {};
#pragma unroll
        for (int k = 0; k < D; ++k)
            fetch_columns<DTYPE, FW, 0>(ring[k], src + (size_t)min(k, n_in - 1) * w);
        for (int r0 = 0; r0 < n_in; r0 += D) {
#pragma unroll
            for (int k = 0; k < D; ++k) {
                const int r = r0 + k;
                if (r < n_in) {
                    float v[FW];
#pragma unroll
                    for (int j = 0; j < FW; ++j) v[j] = ring[k][j];
                    fetch_columns<DTYPE, FW, 0>(ring[k], src + (size_t)min(r + D, n_in - 1) * w);
                    exchange_columns<FW, 0>(v, lane);
                    finish_row(v, r);
                }
            }
        }
    }
}

// Ours, for float32 frames whose width is a multiple of 4, filters up to 7x7 at the default
// column origin: a lane owns 4 adjacent output columns (a warp 128), reads its 4 input columns
// with one 16-byte load and its halo from the neighbouring lanes by shuffle: the element wanted
// sits at a compile-time index of the neighbour's vector, so no pack/unpack is needed.  Lanes 0
// and 31 load the quads just outside the warp themselves.  Row reuse and prefetching as in
// reuse_sub_block; outputs are stored 16 bytes at a time.  Every tap is inside the frame.
template <int FH, int FW, bool TAPS_SHARED>
__device__ __forceinline__ void reuse_sub_block_vec4(const float* frame, float* oframe,
                                                     const Taps<FH, FW>& taps,
                                                     const float* s_taps, int w, int cy, int y0,
                                                     int rows, int x0, int lane) {
    constexpr int L = FW / 2, R = FW - 1 - L;  // halo columns left and right of a quad
    static_assert(L <= 4 && R <= 4, "one neighbouring quad per side");
    constexpr int D = reuse_prefetch(FH, FW, 4);
    float acc[FH][4] = {};
    const int n_in = rows + FH - 1;
    const float* src = frame + (size_t)(y0 - cy) * w + x0 + 4 * lane;
    // lane 0 reads the quad left of the warp, lane 31 the one right of it
    const int halo_offset = lane == 0 ? -4 : 128 - 4 * 31;
    const bool halo_lane = (lane == 0 && L > 0) || (lane == 31 && R > 0);
    float* dst = oframe + (size_t)y0 * w + x0 + 4 * lane;
    float4 ring_a[D], ring_b[D];
    auto fetch = [&](int k, int r) {
        const float* row = src + (size_t)min(r, n_in - 1) * w;
        ring_a[k] = __ldg(reinterpret_cast<const float4*>(row));
        ring_b[k] = halo_lane ? __ldg(reinterpret_cast<const float4*>(row + halo_offset))
                              : make_float4(0.f, 0.f, 0.f, 0.f);
    };
#pragma unroll
    for (int k = 0; k < D; ++k) fetch(k, k);
    for (int r0 = 0; r0 < n_in; r0 += D) {
#pragma unroll
        for (int k = 0; k < D; ++k) {
            const int r = r0 + k;
            if (r < n_in) {
                const float av[4] = {ring_a[k].x, ring_a[k].y, ring_a[k].z, ring_a[k].w};
                const float bv[4] = {ring_b[k].x, ring_b[k].y, ring_b[k].z, ring_b[k].w};
                fetch(k, r + D);
                float v[4 + FW - 1];  // v[m]: input column 4 * lane - L + m
#pragma unroll
                for (int m = 0; m < 4 + FW - 1; ++m) {
                    const int o = m - L;
                    if (o < 0) {
                        const float up = __shfl_up_sync(0xffffffffu, av[4 + o], 1);
                        v[m] = lane == 0 ? bv[4 + o] : up;
                    } else if (o > 3) {
                        const float down = __shfl_down_sync(0xffffffffu, av[o - 4], 1);
                        v[m] = lane == 31 ? bv[o - 4] : down;
                    } else {
                        v[m] = av[o];
                    }
                }
                row_reuse<FH, FW, TAPS_SHARED, true, 4>(acc, v, taps, s_taps, FH);
                if (r >= FH - 1)
                    *reinterpret_cast<float4*>(dst + (size_t)(r - FH + 1) * w) =
                        make_float4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
                shift_rows<FH, 4>(acc);
            }
        }
    }
}

// Ours, "async" loads (float32 frames of a width divisible by 4 on a 16-byte aligned base,
// filters up to 7x7 at the default column origin): the loads of a sub-block no longer go
// through registers.  Each warp copies its input rows, 32 Q columns plus the 16-byte chunks of
// halo either side, into its own ring of shared memory with cp.async (16 bytes per copy, L2
// only), a GROUP of rows per commit group and STAGES groups in the ring, so about staged_ahead
// rows of memory requests are outstanding per warp at no register cost (the register ring of
// reuse_sub_block holds 2).  A lane then reads the FW + Q - 1 input columns of its Q outputs
// from the ring (no bank conflict) and row reuse proceeds as in reuse_sub_block.  A sub-block at
// an edge (MAPPED) fills the same ring element by element through boundary_index, so both kinds
// share the compute loop and the kernel stays at 40-64 registers.
__host__ __device__ constexpr int staged_ahead(int fh) {
#ifdef XCORR_STAGED_AHEAD  // development probes override the choice
    return XCORR_STAGED_AHEAD;
#endif
    return fh <= 3 ? 8 : (fh <= 5 ? 10 : 7);  // measured best (sm_90)
}

// Rows per commit group: a multiple of FH where that stays small, so the shift of acc[] after
// each row is register renaming in the unrolled group.
__host__ __device__ constexpr int staged_group(int fh) {
#ifdef XCORR_STAGED_GROUP
    return XCORR_STAGED_GROUP;
#endif
    return fh >= 4 ? fh : fh * (4 / fh);
}

// Q: output columns per lane (1 or 2); the warp's sub-block is 32 Q columns wide, lane l
// computing columns Q l, ..., Q l + Q - 1 (with 2, pairs of ring words are read as one 8-byte
// load where they are 8-byte aligned, and the outputs stored 8 bytes at a time).
template <int FH, int FW, int Q> struct Staging {
    static constexpr int LEFT = (FW / 2 + 3) / 4;           // 16-byte chunks left of column 0
    static constexpr int RIGHT = (FW - 1 - FW / 2 + 3) / 4;  // and right of column 32 Q - 1
    static constexpr int NC = 8 * Q + LEFT + RIGHT;           // chunks per row
    static constexpr int RING_W = 4 * NC;  // ring columns: virtual input columns x0 - 4 LEFT + c
    static constexpr int LANE_COLS = (RING_W + 31) / 32;  // ring columns a mapped fill gives a lane
    static constexpr int GROUP = staged_group(FH);  // rows per commit group
    static constexpr int STAGES = 1 + (staged_ahead(FH) + GROUP - 1) / GROUP;
    static constexpr int OFFSET = 4 * LEFT - FW / 2;  // ring column of the lane's tap column 0
};

template <int FH, int FW, int Q, bool TAPS_SHARED, bool MAPPED>
__device__ __forceinline__ void reuse_sub_block_staged(
    const float* frame, float* oframe, const Taps<FH, FW>& taps, const float* s_taps, int h,
    int w, int cy, int mode, float cval, int y0, int rows, int x0, int lane,
    float (*ring)[Staging<FH, FW, Q>::GROUP][Staging<FH, FW, Q>::RING_W]) {
    using S = Staging<FH, FW, Q>;
    constexpr int RING_W = S::RING_W;
    const int n_in = rows + FH - 1;
    const int n_groups = (n_in + S::GROUP - 1) / S::GROUP;
    // MAPPED: the input columns of the lane's ring columns lane + 32 k (-1: cval)
    int rx[S::LANE_COLS];
#pragma unroll
    for (int k = 0; k < S::LANE_COLS; ++k)
        rx[k] = MAPPED ? boundary_index(x0 - 4 * S::LEFT + lane + 32 * k, w, mode) : 0;
    // !MAPPED: the lane's 16-byte chunks of a group, c = lane + 32 q (row c / NC, chunk c % NC)
    constexpr int CHUNKS = (S::GROUP * S::NC + 31) / 32;
    constexpr unsigned SLOT_BYTES = sizeof(float) * S::GROUP * RING_W;
    const unsigned ring_base = static_cast<unsigned>(__cvta_generic_to_shared(&ring[0][0][0]));
    int chunk_row[CHUNKS], chunk_src[CHUNKS];
    unsigned chunk_smem[CHUNKS];
#pragma unroll
    for (int q = 0; q < CHUNKS; ++q) {
        const int c = lane + 32 * q, i = c / S::NC, k = c - (c / S::NC) * S::NC;
        chunk_row[q] = c < S::GROUP * S::NC ? i : (1 << 30);  // past the chunks: never copied
        chunk_src[q] = i * w + 4 * k;
        chunk_smem[q] = sizeof(float) * (i * RING_W + 4 * k);
    }
    // !MAPPED: the lane's column 0 in the first input row of the next group to issue
    const float* next_src = frame + (size_t)(y0 - cy) * w + x0 - 4 * S::LEFT;
    auto issue = [&](int g) {
        const int slot = g % S::STAGES;
        if constexpr (MAPPED) {  // a sub-block at an edge: element by element, mapped by the
                                 // boundary mode (4-byte copies; cval stored directly)
#pragma unroll 1
            for (int i = 0; i < S::GROUP && g * S::GROUP + i < n_in; ++i) {
                const int ry = boundary_index(y0 - cy + g * S::GROUP + i, h, mode);
                const float* row = frame + (size_t)max(ry, 0) * w;
#pragma unroll
                for (int k = 0; k < S::LANE_COLS; ++k) {
                    if (lane + 32 * k >= RING_W) continue;
                    if (ry < 0 || rx[k] < 0)
                        ring[slot][i][lane + 32 * k] = cval;
                    else  // asynchronous too, so edge sub-blocks keep their rows in flight
                        cp_async4(&ring[slot][i][lane + 32 * k], row + rx[k]);
                }
            }
            cp_async_commit();
            return;
        }
        // The lane's chunks are the same in every group: only the group's first row (next_src)
        // and the slot move, so a copy costs an add and a compare beyond the LDGSTS itself.
        const int rows_left = n_in - g * S::GROUP;
        const unsigned slot_base = ring_base + slot * SLOT_BYTES;
#pragma unroll
        for (int q = 0; q < CHUNKS; ++q)
            if (chunk_row[q] < rows_left)
                cp_async16_shared(slot_base + chunk_smem[q], next_src + chunk_src[q]);
        next_src += (size_t)S::GROUP * w;
        cp_async_commit();  // also when empty, so every wait below counts the same groups
    };
#pragma unroll
    for (int g = 0; g < S::STAGES - 1; ++g) issue(g);
    float acc[FH][Q] = {};
    float* dst = oframe + (size_t)y0 * w + x0 + Q * lane;
    for (int g = 0; g < n_groups; ++g) {
        issue(g + S::STAGES - 1);  // into the slot read in the previous iteration
        cp_async_wait<S::STAGES - 1>();
        __syncwarp();
        const float(*rows_g)[RING_W] = ring[g % S::STAGES];
#pragma unroll
        for (int i = 0; i < S::GROUP; ++i) {
            const int r = g * S::GROUP + i;
            if (r < n_in) {
                // v[m]: ring column OFFSET + Q lane + m (the input columns of the lane's taps)
                const float* ring_row = rows_g[i] + S::OFFSET + Q * lane;
                constexpr int NV = FW + Q - 1;
                float v[NV];
#pragma unroll
                for (int m = 0; m < NV; ++m) {
                    // with Q = 2, words m and m + 1 form an 8-byte pair where OFFSET + m is even
                    const bool pair_start = Q == 2 && (S::OFFSET + m) % 2 == 0 && m + 1 < NV;
                    const bool pair_end = Q == 2 && m >= 1 && (S::OFFSET + m - 1) % 2 == 0;
                    if (pair_start) {
                        const float2 p = *reinterpret_cast<const float2*>(ring_row + m);
                        v[m] = p.x;
                        v[m + 1] = p.y;
                    } else if (!pair_end) {
                        v[m] = ring_row[m];
                    }
                }
                row_reuse<FH, FW, TAPS_SHARED, true, Q>(acc, v, taps, s_taps, FH);
                if (r >= FH - 1 && (!MAPPED || x0 + Q * lane < w)) {  // w % 4 == 0: all or none
                    float* o = dst + (size_t)(r - FH + 1) * w;
                    if constexpr (Q == 2)
                        *reinterpret_cast<float2*>(o) = make_float2(acc[0][0], acc[0][1]);
                    else
                        *o = acc[0][0];
                }
                shift_rows<FH, Q>(acc);
            }
        }
        __syncwarp();  // every lane is done with this slot before it is refilled
    }
}

// Direct path: one output with boundary mapping, taps from shared memory.
template <int DTYPE>
__device__ __forceinline__ float direct_output(const typename Pixel<DTYPE>::type* frame,
                                               const float* s_taps, int stride, int h, int w,
                                               int fh,
                                               int fw, int y, int x, int cy, int cx, int mode,
                                               float cval) {
    float sum = 0.0f;
    for (int i = 0; i < fh; ++i) {
        const int ry = boundary_index(y + i - cy, h, mode);
        for (int j = 0; j < fw; ++j) {
            const int rx = boundary_index(x + j - cx, w, mode);
            const float v = (ry < 0 || rx < 0) ? cval
                                               : Pixel<DTYPE>::load(frame + (size_t)ry * w + rx);
            sum = fmaf(s_taps[i * stride + j], v, sum);
        }
    }
    return sum;
}

}  // namespace xcorr

// Host: xcorr_app/filters/_reuse.py reuse_correlate.  The sub-blocks cover output rows
// [y_first, y_first + n_rows) and columns x_first + 32 * VEC * sb for sb < n_sub_blocks (VEC:
// columns per lane in the plain sub-blocks, 1 or 4; VEC = 4 only for float32, w % 4 == 0,
// cx = FW / 2, up to 7x7, with ours edges; its edge sub-blocks run as four mapped 32-column ones;
// ASYNC: every sub-block, 32 VEC columns wide, goes through reuse_sub_block_staged).
// Ours (n_edge = 0): the whole frame, x_first = y_first = 0, sub-blocks that touch an edge map
// their columns.  The papers' (n_edge > 0): only the interior, y_first = cy, x_first = cx,
// n_rows = interior rows; the n_edge other outputs of each frame (top band, bottom band, then the
// left and right columns of the interior rows) go to the direct path of the trailing edge blocks.
template <int DTYPE, int FH, int FW, bool TAPS_SHARED, int VEC, bool ASYNC>
__global__ void __launch_bounds__(128, xcorr::reuse_min_blocks(FH, FW, TAPS_SHARED, VEC, ASYNC))
reuse_correlate(const typename xcorr::Pixel<DTYPE>::type* __restrict__ in,
                float* __restrict__ out, const xcorr::Taps<FH, FW> taps,
                const float* __restrict__ taps_global, int h, int w, int fh, int fw, int cy,
                int cx, int mode, float cval, int y_first, int n_rows, int x_first,
                int n_sub_blocks, int rows_per_block, int interior_bx, int n_edge) {
    using namespace xcorr;
    using Src = typename Pixel<DTYPE>::type;
    __shared__ float s_taps[FH * FW];
    const int tid = threadIdx.y * 32 + threadIdx.x;
    // Taps in shared memory with row stride FW, zero past (fh, fw), from the global copy (a
    // dynamic index into the by-value parameter would copy it to a stack frame).  The edge path
    // and the papers' variant read them there.
    for (int k = tid; k < FH * FW; k += blockDim.x * blockDim.y) {
        const int i = k / FW, j = k - (k / FW) * FW;
        s_taps[k] = (i < fh && j < fw) ? taps_global[i * fw + j] : 0.0f;
    }
    __syncthreads();
    const size_t frame_size = (size_t)h * w;
    const Src* frame = in + blockIdx.z * frame_size;
    float* oframe = out + blockIdx.z * frame_size;
    const int lane = threadIdx.x;

    if ((int)blockIdx.x < interior_bx) {
        const int sb = blockIdx.x * blockDim.y + threadIdx.y;
        const int r0 = blockIdx.y * rows_per_block;
        if (sb >= n_sub_blocks || r0 >= n_rows) return;
        const int rows = min(rows_per_block, n_rows - r0);
        const int y0 = y_first + r0;
        const bool rows_inside = y0 - cy >= 0 && y0 - cy + rows + FH - 2 < h;
        if constexpr (VEC == 4 && !ASYNC) {  // 128-column sub-blocks (float32, w % 4 == 0)
            const int x0 = x_first + sb * 128;
            if (rows_inside && x0 - FW / 2 >= 0 && x0 + 127 + (FW - 1 - FW / 2) < w) {
                reuse_sub_block_vec4<FH, FW, TAPS_SHARED>(
                    reinterpret_cast<const float*>(frame), oframe, taps, s_taps, w, cy, y0,
                    rows, x0, lane);
                return;
            }
            for (int k = 0; k < 4 && x0 + 32 * k < w; ++k)
                reuse_sub_block<DTYPE, FH, FW, TAPS_SHARED, true>(
                    frame, oframe, taps, s_taps, h, w, fh, fw, cy, cx, mode, cval, y0, rows,
                    x0 + 32 * k, lane);
            return;
        }
        if constexpr (ASYNC) {  // float32, w % 4 == 0, cx = FW / 2, 16-byte aligned base
            using S = Staging<FH, FW, VEC>;
            const int x0 = x_first + sb * 32 * VEC;
            __shared__ __align__(16) float ring[4][S::STAGES][S::GROUP][S::RING_W];
            const bool inside = rows_inside && x0 - 4 * S::LEFT >= 0 &&
                                x0 + 4 * (8 * VEC + S::RIGHT) <= w;
            if (inside)
                reuse_sub_block_staged<FH, FW, VEC, TAPS_SHARED, false>(
                    reinterpret_cast<const float*>(frame), oframe, taps, s_taps, h, w, cy, mode,
                    cval, y0, rows, x0, lane, ring[threadIdx.y]);
            else
                reuse_sub_block_staged<FH, FW, VEC, TAPS_SHARED, true>(
                    reinterpret_cast<const float*>(frame), oframe, taps, s_taps, h, w, cy, mode,
                    cval, y0, rows, x0, lane, ring[threadIdx.y]);
            return;
        } else {
            const int x0 = x_first + sb * 32;
            const bool inside = rows_inside && x0 - cx >= 0 && x0 + 31 - cx + FW - 1 < w;
            if (inside)
                reuse_sub_block<DTYPE, FH, FW, TAPS_SHARED, false>(
                    frame, oframe, taps, s_taps, h, w, fh, fw, cy, cx, mode, cval, y0,
                    rows, x0, lane);
            else
                reuse_sub_block<DTYPE, FH, FW, TAPS_SHARED, true>(
                    frame, oframe, taps, s_taps, h, w, fh, fw, cy, cx, mode, cval, y0,
                    rows, x0, lane);
            return;
        }
    }

    // The papers' edge path: thread t of the edge blocks of this frame takes outputs t,
    // t + stride, ...  (ASYNC runs with ours edges only: n_edge = 0.)
    if constexpr (ASYNC) return;
    const int edge_bx = gridDim.x - interior_bx;
    const int threads = blockDim.x * blockDim.y;
    const int stride = edge_bx * gridDim.y * threads;
    const int y_hi = y_first + n_rows;
    const int inner_w = 32 * n_sub_blocks;
    const int n_top = (n_rows > 0 ? y_first : h) * w;
    const int n_bottom = (n_rows > 0 ? h - y_hi : 0) * w;
    const int left = n_rows > 0 ? x_first : 0, side = w - inner_w;
    for (int k = ((blockIdx.y * edge_bx) + (blockIdx.x - interior_bx)) * threads + tid;
         k < n_edge; k += stride) {
        int y, x;
        if (k < n_top) {
            y = div_floor(k, w, x);
        } else if (k < n_top + n_bottom) {
            y = y_hi + div_floor(k - n_top, w, x);
        } else {
            int c;
            y = y_first + div_floor(k - n_top - n_bottom, side, c);
            x = c < left ? c : c - left + x_first + inner_w;
        }
        oframe[(size_t)y * w + x] =
            direct_output<DTYPE>(frame, s_taps, FW, h, w, fh, fw, y, x, cy, cx, mode, cval);
    }
}
