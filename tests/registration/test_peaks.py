"""Tests of xcorr_app.registration._peaks on NumPy (and on CuPy when a GPU is usable)."""

import numpy as np
import pytest

from xcorr_app.backend import to_numpy
from xcorr_app.errors import XcorrError
from xcorr_app.registration import find_shifts, on_border
from xcorr_app.registration._peaks import (_axis_fits, confidence, peak_index, subpixel_gaussian,
                                           subpixel_parabolic)

BATCH, H, W = (3, 5), 15, 17


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def _centres(seed, shape=BATCH):
    """Random sub-pixel peak positions, at least 3 px inside, never on a half-pixel tie."""
    rng = np.random.default_rng(seed)
    iy = rng.integers(3, H - 3, shape)
    ix = rng.integers(3, W - 3, shape)
    return iy + rng.uniform(-0.45, 0.45, shape), ix + rng.uniform(-0.45, 0.45, shape), rng


def _grid(py, px):
    yy = np.arange(H)[:, None] - py[..., None, None]
    xx = np.arange(W)[None, :] - px[..., None, None]
    return yy, xx


def _parabolas(seed):
    py, px, rng = _centres(seed)
    yy, xx = _grid(py, px)
    a = rng.uniform(0.5, 2.0, BATCH)[..., None, None]
    b = rng.uniform(0.5, 2.0, BATCH)[..., None, None]
    return 100.0 - a * yy**2 - b * xx**2, py, px


def _gaussians(seed):
    py, px, rng = _centres(seed)
    yy, xx = _grid(py, px)
    sy = rng.uniform(1.0, 3.0, BATCH)[..., None, None]
    sx = rng.uniform(1.0, 3.0, BATCH)[..., None, None]
    amp = rng.uniform(0.5, 5.0, BATCH)[..., None, None]
    return amp * np.exp(-(yy**2 / (2 * sy**2) + xx**2 / (2 * sx**2))), py, px


def test_peak_index_batched(xp):
    corr, py, px = _gaussians(0)
    iy, ix = peak_index(xp.asarray(corr))
    assert type(iy) is type(xp.asarray(corr)) and iy.shape == BATCH and iy.dtype == np.int64
    np.testing.assert_array_equal(to_numpy(iy), np.round(py))
    np.testing.assert_array_equal(to_numpy(ix), np.round(px))


def test_parabolic_recovers_exact_parabola(xp):
    corr, py, px = _parabolas(1)
    c = xp.asarray(corr)
    iy, ix = peak_index(c)
    fy, fx = subpixel_parabolic(c, iy, ix)
    assert fy.shape == BATCH and fy.dtype == np.float64
    assert np.all(np.abs(to_numpy(fy)) <= 0.5) and np.all(np.abs(to_numpy(fx)) <= 0.5)
    np.testing.assert_allclose(to_numpy(iy + fy), py, atol=1e-9)
    np.testing.assert_allclose(to_numpy(ix + fx), px, atol=1e-9)


def test_gaussian_recovers_exact_gaussian(xp):
    corr, py, px = _gaussians(2)
    c = xp.asarray(corr)
    iy, ix = peak_index(c)
    fy, fx = subpixel_gaussian(c, iy, ix)
    np.testing.assert_allclose(to_numpy(iy + fy), py, atol=1e-6)
    np.testing.assert_allclose(to_numpy(ix + fx), px, atol=1e-6)
    # the parabola is only approximate on a Gaussian, but stays within half a pixel
    gy, _ = subpixel_parabolic(c, iy, ix)
    assert np.all(np.abs(to_numpy(gy)) <= 0.5)
    assert np.max(np.abs(to_numpy(iy + gy) - py)) > 1e-4


def _tilted(seed):
    """Gaussians elongated along a diagonal (correlation 0.6-0.8 between the axes) and the
    paraboloids of their logarithms."""
    py, px, rng = _centres(seed)
    yy, xx = _grid(py, px)
    rho = rng.uniform(0.6, 0.8, BATCH)[..., None, None] * rng.choice([-1, 1], BATCH)[..., None, None]
    q = (yy**2 - 2 * rho * yy * xx + xx**2) / (2 * 1.5**2 * (1 - rho**2))
    return np.exp(-q), 50.0 - q, py, px


def test_three_point_fits_follow_a_peak_elongated_along_a_diagonal(xp):
    """The rows' and the columns' 3-point fits, intersected, are exact on a tilted Gaussian
    (and on a tilted paraboloid); the classic fits through the middle row and column, the
    fallback, are biased there."""
    gauss, para, py, px = _tilted(5)
    for corr, fit, log in ((gauss, subpixel_gaussian, True), (para, subpixel_parabolic, False)):
        c = xp.asarray(corr)
        iy, ix = peak_index(c)
        fy, fx = fit(c, iy, ix)
        np.testing.assert_allclose(to_numpy(iy + fy), py, atol=1e-6)
        np.testing.assert_allclose(to_numpy(ix + fx), px, atol=1e-6)
        by, bx = _axis_fits(corr, *peak_index(corr), log)
        assert np.hypot(to_numpy(iy) + by - py, to_numpy(ix) + bx - px).max() > 0.05


