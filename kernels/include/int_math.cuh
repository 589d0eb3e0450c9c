// Integer helpers shared by the kernels.
#pragma once

namespace xcorr {

// Quotient and remainder of non-negative ints without the integer-division subroutine: in large
// kernels ptxas calls it out of line and spills live registers around the call, which the CI
// compile check forbids.  A float reciprocal gives the quotient to within a few units for any
// a < 2^31; the loops correct it exactly.
__device__ __forceinline__ int div_floor(int a, int b, int& rem) {
    int q = __float2int_rz(__fdividef(__int2float_rz(a), __int2float_rn(b)));
    int r = a - q * b;
    while (r < 0) { --q; r += b; }
    while (r >= b) { ++q; r -= b; }
    rem = r;
    return q;
}

__device__ __forceinline__ int div_floor(int a, int b) {
    int rem;
    return div_floor(a, b, rem);
}

__device__ __forceinline__ int ceil_div(int a, int b) { return div_floor(a + b - 1, b); }

}  // namespace xcorr
