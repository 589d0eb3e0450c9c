"""Masked registration (xcorr_app.registration._masked) through ``phase_cross_correlation(...,
reference_mask=..., moving_mask=...)``, against skimage.registration's and known shifts: the
cases of scikit-image's own masked tests, written anew, plus subpixel refinement and refusals."""

import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage import data
from skimage.registration import phase_cross_correlation as sk_pcc

from xcorr_app.backend import to_numpy
from xcorr_app.errors import InputError
from xcorr_app.registration import phase_cross_correlation


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def _on(xp, *arrays):
    return [None if a is None else xp.asarray(a) for a in arrays]


def _masked(xp, ref, moving, ref_mask, moving_mask=None, **kw):
    """Ours on ``xp`` arrays and scikit-image's on NumPy ones, the same arguments."""
    got = phase_cross_correlation(*_on(xp, ref, moving), reference_mask=xp.asarray(ref_mask),
                                  moving_mask=_on(xp, moving_mask)[0], **kw)
    want = sk_pcc(ref, moving, reference_mask=ref_mask, moving_mask=moving_mask, **kw)
    return got, want


def _assert_same(got, want):
    """scikit-image's masked result: ``(float64 shift, nan, nan)``, the same shift exactly."""
    shift, error, phasediff = got
    assert type(shift) is np.ndarray and shift.dtype == np.float64 == want[0].dtype
    assert type(error) is type(want[1]) is float and np.isnan(error)
    assert type(phasediff) is type(want[2]) is float and np.isnan(phasediff)
    np.testing.assert_array_equal(shift, want[0])


def _camera(shape=(256, 256), corner=(100, 150)):
    (y, x), (h, w) = corner, shape
    return data.camera()[y:y + h, x:x + w].astype(np.float64)


def _fourier_moved(image, move):
    """``image`` moved by ``move`` (subpixel allowed), circularly, by a Fourier shift."""
    return np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(image), move)).real


@pytest.mark.parametrize("mask_dtype", [bool, np.uint8, np.float32])
def test_trivial_mask_gives_the_unmasked_shift(xp, mask_dtype):
    """A mask valid everywhere: the unmasked phase correlation's shift (the images wrap around
    as the circular correlation assumes); 0/1 masks of any type are masks."""
    ref = _camera()
    moving = _fourier_moved(ref, (-7, 12))
    trivial = np.ones(ref.shape, mask_dtype)
    got, want = _masked(xp, ref, moving, trivial, overlap_ratio=1 / 10)
    _assert_same(got, want)
    np.testing.assert_array_equal(got[0], phase_cross_correlation(ref, moving)[0])
    np.testing.assert_array_equal(got[0], [7, -12])


@pytest.mark.parametrize("move", [(-7, 12), (3, 0), (-20, -25)])
def test_random_masks(xp, rng, move):
    """Different random masks for the two images, 75 % of the pixels valid each."""
    ref = _camera()
    moving = _fourier_moved(ref, move)
    ref_mask, moving_mask = (rng.random(ref.shape) < 0.75 for _ in range(2))
    got, want = _masked(xp, ref, moving, ref_mask, moving_mask)
    _assert_same(got, want)
    np.testing.assert_array_equal(got[0], np.negative(move))


@pytest.mark.parametrize("crop", [(64, 64, 64, 64), (10, 40, 70, 3)])
@pytest.mark.parametrize("random_masks", [False, True])
def test_different_sizes(xp, rng, crop, random_masks):
    """A moving image cropped from the moved reference: the shift relative to the centres (half
    a pixel where the sizes differ by an odd number), as scikit-image gives it."""
    ref = _camera()
    moved = _fourier_moved(ref, (-7, 12))
    top, bottom, left, right = crop
    moving = moved[top:-bottom, left:-right]
    masks = [np.ones(a.shape, bool) for a in (ref, moving)]
    if random_masks:
        masks = [m & (rng.random(m.shape) < 0.75) for m in masks]
    got, want = _masked(xp, ref, moving, *masks)
    _assert_same(got, want)
    # the crop's centre sits (top - bottom, left - right) / 2 off the moved reference's
    np.testing.assert_array_equal(got[0], [7 + (top - bottom) / 2, -12 + (left - right) / 2])


@pytest.mark.parametrize("move", [(75, 75), (-130, 130), (130, 130), (-90, -40)])
def test_objects_on_black_large_shifts(xp, move):
    """Padfield's test setting: an object on a black background in each image, the masks where
    the images are not 0, shifts about half the image (they wrap in a circular correlation)."""
    yy, xx = np.mgrid[:300, :300]
    scene = np.zeros((600, 600))
    scene[150:450, 150:450] = data.camera()[100:400, 100:400] + 1.0
    fixed = scene[150:450, 150:450] * ((yy - 150) ** 2 + (xx - 140) ** 2 < 110 ** 2)
    dy, dx = move
    window = scene[150 - dy:450 - dy, 150 - dx:450 - dx]       # moving[n] = scene[n - move]
    moving = window * ((yy - 130) ** 2 / 1.2 + (xx - 160) ** 2 < 120 ** 2)
    got, want = _masked(xp, fixed, moving, fixed != 0, moving != 0, overlap_ratio=0.1)
    _assert_same(got, want)
    np.testing.assert_array_equal(got[0], [-dy, -dx])


