// Few-pair cross-correlation ("small"): our addition for one pair or a few (one_to_one, or up
// to 8 right matrices per call), where the batch kernels leave most of the GPU idle and the
// launch, not the arithmetic, sets the pace (a full 64x64 correlation is 16.7M multiply-adds:
// under a microsecond of an H100's FP32 rate).
//
// out[z][ky - shift_y0][kx - shift_x0] = sum_n left[left_of(z)][n + k] * right[right_of(z)][n]
//
// The output shifts are spread over the GPU: a block owns TY consecutive y-shifts x 32
// consecutive x-shifts of one result z (lane = x-shift, each lane TY sums in registers), and
// its warps split the right rows that meet the tile (blockDim.y warps, a contiguous chunk
// each).  The block first stages in shared memory exactly what its tile reads: the right
// rows and columns that meet the left at one of its shifts (columns in quads of 4, zeros past
// the row) and the left window they meet, zeros outside the left matrix, so the inner loop
// has no bounds test.  A warp walks its chunk's columns a quad at a time and, inside a quad,
// its rows; for each right row it reads one float4 of right values (the same address in every
// lane: a broadcast) and 4 left values of the row that enters its sliding window of TY rows
// (consecutive lanes, consecutive addresses: no bank conflict), for 4 * TY FMAs.  The window
// is a circular buffer whose rotation is resolved at compile time (the row loop is unrolled
// by TY), as in the register-tiled kernels.  The warps' sums are added in shared memory in a
// fixed order and stored once: no atomics, so no zeroed output and no memset launch; every
// output element is written (zeros where nothing overlaps).
#include "xcorr_forms.cuh"
#include "int_math.cuh"

