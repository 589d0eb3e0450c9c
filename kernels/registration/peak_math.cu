// Per-frame peak arithmetic on small arrays (N or N x 2 values, or one small surface per frame),
// for xcorr_app/registration/_peak_math.py.  Each kernel replaces a chain of CuPy operations of
// xcorr_app/registration/_peaks.py, xcorr_app/registration/_fft_register.py or
// xcorr_app/alignment/refine/_template.py that, on a fresh machine, compiled one NVRTC kernel per
// operation (tens of them, ~0.1 s each) before a first run measured anything; this source compiles
// in one NVRTC call per precision (xcorr_app/registration/_peak_math.py GROUPS).  The NumPy code of
// those modules stays the reference: the same float64 arithmetic in the same order (products
// through __dmul_rn so that the compiler cannot contract them into FMAs, which NumPy does not do),
// the same NaN, inf and border rules.  Only log, hypot and the DFT's phases may differ from the
// host's by an ulp.
//
//  * subpixel_shifts: xcorr_app/registration/_peaks.py refined_shifts (and subpixel_fit2d,
//    subpixel_parabolic, subpixel_gaussian): the 3x3 fit (or the 3-point fits) around each integer
//    peak, one thread per frame.
//  * peaks_on_border: xcorr_app/registration/_peaks.py on_border.
//  * surface_argmax: xcorr_app/registration/_peaks.py peak_index (first maximum in row-major order,
//    the first NaN if any, as NumPy's argmax), with the value at the peak and, for
//    xcorr_app/registration/_fft_register.py fft_shifts, |x| of the circular correlation taken on
//    the fly and the signed (wrapped) shifts of signed_shifts.
//  * dft_matrices + upsampled_peaks: xcorr_app/registration/_fft_register.py refine_peak
//    (upsampled_dft, peak_index, the shift arithmetic) around cuBLAS matrix products (no
//    compilation).
//  * wrap_row_sums + wrap_totals: the two masked correlations of
//    xcorr_app/alignment/refine/_template.py periodic_frames (every tested frame in one launch
//    each); phase_ramps: its references moved by a fraction of a pixel (spectra for cuFFT's
//    inverse).
//  * edge_differences, periodic_smooth: xcorr_app/registration/_fft_register.py periodic_spectrum
//    (its edge differences, the subtraction of the smooth component); phase_cross_power:
//    xcorr_app/registration/_fft_register.py cross_power (phase); weighted_spectrum: fft_shifts'
//    low-pass of a reference spectrum.

#define NO_INDEX 0x7fffffffffffffffLL

__device__ __forceinline__ double M(double a, double b) { return __dmul_rn(a, b); }

__device__ __forceinline__ long long clip_ll(long long v, long long lo, long long hi) {
    return v < lo ? lo : (v > hi ? hi : v);  // np.clip (lo <= hi here)
}

// corr[y, x] of one surface as float64 (xcorr_app/registration/_peaks.py _gather); like CuPy's
// fancy indexing the flat index wraps around (it is always in range for the peaks the code finds)
template <typename T>
__device__ __forceinline__ double gather(const T* c, long long size, int wo, long long y,
                                         long long x) {
    long long k = (y * wo + x) % size;
    if (k < 0) k += size;
    return (double)c[k];
}

// xcorr_app/registration/_peaks.py _vertex: 0.5 * (cm - cp) / (cm - 2 c0 + cp) clipped to
// [-0.5, 0.5] where ok and the denominator is finite and negative, else 0; + 0.0 turns -0.0
// into 0.0
__device__ __forceinline__ double vertex(double cm, double c0, double cp, bool ok) {
    const double denom = (cm - M(2.0, c0)) + cp;
    ok = ok && denom < 0 && isfinite(denom);
    const double off = M(0.5, cm - cp) / (ok ? denom : -1.0);
    const double v = ok ? (off < -0.5 ? -0.5 : (off > 0.5 ? 0.5 : off)) : 0.0;  // NaN stays
    return v + 0.0;
}

// log, emitted once: one thread per frame does not need it inlined, and every inlined copy
// of the double-precision log costs NVRTC time on a first run
__device__ __noinline__ double log_d(double v) { return log(v); }

