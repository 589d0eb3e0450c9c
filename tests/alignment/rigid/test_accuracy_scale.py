"""Scale-free numerics: float frames of any magnitude are measured alike.

Float32 frames scaled by 1e17 or more (1e-25 or less) overflowed (underflowed) the
correlation's sums and spectra: every frame came out at the corner of the search with a NaN
peak.  :func:`~xcorr_app.alignment.rigid._preprocess.scale_free` brings each frame to magnitude 1 by a
power of two before anything is summed.
"""

import numpy as np
import pytest
import tifffile

from sample_paths import stack_path, truth
from xcorr_app import align, estimate_shifts
from xcorr_app.alignment.rigid import prepare, scale_free

SCALES = (1e-30, 1.0, 1e30)
OPTIONS = [{}, {"normalization": "phase"}, {"normalization": "none"},
           {"reference": "previous"}, {"max_shift": 8}, {"subpixel": "upsample"}]


@pytest.fixture(scope="module")
def hubble():
    return tifffile.imread(stack_path("hubble")).astype(np.float32)


def _devices():
    return ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(map(str, o.values())) or
                         "default")
def test_any_scale_gives_the_same_shifts(hubble, options, device):
    runs = [align(hubble * np.float32(s), device=device, **options) for s in SCALES]
    base = np.asarray(runs[1].shifts)
    assert np.abs(base - truth("hubble")).max() < 1.0  # (a real measurement to compare with)
    # the upsampled refinement's fit between its samples, in single precision: 3e-4 px
    tol = 1e-3 if options.get("subpixel") == "upsample" else 2e-5
    for r in runs:
        np.testing.assert_allclose(np.asarray(r.shifts), base, atol=tol)
        assert np.isfinite(np.asarray(r.peak)).all() and np.all(np.asarray(r.confidence) > 0)
        assert not any("border" in n for n in r.notes)


def test_estimate_shifts_and_a_reference_of_another_scale(hubble):
    want = estimate_shifts(hubble[0], hubble, device="cpu")[0]
    for ref_scale, scale in ((1e30, 1e30), (1e-30, 1e-25), (1e-30, 1e30)):
        got = estimate_shifts(hubble[0] * np.float32(ref_scale), hubble * np.float32(scale),
                              device="cpu")[0]
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_scale_free_is_a_power_of_two_per_frame():
    rng = np.random.default_rng(5)
    f = rng.normal(size=(3, 8, 9)).astype(np.float32) * np.float32([[[1e20]], [[1.0]], [[3e-28]]])
    g = scale_free(f, np)
    peak = np.abs(g).max(axis=(1, 2))
    assert np.all((peak >= 0.5) & (peak < 1.0))
    ratio = g.astype(np.float64) / f
    for r in ratio:  # one exact power of two a frame
        assert np.all(r == r.flat[0]) and np.log2(r.flat[0]) == np.round(np.log2(r.flat[0]))
    # integers as they are; NaN, Inf and zero frames too
    ints = np.arange(24, dtype=np.uint16).reshape(2, 3, 4)
    assert scale_free(ints, np) is ints
    odd = np.stack([np.full((2, 2), np.nan), np.zeros((2, 2)), np.full((2, 2), 1e300)])
    out = scale_free(odd, np)
    assert np.isnan(out[0]).all() and (out[1] == 0).all() and 0.5 <= out[2, 0, 0] < 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 9), (301, 517)])
def test_gpu_scale_free_is_the_cpus(dtype, shape):
    """The GPU's scaled frames (``kernels/alignment/frame_stats.cu``) are the CPU's, bit for
    bit, on frames under a warp and over a frame's blocks: tiny, huge, subnormal-making, NaN,
    Inf and zero frames included."""
    import cupy as cp

    rng = np.random.default_rng(6)
    big = 1e300 if dtype == np.float64 else 3e38
    with np.errstate(over="ignore"):  # (3e38 times a normal number: Inf pixels, wanted)
        f = rng.normal(size=(7, *shape)).astype(dtype) * np.array(
            [1e20, 1.0, 3e-28, big, 0.75, 1.0, 1.0], dtype)[:, None, None]
    f[4] = 0.0
    f[5, 2, 3] = np.nan
    f[6, 0, 0] = np.inf
    want = scale_free(f, np)
    got = scale_free(cp.asarray(f), cp).get()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_float64_beyond_float32_is_measured():
    """float64 frames of 1e300 are brought into range before float32 (they became Inf)."""
    frames = tifffile.imread(stack_path("cell")).astype(np.float64)
    want = align(frames, device="cpu").shifts
    p = prepare(frames[:2] * 1e300, np)
    assert bool(p.finite.all()) and not bool(p.constant.any())
    np.testing.assert_allclose(align(frames * 1e300, device="cpu").shifts, want, atol=2e-5)


def test_a_noisy_stack_takes_the_same_lucas_kanade_path_at_any_scale():
    from xcorr_app.bench._accuracy_data import make_stack

    frames = make_stack("low_light", 0, quick=True).frames
    runs = [align(frames * np.float32(s), device="cpu") for s in SCALES]
    assert all(r.settings["lucas_kanade"] == "on" for r in runs)
    for r in runs:
        np.testing.assert_allclose(np.asarray(r.shifts), np.asarray(runs[1].shifts), atol=2e-5)