template <int FORM, int TY>
__global__ void __launch_bounds__(512)
small_xcorr(const float* __restrict__ left, const float* __restrict__ right,
            float* __restrict__ out, int left_h, int left_w, int right_h, int right_w, int out_h,
            int out_w, int shift_y0, int shift_x0, int m, int n_results) {
    using namespace xcorr;
    // the staged right rows (float4 quads, rows of n_quads quads), then the left window;
    // after the sums, each warp's TY x 32 partial sums
    extern __shared__ float4 s_right4[];
    float* s_all = reinterpret_cast<float*>(s_right4);
    const int lane = threadIdx.x, warp = threadIdx.y, warps = blockDim.y;
    const int tid = warp * 32 + lane, n_threads = warps * 32;
    const int ky_first = shift_y0 + blockIdx.y * TY, kx_first = shift_x0 + blockIdx.x * 32;
    // right rows / columns that meet the left at one of the tile's shifts (uniform per block)
    const int y_begin = max(0, -(ky_first + TY - 1)), y_end = min(right_h, left_h - ky_first);
    const int x_begin = max(0, -(kx_first + 31)) & ~3, x_end = min(right_w, left_w - kx_first);
    const bool any = y_begin < y_end && x_begin < x_end;
    const int n_rows = any ? y_end - y_begin : 0;
    const int n_quads = any ? (x_end - x_begin + 3) >> 2 : 0;
    const int cols4 = 4 * n_quads;
    // the left window: rows y + ky, columns x + kx of the staged right rows and the tile
    const int l_rows = any ? n_rows + TY - 1 : 0, l_cols = cols4 + 31;
    const int row0 = y_begin + ky_first, col0 = x_begin + kx_first;
    float* s_left = s_all + n_rows * cols4;
    // this warp's right rows (relative to y_begin)
    const int chunk = ceil_div(n_rows, warps);
    const int wy0 = min(n_rows, warp * chunk), wy1 = min(n_rows, wy0 + chunk);
    const size_t left_size = (size_t)left_h * left_w, right_size = (size_t)right_h * right_w;
    const size_t out_size = (size_t)out_h * out_w;

    for (int z = blockIdx.z; z < n_results; z += gridDim.z) {
        const float* lp = left + (size_t)left_of<FORM>(z, m) * left_size;
        const float* rp = right + (size_t)right_of<FORM>(z, m) * right_size;
        for (int k = tid; k < n_rows * cols4; k += n_threads) {
            int xx;
            const int yy = div_floor(k, cols4, xx);
            const int x = x_begin + xx;
            s_all[k] = x < right_w ? __ldg(rp + (size_t)(y_begin + yy) * right_w + x) : 0.0f;
        }
        for (int k = tid; k < l_rows * l_cols; k += n_threads) {
            int cc;
            const int rr = div_floor(k, l_cols, cc);
            const int r = row0 + rr, c = col0 + cc;
            s_left[k] = (r >= 0 && r < left_h && c >= 0 && c < left_w)
                            ? __ldg(lp + (size_t)r * left_w + c) : 0.0f;
        }
        __syncthreads();

        // With TY < 4 each sum is split over the quad's 4 columns: TY chains of 4 dependent
        // FMAs a row would leave a lone warp waiting on the FMA latency.
        constexpr int SPLIT = TY < 4 ? 4 : 1;
        float acc[TY][SPLIT];
#pragma unroll
        for (int i = 0; i < TY; ++i)
#pragma unroll
            for (int s = 0; s < SPLIT; ++s) acc[i][s] = 0.0f;
        for (int q = 0; q < n_quads && wy0 < wy1; ++q) {
            // s_left[(yy + i) * l_cols + 4q + s + lane]: shift row i, column s of the quad
            const float* lq = s_left + 4 * q + lane;
            const float4* rq = s_right4 + q;  // rq[yy * n_quads]: right row yy, this quad
            float win[TY][4];  // circular over rows: slot (i + s) % TY holds shift row i
#pragma unroll
            for (int i = 0; i < TY - 1; ++i)
#pragma unroll
                for (int s = 0; s < 4; ++s) win[i][s] = lq[(wy0 + i) * l_cols + s];
            // Step st of a group of TY right rows starting at yy (st a constant after unrolling).
            auto step = [&](int yy, int st) {
                float* dst = win[(st + TY - 1) % TY];
                const float* src = lq + (yy + st + TY - 1) * l_cols;
#pragma unroll
                for (int s = 0; s < 4; ++s) dst[s] = src[s];
                const float4 r4 = rq[(yy + st) * n_quads];
                const float r[4] = {r4.x, r4.y, r4.z, r4.w};
#pragma unroll
                for (int i = 0; i < TY; ++i)
#pragma unroll
                    for (int s = 0; s < 4; ++s)
                        acc[i][s % SPLIT] = fmaf(win[(i + st) % TY][s], r[s], acc[i][s % SPLIT]);
            };
            int yy = wy0;
            for (; yy + TY <= wy1; yy += TY) {  // whole groups: no test between the steps
#pragma unroll
                for (int st = 0; st < TY; ++st) step(yy, st);
            }
#pragma unroll
            for (int st = 0; st < TY - 1; ++st) {  // the last, partial group (uniform test)
                if (yy + st >= wy1) break;
                step(yy, st);
            }
        }
        __syncthreads();  // every warp is done with the staged inputs: reuse them for the sums
#pragma unroll
        for (int i = 0; i < TY; ++i) {
            float v = acc[i][0];
#pragma unroll
            for (int s = 1; s < SPLIT; ++s) v += acc[i][s];
            s_all[(warp * TY + i) * 32 + lane] = v;
        }
        __syncthreads();
        for (int e = tid; e < TY * 32; e += n_threads) {
            float v = 0.0f;
            for (int w = 0; w < warps; ++w) v += s_all[w * TY * 32 + e];  // a fixed order
            const int iy = blockIdx.y * TY + (e >> 5), ix = blockIdx.x * 32 + (e & 31);
            if (iy < out_h && ix < out_w) out[z * out_size + (size_t)iy * out_w + ix] = v;
        }
        __syncthreads();  // the sums are read before the next result's staging
    }
}
