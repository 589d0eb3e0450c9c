"""The align pipeline and filters on the GPU (CuPy in, CuPy out; same answers as the CPU)."""

import numpy as np
import pytest

from xcorr_app import align, estimate_shifts, filters

from sample_paths import SAMPLES, stack_path, truth

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("max_shift", [None, 10])
def test_gpu_align_matches_truth_and_cpu(name, max_shift):
    gpu = align(stack_path(name), device="gpu", max_shift=max_shift)
    cpu = align(stack_path(name), device="cpu", max_shift=max_shift)
    assert gpu.settings["device"] == "gpu"
    assert np.abs(gpu.shifts - truth(name)).max() <= 0.1
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=2e-3)
    np.testing.assert_array_equal(gpu.agree, cpu.agree)


def test_gpu_estimate_shifts_cupy_in_cupy_out(rng):
    import cupy as cp
    from scipy import ndimage as ndi

    base = ndi.gaussian_filter(rng.random((80, 90)), 1.5)
    ref = base[5:65, 5:75]
    frames = np.stack([base[7:67, 2:72], ref])  # shift (2, -3)
    for ms in (None, 6):
        s, p, c = estimate_shifts(cp.asarray(ref), cp.asarray(frames), max_shift=ms)
        assert isinstance(s, cp.ndarray)
        np.testing.assert_allclose(s.get(), [[2, -3], [0, 0]], atol=0.05)


@pytest.mark.parametrize("fn,args", [(filters.gaussian, (1.7,)), (filters.box, (4,)),
                                     (filters.sobel, (None,)), (filters.laplace, ()),
                                     (filters.dog, (1.0, 3.0))])
def test_gpu_filters_match_cpu(rng, fn, args):
    import cupy as cp

    stack = rng.random((3, 33, 65)).astype(np.float32)
    want = fn(stack, *args)
    got = fn(cp.asarray(stack), *args)
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(got.get(), want, rtol=1e-4, atol=1e-4)


def test_gpu_correlate2d_matches_cpu(rng):
    import cupy as cp

    stack = rng.random((2, 40, 31)).astype(np.float32)
    w = rng.random((3, 4)).astype(np.float32)
    for mode in filters.MODES:
        want = filters.correlate2d(stack, w, mode=mode, cval=0.5)
        got = filters.correlate2d(cp.asarray(stack), w, mode=mode, cval=0.5)
        np.testing.assert_allclose(got.get(), want, rtol=1e-4, atol=1e-4)
