// The four forms of cross-correlation between many matrices, shared by every xcorr kernel.
// Result z of the flattened output batch correlates left matrix left_of(z) with right matrix
// right_of(z). The ids must match xcorr_app/forms.py (FORM_IDS).
#pragma once

namespace xcorr {

enum Form { ONE_TO_ONE = 0, ONE_TO_MANY = 1, N_TO_MN = 2, N_TO_M = 3 };

// m: right matrices per left (the M of forms.py).
template <int FORM>
__device__ __forceinline__ int left_of(int z, int m) {
    return (FORM == ONE_TO_ONE || FORM == ONE_TO_MANY) ? 0 : z / m;
}

template <int FORM>
__device__ __forceinline__ int right_of(int z, int m) {
    return FORM == ONE_TO_ONE ? 0 : (FORM == N_TO_M ? z % m : z);
}

}  // namespace xcorr
