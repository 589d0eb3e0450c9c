// The rigid-body fit of xcorr_app/alignment/piecewise/_rotation.py fit_rigid_body, a frame a
// thread, in double: the rotation and shift (the unknowns x = (sin phi, cos phi, ty, tx) of the
// displacement a_p x at patch p, a_p = [[-ux, -uy, 1, 0], [uy, -ux, 0, 1]]) fitted by weighted
// least squares to the patches' displacements, each residual weighted by its patch's structure
// tensor J_p and its weight w_p; three fits, the patches far from the first two left out (as the
// host's NumPy does it, a few numbers a frame: there it took most of a GPU run's quality report,
// and CuPy's batched solve imports cupyx).  P patches, a template argument.
//
// values (n, P, 2) the patches' displacements; weights (n, P): each patch's weight, or with
// FROM_PEAK its correlation peak rho, weighted rho / (1 - rho) (rho clipped to [0, 0.999], NaN:
// 0); a patch whose displacement is not a number weighs 0.  u (P, 2) the patches' centres about
// the frame's centre, tensors (P, 2, 2).  out (n, 6): phi (radians), ty, tx and their standard
// errors, NaN for a frame of fewer than min_patches patches (or a system that is not positive
// definite: the normal equations are solved by Cholesky, not LAPACK's pivoted LU).
//
// Grid ceil(n / THREADS), THREADS threads.

#include "cholesky4.cuh"

// Patch q of frame f: its weight (0: not used) and its displacement less its centre.
template <int P, bool FROM_PEAK>
__device__ __forceinline__ double patch_of(const double* __restrict__ values,
                                           const double* __restrict__ weights,
                                           const double* __restrict__ u, long long f, int q,
                                           double& y0, double& y1) {
    const double vy = values[(f * P + q) * 2], vx = values[(f * P + q) * 2 + 1];
    double wq = weights[f * P + q];
    if (FROM_PEAK) {
        const double rho = isnan(wq) ? 0.0 : fmin(fmax(wq, 0.0), 0.999);
        wq = rho / (1.0 - rho);
    }
    const bool used = wq > 0.0 && isfinite(vy) && isfinite(vx);
    y0 = used ? vy - u[2 * q] : 0.0;
    y1 = used ? vx - u[2 * q + 1] : 0.0;
    return used ? wq : 0.0;
}

// The weighted square of patch q's residual against x (its tensor J_q).
__device__ __forceinline__ double residual_of(const double* __restrict__ u,
                                              const double* __restrict__ tensors, int q,
                                              double y0, double y1, const double (&x)[4]) {
    const double uy = u[2 * q], ux = u[2 * q + 1];
    const double r0 = y0 - (-ux * x[0] - uy * x[1] + x[2]);
    const double r1 = y1 - (uy * x[0] - ux * x[1] + x[3]);
    const double* j = tensors + 4 * q;
    return j[0] * r0 * r0 + (j[1] + j[2]) * r0 * r1 + j[3] * r1 * r1;
}