// xcorr_app/registration/_peaks.py _neighbours + _vertex / _gaussian_axis along rows (axis_rows) or
// columns (not inlined either, for the same reason)
template <typename T>
__device__ __noinline__ double axis3(const T* c, long long size, int ho, int wo, long long iy,
                                     long long ix, bool axis_rows, bool gaussian) {
    const long long n = axis_rows ? ho : wo;
    const long long pos = axis_rows ? iy : ix;
    const long long before = clip_ll(pos - 1, 0, n - 1), after = clip_ll(pos + 1, 0, n - 1);
    const double cm = axis_rows ? gather(c, size, wo, before, ix) : gather(c, size, wo, iy, before);
    const double cp = axis_rows ? gather(c, size, wo, after, ix) : gather(c, size, wo, iy, after);
    const double c0 = gather(c, size, wo, iy, ix);
    const bool inside = pos > 0 && pos < n - 1;
    if (gaussian && cm > 0 && c0 > 0 && cp > 0)
        return vertex(log_d(cm), log_d(c0), log_d(cp), inside);
    return vertex(cm, c0, cp, inside);
}

// (fy, fx) = (py, px) where ok and within a pixel, else the 3-point fits through the peak's
// row and column (xcorr_app/registration/_peaks.py _axis_fits)
template <typename T>
__device__ void fitted_or_axis3(const T* c, long long size, int ho, int wo, long long iy,
                                long long ix, bool lg, bool ok, double py, double px,
                                double& fy, double& fx) {
    ok = ok && fabs(px) <= 1 && fabs(py) <= 1;
    if (ok) {
        fy = py + 0.0;
        fx = px + 0.0;
    } else {
        fy = axis3(c, size, ho, wo, iy, ix, true, lg) + 0.0;
        fx = axis3(c, size, ho, wo, iy, ix, false, lg) + 0.0;
    }
}

// xcorr_app/registration/_peaks.py _window: the 3x3 neighbourhood of the peak (of log(corr) with
// lg); returns whether it lies inside the surface (and, with lg, is positive)
template <typename T>
__device__ bool window3(const T* c, long long size, int ho, int wo, long long iy, long long ix,
                        bool lg, double (&w)[3][3]) {
    bool inside = iy >= 1 && iy <= ho - 2 && ix >= 1 && ix <= wo - 2;
    const long long cy = clip_ll(iy, 1, ho - 2 > 1 ? ho - 2 : 1);
    const long long cx = clip_ll(ix, 1, wo - 2 > 1 ? wo - 2 : 1);
#pragma unroll
    for (int dy = 0; dy < 3; ++dy) {
#pragma unroll
        for (int dx = 0; dx < 3; ++dx) {
            double v = gather(c, size, wo, clip_ll(cy + dy - 1, 0, ho - 1),
                              clip_ll(cx + dx - 1, 0, wo - 1));
            if (lg) {
                inside = inside && v > 0;
                v = log_d(v > 0 ? v : 1.0);
            }
            w[dy][dx] = v;
        }
    }
    return inside;
}

// xcorr_app/registration/_peaks.py _free_vertex: the parabola's vertex, not clipped; ok narrowed to
// a finite maximum
__device__ __forceinline__ double free_vertex(double cm, double c0, double cp, bool& ok) {
    const double denom = (cm - M(2.0, c0)) + cp;
    ok = ok && denom < 0 && isfinite(denom);
    return M(0.5, cm - cp) / (ok ? denom : -1.0);
}

// xcorr_app/registration/_peaks.py _ridge_fit: the 3-point fits along the three rows and three
// columns, their lines intersected, falling back to the fits through the middle row and column
template <typename T>
__device__ void ridge3(const T* c, long long size, int ho, int wo, long long iy, long long ix,
                       bool lg, double& fy, double& fx) {
    double w[3][3];
    bool ok = window3(c, size, ho, wo, iy, ix, lg, w);
    double rx[3], cy[3];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        rx[k] = free_vertex(w[k][0], w[k][1], w[k][2], ok);
        cy[k] = free_vertex(w[0][k], w[1][k], w[2][k], ok);
    }
    const double sx = (rx[2] - rx[0]) / 2, sy = (cy[2] - cy[0]) / 2;
    const double den = 1.0 - M(sx, sy);
    ok = ok && den > 0.1;
    const double px = (rx[1] + M(sx, cy[1])) / (ok ? den : 1.0);
    const double py = cy[1] + M(sy, px);
    fitted_or_axis3(c, size, ho, wo, iy, ix, lg, ok, py, px, fy, fx);
}