def _labelled_pair():
    """Two views of a smooth scene, the second moved by (-6, 9), each with the same saturated
    label at the same place (a timestamp, a scale bar): the plain correlation locks on it."""
    scene = ndi.gaussian_filter(np.random.default_rng(5).random((160, 160)), 3)
    ref, moving = scene[20:120, 20:120].copy(), scene[26:126, 11:111].copy()
    for image in (ref, moving):
        image[60:80, 10:40] = 5.0
    mask = np.ones(ref.shape, bool)
    mask[58:82, 8:42] = False
    return ref, moving, mask


@pytest.mark.parametrize("normalization", ["phase", None])
def test_mask_unfools_a_static_label(xp, normalization):
    ref, moving, mask = _labelled_pair()
    plain = phase_cross_correlation(*_on(xp, ref, moving), normalization=normalization)[0]
    np.testing.assert_array_equal(plain, [0, 0])  # fooled: the label does not move
    got, want = _masked(xp, ref, moving, mask, normalization=normalization)
    _assert_same(got, want)
    np.testing.assert_array_equal(got[0], [6, -9])


def test_nan_where_masked_out_is_ignored(xp, rng):
    """NaN or infinite pixels under a False mask take no part (scikit-image zeroes them); the
    inputs are left as they were."""
    ref = _camera((160, 200))
    moving = _fourier_moved(ref, (5, -3))
    ref_mask, moving_mask = (rng.random(ref.shape) < 0.8 for _ in range(2))
    ref_bad, moving_bad = ref.copy(), moving.copy()
    ref_bad[~ref_mask] = np.nan
    moving_bad[~moving_mask] = np.inf
    clean, _ = _masked(xp, ref, moving, ref_mask, moving_mask)
    inputs = _on(xp, ref_bad, moving_bad, ref_mask, moving_mask)
    kept = [a.copy() for a in inputs]
    got = phase_cross_correlation(inputs[0], inputs[1], reference_mask=inputs[2],
                                  moving_mask=inputs[3])
    np.testing.assert_array_equal(got[0], clean[0])
    np.testing.assert_array_equal(got[0], [-5, 3])
    for a, b in zip(inputs, kept):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float32, np.float64])
def test_image_dtypes(xp, rng, dtype):
    """Any real type; float64 shifts always (single precision computes in float32)."""
    ref = _camera((128, 144))
    moving = np.clip(_fourier_moved(ref, (9, 4)), 0, 255)
    ref, moving = ref.astype(dtype), moving.astype(dtype)
    mask = rng.random(ref.shape) < 0.7
    got, want = _masked(xp, ref, moving, mask)
    _assert_same(got, want)
    np.testing.assert_array_equal(got[0], [-9, -4])


@pytest.mark.parametrize("upsample", [20, 100])
def test_subpixel_with_upsample_factor(xp, rng, upsample):
    """upsample_factor > 1: the masked peak refined to within 0.05 px of a known subpixel move
    of smooth images, on the 1 / upsample_factor grid; 1 gives scikit-image's integer shift."""
    for _ in range(4):
        ref = ndi.gaussian_filter(rng.random((96, 112)), 2)
        move = rng.uniform(-6, 6, 2)
        moving = _fourier_moved(ref, move)
        ref_mask = np.zeros(ref.shape, bool)
        ref_mask[10:-10, 12:-12] = True                     # the wrapped-around edges left out
        moving_mask = ref_mask & (rng.random(ref.shape) < 0.8)
        fine = phase_cross_correlation(*_on(xp, ref, moving), reference_mask=xp.asarray(ref_mask),
                                       moving_mask=xp.asarray(moving_mask),
                                       upsample_factor=upsample)
        np.testing.assert_allclose(fine[0], -move, rtol=0, atol=0.05)
        np.testing.assert_allclose(fine[0] * upsample, np.round(fine[0] * upsample), atol=1e-9)
        assert not np.all(fine[0] == np.round(fine[0]))
        got, want = _masked(xp, ref, moving, ref_mask, moving_mask)
        _assert_same(got, want)
        np.testing.assert_allclose(got[0], -move, rtol=0, atol=0.6)  # (a peak between two)


def test_subpixel_half_pixel_grid(xp):
    ref = ndi.gaussian_filter(np.random.default_rng(2).random((80, 80)), 2.5)
    moving = _fourier_moved(ref, (1.3, -2.2))
    mask = np.zeros(ref.shape, bool)
    mask[8:-8, 8:-8] = True
    shift = phase_cross_correlation(*_on(xp, ref, moving), reference_mask=xp.asarray(mask),
                                    upsample_factor=2)[0]
    np.testing.assert_array_equal(shift, [-1.5, 2.0])


