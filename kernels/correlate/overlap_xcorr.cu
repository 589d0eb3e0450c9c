// Overlap-wise baseline of definition-based cross-correlation (thesis, "Two matrices"):
// one thread per output element (one relative shift), summing the whole overlap of the two
// matrices. It is the correctness and speed baseline for the warp-shuffle kernels.
//
// out[z][iy][ix] = sum_n left[left_of(z)][n + k] * right[right_of(z)][n],
// k = (iy + shift_y0, ix + shift_x0); n runs over the overlap (no padded copies).
// Full range: shift_y0 = -(right_h - 1), out_h = left_h + right_h - 1; bounded: shift_y0 = -sy.
#include "xcorr_forms.cuh"

template <int FORM>
__global__ void overlap_xcorr(const float* __restrict__ left, const float* __restrict__ right,
                              float* __restrict__ out, int left_h, int left_w, int right_h,
                              int right_w, int out_h, int out_w, int shift_y0, int shift_x0,
                              int m, int n_results) {
    const int ix = blockIdx.x * blockDim.x + threadIdx.x;
    const int iy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ix >= out_w || iy >= out_h) return;
    const int ky = iy + shift_y0;
    const int kx = ix + shift_x0;
    // Rows/columns n of the right matrix with 0 <= n < right and 0 <= n + k < left.
    const int y_begin = max(0, -ky), y_end = min(right_h, left_h - ky);
    const int x_begin = max(0, -kx), x_end = min(right_w, left_w - kx);
    const size_t left_size = (size_t)left_h * left_w;
    const size_t right_size = (size_t)right_h * right_w;
    const size_t out_size = (size_t)out_h * out_w;
    for (int z = blockIdx.z; z < n_results; z += gridDim.z) {
        const float* l = left + xcorr::left_of<FORM>(z, m) * left_size;
        const float* r = right + xcorr::right_of<FORM>(z, m) * right_size;
        float sum = 0.0f;
        for (int y = y_begin; y < y_end; ++y) {
            const float* lrow = l + (size_t)(y + ky) * left_w + kx;
            const float* rrow = r + (size_t)y * right_w;
            for (int x = x_begin; x < x_end; ++x) sum = fmaf(lrow[x], rrow[x], sum);
        }
        out[z * out_size + (size_t)iy * out_w + ix] = sum;
    }
}