// xcorr_app/registration/_peaks.py subpixel_fit2d: least-squares paraboloid over the 3x3
// neighbourhood (of log(corr) with lg), falling back to the 3-point fits through the middle row and
// column
template <typename T>
__device__ void fit2d(const T* c, long long size, int ho, int wo, long long iy, long long ix,
                      bool lg, double& fy, double& fx) {
    double w[3][3];
    const bool inside = window3(c, size, ho, wo, iy, ix, lg, w);
    double col[3], row[3];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        col[k] = (w[0][k] + w[1][k]) + w[2][k];
        row[k] = (w[k][0] + w[k][1]) + w[k][2];
    }
    const double b = (col[2] - col[0]) / 6, cc = (row[2] - row[0]) / 6;
    const double d = ((col[2] + col[0]) - M(2.0, col[1])) / 6;
    const double g = ((row[2] + row[0]) - M(2.0, row[1])) / 6;
    const double e = (((w[2][2] - w[0][2]) - w[2][0]) + w[0][0]) / 4;
    const double det = M(M(4.0, d), g) - M(e, e);
    bool ok = inside && d < 0 && g < 0 && det > 0;
    const double safe = ok ? det : 1.0;
    const double px = (M(e, cc) - M(M(2.0, g), b)) / safe;
    const double py = (M(e, b) - M(M(2.0, d), cc)) / safe;
    fitted_or_axis3(c, size, ho, wo, iy, ix, lg, ok, py, px, fy, fx);
}

// xcorr_app/registration/_peaks.py refined_shifts: out[f] = (iy - oy + fy, ix - ox + fx) with
// absolute, else the offsets (fy, fx) of the subpixel_* functions.  method: 0 none,
// 1 parabolic3, 2 gaussian3, 3 parabolic (fit2d), 4 gaussian (fit2d of the logs).  One thread
// per surface.
template <typename T>
__global__ void subpixel_shifts(const T* __restrict__ corr, const long long* __restrict__ iy,
                                const long long* __restrict__ ix, long long n, int ho, int wo,
                                int method, double oy, double ox, int absolute,
                                double* __restrict__ out) {
    const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n) return;
    const long long size = (long long)ho * wo;
    const T* c = corr + f * size;
    const long long y = iy[f], x = ix[f];
    double fy = 0.0, fx = 0.0;
    if (method == 1 || method == 2) {
        ridge3(c, size, ho, wo, y, x, method == 2, fy, fx);
    } else if (method >= 3) {
        fit2d(c, size, ho, wo, y, x, method == 4, fy, fx);
    }
    if (absolute) {
        out[2 * f] = ((double)y - oy) + fy;
        out[2 * f + 1] = ((double)x - ox) + fx;
    } else {
        out[2 * f] = fy;
        out[2 * f + 1] = fx;
    }
}

// xcorr_app/registration/_peaks.py on_border:
// (|iy - oy| >= by and by > 0) or (|ix - ox| >= bx and bx > 0)
__global__ void peaks_on_border(const long long* __restrict__ iy,
                                const long long* __restrict__ ix, long long n, long long oy,
                                long long ox, long long by, long long bx,
                                bool* __restrict__ out) {
    const long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= n) return;
    const long long ky = llabs(iy[f] - oy), kx = llabs(ix[f] - ox);
    out[f] = (ky >= by && by > 0) || (kx >= bx && bx > 0);
}

// ---- first maximum of each surface -------------------------------------------------------

template <typename T> struct Real { typedef T type; };
template <> struct Real<float2> { typedef float type; };
template <> struct Real<double2> { typedef double type; };

// the value compared: x, |x| (ABS), or the magnitude of a complex (CuPy's and NumPy's abs: hypot)
template <bool ABS> __device__ __forceinline__ float value_of(float v) {
    return ABS ? fabsf(v) : v;
}
template <bool ABS> __device__ __forceinline__ double value_of(double v) {
    return ABS ? fabs(v) : v;
}
template <bool ABS> __device__ __forceinline__ float value_of(float2 v) {
    return hypotf(v.x, v.y);
}
template <bool ABS> __device__ __forceinline__ double value_of(double2 v) {
    return hypot(v.x, v.y);
}

__device__ __forceinline__ float neg_inf(float) { return __int_as_float(0xff800000); }
__device__ __forceinline__ double neg_inf(double) {
    return __longlong_as_double((long long)0xfff0000000000000ULL);
}

