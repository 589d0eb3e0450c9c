// A symmetric positive definite 4x4 system solved by Cholesky in double (the rigid-body fit,
// the reference fit's Gauss-Newton step).
#pragma once

// x = m^-1 b for a symmetric positive definite 4x4 m (Cholesky: m = L L^T), and the diagonal of
// m^-1; false where m is not positive definite.
__device__ __forceinline__ bool cholesky_solve4(const double (&m)[4][4], const double (&b)[4],
                                                double (&x)[4], double (&inv_diag)[4]) {
    double l[4][4] = {};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j <= i; ++j) {
            double s = m[i][j];
#pragma unroll
            for (int k = 0; k < j; ++k) s -= l[i][k] * l[j][k];
            if (i == j) {
                if (!(s > 0.0)) return false;
                l[i][i] = sqrt(s);
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    double z[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // L z = b
        double s = b[i];
#pragma unroll
        for (int k = 0; k < i; ++k) s -= l[i][k] * z[k];
        z[i] = s / l[i][i];
    }
#pragma unroll
    for (int i = 3; i >= 0; --i) {  // L^T x = z
        double s = z[i];
#pragma unroll
        for (int k = i + 1; k < 4; ++k) s -= l[k][i] * x[k];
        x[i] = s / l[i][i];
    }
    double li[4][4] = {};  // L^-1 (lower): diag(m^-1)_j = sum_i (L^-1)_ij^2
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        li[j][j] = 1.0 / l[j][j];
#pragma unroll
        for (int i = j + 1; i < 4; ++i) {
            double s = 0.0;
#pragma unroll
            for (int k = j; k < i; ++k) s -= l[i][k] * li[k][j];
            li[i][j] = s / l[i][i];
        }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        double s = 0.0;
#pragma unroll
        for (int i = j; i < 4; ++i) s += li[i][j] * li[i][j];
        inv_diag[j] = s;
    }
    return true;
}