def test_three_point_fits_fall_back_to_the_middle_row_and_column(xp):
    """Lines near parallel (a ridge along the diagonal): the classic fits, within half a pixel."""
    yy, xx = np.mgrid[:H, :W] - np.array([7.2, 8.3])[:, None, None]
    corr = np.exp(-((yy - xx) ** 2 / 0.5 + (yy + xx) ** 2 / 400.0))[None]
    iy, ix = peak_index(corr)
    for fit, log in ((subpixel_gaussian, True), (subpixel_parabolic, False)):
        got = fit(xp.asarray(corr), xp.asarray(iy), xp.asarray(ix))
        for g, want in zip(got, _axis_fits(corr, iy, ix, log)):
            np.testing.assert_allclose(to_numpy(g), want, atol=1e-12)
            assert np.all(np.abs(want) <= 0.5)


def test_gaussian_falls_back_to_parabolic_on_non_positive_values(xp):
    corr, _, _ = _parabolas(3)
    c = xp.asarray(corr - 100.0)  # all values <= 0: no logarithm possible
    iy, ix = peak_index(c)
    for g, p in zip(subpixel_gaussian(c, iy, ix), subpixel_parabolic(c, iy, ix)):
        np.testing.assert_allclose(to_numpy(g), to_numpy(p), atol=1e-12)


def test_border_peaks_give_zero_offset(xp):
    corr = np.zeros((4, H, W))
    corr[0, 0, 5], corr[0, 1, 5] = 2.0, 1.0       # top row: no fy, fx from flat row -> 0
    corr[1, 7, W - 1], corr[1, 7, W - 2] = 2.0, 1.5  # right column
    corr[2, H - 1, 0] = 3.0                         # corner
    corr[3, 6, 6], corr[3, 6, 7], corr[3, 5, 6] = 2.0, 1.0, 0.5  # interior control
    c = xp.asarray(corr)
    iy, ix = peak_index(c)
    for f in (subpixel_parabolic, subpixel_gaussian):
        fy, fx = (to_numpy(a) for a in f(c, iy, ix))
        np.testing.assert_array_equal(fy[:3], 0.0)
        np.testing.assert_array_equal(fx[:3], 0.0)
        assert fy[3] < 0 < fx[3]


