// Split-row warp-shuffle cross-correlation (thesis, "Warp shuffle algorithm"), with work
// distribution, multi-right-matrix reuse, several left matrices (n-to-m) and multi-row
// (grouped-overlap) reuse, all in one template.
//
// out[z][ky - shift_y0][kx - shift_x0] = sum_n left[left_of(z)][n + k] * right[right_of(z)][n]
//
// Threads: lane = one x-shift (a warp covers 32 consecutive x-shifts, blockIdx.x picks which);
// the y index of the grid is the worker id (work_distribution.cuh); blockIdx.z strides over
// groups of LEFTS x RIGHTS (left, right) pairs.  A worker computes SHIFTS consecutive y-shifts
// for each of its pairs, summing the left rows [row_begin, row_end) of its task.
//
// Per 32-column chunk of the right matrix, each lane loads two left values (the "top" and
// "bottom" part of the left buffer, a = columns [c, c+32), b = [c+32, c+64)) of each of its
// LEFT_ROWS left rows, and one right value of each right row it needs; out-of-range loads read 0,
// so no lane diverges.  Then 32 steps: the right value of the step is broadcast from lane `step`
// by shuffle, multiplied with the lane's left value, and the left buffer moves one lane down
// (lane 31 takes b of lane 0).  Shuffles per FMA: (2 L R_l + R (S + R_l - 1)) : L R S R_l with
// L = LEFTS, R = RIGHTS, S = SHIFTS, R_l = LEFT_ROWS, versus 3 : 1 for the simple algorithm.
//
// warp_shuffle_block_xcorr is the same warp shuffle with a fourth distribution of ours, "block":
// the warps of one block share a shift group's rows and add their sums in shared memory.
//
// Every register array is indexed by compile-time constants only (fully unrolled loops), so
// they stay in registers: the CI compile check fails on any stack frame or spill.
#include "xcorr_forms.cuh"
#include "work_distribution.cuh"

