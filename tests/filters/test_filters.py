"""CPU path of xcorr_app.filters._api (scipy.ndimage per frame) and its argument checking."""

import numpy as np
import pytest
import scipy.ndimage as ndi

from xcorr_app import filters
from xcorr_app.errors import XcorrError
from xcorr_app.filters._reference import correlate_reference


def per_frame(fn, stack):
    return np.stack([fn(f) for f in stack])


@pytest.mark.parametrize("mode", filters.MODES)
def test_correlate_and_convolve_match_scipy_per_frame(rng, mode):
    stack = rng.random((3, 23, 31))
    for shape, origin in [((3, 3), 0), ((2, 4), (0, -1)), ((5, 2), (1, 0)), ((1, 1), 0)]:
        w = rng.standard_normal(shape)
        got = filters.correlate2d(stack, w, mode=mode, cval=0.5, origin=origin)
        want = per_frame(lambda f: ndi.correlate(f, w, mode=mode, cval=0.5, origin=origin), stack)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        got = filters.convolve2d(stack, w, mode=mode, cval=0.5, origin=origin)
        want = per_frame(lambda f: ndi.convolve(f, w, mode=mode, cval=0.5, origin=origin), stack)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,args,scipy_fn", [
    ("gaussian", (1.5,), lambda f: ndi.gaussian_filter(f, 1.5)),
    ("box", (4,), lambda f: ndi.uniform_filter(f, 4)),
    ("sobel", (0,), lambda f: ndi.sobel(f, axis=0)),
    ("sobel", (1,), lambda f: ndi.sobel(f, axis=1)),
    ("sobel", (None,), lambda f: np.hypot(ndi.sobel(f, axis=0), ndi.sobel(f, axis=1))),
    ("laplace", (), ndi.laplace),
    ("dog", (1.0, 2.5), lambda f: ndi.gaussian_filter(f, 1.0) - ndi.gaussian_filter(f, 2.5)),
])
def test_named_filters_filter_each_frame_alone(rng, name, args, scipy_fn):
    """A stack is filtered frame by frame: nothing leaks across frames (sobel once did)."""
    stack = rng.random((4, 20, 27))
    got = getattr(filters, name)(stack, *args)
    np.testing.assert_allclose(got, per_frame(scipy_fn, stack), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(getattr(filters, name)(stack[1], *args), scipy_fn(stack[1]),
                               rtol=1e-12, atol=1e-12)


def test_reference_matches_scipy(rng):
    stack = rng.random((2, 9, 14))
    w = rng.random((3, 4))
    want = per_frame(lambda f: ndi.correlate(f, w, mode="wrap"), stack)
    np.testing.assert_allclose(correlate_reference(stack, w, "wrap"), want)


def test_integer_input_gives_float(rng):
    stack = rng.integers(0, 4000, size=(2, 12, 15)).astype(np.uint16)
    got = filters.correlate2d(stack, np.ones((3, 3)) / 9)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, correlate_reference(stack, np.ones((3, 3)) / 9), rtol=1e-6)


def test_gaussian_taps_match_scipy():
    from scipy.ndimage import _filters

    taps = filters.gaussian_taps(3.75)
    assert taps.size == 31 and np.isclose(taps.sum(), 1.0)
    np.testing.assert_allclose(taps, _filters._gaussian_kernel1d(3.75, 0, 15)[::-1])


@pytest.mark.parametrize("shape", [(1, 1), (2, 5), (7, 3), (40, 33)])
@pytest.mark.parametrize("sigma", [0.6, 2.0, 4.5])
def test_gaussian_light_matches_scipy_without_importing_it(rng, shape, sigma):
    """The SciPy-free gaussian of the GPU run's CPU-side decisions: reflect mode, pads wider
    than the image included."""
    img = rng.random(shape)
    np.testing.assert_allclose(filters.gaussian_light(img, sigma), ndi.gaussian_filter(img, sigma),
                               rtol=1e-12, atol=1e-14)


def test_gaussian_light_imports_no_scipy():
    import subprocess
    import sys

    code = ("import sys, numpy as np; from xcorr_app.filters import gaussian_light; "
            "gaussian_light(np.ones((9, 8)), 2.0); print('scipy' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


@pytest.mark.parametrize("call,message", [
    (lambda s: filters.correlate2d(s, np.ones((3, 3)), mode="bogus"), "unknown mode"),
    (lambda s: filters.correlate2d(s, np.ones((2, 4)), origin=(1, 0)), "origin 1 is invalid"),
    (lambda s: filters.correlate2d(s, np.ones((4, 4)), origin=(0, -3)), "origin -3 is invalid"),
    (lambda s: filters.correlate2d(s, np.ones((3, 3)), origin=(0, 0, 0)), "origin must be"),
    (lambda s: filters.correlate2d(s, np.ones((31, 3))), "larger than the image"),
    (lambda s: filters.correlate2d(s, np.full((3, 3), np.nan)), "NaN or Inf"),
    (lambda s: filters.correlate2d(s, np.ones(3)), "2-D array"),
    (lambda s: filters.correlate2d(s[0, 0], np.ones((1, 1))), "(H, W) image"),
    (lambda s: filters.gaussian(s, -1.0), "sigma must be > 0"),
    (lambda s: filters.box(s, 2.5), "positive integer"),
    (lambda s: filters.sobel(s, 2), "axis must be 0"),
    (lambda s: filters.dog(s, 3.0, 1.0), "sigma_low < sigma_high"),
])
def test_bad_arguments_give_clear_errors(call, message):
    stack = np.ones((2, 10, 12), np.float32)
    with pytest.raises(XcorrError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(stack)


def test_parse_kernel_spec(tmp_path, rng):
    stack = rng.random((2, 16, 18))
    fn = filters.parse_kernel_spec("gaussian:1.5")
    np.testing.assert_allclose(fn(stack, "reflect", 0.0), filters.gaussian(stack, 1.5))
    w = rng.random((3, 5))
    np.save(tmp_path / "w.npy", w)
    fn = filters.parse_kernel_spec(str(tmp_path / "w.npy"))
    np.testing.assert_allclose(fn(stack, "nearest", 0.0), filters.correlate2d(stack, w, "nearest"))
    for bad in ("gaussian", "box:x", "median:3", str(tmp_path / "missing.npy")):
        with pytest.raises(XcorrError):
            filters.parse_kernel_spec(bad)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("mode", filters.MODES)
def test_sobel_matches_scipy_with_a_constant_border_too(rng, axis, mode):
    """scipy runs the derivative's axis first; with cval != 0 the order shows at the border
    (axis 1 was 30 off there)."""
    frame = rng.random((6, 7)) * 10
    got = filters.sobel(frame, axis, mode=mode, cval=7.5)
    np.testing.assert_allclose(got, ndi.sobel(frame, axis, mode=mode, cval=7.5), atol=1e-12)
