// scipy.ndimage's boundary modes for the filter kernels (kernels/filters/*.cu; the ids are
// xcorr_app/filters/_modes.py's MODE_IDS, in the same order).
#pragma once

namespace xcorr {

enum BoundaryMode { MODE_REFLECT = 0, MODE_CONSTANT = 1, MODE_NEAREST = 2, MODE_MIRROR = 3,
                    MODE_WRAP = 4 };

// Index i of a line of n samples mapped into [0, n) by the boundary mode; -1 for constant.
__device__ __forceinline__ int boundary_index(int i, int n, int mode) {
    if (i >= 0 && i < n) return i;
    switch (mode) {
    case MODE_CONSTANT: return -1;
    case MODE_NEAREST: return i < 0 ? 0 : n - 1;
    case MODE_WRAP:
        while (i < 0) i += n;
        while (i >= n) i -= n;
        return i;
    case MODE_MIRROR: {  // d c b | a b c d | c b a: period 2n - 2
        if (n == 1) return 0;
        const int period = 2 * n - 2;
        while (i < 0) i += period;
        while (i >= period) i -= period;
        return i < n ? i : period - i;
    }
    default: {  // reflect, d c b a | a b c d | d c b a: period 2n
        const int period = 2 * n;
        while (i < 0) i += period;
        while (i >= period) i -= period;
        return i < n ? i : period - 1 - i;
    }
    }
}

}  // namespace xcorr