namespace xcorr {
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int WARP = 32;

// The LEFTS left and RIGHTS right matrices of pair group zg: their addresses and whether each
// exists (a missing one points at matrix 0, reads as zeros and is never stored).
template <int FORM, int LEFTS, int RIGHTS>
__device__ __forceinline__ void pair_group(const float* left, const float* right, int zg,
                                           int n_left, int m, size_t left_size,
                                           size_t right_size, int& l0, int& r0,
                                           const float* (&lp)[LEFTS], bool (&lok)[LEFTS],
                                           const float* (&rp)[RIGHTS], bool (&rok)[RIGHTS]) {
    const int right_groups = (m + RIGHTS - 1) / RIGHTS;
    int rg;
    l0 = div_floor(zg, right_groups, rg) * LEFTS;
    r0 = rg * RIGHTS;
#pragma unroll
    for (int li = 0; li < LEFTS; ++li) {
        lok[li] = l0 + li < n_left;
        lp[li] = left + (size_t)(lok[li] ? l0 + li : 0) * left_size;
    }
    right_group<FORM, RIGHTS>(right, l0, r0, m, right_size, rp, rok);
}

template <int FORM, int LEFTS>
__device__ __forceinline__ int pair_groups(int n_left, int m, int rights) {
    const int left_groups = (FORM == N_TO_M) ? (n_left + LEFTS - 1) / LEFTS : n_left;
    return left_groups * ((m + rights - 1) / rights);
}

// The split-row warp shuffle over some left rows of one pair group, added to `sum`: slabs of
// LEFT_ROWS rows starting at row_begin, then every row_step rows, up to row_end.  The lane's
// x-shift is kx_warp + lane; ky0 is the group's first y-shift; right columns [x_begin, x_end)
// are those that meet the left at any of the warp's x-shifts.
template <int LEFTS, int RIGHTS, int SHIFTS, int LEFT_ROWS>
__device__ __forceinline__ void shuffle_rows(const float* const (&lp)[LEFTS],
                                             const bool (&lok)[LEFTS],
                                             const float* const (&rp)[RIGHTS],
                                             const bool (&rok)[RIGHTS], int row_begin,
                                             int row_end, int row_step, int ky0, int kx_warp,
                                             int x_begin, int x_end, int left_w, int right_h,
                                             int right_w, float (&sum)[LEFTS][RIGHTS][SHIFTS]) {
    constexpr int RROWS = SHIFTS + LEFT_ROWS - 1;  // right rows met by LEFT_ROWS left rows
    const int lane = threadIdx.x;
    const int src = (lane + 1) & (WARP - 1);
    for (int y = row_begin; y < row_end; y += row_step) {
        for (int xc = x_begin; xc < x_end; xc += WARP) {
            float a[LEFTS][LEFT_ROWS], b[LEFTS][LEFT_ROWS];
            const int ca = xc + kx_warp + lane, cb = ca + WARP;
#pragma unroll
            for (int i = 0; i < LEFT_ROWS; ++i) {
                const bool row_ok = y + i < row_end;
#pragma unroll
                for (int li = 0; li < LEFTS; ++li) {
                    const float* row = lp[li] + (size_t)(y + i) * left_w;
                    const bool ok = row_ok && lok[li];
                    a[li][i] = (ok && ca >= 0 && ca < left_w) ? row[ca] : 0.0f;
                    b[li][i] = (ok && cb >= 0 && cb < left_w) ? row[cb] : 0.0f;
                }
            }
            // Right row of left row y + i at shift ky0 + j: y + i - ky0 - j = ry0 + d,
            // d = i - j + SHIFTS - 1.
            const int ry0 = y - ky0 - (SHIFTS - 1);
            const int cr = xc + lane;
            float r[RIGHTS][RROWS];
#pragma unroll
            for (int d = 0; d < RROWS; ++d) {
                const int ry = ry0 + d;
                const bool ok = ry >= 0 && ry < right_h && cr < right_w;
#pragma unroll
                for (int ri = 0; ri < RIGHTS; ++ri)
                    r[ri][d] = (ok && rok[ri]) ? rp[ri][(size_t)ry * right_w + cr] : 0.0f;
            }
            // The chunk's products are summed apart and then added to the total: float32
            // error grows with the rows x chunks of the overlap, not with its element count.
            float part[LEFTS][RIGHTS][SHIFTS] = {};  // all zero
            const int steps = min(WARP, x_end - xc);
#pragma unroll
            for (int s = 0; s < WARP; ++s) {
                if (s >= steps) break;  // uniform across the warp
#pragma unroll
                for (int ri = 0; ri < RIGHTS; ++ri) {
#pragma unroll
                    for (int d = 0; d < RROWS; ++d) {
                        const float rv = __shfl_sync(FULL_MASK, r[ri][d], s);
#pragma unroll
                        for (int i = 0; i < LEFT_ROWS; ++i) {
                            const int j = i + SHIFTS - 1 - d;
                            if (j < 0 || j >= SHIFTS) continue;
#pragma unroll
                            for (int li = 0; li < LEFTS; ++li)
                                part[li][ri][j] = fmaf(a[li][i], rv, part[li][ri][j]);
                        }
                    }
                }
#pragma unroll
                for (int li = 0; li < LEFTS; ++li) {
#pragma unroll
                    for (int i = 0; i < LEFT_ROWS; ++i) {
                        const float an = __shfl_sync(FULL_MASK, a[li][i], src);
                        const float bn = __shfl_sync(FULL_MASK, b[li][i], src);
                        a[li][i] = lane == WARP - 1 ? bn : an;
                        b[li][i] = bn;
                    }
                }
            }
#pragma unroll
            for (int li = 0; li < LEFTS; ++li)
#pragma unroll
                for (int ri = 0; ri < RIGHTS; ++ri)
#pragma unroll
                    for (int j = 0; j < SHIFTS; ++j) sum[li][ri][j] += part[li][ri][j];
        }
    }
}

}  // namespace xcorr