// NumPy's argmax order: a NaN beats everything (the first NaN wins), then the larger value,
// then the smaller index
template <typename V>
__device__ __forceinline__ bool better(V v, long long i, V bv, long long bi) {
    const bool n1 = isnan(v), n2 = isnan(bv);
    if (n1 || n2) return n1 && (!n2 || i < bi);
    return v > bv || (v == bv && i < bi);
}

// the block's best (value, index); valid in thread 0
template <typename V, int THREADS>
__device__ __forceinline__ void block_argmax(V& v, long long& i) {
    __shared__ V sv[THREADS / 32];
    __shared__ long long si[THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const V ov = __shfl_down_sync(0xffffffffu, v, o);
        const long long oi = __shfl_down_sync(0xffffffffu, i, o);
        if (better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    if ((threadIdx.x & 31) == 0) {
        sv[threadIdx.x >> 5] = v;
        si[threadIdx.x >> 5] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < THREADS / 32; ++k) {
            if (better(sv[k], si[k], v, i)) {
                v = sv[k];
                i = si[k];
            }
        }
    }
}

// xcorr_app/registration/_peaks.py peak_index (iy, ix) and the value there as float64; with
// copies > 0 also xcorr_app/registration/_fft_register.py signed_shifts of (iy, ix) for sizes
// (h, w) as float64 (N, 2), written `copies` times (shifts[c * 2N + 2f + axis]).  grid
// (SLICES, G), block THREADS: block (s, g) scans slice s of surface f = first + g (one block per
// surface left 68 of 132 SMs idle on a 64-frame chunk, at a fifth of the memory's bandwidth);
// with SLICES > 1 each block's best goes to part[2 (g SLICES + s) ..] (the value's bits, the
// index) and the surface's last block to finish (counted in done[g], set back to 0) takes the
// best of them: better() orders (value, index) totally, so the answer does not depend on which
// block is last.
template <typename T, bool ABS, int THREADS>
__global__ void surface_argmax(const T* __restrict__ corr, int h, int w,
                               long long* __restrict__ iy, long long* __restrict__ ix,
                               double* __restrict__ value, double* __restrict__ shifts,
                               int copies, long long first, long long n,
                               long long* __restrict__ part, int* __restrict__ done) {
    typedef typename Real<T>::type V;
    const long long size = (long long)h * w, g = blockIdx.y, f = first + g;
    const int slices = gridDim.x;
    const long long per = (size + slices - 1) / slices;
    const long long begin = per * blockIdx.x, end = min(size, begin + per);
    const T* c = corr + f * size;
    V best = neg_inf(V());
    long long at = NO_INDEX;
    long long k = begin + threadIdx.x;
    for (; k + 3 * THREADS < end; k += 4 * THREADS) {  // four loads in flight a thread
        V v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = value_of<ABS>(c[k + u * THREADS]);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            if (better(v[u], k + u * THREADS, best, at)) {
                best = v[u];
                at = k + u * THREADS;
            }
        }
    }
    for (; k < end; k += THREADS) {
        const V v = value_of<ABS>(c[k]);
        if (better(v, k, best, at)) {
            best = v;
            at = k;
        }
    }
    block_argmax<V, THREADS>(best, at);
    if (slices > 1) {
        __shared__ bool last;
        if (threadIdx.x == 0) {
            long long* mine = part + 2 * (g * slices + blockIdx.x);
            __stcg(mine, __double_as_longlong((double)best));
            __stcg(mine + 1, at);
            __threadfence();  // the slice's best reaches L2 before the count says it is there
            last = atomicAdd(done + g, 1) == slices - 1;
            if (last) done[g] = 0;
        }
        __syncthreads();
        if (!last) return;
        if (threadIdx.x == 0) {
            __threadfence();
            const long long* all = part + 2 * g * slices;
            for (int s = 0; s < slices; ++s) {
                const V v = (V)__longlong_as_double(__ldcg(all + 2 * s));
                const long long i = __ldcg(all + 2 * s + 1);
                if (better(v, i, best, at)) {
                    best = v;
                    at = i;
                }
            }
        }
    }
    if (threadIdx.x == 0) {
        const long long y = at / w, x = at % w;
        iy[f] = y;
        ix[f] = x;
        value[f] = (double)best;
        const double sy = (double)(y > h / 2 ? y - h : y), sx = (double)(x > w / 2 ? x - w : x);
        for (int k = 0; k < copies; ++k) {
            shifts[k * 2 * n + 2 * f] = sy;
            shifts[k * 2 * n + 2 * f + 1] = sx;
        }
    }
}

