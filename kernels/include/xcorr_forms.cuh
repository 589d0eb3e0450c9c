// The four forms of cross-correlation between many matrices, shared by every xcorr kernel.
// Result z of the flattened output batch correlates left matrix left_of(z) with right matrix
// right_of(z). The ids must match xcorr_app/correlate/_forms.py FORM_IDS.
#pragma once

namespace xcorr {

enum Form { ONE_TO_ONE = 0, ONE_TO_MANY = 1, N_TO_MN = 2, N_TO_M = 3 };

// m: right matrices per left (the M of xcorr_app/correlate/_forms.py).
template <int FORM>
__device__ __forceinline__ int left_of(int z, int m) {
    return (FORM == ONE_TO_ONE || FORM == ONE_TO_MANY) ? 0 : z / m;
}

template <int FORM>
__device__ __forceinline__ int right_of(int z, int m) {
    return FORM == ONE_TO_ONE ? 0 : (FORM == N_TO_M ? z % m : z);
}

// The RIGHTS right matrices r0 .. r0 + RIGHTS - 1 paired with left matrix l (n_to_mn: of l's own
// group): their addresses and whether each exists (r0 + i < m); a missing one points at matrix 0
// and must be read as zeros and never stored.
template <int FORM, int RIGHTS>
__device__ __forceinline__ void right_group(const float* right, int l, int r0, int m,
                                            size_t right_size, const float* (&ptr)[RIGHTS],
                                            bool (&ok)[RIGHTS]) {
#pragma unroll
    for (int i = 0; i < RIGHTS; ++i) {
        ok[i] = r0 + i < m;
        const int r = ok[i] ? r0 + i : 0;
        ptr[i] = right + (size_t)(FORM == N_TO_MN ? l * m + r : r) * right_size;
    }
}

}  // namespace xcorr