template <int FORM, int LEFTS, int RIGHTS, int SHIFTS, int LEFT_ROWS>
__global__ void __launch_bounds__(128, 4)
warp_shuffle_xcorr(const float* __restrict__ left, const float* __restrict__ right,
                   float* __restrict__ out, int left_h, int left_w, int right_h, int right_w,
                   int out_h, int out_w, int shift_y0, int shift_x0, int n_left, int m,
                   int dist, int rows_per_worker, int n_groups, int n_workers, int max_tasks,
                   const int* __restrict__ pieces, int n_pieces) {
    using namespace xcorr;
    const int lane = threadIdx.x;
    // Whole warps take the same branches below: the worker id is shared by a warp's lanes.
    for (int worker = blockIdx.y * blockDim.y + threadIdx.y; worker < n_workers;
         worker += gridDim.y * blockDim.y) {
    int group, task;
    if (!assign_work(dist, worker, n_groups, rows_per_worker, max_tasks, pieces, n_pieces, group,
                     task))
        continue;
    const int ky0 = shift_y0 + group * SHIFTS;
    const int ky_last = min(ky0 + SHIFTS - 1, shift_y0 + out_h - 1);
    const int dom_begin = max(0, ky0), dom_end = min(left_h, ky_last + right_h);
    int row_begin = dom_begin, row_end = dom_end;
    if (dist != DIST_NONE) {
        row_begin = dom_begin + task * rows_per_worker;
        row_end = min(row_begin + rows_per_worker, dom_end);
        if (row_begin >= row_end) continue;  // rectangle: an idle worker of a short group
    }
    const int kx_warp = shift_x0 + blockIdx.x * WARP;  // x-shift of lane 0
    const int ix = blockIdx.x * WARP + lane;           // output column of this lane
    // Right columns that overlap the left at any of the warp's 32 x-shifts.
    const int x_begin = max(0, -(kx_warp + WARP - 1)), x_end = min(right_w, left_w - kx_warp);
    const size_t left_size = (size_t)left_h * left_w, right_size = (size_t)right_h * right_w;
    const size_t out_size = (size_t)out_h * out_w;
    const int n_pair_groups = pair_groups<FORM, LEFTS>(n_left, m, RIGHTS);
    for (int zg = blockIdx.z; zg < n_pair_groups; zg += gridDim.z) {
        int l0, r0;
        const float* lp[LEFTS];
        const float* rp[RIGHTS];
        bool lok[LEFTS], rok[RIGHTS];
        pair_group<FORM, LEFTS, RIGHTS>(left, right, zg, n_left, m, left_size, right_size, l0,
                                        r0, lp, lok, rp, rok);
        float sum[LEFTS][RIGHTS][SHIFTS] = {};  // all zero
        shuffle_rows<LEFTS, RIGHTS, SHIFTS, LEFT_ROWS>(lp, lok, rp, rok, row_begin, row_end,
                                                       LEFT_ROWS, ky0, kx_warp, x_begin, x_end,
                                                       left_w, right_h, right_w, sum);
        if (ix >= out_w) continue;
#pragma unroll
        for (int li = 0; li < LEFTS; ++li) {
#pragma unroll
            for (int ri = 0; ri < RIGHTS; ++ri) {
                if (!lok[li] || !rok[ri]) continue;
                const size_t z = (size_t)(l0 + li) * m + (r0 + ri);
#pragma unroll
                for (int j = 0; j < SHIFTS; ++j) {
                    if (ky0 + j > ky_last) continue;
                    float* o = out + z * out_size + (size_t)(ky0 + j - shift_y0) * out_w + ix;
                    if (dist == DIST_NONE)
                        *o = sum[li][ri][j];
                    else
                        atomicAdd(o, sum[li][ri][j]);
                }
            }
        }
    }
    }  // worker loop
}

