"""The upsampled-DFT refinement (:mod:`xcorr_app.registration._upsampled`) and the FFT
reference's low-pass (``fft_shifts(..., lowpass=)``), against known shifts."""

import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage import data

from xcorr_app.backend import to_numpy
from xcorr_app.errors import InputError
from xcorr_app.registration import fft_shifts, refine_upsampled
from xcorr_app.registration._fft_register import gaussian_weights
from xcorr_app.registration._upsampled import best_neighbour

# content moves (subpixel, off the 1/20 grid); the shifts to recover are minus these
MOVES = np.array([(0.0, 0.0), (2.337, -4.161), (-5.123, 1.049), (0.4711, 3.5555)])


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy

    return cupy


def _moved(image, moves):
    spec = np.fft.fft2(image)
    return np.stack([np.fft.ifft2(ndi.fourier_shift(spec, m)).real for m in moves])


def _camera(shape=(63, 81), margin=0):  # odd: no Nyquist terms, whose shift is not exact
    return data.camera()[150:150 + shape[0] + 2 * margin,
                         220:220 + shape[1] + 2 * margin].astype(np.float64)


def test_circular_shifts_between_the_samples(xp):
    """Wrap-around copies: the circular correlation is exact, and the fit between the samples
    recovers shifts that lie off the 1/20 grid (the grid alone: up to 0.025 px per axis)."""
    frames = _moved(_camera(), MOVES).astype(np.float32)
    start = np.round(-MOVES)
    got = to_numpy(refine_upsampled(xp.asarray(frames[0]), xp.asarray(frames), start, 20,
                                    boundary="circular"))
    assert got.dtype == np.float64 and got.shape == MOVES.shape
    np.testing.assert_allclose(got, -MOVES, atol=2e-3)
    on_grid = np.round(-MOVES * 20) / 20
    assert np.abs(on_grid - -MOVES).max() > 0.01  # (so the tolerance above tells them apart)


def test_a_start_one_pixel_off_is_moved_to_the_peak(xp):
    frames = _moved(_camera(), MOVES).astype(np.float32)
    start = np.round(-MOVES) + np.array([[0, 0], [1, 0], [0, -1], [-1, 1]])
    got = to_numpy(refine_upsampled(xp.asarray(frames[0]), xp.asarray(frames), start, 20,
                                    boundary="circular"))
    np.testing.assert_allclose(got, -MOVES, atol=2e-3)
    spectra = np.fft.fft2(frames[0])[None] * np.fft.fft2(frames).conj()
    np.testing.assert_array_equal(to_numpy(best_neighbour(xp.asarray(spectra),
                                                          xp.asarray(start))), np.round(-MOVES))


def test_linear_frames_are_refined_on_their_periodic_components(xp):
    """Frames cut from a larger scene: their circular correlation has seams at the edges; the
    periodic components' does not.  As they are (``circular``) the refinement is pulled."""
    margin = 8
    canvas = _camera(margin=margin)
    frames = _moved(canvas, MOVES)[:, margin:-margin, margin:-margin].astype(np.float32)
    start = np.round(-MOVES)
    lin = to_numpy(refine_upsampled(xp.asarray(frames[0]), xp.asarray(frames), start, 20))
    circ = to_numpy(refine_upsampled(xp.asarray(frames[0]), xp.asarray(frames), start, 20,
                                     boundary="circular"))
    assert np.abs(lin + MOVES).max() < 0.03  # (what the frames do not share is left)
    assert np.abs(circ + MOVES).max() > 0.15


def test_phase_and_one_reference_per_frame(xp):
    frames = _moved(_camera(), MOVES)
    refs = np.repeat(frames[:1], len(frames), axis=0)
    one = refine_upsampled(xp.asarray(frames[0]), xp.asarray(frames), np.round(-MOVES), 20,
                           "phase", "circular")
    each = refine_upsampled(xp.asarray(refs), xp.asarray(frames), np.round(-MOVES), 20,
                            "phase", "circular")
    np.testing.assert_allclose(to_numpy(one), -MOVES, atol=2e-3)
    np.testing.assert_allclose(to_numpy(each), to_numpy(one), atol=1e-9)


def test_upsample_one_returns_the_start_and_bad_arguments_are_refused():
    frames = _moved(_camera(), MOVES[:2])
    start = np.array([[0.0, 0.0], [-2.0, 4.0]])
    np.testing.assert_array_equal(refine_upsampled(frames[0], frames, start, 1), start)
    with pytest.raises(InputError, match="normalization"):
        refine_upsampled(frames[0], frames, start, 20, normalization="zncc")
    with pytest.raises(InputError, match="boundary"):
        refine_upsampled(frames[0], frames, start, 20, boundary="auto")


def test_lowpass_is_both_images_filtered_circularly(xp):
    frames = _moved(_camera(), MOVES).astype(np.float64)
    smooth = ndi.gaussian_filter(frames, (0, 1.5, 1.5), mode="wrap")
    want = fft_shifts(smooth[0], smooth, upsample_factor=20, normalization=None)[0]
    got = fft_shifts(xp.asarray(frames[0]), xp.asarray(frames), upsample_factor=20,
                     normalization=None, lowpass=1.5)[0]
    np.testing.assert_allclose(to_numpy(got), want, atol=1e-9)
    g = to_numpy(gaussian_weights(xp, (6, 9), 1.5, half=False, dtype=np.float64))
    assert g.shape == (6, 9) and g[0, 0] == 1.0 and np.allclose(g, g[::-1][np.r_[-1, :5]])


def test_lowpass_keeps_the_check_of_a_mean_reference_on_the_moon_sample():
    """The mean of a drifting stack keeps little but low frequencies: the frames' noise above
    them scattered the plain correlation of the periodic components."""
    import tifffile

    from sample_paths import stack_path, truth

    frames = tifffile.imread(stack_path("moon")).astype(np.float32)
    frames -= frames.mean(axis=(1, 2), keepdims=True)
    mean = frames.mean(axis=0)

    def scatter(shifts):  # RMS px about the truth, the offset to the mean image removed
        e = shifts - truth("moon")
        e -= e.mean(axis=0)
        return float(np.sqrt((e ** 2).sum(axis=1).mean()))

    kw = dict(upsample_factor=20, normalization=None, periodic=True)
    assert scatter(fft_shifts(mean, frames, lowpass=1.0, **kw)[0]) < 0.07
    assert scatter(fft_shifts(mean, frames, **kw)[0]) > 0.2