@pytest.mark.parametrize("shapes", [((16, 20), (16, 20)), ((16, 20), (9, 25))])
def test_flat_images_warn(xp, shapes):
    """Flat over the masks: every correlation is 0, the shift the mean of all translations
    (0 between the centres), with a warning that it means nothing.  (scikit-image's shift is
    then rounding noise: its flat sums are not exactly 0.)"""
    ref, moving = np.full(shapes[0], 3.0), np.full(shapes[1], 7.0)
    with pytest.warns(UserWarning, match="flat"):
        shift, error, phasediff = phase_cross_correlation(
            *_on(xp, ref, moving), reference_mask=xp.ones(ref.shape, bool),
            moving_mask=xp.asarray(np.arange(moving.size).reshape(moving.shape) % 3 > 0))
    np.testing.assert_array_equal(shift, [0, 0])
    assert np.isnan(error) and np.isnan(phasediff)


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert msg and "\n" not in msg
    return msg


_IMG = np.random.default_rng(0).random((12, 16))
_OK = np.ones((12, 16), bool)
_ONE_NAN = np.where(np.arange(12 * 16).reshape(12, 16) == 40, np.nan, _IMG)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("kw, words", [
    (dict(reference_mask=np.ones((12, 15), bool)), ["reference_mask", "shape"]),
    (dict(reference_mask=_OK, moving_mask=np.ones((16, 12), bool)), ["moving_mask", "shape"]),
    (dict(reference_mask=np.ones((1, 12, 16), bool)), ["reference_mask", "shape"]),
    (dict(reference_mask=np.full((12, 16), 2)), ["reference_mask", "0 and 1"]),
    (dict(reference_mask=_OK, moving_mask=np.full((12, 16), 0.5)), ["moving_mask", "0 and 1"]),
    (dict(reference_mask=np.full((12, 16), np.nan)), ["reference_mask", "0 and 1"]),
    (dict(reference_mask=np.full((12, 16), "1")), ["reference_mask", "0 and 1"]),
    (dict(reference_mask=np.zeros((12, 16), bool)), ["reference_mask", "no True"]),
    (dict(reference_mask=_OK, moving_mask=np.zeros((12, 16), np.uint8)), ["moving_mask", "no True"]),
    (dict(reference_mask=_OK, overlap_ratio=0), ["overlap_ratio", "(0, 1]"]),
    (dict(reference_mask=_OK, overlap_ratio=-0.2), ["overlap_ratio", "(0, 1]"]),
    (dict(reference_mask=_OK, overlap_ratio=1.5), ["overlap_ratio", "(0, 1]"]),
    (dict(reference_mask=_OK, overlap_ratio=np.nan), ["overlap_ratio", "(0, 1]"]),
    (dict(reference_mask=_OK, overlap_ratio="most"), ["overlap_ratio", "(0, 1]"]),
    (dict(moving_mask=_OK), ["moving_mask needs reference_mask"]),
    (dict(reference_mask=_OK, space="fourier"), ["space='real'"]),
    (dict(reference_mask=_OK, upsample_factor=0.5), ["upsample_factor"]),
])
def test_bad_masked_arguments(kw, words):
    with pytest.raises(InputError) as excinfo:
        phase_cross_correlation(_IMG, _IMG, **kw)
    msg = _one_line(excinfo)
    assert all(w in msg for w in words), msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("ref, moving, kw, words", [
    (_ONE_NAN, _IMG, dict(reference_mask=_OK), ["NaN", "reference_image"]),
    (_IMG, _ONE_NAN, dict(reference_mask=_OK, moving_mask=_OK),
     ["NaN", "moving_image"]),
    (_IMG, np.where(_OK, np.inf, 0), dict(reference_mask=_OK), ["infinite", "moving_image"]),
    (_IMG, _IMG[:, :10], dict(reference_mask=_OK), ["differ in shape", "moving_mask"]),
    (_IMG + 0j, _IMG, dict(reference_mask=_OK), ["real images"]),
    (np.ones((2, 12, 16)), np.ones((2, 12, 16)), dict(reference_mask=np.ones((2, 12, 16), bool)),
     ["2-D"]),
])
def test_bad_masked_images(ref, moving, kw, words):
    with pytest.raises(InputError) as excinfo:
        phase_cross_correlation(ref, moving, **kw)
    msg = _one_line(excinfo)
    assert all(w in msg for w in words), msg


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_under_a_false_mask_is_fine_under_a_true_one_not():
    mask = np.isfinite(_ONE_NAN)
    shift = phase_cross_correlation(_IMG, _ONE_NAN, reference_mask=mask)[0]
    np.testing.assert_array_equal(shift, [0, 0])
    with pytest.raises(InputError, match="NaN"):
        phase_cross_correlation(_IMG, _ONE_NAN, reference_mask=mask, moving_mask=_OK)


@pytest.mark.gpu
def test_mixed_numpy_and_cupy_inputs():
    """A CuPy mask with NumPy images (or the reverse): computed on the GPU, a NumPy shift."""
    import cupy

    ref, moving, mask = _labelled_pair()
    got = phase_cross_correlation(ref, moving, reference_mask=cupy.asarray(mask))
    _assert_same(got, sk_pcc(ref, moving, reference_mask=mask))
    got = phase_cross_correlation(cupy.asarray(ref), moving, reference_mask=mask)
    np.testing.assert_array_equal(got[0], [6, -9])