// The "block" distribution (ours, beyond the thesis): the rows of one shift group are shared
// by the blockDim.y warps of one block (warp w sums the LEFT_ROWS-row slabs w, w + W, ...), and
// the block adds their sums in shared memory (dynamic, W x LEFTS x RIGHTS x SHIFTS x 32 floats)
// in a fixed order and stores each output once: no atomics, no zeroed output, and results that
// repeat bit for bit.  blockIdx.y strides over the shift groups, blockIdx.z over pair groups.
template <int FORM, int LEFTS, int RIGHTS, int SHIFTS, int LEFT_ROWS>
__global__ void __launch_bounds__(256, 2)
warp_shuffle_block_xcorr(const float* __restrict__ left, const float* __restrict__ right,
                         float* __restrict__ out, int left_h, int left_w, int right_h,
                         int right_w, int out_h, int out_w, int shift_y0, int shift_x0,
                         int n_left, int m, int n_groups) {
    using namespace xcorr;
    constexpr int SUMS = LEFTS * RIGHTS * SHIFTS;
    extern __shared__ float block_sums[];  // [W][SUMS][WARP]
    const int lane = threadIdx.x, warp = threadIdx.y, n_warps = blockDim.y;
    const int kx_warp = shift_x0 + blockIdx.x * WARP;
    const int ix = blockIdx.x * WARP + lane;
    const int x_begin = max(0, -(kx_warp + WARP - 1)), x_end = min(right_w, left_w - kx_warp);
    const size_t left_size = (size_t)left_h * left_w, right_size = (size_t)right_h * right_w;
    const size_t out_size = (size_t)out_h * out_w;
    const int n_pair_groups = pair_groups<FORM, LEFTS>(n_left, m, RIGHTS);
    // Every loop bound below is the same for the whole block, so every warp meets each barrier.
    for (int group = blockIdx.y; group < n_groups; group += gridDim.y) {
        const int ky0 = shift_y0 + group * SHIFTS;
        const int ky_last = min(ky0 + SHIFTS - 1, shift_y0 + out_h - 1);
        const int dom_begin = max(0, ky0), dom_end = min(left_h, ky_last + right_h);
        for (int zg = blockIdx.z; zg < n_pair_groups; zg += gridDim.z) {
            int l0, r0;
            const float* lp[LEFTS];
            const float* rp[RIGHTS];
            bool lok[LEFTS], rok[RIGHTS];
            pair_group<FORM, LEFTS, RIGHTS>(left, right, zg, n_left, m, left_size, right_size,
                                            l0, r0, lp, lok, rp, rok);
            float sum[LEFTS][RIGHTS][SHIFTS] = {};  // all zero
            shuffle_rows<LEFTS, RIGHTS, SHIFTS, LEFT_ROWS>(
                lp, lok, rp, rok, dom_begin + warp * LEFT_ROWS, dom_end, n_warps * LEFT_ROWS,
                ky0, kx_warp, x_begin, x_end, left_w, right_h, right_w, sum);
            __syncthreads();  // the previous pair group's sums have been read
#pragma unroll
            for (int li = 0; li < LEFTS; ++li)
#pragma unroll
                for (int ri = 0; ri < RIGHTS; ++ri)
#pragma unroll
                    for (int j = 0; j < SHIFTS; ++j)
                        block_sums[((warp * LEFTS + li) * RIGHTS + ri) * SHIFTS * WARP +
                                   j * WARP + lane] = sum[li][ri][j];
            __syncthreads();
            // Warp w adds up and stores the sums k = w, w + W, ... of every warp, in warp order.
            for (int k = warp; k < SUMS; k += n_warps) {
                float total = 0.0f;
                for (int w = 0; w < n_warps; ++w) total += block_sums[(w * SUMS + k) * WARP + lane];
                const int j = k % SHIFTS, ri = (k / SHIFTS) % RIGHTS, li = k / (SHIFTS * RIGHTS);
                bool exists = false;  // lok[li] && rok[ri], with compile-time indices
#pragma unroll
                for (int a = 0; a < LEFTS; ++a)
#pragma unroll
                    for (int b = 0; b < RIGHTS; ++b)
                        if (a == li && b == ri) exists = lok[a] && rok[b];
                if (!exists || ix >= out_w || ky0 + j > ky_last) continue;
                const size_t z = (size_t)(l0 + li) * m + (r0 + ri);
                out[z * out_size + (size_t)(ky0 + j - shift_y0) * out_w + ix] = total;
            }
        }
    }
}