// ---- refine_peak: the upsampled DFT around the peak ---------------------------------------

// np.fft.fftfreq(n, u)[k] = k_signed * (1.0 / (n * u))
__device__ __forceinline__ double fftfreq(long long k, long long n, double u) {
    const long long half = (n - 1) / 2 + 1;
    return (double)(k < half ? k : k - n) * (1.0 / M((double)n, u));
}

template <typename C> __device__ __forceinline__ C make_c(double re, double im);
template <> __device__ __forceinline__ float2 make_c<float2>(double re, double im) {
    float2 z;
    z.x = (float)re;
    z.y = (float)im;
    return z;
}
template <> __device__ __forceinline__ double2 make_c<double2>(double re, double im) {
    double2 z;
    z.x = re;
    z.y = im;
    return z;
}

// exp(i pi t), conjugated with conj.  NumPy rounds theta = -2 pi (r - oy) fy[k] to double
// before exp; sincospi of t = -2 (r - oy) fy[k] (exact but for one rounding) is the sine and
// cosine of the exact angle instead (a difference of an ulp of theta at most, far below the
// complex64 rounding), and needs no argument reduction (sincos's slow path uses a stack frame)
template <typename C>
__device__ __forceinline__ C phasor(double t, bool conj) {
    double s, co;
    sincospi(t, &s, &co);
    return make_c<C>(co, conj ? -s : s);
}

// The matrices of xcorr_app/registration/_fft_register.py upsampled_dft(conj(P), region, u,
// offsets, full_width) for the cross-power spectra P (N, H, WC), built for products with P itself
// (no conj(P) pass):
//   ky[r, k] = exp(-2 pi i (r - oy) fy[k]),  kx[k, c] = exp(-2 pi i fx[k] (c - ox)),
//   fy = fftfreq(H, u), fx = fftfreq(W, u), (oy, ox) = dftshift - round(s * u) / u * u,
// upsampled_dft = ky conj(P) kx[:WC] (+ the mirrored columns of a half spectrum)
//   = conj(kyc P kxc) + (kyn P) kxm with
//   kyc = conj(ky), kxc = conj(kx[:WC]), kyn[r, j] = ky[r, -j mod H],
//   kxm[k, c] = kx[W - k, c] for 1 <= k <= W - WC (the mirrored columns), 0 for other k < WC.
// Also rounded[f] = round(s * u) / u.  Element-wise, grid-stride.
template <typename C>
__global__ void dft_matrices(const double* __restrict__ shifts, long long n, int h, int w,
                             int wc, int rh, int rw, double u, long long dftshift, int mirrored,
                             C* __restrict__ kyc, C* __restrict__ kxc, C* __restrict__ kyn,
                             C* __restrict__ kxm, double* __restrict__ rounded) {
    const long long sy_ = (long long)rh * h, sx_ = (long long)wc * rw;
    const long long per = (sy_ + sx_) * (mirrored > 0 ? 2 : 1);
    const long long total = n * per;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long f = i / per;
        long long j = i % per;
        const double ry = rint(M(shifts[2 * f], u)) / u;
        const double rx = rint(M(shifts[2 * f + 1], u)) / u;
        const double oy = (double)dftshift - M(ry, u), ox = (double)dftshift - M(rx, u);
        if (j == 0) {
            rounded[2 * f] = ry;
            rounded[2 * f + 1] = rx;
        }
        const bool second = j >= sy_ + sx_;  // kyn, kxm
        if (second) j -= sy_ + sx_;
        if (j < sy_) {
            const long long r = j / h, k0 = j % h;
            const long long k = second ? (k0 == 0 ? 0 : h - k0) : k0;
            const double t = M(M(-2.0, (double)r - oy), fftfreq(k, h, u));
            (second ? kyn : kyc)[f * sy_ + j] = phasor<C>(t, !second);
        } else {
            j -= sy_;
            const long long k = j / rw, col = j % rw;
            if (!second) {
                const double t = M(M(-2.0, fftfreq(k, w, u)), (double)col - ox);
                kxc[f * sx_ + j] = phasor<C>(t, true);
            } else if (k >= 1 && k <= mirrored) {
                const double t = M(M(-2.0, fftfreq(w - k, w, u)), (double)col - ox);
                kxm[f * sx_ + j] = phasor<C>(t, false);
            } else {
                kxm[f * sx_ + j] = make_c<C>(0.0, 0.0);
            }
        }
    }
}

