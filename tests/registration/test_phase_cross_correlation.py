"""xcorr_app.registration._phase_cross_correlation.phase_cross_correlation against skimage.registration's."""

import inspect
import warnings

import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage import data
from skimage.registration import phase_cross_correlation as sk_pcc

from xcorr_app.errors import InputError, XcorrError
from xcorr_app.registration import phase_cross_correlation

TOL = 1e-9  # float64: the same algorithm, only the summation order differs


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def _pair(rng, shape, noise=1e-3):
    """A smooth random image and a copy moved circularly by a random subpixel amount, plus noise
    (so the match is not perfect)."""
    ref = ndi.gaussian_filter(rng.random(shape), 2)
    move = rng.uniform(-8, 8, 2) * (np.asarray(shape) > 1)
    moving = np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(ref), move)).real
    return ref, moving + rng.normal(0, noise, shape), move


def _assert_same(got, want, tol=TOL, phase_tol=None):
    """Same values and the same types as skimage's (shift ndarray, numpy-scalar error/phasediff)."""
    (shift, error, phasediff), (w_shift, w_error, w_phasediff) = got, want
    assert type(shift) is np.ndarray and shift.shape == (2,) and shift.dtype == w_shift.dtype
    assert type(error) is type(w_error) and type(phasediff) is type(w_phasediff)
    np.testing.assert_allclose(shift, w_shift, rtol=0, atol=tol)
    np.testing.assert_allclose(error, w_error, rtol=tol, atol=tol)
    # phasediff is an angle: compare on the circle (+pi and -pi are the same)
    assert abs(np.angle(np.exp(1j * (phasediff - w_phasediff)))) <= (phase_tol or tol)


def _run(xp, ref, moving, **kw):
    return phase_cross_correlation(xp.asarray(ref), xp.asarray(moving), **kw)


@pytest.mark.parametrize("shape", [(33, 47), (64, 64), (17, 128), (1, 40), (40, 1)])
@pytest.mark.parametrize("upsample", [1, 10, 100, 2.5])
@pytest.mark.parametrize("space", ["real", "fourier"])
@pytest.mark.parametrize("normalization", ["phase", None])
def test_matches_skimage(xp, rng, shape, upsample, space, normalization):
    ref, moving, move = _pair(rng, shape)
    if space == "fourier":
        ref, moving = np.fft.fft2(ref), np.fft.fft2(moving)
    kw = dict(upsample_factor=upsample, space=space, normalization=normalization)
    got = _run(xp, ref, moving, **kw)
    _assert_same(got, sk_pcc(ref, moving, **kw))
    if min(shape) > 1:  # (noise moves the peak of a single row or column much further)
        np.testing.assert_allclose(got[0], -move, atol=1 / upsample + 0.1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.complex64, np.complex128])
def test_input_dtypes_give_skimage_types(xp, rng, dtype):
    """float32/complex64 in: single precision (float32 results) as in skimage; else float64."""
    ref, moving, _ = _pair(rng, (48, 40))
    ref, moving = ((a - a.min()) / np.ptp(a) * 250 for a in (ref, moving))
    ref, moving = ref.astype(dtype), moving.astype(dtype)
    single = dtype in (np.float32, np.complex64)
    for upsample in (1, 10, 100):
        want = sk_pcc(ref, moving, upsample_factor=upsample)
        got = _run(xp, ref, moving, upsample_factor=upsample)
        assert got[0].dtype == (np.float32 if single else np.float64)
        if single:  # float32 rounding can move the refined peak by one upsampled pixel
            np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1.01 / upsample)
            _assert_same((want[0],) + got[1:], want, tol=1e-4, phase_tol=1e-3)
        elif xp is not np and np.issubdtype(dtype, np.integer):
            # integer images can have spectral bins that are exactly 0 in scipy.fft but ~1e-13
            # in cuFFT; phase normalization makes those unit phasors, so 1 of H*W terms differs
            _assert_same(got, want, tol=1e-9, phase_tol=10 / ref.size)
        else:
            _assert_same(got, want)


def test_large_shift_wraps_negative_and_integer_shift_exact(xp, rng):
    """A peak index above half the size is a negative shift; an integer move is found exactly."""
    ref = ndi.gaussian_filter(rng.random((50, 61)), 2)
    for move in [(0, 0), (7, -12), (24, 30), (25, -30), (-25, 31), (26, -31)]:
        moving = np.roll(ref, move, axis=(0, 1))
        index = [(-m) % n for m, n in zip(move, ref.shape)]
        want = [i - n if i > n // 2 else i for i, n in zip(index, ref.shape)]
        for upsample in (1, 20):
            got = _run(xp, ref, moving, upsample_factor=upsample)
            _assert_same(got, sk_pcc(ref, moving, upsample_factor=upsample))
            np.testing.assert_allclose(got[0], want, rtol=0, atol=TOL)


def _camera_crops(move, subpixel=(0.0, 0.0)):
    """Two 128 x 120 crops of the camera image, the second ``move`` (+ ``subpixel``) further on:
    far enough that the FFT shift wraps and only ``disambiguate`` finds the real one."""
    img = data.camera().astype(np.float64)
    if any(subpixel):
        moved = np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(img), [-s for s in subpixel])).real
    else:
        moved = img
    (y, x), (dy, dx) = (100, 150), move
    return img[y:y + 128, x:x + 120], moved[y + dy:y + dy + 128, x + dx:x + dx + 120]


