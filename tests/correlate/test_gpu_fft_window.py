"""The FFT correlation at a window of shifts (correlate/_fft_window.py,
kernels/correlate/fft_window.cu) against the float64 definition, and its limits."""

import numpy as np
import pytest

from xcorr_app.correlate import correlation_window, window_applies
from xcorr_app.correlate._fft_window import MAX_HALF_WIDTH
from xcorr_app.errors import InputError


def test_window_applies_limits():
    assert window_applies((540, 540), (-14, -14), (29, 29))
    assert window_applies((9, 11), (-1, -2), (3, 5))
    m = MAX_HALF_WIDTH
    assert window_applies((200, 200), (-m, -m), (2 * m + 1, 2 * m + 1))
    assert window_applies((200, 200), (0, 3), (m + 1, m - 2))  # one-sided
    assert not window_applies((200, 200), (-3, -m - 1), (7, 2 * m + 3))  # too wide
    assert not window_applies((200, 200), (-m - 1, 0), (m + 2, 3))  # too high
    assert not window_applies((200, 200), (0, 0), (3, m + 2))  # x = m + 1
    assert not window_applies((9, 7), (-1, -4), (3, 9))  # x and -x alias in 7 columns
    assert not window_applies((9, 11), (0, 0), (0, 3))


def reference_window(left, right, size, first, shape):
    """float64: the circular correlation of the zero-padded matrices at the window."""
    fl = np.fft.rfft2(left.astype(np.float64), s=size)
    fr = np.fft.rfft2(right.astype(np.float64), s=size)
    circ = np.fft.irfft2(fl * np.conj(fr), s=size)
    rows = (first[0] + np.arange(shape[0])) % size[0]
    cols = (first[1] + np.arange(shape[1])) % size[1]
    return circ[..., rows[:, None], cols[None, :]]


@pytest.mark.gpu
@pytest.mark.parametrize("frame,size,first,shape,frames,per_frame", [
    ((5, 7), (9, 11), (-1, -2), (3, 5), 3, False),          # smaller than a warp, odd fx
    ((5, 7), (9, 12), (-4, -5), (9, 11), 1, False),         # the whole plane's shifts, even fx
    ((37, 53), (45, 61), (-4, -3), (9, 4), 7, True),        # asymmetric x, a left each
    ((37, 53), (45, 61), (0, 0), (1, 1), 2, False),         # one shift
    ((130, 97), (150, 120), (-14, -14), (29, 29), 5, False),  # the aligner's +-14, > a block
    ((64, 300), (80, 320), (-19, -19), (39, 39), 3, False),   # the widest window
    ((100, 90), (128, 128), (2, -7), (18, 15), 2, False),     # rows of y > 0 only
    ((40, 33), (60, 50), (-19, 0), (5, 1), 40, False),        # y < 0 only, one column
])
def test_correlation_window_matches_float64(rng, frame, size, first, shape, frames,
                                            per_frame):
    import cupy as cp

    from xcorr_app.correlate import conj_product, irfftn_unnormalized, padded_spectra

    left = rng.standard_normal((frames if per_frame else 1,) + frame).astype(np.float32) + 0.5
    right = rng.standard_normal((frames,) + frame).astype(np.float32) + 0.5
    want = reference_window(left, right, size, first, shape)
    fl = padded_spectra(cp.asarray(left), size)
    fr = padded_spectra(cp.asarray(right), size)
    out = cp.full((frames,) + shape, np.nan, cp.float32)  # poisoned
    got = correlation_window(fl if per_frame else fl[0], fr, size, first, shape, out=out)
    assert got is out
    scale = np.sqrt((left.astype(np.float64) ** 2).sum(axis=(-2, -1))
                    * (right.astype(np.float64) ** 2).sum(axis=(-2, -1)))
    err = np.abs(got.get() - want).max(axis=(-2, -1))
    assert np.all(err <= 2e-6 * scale), (err / scale).max()
    # the same numbers as the whole inverse (the plan's other path) to float32 rounding
    prod = conj_product(fl if per_frame else fl[0], fr.copy(), scale=1.0 / (size[0] * size[1]))
    circ = irfftn_unnormalized(prod, size).get()
    rows = (first[0] + np.arange(shape[0])) % size[0]
    cols = (first[1] + np.arange(shape[1])) % size[1]
    np.testing.assert_allclose(got.get(), circ[:, rows[:, None], cols[None, :]],
                               atol=float(2e-6 * scale.max()), rtol=0)


@pytest.mark.gpu
def test_correlation_window_refuses_what_it_cannot_take():
    import cupy as cp

    f = cp.zeros((2, 40, 21), cp.complex64)
    with pytest.raises(InputError, match="window_applies"):
        correlation_window(f[0], f, (40, 40), (-30, -30), (61, 61))
    with pytest.raises(InputError, match="spectra of 40x21"):
        correlation_window(f[0], f[:, :, :20], (40, 40), (-1, -1), (3, 3))
    with pytest.raises(InputError, match="C-contiguous float32"):
        correlation_window(f[0], f, (40, 40), (-1, -1), (3, 3), out=cp.empty((2, 3, 3)))
    with pytest.raises(InputError, match="3 left spectra for 2"):
        correlation_window(cp.zeros((3, 40, 21), cp.complex64), f, (40, 40), (-1, -1), (3, 3))