// Warp per shift (thesis, "Occupancy improvement"): for the smallest matrices one warp sums one
// output element, its lanes striding over the overlap and reducing by xor-shuffle.  With SHARED,
// the block's warps compute consecutive shifts of one result and first stage that result's right
// matrix in shared memory (right_h * right_w floats) and, where stage_left is set (it fits),
// the left one after it, so every load of the sums is a shared-memory load.  Ours (issue 24: on
// small pairs the kernel is bound by its instructions, about 500 a warp on a 32x32 pair): the
// block's warps take consecutive x-shifts of one y-shift (grid: x-shift groups, y-shifts,
// results), so no division finds a warp's shift; a lane walks the overlap by rows and columns,
// stepping 32 elements by a row and column step found once (a reciprocal where the overlap is
// narrower than a warp, nothing where it is wider), four sums in flight; the staging copies
// float4s where the matrices are 16-byte aligned.
template <int FORM, bool SHARED>
__global__ void __launch_bounds__(256)
warp_per_shift_xcorr(const float* __restrict__ left, const float* __restrict__ right,
                     float* __restrict__ out, int left_h, int left_w, int right_h, int right_w,
                     int out_h, int out_w, int shift_y0, int shift_x0, int m, int n_results,
                     int stage_left) {
    using namespace xcorr;
    extern __shared__ float4 staged4[];
    float* staged = reinterpret_cast<float*>(staged4);
    const int lane = threadIdx.x;
    const int ixo = blockIdx.x * blockDim.y + threadIdx.y;
    const bool active_x = ixo < out_w;
    const int kx = ixo + shift_x0;
    const int x_begin = max(0, -kx), x_end = min(right_w, left_w - kx);
    const int nx = active_x ? max(0, x_end - x_begin) : 0;
    // element e of the overlap is its row e / nx, column e % nx; a lane starts at e = lane and
    // steps by 32 = sy rows and sx columns (sx < nx), carrying a column past the row's end.
    // Below a warp's width the quotients come from a reciprocal: exact, as (n + 0.5) / nx is
    // at least 1 / 64 away from an integer and the reciprocal's error is below 1e-5 there.
    int sy = 0, sx = WARP, y_lane = 0, x_lane = lane;
    if (nx > 0 && nx <= WARP) {
        const float inv = __frcp_rn((float)nx);
        sy = __float2int_rz(((float)WARP + 0.5f) * inv);
        sx = WARP - sy * nx;
        y_lane = __float2int_rz(((float)lane + 0.5f) * inv);
        x_lane = lane - y_lane * nx;
    }
    const size_t left_size = (size_t)left_h * left_w, right_size = (size_t)right_h * right_w;
    const size_t out_size = (size_t)out_h * out_w;
    const int tid = threadIdx.y * WARP + lane, n_threads = blockDim.y * WARP;
    for (int z = blockIdx.z; z < n_results; z += gridDim.z) {
        const float* l = left + left_of<FORM>(z, m) * left_size;
        const float* r = right + right_of<FORM>(z, m) * right_size;
        if (SHARED) {
            __syncthreads();  // the previous result's reads are done
            const bool vec = ((right_size | (stage_left ? left_size : 0)) & 3) == 0 &&
                             (((size_t)r | (stage_left ? (size_t)l : 0)) & 15) == 0;
            if (vec) {
                const float4* r4 = reinterpret_cast<const float4*>(r);
                const float4* l4 = reinterpret_cast<const float4*>(l);
                const int n4 = (int)(right_size >> 2);
                for (int i = tid; i < n4; i += n_threads) staged4[i] = __ldg(r4 + i);
                if (stage_left)
                    for (int i = tid; i < (int)(left_size >> 2); i += n_threads)
                        staged4[n4 + i] = __ldg(l4 + i);
            } else {
                for (int i = tid; i < (int)right_size; i += n_threads) staged[i] = r[i];
                if (stage_left)
                    for (int i = tid; i < (int)left_size; i += n_threads)
                        staged[right_size + i] = l[i];
            }
            __syncthreads();
            r = staged;
            if (stage_left) l = staged + right_size;
        }
        for (int iy = blockIdx.y; iy < out_h; iy += gridDim.y) {
            const int ky = iy + shift_y0;
            const int y_begin = max(0, -ky), y_end = min(right_h, left_h - ky);
            const int count = nx * max(0, y_end - y_begin);
            // the overlap's first element (offsets of 0 where there is none: never read)
            const float* lp = l + (count ? (size_t)(y_begin + ky) * left_w + x_begin + kx : 0);
            const float* rp = r + (count ? (size_t)y_begin * right_w + x_begin : 0);
            int y = y_lane, x = x_lane;
            auto next = [&]() {
                x += sx;
                y += sy;
                if (x >= nx) {
                    x -= nx;
                    ++y;
                }
            };
            float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int e = lane;
            for (; e + 3 * WARP < count; e += 4 * WARP) {
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    s[k] = fmaf(lp[y * left_w + x], rp[y * right_w + x], s[k]);
                    next();
                }
            }
#pragma unroll
            for (int k = 0; k < 3; ++k) {  // the last 0 to 3 elements of this lane
                if (e < count) {
                    s[k] = fmaf(lp[y * left_w + x], rp[y * right_w + x], s[k]);
                    next();
                    e += WARP;
                }
            }
            float sum = (s[0] + s[1]) + (s[2] + s[3]);
#pragma unroll
            for (int off = WARP / 2; off > 0; off >>= 1)
                sum += __shfl_xor_sync(FULL_MASK, sum, off);
            if (active_x && lane == 0) out[z * out_size + (size_t)iy * out_w + ixo] = sum;
        }
    }
}
