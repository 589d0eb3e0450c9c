"""The CPU's banded float32 separable filter (the alignment's prefilter) against SciPy's float64
passes: every mode, odd sizes under and over a band, symmetric and lopsided taps."""

import numpy as np
import pytest
import scipy.ndimage as ndi

from xcorr_app import filters
from xcorr_app.alignment.rigid import parse_prefilter
from xcorr_app.filters import host_separable, host_separable_fits
from xcorr_app.filters._host_separable import BAND_PIXELS

TAPS = [(filters.gaussian_taps(1.0), filters.gaussian_taps(1.0)),
        (np.array([0.1, 0.5, 0.2]), np.array([1.0])),
        (filters.gaussian_taps(0.7), np.array([-0.5, 0.0, 0.5]))]


def _scipy(stack, ty, tx, mode, cval):
    s = stack.astype(np.float64)
    a = stack.ndim - 2
    return ndi.correlate1d(ndi.correlate1d(s, ty, axis=a, mode=mode, cval=cval), tx,
                           axis=a + 1, mode=mode, cval=cval)


@pytest.mark.parametrize("mode", filters.MODES)
@pytest.mark.parametrize("shape", [(5, 7), (3, 31, 17), (2, 9, 1), (1, 37, 4100)])
def test_equals_scipys_float64_passes_within_float32(rng, mode, shape):
    stack = (rng.standard_normal(shape) * 100 + 50).astype(np.float32)
    before = stack.copy()
    checked = 0
    for ty, tx in TAPS:
        if not host_separable_fits(stack, len(ty) // 2, len(tx) // 2, mode):
            continue
        got = host_separable(stack, ty, tx, mode, 3.5)
        want = _scipy(stack, ty, tx, mode, 3.5)
        assert got.dtype == np.float32 and got.shape == stack.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
        checked += 1
    assert checked
    np.testing.assert_array_equal(stack, before)  # (the input as it was)


def test_bands_cut_a_frame_of_many_rows():
    """A frame of more rows than a band holds: the bands' seams are invisible."""
    w = 100
    rows = 3 * (BAND_PIXELS // w) + 5
    img = np.random.default_rng(3).standard_normal((rows, w)).astype(np.float32)
    t = filters.gaussian_taps(2.0)
    np.testing.assert_allclose(host_separable(img, t, t, "reflect", 0.0),
                               _scipy(img, t, t, "reflect", 0.0), rtol=0, atol=1e-6 * 4)


def test_what_it_does_not_take():
    f32 = np.zeros((6, 6), np.float32)
    assert host_separable_fits(f32, 4, 5, "reflect")
    assert not host_separable_fits(f32.astype(np.float64), 4, 4, "reflect")
    assert not host_separable_fits(np.zeros((4, 6), np.float32), 4, 4, "reflect")
    assert not host_separable_fits(f32, 4, 6, "reflect")
    assert not host_separable_fits(f32, 4, 4, "sideways")
    assert not host_separable_fits(np.zeros((2, 2, 6, 6), np.float32), 4, 4, "reflect")
    assert not host_separable_fits(np.zeros((0, 6, 6), np.float32), 4, 4, "reflect")
    t = filters.gaussian_taps(1.0)
    with pytest.raises(ValueError, match="odd tap counts"):
        host_separable(f32, t[:-1], t, "reflect", 0.0)


@pytest.mark.parametrize("spec", ["gaussian:1", "gaussian:2.5", "dog:1,4"])
def test_the_prefilter_on_the_cpu_is_the_filters_within_float32(rng, spec):
    """The alignment's prefilter of float32 frames (this path) against the filter of the
    spec (:func:`xcorr_app.filters.gaussian` / ``dog``: SciPy's, in float64)."""
    pre = parse_prefilter(spec)
    frames = (rng.standard_normal((3, 45, 38)) * 30).astype(np.float32)
    assert pre.sigmas and host_separable_fits(frames, pre.fn.radius, pre.fn.radius,
                                              "reflect")  # (this path, not SciPy's)
    want = pre.fn(frames.astype(np.float64), "reflect", 0.0)
    got = pre(frames)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_a_reach_past_the_frame_is_refused_before_any_taps_are_made():
    """A sigma whose reach is far past the frame is the filter's InputError at once, not
    taps of terabytes (the estimate skips the run's limits)."""
    from xcorr_app.errors import InputError
    from xcorr_app import estimate_shifts

    ref = np.random.default_rng(0).random((40, 48))
    with pytest.raises(InputError, match="beyond"):
        estimate_shifts(ref, ref[None], prefilter="gaussian:1e12", device="cpu")
    frames = np.ones((1, 40, 48), np.float32)
    with np.errstate(all="raise"):  # (NaN and Inf pixels spread quietly)
        frames[0, 3, 4] = np.inf
        out = parse_prefilter("dog:1,4")(frames)
    assert not np.isfinite(out[0, 3, 4]) and np.isfinite(out[0, 30:, 30:]).all()
