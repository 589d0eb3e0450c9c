"""The FFT home (``xcorr_app.correlate._fft``): its alias-free lengths, and the GPU path's crop
arithmetic ported to NumPy (CPU): the circular result gathered at ``(y + oy) mod fy,
(x + ox) mod fx`` and zeroed outside the overlapping shifts equals the direct sum.  The GPU
tests check the kernel itself."""

import numpy as np

from xcorr_app.correlate import _direct as reference
from xcorr_app.correlate import fft_geometry, next_smooth
from xcorr_app.correlate._fft import _crop_scalars, fft_length


def crop_port(circ, scalars):
    fy, fx, ho, wo, oy, ox, y_lo, y_hi, x_lo, x_hi = (int(v) for v in scalars)
    y, x = np.arange(ho)[:, None], np.arange(wo)[None, :]
    valid = (y >= y_lo) & (y < y_hi) & (x >= x_lo) & (x < x_hi)
    return np.where(valid, circ[..., (y + oy) % fy, (x + ox) % fx], 0.0)


def test_crop_of_the_circular_result_is_the_correlation(rng):
    for _ in range(150):
        ls = tuple(int(v) for v in rng.integers(1, 30, 2))
        rs = tuple(int(v) for v in rng.integers(1, 30, 2))
        bound = None if rng.random() < 0.4 else tuple(int(v) for v in rng.integers(0, 40, 2))
        left, right = rng.standard_normal(ls), rng.standard_normal((2,) + rs)
        geo = fft_geometry(ls, rs, bound)
        size, shape, scalars = geo.size, geo.shape, _crop_scalars(geo)
        circ = np.fft.irfft2(np.fft.rfft2(left, s=size) * np.conj(np.fft.rfft2(right, s=size)),
                             s=size)
        got = crop_port(circ, scalars)
        want = reference.xcorr_direct(left, right, "one_to_many", bound)
        assert got.shape == want.shape == (2,) + shape
        assert np.allclose(got, want, atol=1e-9), (ls, rs, bound)


def test_fft_length_is_alias_free_and_small():
    assert fft_length(1024, 1024, -8, 17) == 1080  # needs 1032, not 2047; 5-smooth
    assert fft_length(5, 3, -2, 7) >= 7  # full range of 5 and 3
    assert fft_length(7, 7, -100, 201) >= 13


def test_next_smooth_is_scipys_next_fast_len_for_real_transforms():
    from scipy.fft import next_fast_len

    for n in list(range(1, 3000)) + [4095, 4097, 6143, 8191, 10007, 65537]:
        assert next_smooth(n) == next_fast_len(n, real=True), n
