// A shift as the warps read it (xcorr_app/alignment/warp/_warp.py's definition, NumPy's
// nan_to_num): NaN counts as 0, an infinite shift as one far outside the frame.
#pragma once

__device__ __forceinline__ double finite_shift(double s) {
    if (isnan(s)) return 0.0;
    return fmin(fmax(s, -1e15), 1e15);  // (inf: far outside, as nan_to_num's largest double)
}