// The rest of refine_peak: local = |conj(a) + b| (b only with has_b) per frame (rh, rw), its
// first maximum (uy, ux) (peak_index), shifts = rounded + ((uy, ux) - dftshift) / u and
// peak = max(local) (float32 for complex64) / scale.  grid (N), block THREADS.
template <typename C, int THREADS>
__global__ void upsampled_peaks(const C* __restrict__ a, const C* __restrict__ b, int has_b,
                                int rh, int rw, const double* __restrict__ rounded, double u,
                                long long dftshift, double scale, double* __restrict__ shifts,
                                double* __restrict__ peak) {
    typedef typename Real<C>::type V;
    const long long size = (long long)rh * rw;
    const long long f = blockIdx.x;
    const C* af = a + f * size;
    const C* bf = b + f * size;
    V best = neg_inf(V());
    long long at = NO_INDEX;
    for (long long k = threadIdx.x; k < size; k += THREADS) {
        C z = af[k];
        z.y = -z.y;
        if (has_b) {
            const C zb = bf[k];
            z.x = z.x + zb.x;
            z.y = z.y + zb.y;
        }
        const V v = value_of<true>(z);
        if (better(v, k, best, at)) {
            best = v;
            at = k;
        }
    }
    block_argmax<V, THREADS>(best, at);
    if (threadIdx.x == 0) {
        const long long uy = at / rw, ux = at % rw;
        shifts[2 * f] = rounded[2 * f] + (double)(uy - dftshift) / u;
        shifts[2 * f + 1] = rounded[2 * f + 1] + (double)(ux - dftshift) / u;
        peak[f] = (double)best / scale;
    }
}

// ---- xcorr_app/alignment/refine/_template.py periodic_frames: a frame against the reference
// moved circularly ----------------------------------------------------------------------------

// The sums of xcorr_app/alignment/refine/_template.py _correlation(a, b, mask) for both masks at
// once, for frame f = blockIdx.y of a (F, H, W) against
// b[y, x] = ref[(y + iy) mod H, (x + ix) mod W] (np.roll(ref, (-iy, -ix))),
// (iy, ix) = shifts[2 f], shifts[2 f + 1], ref starting at f * ref_stride (0: one reference for
// every frame): mask 0 the pixels whose (y + iy, x + ix) lies inside the frame, mask 1 those that
// wrapped around.  Per row (grid (H, F)): stage 0 writes [count, sum a, sum b] of each mask,
// stage 1 (means + 6 f = [ma0, mb0, ma1, mb1]) [sum am bm, sum am^2, sum bm^2] with am = a - ma;
// rows[(f H + y) * 6 + 3 * mask + q], float64.
template <int THREADS>
__global__ void wrap_row_sums(const float* __restrict__ frames, const float* __restrict__ refs,
                              long long ref_stride, int h, int w, const int* __restrict__ shifts,
                              int stage, const double* __restrict__ means,
                              double* __restrict__ rows) {
    const int y = blockIdx.x, f = blockIdx.y;
    const float* a = frames + (long long)f * h * w;
    const float* ref = refs + f * ref_stride;
    const int iy = shifts[2 * f], ix = shifts[2 * f + 1];
    const int yy = y + iy;
    const bool row_wraps = yy < 0 || yy >= h;
    const int ry = ((yy % h) + h) % h;
    double s[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    double ma0 = 0, mb0 = 0, ma1 = 0, mb1 = 0;
    if (stage) {
        ma0 = means[6 * f];
        mb0 = means[6 * f + 1];
        ma1 = means[6 * f + 2];
        mb1 = means[6 * f + 3];
    }
    for (int x = threadIdx.x; x < w; x += THREADS) {
        const int xx = x + ix;
        const bool wraps = row_wraps || xx < 0 || xx >= w;
        const double va = a[(long long)y * w + x];
        const double vb = ref[(long long)ry * w + (((xx % w) + w) % w)];
        double p0 = 1.0, p1 = va, p2 = vb;  // stage 0
        if (stage) {
            const double am = va - (wraps ? ma1 : ma0), bm = vb - (wraps ? mb1 : mb0);
            p0 = M(am, bm);
            p1 = M(am, am);
            p2 = M(bm, bm);
        }
        if (wraps) {  // constant indices: the sums stay in registers
            s[3] += p0;
            s[4] += p1;
            s[5] += p2;
        } else {
            s[0] += p0;
            s[1] += p1;
            s[2] += p2;
        }
    }
    __shared__ double part[THREADS / 32][6];
#pragma unroll
    for (int q = 0; q < 6; ++q) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s[q] += __shfl_down_sync(0xffffffffu, s[q], off);
    }
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int q = 0; q < 6; ++q) part[threadIdx.x >> 5][q] = s[q];
    }
    __syncthreads();
    if (threadIdx.x < 6) {
        double t = 0.0;
        for (int k = 0; k < THREADS / 32; ++k) t += part[k][threadIdx.x];
        rows[((long long)f * h + y) * 6 + threadIdx.x] = t;
    }
}