// (The patches are read again from memory at each step, their weights a bit mask: arrays of P
// in registers spilled.)
template <int P, bool FROM_PEAK, int THREADS>
__global__ void __launch_bounds__(THREADS) rigid_body_fit(
        const double* __restrict__ values, const double* __restrict__ weights,
        const double* __restrict__ u, const double* __restrict__ tensors, long long n,
        double outlier_px, int min_patches, int keep_least, double* __restrict__ out) {
    static_assert(P <= 32, "a patch a bit of the mask");
    const long long f = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (f >= n) return;
    unsigned dropped = 0u;  // the patches left out as far from the fit
    double x[4] = {0.0, 0.0, 0.0, 0.0}, inv_diag[4] = {0.0, 0.0, 0.0, 0.0}, s2 = 0.0;
    int count = 0;
    bool solved = true;
#pragma unroll 1
    for (int k = 0; k < 3; ++k) {
        count = 0;
        double m[4][4] = {}, b[4] = {0.0, 0.0, 0.0, 0.0};
#pragma unroll 1
        for (int q = 0; q < P; ++q) {
            double y0, y1;
            double wq = patch_of<P, FROM_PEAK>(values, weights, u, f, q, y0, y1);
            if ((dropped >> q) & 1u) wq = 0.0;
            if (!(wq > 0.0)) continue;
            ++count;
            const double uy = u[2 * q], ux = u[2 * q + 1];
            const double a0[4] = {-ux, -uy, 1.0, 0.0}, a1[4] = {uy, -ux, 0.0, 1.0};
            const double* j = tensors + 4 * q;
            const double jy0 = j[0] * y0 + j[1] * y1, jy1 = j[2] * y0 + j[3] * y1;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                b[i] += wq * (a0[i] * jy0 + a1[i] * jy1);
#pragma unroll
                for (int c = 0; c < 4; ++c)
                    m[i][c] += wq * (a0[i] * (j[0] * a0[c] + j[1] * a1[c])
                                     + a1[i] * (j[2] * a0[c] + j[3] * a1[c]));
            }
        }
        if (count < min_patches) {  // (the host's identity: its answer is NaN at the end)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
#pragma unroll
                for (int c = 0; c < 4; ++c) m[i][c] = i == c ? 1.0 : 0.0;
                b[i] = 0.0;
            }
        }
        solved = cholesky_solve4(m, b, x, inv_diag);
        if (!solved) break;
        if (k == 2) {  // the residuals' weighted sum of squares
#pragma unroll 1
            for (int q = 0; q < P; ++q) {
                double y0, y1;
                const double wq = patch_of<P, FROM_PEAK>(values, weights, u, f, q, y0, y1);
                if (!((dropped >> q) & 1u) && wq > 0.0)
                    s2 += wq * residual_of(u, tensors, q, y0, y1, x);
            }
            break;
        }
        // the used patches' median distance (the lower one, as the host's sort gives it): the
        // one with as many used below it, ties in patch order
        const int want = (max(count, 1) - 1) / 2;
        double median = __longlong_as_double(0x7ff0000000000000LL);  // (inf: NVRTC has no math.h)
#pragma unroll 1
        for (int q = 0; q < P; ++q) {
            double y0, y1;
            const double wq = patch_of<P, FROM_PEAK>(values, weights, u, f, q, y0, y1);
            if (((dropped >> q) & 1u) || !(wq > 0.0)) continue;
            const double dq = sqrt(fmax(residual_of(u, tensors, q, y0, y1, x), 0.0));
            int below = 0;
#pragma unroll 1
            for (int r = 0; r < P; ++r) {
                double z0, z1;
                const double wr = patch_of<P, FROM_PEAK>(values, weights, u, f, r, z0, z1);
                if (((dropped >> r) & 1u) || !(wr > 0.0)) continue;
                const double dr = sqrt(fmax(residual_of(u, tensors, r, z0, z1, x), 0.0));
                below += dr < dq || (dr == dq && r < q);
            }
            if (below == want) median = dq;
        }
        const double limit = fmax(outlier_px, 3.0 * 1.4826 * median);
        unsigned far = 0u;
#pragma unroll 1
        for (int q = 0; q < P; ++q) {
            double y0, y1;
            const double wq = patch_of<P, FROM_PEAK>(values, weights, u, f, q, y0, y1);
            if (((dropped >> q) & 1u) || !(wq > 0.0)) continue;
            if (sqrt(fmax(residual_of(u, tensors, q, y0, y1, x), 0.0)) > limit) far |= 1u << q;
        }
        if (count - __popc(far) >= keep_least) dropped |= far;
    }
    double* o = out + f * 6;
    if (!solved || count < min_patches) {
#pragma unroll
        for (int i = 0; i < 6; ++i) o[i] = __longlong_as_double(0x7ff8000000000000LL);  // (NaN)
        return;
    }
    s2 /= (double)max(2 * count - 4, 1);
    o[0] = atan2(x[0], x[1]);
    o[1] = x[2];
    o[2] = x[3];
    o[3] = sqrt(fmax(s2 * inv_diag[0], 0.0)) / fmax(hypot(x[0], x[1]), 1e-12);
    o[4] = sqrt(fmax(s2 * inv_diag[2], 0.0));
    o[5] = sqrt(fmax(s2 * inv_diag[3], 0.0));
}