@pytest.mark.parametrize("move", [(70, -80), (-75, 66), (10, 15)])
@pytest.mark.parametrize("subpixel", [(0.0, 0.0), (0.3, -0.6)])
@pytest.mark.parametrize("space", ["real", "fourier"])
def test_disambiguate_matches_skimage(xp, move, subpixel, space):
    ref, moving = _camera_crops(move, subpixel)
    if space == "fourier":
        ref, moving = np.fft.fft2(ref), np.fft.fft2(moving)
    for upsample in (1, 10):
        kw = dict(upsample_factor=upsample, space=space, disambiguate=True)
        got = _run(xp, ref, moving, **kw)
        _assert_same(got, sk_pcc(ref, moving, **kw))
        np.testing.assert_allclose(got[0], np.add(move, subpixel), atol=0.5 / upsample + 0.1)
        plain = _run(xp, ref, moving, upsample_factor=upsample, space=space)[0]
        periods = (plain - got[0]) / (128, 120)  # the same shift modulo the image shape ...
        np.testing.assert_allclose(periods, np.round(periods), atol=TOL)
        assert np.any(periods != 0) == (move != (10, 15))  # ... but another one where it wraps


def test_signature_is_skimage_s():
    ours, theirs = inspect.signature(phase_cross_correlation), inspect.signature(sk_pcc)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == \
           [(p.name, p.kind, p.default) for p in theirs.parameters.values()]


def test_space_is_case_insensitive(rng):
    ref, moving, _ = _pair(rng, (32, 32))
    _assert_same(phase_cross_correlation(ref, moving, space="REAL", upsample_factor=10),
                 sk_pcc(ref, moving, space="real", upsample_factor=10))


def test_empty_image_warns_like_skimage():
    ref = np.zeros((16, 16))
    moving = np.random.default_rng(0).random((16, 16))
    with pytest.warns(UserWarning, match="Could not determine RMS error"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        shift, error, phasediff = phase_cross_correlation(ref, moving)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = sk_pcc(ref, moving)
    np.testing.assert_array_equal(shift, want[0])
    np.testing.assert_array_equal([error, phasediff], [want[1], want[2]])


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg
    return msg


def test_masks_select_the_masked_registration():
    """A mask gives scikit-image's masked result, ``(shift, nan, nan)`` (tests/registration/
    test_masked.py has the cases); overlap_ratio is not read without one."""
    img = np.random.default_rng(0).random((8, 8))
    shift, error, phasediff = phase_cross_correlation(img, img, reference_mask=np.ones((8, 8)))
    assert shift.tolist() == [0.0, 0.0] and np.isnan(error) and np.isnan(phasediff)
    _assert_same(phase_cross_correlation(img, img, overlap_ratio=7), sk_pcc(img, img))


@pytest.mark.parametrize("ref_shape, mov_shape", [((4, 8, 8), (4, 8, 8)), ((8,), (8,)),
                                                  ((8, 8), (8, 9)), ((8, 8), (1, 8, 8))])
def test_bad_shapes(ref_shape, mov_shape):
    with pytest.raises(InputError) as excinfo:
        phase_cross_correlation(np.ones(ref_shape), np.ones(mov_shape))
    assert "2-D" in _one_line(excinfo)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0)])
def test_images_without_pixels_are_an_input_error(shape):
    with pytest.raises(InputError) as excinfo:  # (it was scipy's ValueError from the FFT)
        phase_cross_correlation(np.ones(shape), np.ones(shape))
    assert "pixels" in _one_line(excinfo)


@pytest.mark.parametrize("kw, word", [(dict(space="fft"), "space"), (dict(space=None), "space"),
                                      (dict(normalization="none"), "normalization"),
                                      (dict(upsample_factor=0.5), "upsample_factor"),
                                      (dict(upsample_factor=0), "upsample_factor"),
                                      (dict(upsample_factor=np.nan), "upsample_factor"),
                                      (dict(upsample_factor=np.inf), "upsample_factor"),
                                      (dict(upsample_factor="ten"), "upsample_factor")])
def test_bad_arguments(kw, word):
    img = np.random.default_rng(0).random((8, 8))
    with pytest.raises(XcorrError) as excinfo:
        phase_cross_correlation(img, img, **kw)
    assert word in _one_line(excinfo)


def test_keyword_only():
    img = np.ones((8, 8))
    with pytest.raises(TypeError):
        phase_cross_correlation(img, img, 10)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_input_raises():
    img = np.random.default_rng(0).random((8, 8))
    bad = img.copy()
    bad[2, 3] = np.nan
    with pytest.raises(XcorrError) as excinfo:
        phase_cross_correlation(img, bad)
    assert "NaN" in _one_line(excinfo)


@pytest.mark.gpu
def test_cupy_inputs_return_host_results(rng):
    import cupy

    ref, moving, _ = _pair(rng, (40, 52))
    mixed = phase_cross_correlation(cupy.asarray(ref), moving, upsample_factor=10)
    _assert_same(mixed, sk_pcc(ref, moving, upsample_factor=10))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("ref, mov, kw", [
    (np.ones((8, 8)), np.ones((8, 8)), dict(space="bogus")),
    (np.ones((8, 8)), np.ones((8, 8)), dict(normalization="bogus")),
    (np.ones((8, 8)), np.ones((8, 9)), {}),
    (np.ones((8, 8)), np.full((8, 8), np.nan), {}),
    (np.ones((2, 8, 8)), np.ones((2, 8, 8)), {}),
    (np.ones(8), np.ones(8), {}),
    (np.ones((8, 8)), np.ones((8, 8)), dict(reference_mask=np.ones((8, 9), bool))),
], ids=["space", "normalization", "shapes", "nan", "3d", "1d", "mask"])
def test_bad_input_is_a_value_error(ref, mov, kw):
    """Code written for scikit-image catches ValueError: InputError is one."""
    with pytest.raises(ValueError) as excinfo:
        phase_cross_correlation(ref, mov, **kw)
    assert isinstance(excinfo.value, InputError)
