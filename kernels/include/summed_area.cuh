// Summed-area tables as xcorr_app/registration/_surfaces.py summed_area_tables makes them (float64,
// a zero first row and column; a bounded search keeps only the rows it looks up: table row j holds
// image row y = j for j <= top, y = j + gap after), shared by kernels/registration/zncc_peaks.cu
// (sat_tables) and kernels/alignment/patch_field.cu (patch_windows_tables).
#pragma once

// The table row of image row y.
__device__ __forceinline__ int table_row(int y, int top, int gap) {
    return y <= top ? y : y - gap;
}

// Inclusive prefix sums of a and b across the 32 lanes of a warp (a shuffle scan); every lane
// calls it.
__device__ __forceinline__ void warp_scan_pair(double& a, double& b, int lane) {
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
        const double u1 = __shfl_up_sync(0xffffffffu, a, off);
        const double u2 = __shfl_up_sync(0xffffffffu, b, off);
        if (lane >= off) {
            a += u1;
            b += u2;
        }
    }
}

// Prefix sums of the rows r1[0 .. w1) and r2[0 .. w1) in place, by the 32 lanes of a warp (a
// shuffle scan of 32 entries at a time, the carry passed on); every lane calls it.
__device__ __forceinline__ void scan_row_pair(double* r1, double* r2, int w1, int lane) {
    double carry1 = 0.0, carry2 = 0.0;
    for (int j0 = 0; j0 < w1; j0 += 32) {
        const int j = j0 + lane;
        double v1 = j < w1 ? r1[j] : 0.0;
        double v2 = j < w1 ? r2[j] : 0.0;
        warp_scan_pair(v1, v2, lane);
        v1 += carry1;
        v2 += carry2;
        if (j < w1) {
            r1[j] = v1;
            r2[j] = v2;
        }
        carry1 = __shfl_sync(0xffffffffu, v1, 31);
        carry2 = __shfl_sync(0xffffffffu, v2, 31);
    }
}