// The rows' sums of frame f = blockIdx.x, one warp (32 threads): lane l sums the rows l, l +
// 32, ... in order, then the lanes' sums are added across the warp.  (One thread over the 512
// rows in order was slower.)  Stage 0: out + 6 f = [ma0, mb0, ma1, mb1, k0, k1] (the masked
// means and counts).  Stage 1 (counts = stage 0's out): out[2 f], out[2 f + 1] = the masks'
// correlations num / sqrt(saa sbb), 0 where the mask has fewer than 2 pixels or the
// denominator is not > 0 (xcorr_app/alignment/refine/_template.py _correlation).
__global__ void wrap_totals(const double* __restrict__ rows, int h, int stage,
                            const double* __restrict__ counts, double* __restrict__ out) {
    const int f = blockIdx.x, lane = threadIdx.x;
    if (lane >= 32) return;
    double t[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int y = lane; y < h; y += 32) {
#pragma unroll
        for (int q = 0; q < 6; ++q) t[q] += rows[((long long)f * h + y) * 6 + q];
    }
#pragma unroll
    for (int q = 0; q < 6; ++q) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) t[q] += __shfl_down_sync(0xffffffffu, t[q], off);
    }
    if (lane != 0) return;
    if (stage == 0) {
        for (int m = 0; m < 2; ++m) {
            const double k = t[3 * m];
            out[6 * f + 2 * m] = k > 0 ? t[3 * m + 1] / k : 0.0;
            out[6 * f + 2 * m + 1] = k > 0 ? t[3 * m + 2] / k : 0.0;
            out[6 * f + 4 + m] = k;
        }
    } else {
        for (int m = 0; m < 2; ++m) {
            const double den = sqrt(M(t[3 * m + 1], t[3 * m + 2]));
            out[2 * f + m] = (counts[6 * f + 4 + m] < 2 || !(den > 0)) ? 0.0 : t[3 * m] / den;
        }
    }
}

// xcorr_app/alignment/refine/_template.py fractional_references: the reference's half spectrum spec
// (H, W2 = W / 2 + 1, of rfft2) times exp(2 pi i ky fy) exp(2 pi i kx fx) for frame f = blockIdx.y,
// (fy, fx) = frac[2 f], frac[2 f + 1], ky and kx the frequencies of np.fft.fftfreq(H) and
// rfftfreq(W), at a Nyquist frequency (even H or W) cos(pi f) instead: the spectrum of the
// reference moved circularly by that fraction of a pixel, kept Hermitian (a real image), times
// scale (the unnormalized inverse's 1/n).  out (F, H, W2).
__global__ void phase_ramps(const float2* __restrict__ spec, int h, int w, int w2,
                            const double* __restrict__ frac, double scale,
                            float2* __restrict__ out) {
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int f = blockIdx.y;
    if (k >= (long long)h * w2) return;
    const int y = (int)(k / w2), x = (int)(k % w2);
    const double fy = frac[2 * f], fx = frac[2 * f + 1];
    double sy = 0.0, cy, sx = 0.0, cx;
    if (h % 2 == 0 && 2 * y == h)
        cy = cospi(fy);
    else
        sincospi(M(2.0, M((double)(y < (h + 1) / 2 ? y : y - h) / h, fy)), &sy, &cy);
    if (w % 2 == 0 && 2 * x == w)
        cx = cospi(fx);
    else
        sincospi(M(2.0, M((double)x / w, fx)), &sx, &cx);
    const double re = M(cy, cx) - M(sy, sx), im = M(sy, cx) + M(cy, sx);
    const float2 v = spec[k];
    const float c = (float)M(re, scale), sn = (float)M(im, scale);  // (scale: an inverse's 1/n)
    out[(long long)f * h * w2 + k] = make_float2(v.x * c - v.y * sn, v.x * sn + v.y * c);
}

