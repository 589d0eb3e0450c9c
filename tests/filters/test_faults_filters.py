"""Extreme filter arguments (filters/_validation.py ``check_radius``, cli/_filter.py): a radius
far beyond the frame is refused before any tap is made (a sigma of 1e9 asked for 60 GiB of
taps; ``--kernel gaussian:1e6`` ran for minutes), a sigma that is not a number says so, and a
long filter honours SIGTERM and Ctrl-C within a second."""

import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tifffile

from cli_helpers import assert_clean_error, child_env, from_a_terminal, xcorr
from sample_paths import stack_path
from xcorr_app import filters
from xcorr_app.errors import InputError
from xcorr_app.filters import parse_kernel_spec


@pytest.mark.parametrize("call, words", [
    (lambda img: filters.gaussian(img, 1e9), "radius 4000000000 px"),
    (lambda img: filters.gaussian(img, 2.0, truncate=1e300), "radius"),
    (lambda img: filters.gaussian_light(img, 1e9), "radius"),
    (lambda img: filters.dog(img, 1.0, 1e9), "radius"),
    (lambda img: filters.box(img, 10**12), "box size"),
])
def test_a_radius_far_beyond_the_frame_is_refused_at_once(call, words):
    img = np.zeros((64, 64), np.float32)
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=words) as err:
        call(img)
    assert time.perf_counter() - t0 < 1.0
    assert "at most 256 px" in str(err.value)


def test_a_radius_up_to_the_limit_still_filters():
    img = np.zeros((80, 70), np.float32)
    img[40, 35] = 1.0
    assert abs(float(filters.gaussian(img, 80.0).sum()) - 1.0) < 1e-5  # radius 320: the limit
    with pytest.raises(InputError, match="at most 320 px"):
        filters.gaussian(img, 80.2)
    tiny = np.ones((1, 1))  # (a small frame's limit: 256)
    assert abs(float(filters.gaussian(tiny, 64.0)[0, 0]) - 1.0) < 1e-9
    with pytest.raises(InputError, match="at most 256 px"):
        filters.gaussian(tiny, 64.2)


@pytest.mark.parametrize("sigma", ["2", b"2", None, True, [2.0]])
def test_a_sigma_that_is_not_a_number_says_so(sigma):
    with pytest.raises(InputError, match=r"gaussian sigma must be a number, got"):
        filters.gaussian(np.zeros((8, 8)), sigma)


def test_kernel_specs_know_their_radius():
    assert parse_kernel_spec("gaussian:2").radius == 8
    assert parse_kernel_spec("dog:1,3").radius == 12
    assert parse_kernel_spec("box:5").radius == 2


def test_cli_refuses_a_kernel_far_beyond_the_frame_with_one_line(tmp_path):
    t0 = time.perf_counter()
    res = xcorr("filter", stack_path("moon"), "--kernel", "gaussian:1e6", "--out",
                tmp_path / "g.tif")
    assert time.perf_counter() - t0 < 10
    assert_clean_error(res, "--kernel gaussian:1e6", "at most 640 px")
    assert not (tmp_path / "g.tif").exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_long_filter_stops_within_a_second(tmp_path, rng, sig):
    src = tmp_path / "big.tif"
    tifffile.imwrite(src, rng.random((1, 1000, 1000), dtype=np.float32))
    out = tmp_path / "o.tif"
    env = child_env()
    env.pop("XCORR_DEBUG", None)
    # radius 3600 of 1000x1000: some 10 s of SciPy in one call, within the limit
    proc = subprocess.Popen(from_a_terminal("filter", src, "--kernel", "gaussian:900",
                                            "--device", "cpu", "--out", out, "-q"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    t0 = time.monotonic()
    while not any(p.name.startswith(".o.tif.tmp-") for p in tmp_path.iterdir()):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() - t0 < 60
        time.sleep(0.02)
    time.sleep(0.5)  # (inside the filter)
    assert proc.poll() is None
    proc.send_signal(sig)
    t1 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t1 < 1.5, err
    assert proc.returncode == 128 + sig and "interrupted" in err, (proc.returncode, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.tif"]


def test_an_error_in_the_filter_thread_is_raised_in_the_caller():
    from xcorr_app.cli._filter import interruptible

    def bad(chunk):
        raise InputError("from the thread")

    with pytest.raises(InputError, match="from the thread"):
        interruptible(bad, np.zeros(2))
    assert interruptible(lambda c, k: c + k, np.ones(2), 1).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("sigma", [1e-300, 1e-160, 5e-324])
def test_a_sigma_below_float_squares_is_the_identity(sigma):
    """``-0.5 / sigma**2`` divided by zero (ZeroDivisionError) or overflowed (NaN taps)."""
    from xcorr_app.filters import gaussian, gaussian_taps

    assert gaussian_taps(sigma).tolist() == [1.0]
    if sigma == 1e-300:  # (a radius of 1: the taps beside the centre underflow to 0)
        assert gaussian_taps(sigma, truncate=1e300).tolist() == [0.0, 1.0, 0.0]
    img = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(gaussian(img, sigma), img)


@pytest.mark.parametrize("spec", ["gabor:1,1000000000", "gabor:2,65", "gabor:2,0"])
def test_a_gabor_bank_of_too_many_orientations_is_refused(spec):
    """A billion orientations built filters until the run was killed."""
    from xcorr_app.filters import bank_weights

    with pytest.raises(InputError, match="orientations must be a whole number from 1 to 64"):
        bank_weights(spec, channels=1)
    assert bank_weights("gabor:2,64", channels=1).shape[0] == 64


def test_the_gpu_filters_without_cupy_say_what_to_install():
    """separable_correlate and reuse_correlate imported CuPy bare: a raw ModuleNotFoundError."""
    try:
        import cupy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is importable here")
    from xcorr_app.filters import reuse_correlate, separable_correlate

    img = np.ones((8, 8), np.float32)
    for call in (lambda: separable_correlate(img, np.ones(3), np.ones(3)),
                 lambda: reuse_correlate(img, np.ones((3, 3)))):
        with pytest.raises(InputError, match="pip install cupy"):
            call()


def test_a_later_float64_frame_past_float32_is_refused_naming_it(tmp_path):
    """Frame 2 of a float64 stack at 1e300 was written as Inf (exit 0, a RuntimeWarning as
    the note): the range is checked on every chunk read, one line naming the frame, no
    output; a stack in range is filtered as before."""
    rng = np.random.default_rng(2)
    frames = rng.random((4, 21, 23))
    frames[2] *= 1e300
    path, out = tmp_path / "f64.tif", tmp_path / "o.tif"
    tifffile.imwrite(path, frames, photometric="minisblack")
    res = xcorr("filter", path, "--kernel", "box:3", "--out", out, "--device", "cpu")
    assert_clean_error(res, "(frame 2), outside float32's range", "scale the stack")
    assert not out.exists()
    frames[2] /= 1e300
    tifffile.imwrite(path, frames, photometric="minisblack")
    res = xcorr("filter", path, "--kernel", "box:3", "--out", out, "--device", "cpu", "-q")
    assert res.returncode == 0 and np.isfinite(tifffile.imread(out)).all()