def test_constant_surface(xp):
    for value in (0.0, 3.5):
        c = xp.full((2, H, W), value)
        iy, ix = peak_index(c)
        assert to_numpy(iy).tolist() == [0, 0] and to_numpy(ix).tolist() == [0, 0]
        mid_y, mid_x = xp.full((2,), H // 2), xp.full((2,), W // 2)  # interior: flat fit
        for f in (subpixel_parabolic, subpixel_gaussian):
            for a in f(c, mid_y, mid_x):
                np.testing.assert_array_equal(to_numpy(a), 0.0)
        np.testing.assert_array_equal(to_numpy(confidence(c, iy, ix)), 1.0)
        np.testing.assert_array_equal(to_numpy(confidence(c, mid_y, mid_x)), 1.0)


def test_confidence_with_known_second_peak(xp):
    corr = np.zeros((2, 3, H, W))
    corr[..., 6, 8] = 5.0
    corr[..., 7, 9] = 4.5                        # inside the exclusion window: ignored
    corr[..., 12, 2] = np.array([1.0, 2.0, 2.5])  # second peak
    corr[1] -= 1.0                               # background -1: seconds 0, 1, 1.5
    c = xp.asarray(corr)
    iy, ix = peak_index(c)
    ratio = to_numpy(confidence(c, iy, ix, exclusion=2))
    assert ratio.shape == (2, 3) and ratio.dtype == np.float64
    np.testing.assert_allclose(ratio[0], [5.0, 2.5, 2.0])
    np.testing.assert_allclose(ratio[1], [np.inf, 4.0, 4.0 / 1.5])  # a zero second gives inf
    # the neighbour at 4.5 is a shoulder of the main peak, not a local maximum: exclusion=0
    # still finds the isolated second peak; a window covering everything gives inf
    np.testing.assert_allclose(to_numpy(confidence(c, iy, ix, exclusion=0))[0], [5.0, 2.5, 2.0])
    corr2 = corr.copy()
    corr2[..., 6, 11] = 4.8  # a separate local maximum just outside the window: it counts
    ratio2 = to_numpy(confidence(xp.asarray(corr2), iy, ix, exclusion=2))
    np.testing.assert_allclose(ratio2[0], 5.0 / 4.8)
    assert np.all(np.isinf(to_numpy(confidence(c, iy, ix, exclusion=max(H, W)))))


def test_find_shifts_with_origin(xp):
    corr, py, px = _gaussians(4)
    origin = (7, 4)
    c = xp.asarray(corr)
    shifts, peak, conf = find_shifts(c, origin, subpixel="gaussian")
    assert shifts.shape == BATCH + (2,) and shifts.dtype == np.float64
    assert peak.shape == BATCH and conf.shape == BATCH
    np.testing.assert_allclose(to_numpy(shifts)[..., 0], py - origin[0], atol=1e-6)
    np.testing.assert_allclose(to_numpy(shifts)[..., 1], px - origin[1], atol=1e-6)
    np.testing.assert_allclose(to_numpy(peak), corr.reshape(BATCH + (-1,)).max(-1))
    assert np.all(to_numpy(conf) > 1)

    whole, _, _ = find_shifts(c, origin, subpixel="none")
    np.testing.assert_array_equal(to_numpy(whole)[..., 0], np.round(py) - 7)
    np.testing.assert_array_equal(to_numpy(whole)[..., 1], np.round(px) - 4)
    para, _, _ = find_shifts(c, origin)
    np.testing.assert_allclose(to_numpy(para), to_numpy(shifts), atol=0.2)


def test_peaks_on_the_border_of_the_window(xp):
    """A maximum on the border of a bounded surface (a ramp rising out of the window) is
    told apart from an inner peak; an axis of bound 0 has no border."""
    b = 3
    yy, xx = np.mgrid[-b:b + 1, -b:b + 1].astype(np.float64)
    inner = np.exp(-((yy - 1) ** 2 + (xx + 2) ** 2))       # peak at (1, -2): inside
    ramp = np.exp(-((yy - 1) ** 2 + (xx - 6) ** 2) / 8)    # rises out of the window at dx = 3
    corner = np.exp(-((yy + 5) ** 2 + (xx + 5) ** 2) / 8)  # out past (-3, -3)
    c = xp.asarray(np.stack([inner, ramp, corner]))
    shifts, _, _, iy, ix = find_shifts(c, (b, b), subpixel="gaussian", return_index=True)
    assert to_numpy(on_border(iy, ix, (b, b), (b, b))).tolist() == [False, True, True]
    np.testing.assert_array_equal(to_numpy(shifts)[1:], [[1.0, 3.0], [-3.0, -3.0]])
    flat = xp.asarray(np.exp(-(xx[:1] - 5) ** 2))  # one row: bound (0, 3)
    _, _, _, iy, ix = find_shifts(flat, (0, b), return_index=True)
    assert bool(on_border(iy, ix, (0, b), (0, b)))
    assert not bool(on_border(iy, ix - 1, (0, b), (0, b)))


def test_single_surface_and_float32(xp):
    corr, py, px = _parabolas(5)
    c = xp.asarray(corr[0, 0].astype(np.float32))
    shifts, peak, conf = find_shifts(c, (0, 0))
    assert shifts.shape == (2,) and peak.shape == () and conf.shape == ()
    assert shifts.dtype == peak.dtype == conf.dtype == np.float64
    np.testing.assert_allclose(to_numpy(shifts), [py[0, 0], px[0, 0]], atol=1e-3)


def test_bad_arguments():
    with pytest.raises(XcorrError):
        find_shifts(np.zeros((4, 4)), (0, 0), subpixel="cubic")
    with pytest.raises(XcorrError):
        peak_index(np.zeros(5))


def _strict_maxima_by_definition(corr):
    """Every point >= its 8 neighbours (outside: -inf) and > one of them, compared one by one
    in float64 (the definition the fast separable version must match)."""
    c = np.pad(corr.astype(np.float64), [(0, 0)] * (corr.ndim - 2) + [(1, 1), (1, 1)],
               constant_values=-np.inf)
    ho, wo = corr.shape[-2:]
    out = np.zeros(corr.shape, bool)
    for idx in np.ndindex(*corr.shape):
        *b, y, x = idx
        centre = c[(*b, y + 1, x + 1)]
        nbs = [c[(*b, y + 1 + dy, x + 1 + dx)] for dy in (-1, 0, 1) for dx in (-1, 0, 1)
               if dy or dx]
        with np.errstate(invalid="ignore"):
            out[idx] = all(centre >= v for v in nbs) and any(centre > v for v in nbs)
    return out


@pytest.mark.parametrize("shape", [(1, 1), (3, 7, 5), (2, 1, 6), (2, 6, 1), (9, 13), (2, 33, 31)])
def test_strict_local_maxima_matches_definition(rng, shape):
    """Plateaus (small integers), NaN pixels and integer surfaces included."""
    from xcorr_app.registration._peaks import _strict_local_maxima

    plateaus = rng.integers(0, 3, shape).astype(np.float32)
    flat = plateaus.reshape(-1)
    flat[rng.integers(0, flat.size, max(1, flat.size // 7))] = np.nan
    for corr in (plateaus, rng.random(shape).astype(np.float32),
                 rng.integers(-5, 5, shape)):
        np.testing.assert_array_equal(_strict_local_maxima(corr, np),
                                      _strict_maxima_by_definition(corr))
