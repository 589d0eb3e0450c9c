// The 3-D path's subvoxel samples on the GPU (xcorr_app/alignment/volume/_dft3.py samples3d):
// the correlation at r lags per axis around each volume's peak from its half spectrum, as three
// contractions of the spectrum with exp(2 pi i f x) along x, y and z.  The first, over x, is a
// cuBLAS product per volume (complex64: the spectrum's precision); these kernels make the
// matrices of the three axes (dft_axis) and the two later contractions in double (contract_y,
// contract_z).  As CuPy's operations and batched products they compiled 11 kernels at first
// use, on a cold `xcorr align --volumes`; these ship built.

// out (B, r, n) or, with TRANSPOSE, (B, n, r): weight[k] * exp(2 pi i pos[b, i] f[k]) (by
// sincospi: no argument reduction of large angles, which sincos does in local memory; within
// 1e-13 of NumPy's exp(2j * pi * pos * f) at these lags); C the output's complex type.
template <typename C, bool TRANSPOSE>
__global__ void dft_axis(const double* __restrict__ pos, int b, int r, int n,
                         const double* __restrict__ f, const double* __restrict__ weight,
                         C* __restrict__ out) {
    const long long total = (long long)b * r * n;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long bi = t / ((long long)r * n);
        const int i = (int)((t / n) % r), k = (int)(t % n);
        double s, c;
        sincospi(2.0 * pos[bi * r + i] * f[k], &s, &c);
        const double w = weight[k];
        const long long o = TRANSPOSE ? (bi * n + k) * r + i : t;
        out[o].x = w * c;
        out[o].y = w * s;
    }
}

// t[b, z, ry, rx] = sum_y ky[b, ry, y] a[b, z, y, rx] (a complex64 (B, Z, Y, r) as float2, ky
// and t complex128 as double2), in double, y in order: a thread an output.
__global__ void contract_y(const float2* __restrict__ a,
                           const double2* __restrict__ ky, int b, int z, int y, int r,
                           double2* __restrict__ t) {
    const long long total = (long long)b * z * r * r;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        const int rx = (int)(o % r), ry = (int)((o / r) % r);
        const long long bz = o / ((long long)r * r), bi = bz / z;
        const float2* col = a + bz * y * r + rx;
        const double2* row = ky + (bi * r + ry) * y;
        double re = 0.0, im = 0.0;
        for (int j = 0; j < y; ++j) {
            const float2 v = col[(long long)j * r];
            const double2 k = row[j];
            re += k.x * (double)v.x - k.y * (double)v.y;
            im += k.x * (double)v.y + k.y * (double)v.x;
        }
        t[o] = make_double2(re, im);
    }
}

// out[b, rz, ry, rx] = Re(sum_z kz[b, rz, z] t[b, z, ry, rx]) / size (float64), z in order.
__global__ void contract_z(const double2* __restrict__ t,
                           const double2* __restrict__ kz, int b, int z, int r,
                           double size, double* __restrict__ out) {
    const long long rr = (long long)r * r, total = (long long)b * r * rr;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (long long)gridDim.x * blockDim.x) {
        const long long bi = o / (r * rr), rz = (o / rr) % r, q = o % rr;
        const double2* row = kz + (bi * r + rz) * z;
        const double2* col = t + bi * z * rr + q;
        double re = 0.0;
        for (int j = 0; j < z; ++j) {
            const double2 v = col[(long long)j * rr];
            re += row[j].x * v.x - row[j].y * v.y;
        }
        out[o] = re / size;
    }
}
