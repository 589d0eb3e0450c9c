// Float keys shared by the peak kernels: ordered_key(v) maps IEEE floats to unsigned ints of the
// same order (NaN above +inf), so max / min (and atomicMax / atomicMin) on the keys are max / min
// on the values; 0 is below every key of a number.
#pragma once

__device__ __forceinline__ unsigned int ordered_key(float v) {
    const unsigned int b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ double key_value(unsigned int k) {  // the inverse of ordered_key
    const unsigned int b = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return (double)__uint_as_float(b);
}