// xcorr_app/registration/_fft_register.py periodic_spectrum's edge differences of images (N, H, W):
// a[f, x] = img[f, H - 1, x] - img[f, 0, x] and b[f, y] = img[f, y, W - 1] - img[f, y, 0].
// Element-wise, grid-stride.
template <typename T>
__global__ void edge_differences(const T* __restrict__ img, long long n, int h, int w,
                                 T* __restrict__ a, T* __restrict__ b) {
    const long long per = (long long)w + h, total = n * per;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long f = i / per, j = i % per;
        const T* im = img + f * h * w;
        if (j < w) {
            a[f * w + j] = im[(long long)(h - 1) * w + j] - im[j];
        } else {
            const long long y = j - w;
            b[f * h + y] = im[y * w + w - 1] - im[y * w];
        }
    }
}

// xcorr_app/registration/_fft_register.py periodic_spectrum: f -= the spectrum of the smooth
// component, from the half spectra (rfft) of the edge differences, a (rows n * (w/2+1) + r)
// and b (n * (h/2+1) + q), the other halves by conjugate symmetry (real edges); one element of
// f (n, h, wk) per step; f[n, 0, 0] is kept (the smooth component has no mean).
template <typename C, typename R>
__global__ void periodic_smooth(const C* __restrict__ a, const C* __restrict__ b, int h, int w,
                                int wk, long long total, C* __restrict__ f) {
    const int ah = w / 2 + 1, bh = h / 2 + 1;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i % wk), q = (int)((i / wk) % h);
        const long long n = i / ((long long)wk * h);
        R sq, cq, sr, cr;  // sincospi: no large-argument reduction (it used a stack frame)
        sincospi((R)q / h, &sq, &cq);
        sincospi((R)r / w, &sr, &cr);
        C av = a[n * ah + (r < ah ? r : w - r)], bv = b[n * bh + (q < bh ? q : h - q)];
        if (r >= ah) av.y = -av.y;
        if (q >= bh) bv.y = -bv.y;
        // av * (2 sq^2, -2 sq cq) + bv * (2 sr^2, -2 sr cr), in half angles (no cancellation)
        const R ar = 2 * sq * sq, ai = -2 * sq * cq, br = 2 * sr * sr, bi = -2 * sr * cr;
        const R sm_re = (av.x * ar - av.y * ai) + (bv.x * br - bv.y * bi);
        const R sm_im = (av.x * ai + av.y * ar) + (bv.x * bi + bv.y * br);
        const R den = -4 * (sq * sq + sr * sr);
        if (q != 0 || r != 0) {
            C v = f[i];
            v.x -= sm_re / den;
            v.y -= sm_im / den;
            f[i] = v;
        }
    }
}

// xcorr_app/registration/_fft_register.py cross_power with phase: f = ref * conj(f), divided by
// max(|f|, floor), then times weights (where not null: the FFT check's low-pass, as the CPU's later
// "*="); ref and weights are broadcast over the leading axes of f (ref_size elements repeat).
template <typename C, typename R>
__global__ void phase_cross_power(const C* __restrict__ ref, long long ref_size,
                                  C* __restrict__ f, long long total, R floor,
                                  const R* __restrict__ weights) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const C r = ref[i % ref_size];
        C v = f[i];
        const R re = r.x * v.x + r.y * v.y, im = r.y * v.x - r.x * v.y;
        const R mag = hypot(re, im);
        const R d = mag > floor ? mag : floor;
        v.x = re / d;
        v.y = im / d;
        if (weights != nullptr) {
            const R wgt = weights[i % ref_size];
            v.x *= wgt;
            v.y *= wgt;
        }
        f[i] = v;
    }
}

// out = spec * weights (real weights, the spectrum's trailing elements, broadcast over its leading
// axes): xcorr_app/registration/_fft_register.py fft_shifts' low-pass of the reference spectrum
// (the CPU's complex-times-real product).
template <typename C, typename R>
__global__ void weighted_spectrum(const C* __restrict__ spec, long long total,
                                  const R* __restrict__ weights, long long size,
                                  C* __restrict__ out) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const R w = weights[i % size];
        C v = spec[i];
        v.x *= w;
        v.y *= w;
        out[i] = v;
    }
}
