// 3xTF32 on the tensor cores, shared by kernels/correlate/mma_xcorr.cu and
// kernels/conv/pointwise_mma.cu: the split of an operand and one m16n8k8 product.
#pragma once

namespace xcorr {

// v as hi + lo: hi is v rounded to TF32 (to nearest, ties away from zero, as cvt.rna.tf32 does;
// that instruction is emulated by about ten integer instructions on sm_90, this takes two) and
// lo = v - hi exactly, which the tensor core reads truncated to TF32.  Finite inputs only.
__device__ __forceinline__ uint2 split_tf32(float v) {
    const unsigned hi = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
    return make_uint2(hi, __float_as_uint(v - __uint_as_float(hi)));
}

// d += a * b: one mma.sync.m16n8k8 of TF32 operands (the PTX fragment layouts), FP32 sums
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace xcorr
