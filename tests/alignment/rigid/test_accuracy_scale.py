"""Scale-free numerics: float frames of any magnitude are measured alike.

Float32 frames scaled by 1e17 or more (1e-25 or less) overflowed (underflowed) the
correlation's sums and spectra: every frame came out at the corner of the search with a NaN
peak.  :func:`~xcorr_app.alignment.rigid._preprocess.scale_free` brings each frame to magnitude 1 by a
power of two before anything is summed.
"""

import numpy as np
import pytest
import tifffile
from scipy import ndimage as ndi

from sample_paths import stack_path, truth
from xcorr_app import align, estimate_shifts
from xcorr_app.alignment.rigid import prepare, scale_free
from xcorr_app.errors import InputError

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
    bit, on frames under a warp and over a frame's blocks: tiny, huge, subnormal-making,
    (float64) denormal, NaN, Inf and zero frames included."""
    import cupy as cp

    rng = np.random.default_rng(6)
    big = 1e300 if dtype == np.float64 else 3e38
    # (float64 denormal: 2**-e overflows the type; float32 near its smallest normal number:
    # CuPy compiles every kernel flushing float32 denormals, which a GPU run refuses)
    tiny = 1e-310 if dtype == np.float64 else 1e-29
    with np.errstate(over="ignore", under="ignore"):  # (Inf and denormal pixels, wanted)
        f = rng.normal(size=(8, *shape)).astype(dtype) * np.array(
            [1e20, 1.0, 3e-28, big, 0.75, 1.0, 1.0, tiny], dtype)[:, None, None]
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


# -- denormal and beyond float32: the same shifts as at scale 1, or a true refusal ----------

def _scene_stack(n=6, size=64):
    """``n`` float64 frames of a smooth scene moved by known subpixel shifts (seed 11), in
    [0, 1]."""
    from scipy import ndimage as ndi

    rng = np.random.default_rng(11)
    base = ndi.gaussian_filter(rng.random((size + 16, size + 16)), 2.5)
    moves = rng.uniform(-3, 3, (n, 2))
    moves[0] = 0
    frames = np.stack([ndi.shift(base, m, order=3, mode="reflect")[8:-8, 8:-8] for m in moves])
    return (frames - frames.min()) / (frames.max() - frames.min())


#: (pixel type, scale): float32 denormals (1e-40: about 17 bits left) and near its largest
#: number; float64 denormals and beyond float32's range both ways
EXTREMES = [(np.float32, 1e-40), (np.float32, 1e-30), (np.float32, 1e30), (np.float32, 3e38),
            (np.float64, 1e-300), (np.float64, 1e-310), (np.float64, 1e300)]
PASSES = [{}, {"reference": "refined"}, {"lucas_kanade": "on"}, {"boundary": "circular"},
          {"reference": "mean", "normalization": "phase", "subpixel": "gaussian"},
          {"reference": "refined:2", "normalization": "phase", "subpixel": "gaussian"}]
# (phase: no Lucas-Kanade possible; its default upsampled DFT on this smooth scene moves by
# up to 3e-3 px with float32's rounding at another scale: whitening lifts the frequencies
# the scene lacks)


@pytest.fixture(scope="module")
def scene():
    frames = _scene_stack()
    return frames, {i: align(frames, device="cpu", **o) for i, o in enumerate(PASSES)}


@pytest.mark.parametrize("dtype, scale", EXTREMES)
@pytest.mark.parametrize("k", range(len(PASSES)), ids=lambda k: ",".join(
    f"{a}={b}" for a, b in PASSES[k].items()) or "default")
def test_extreme_scales_give_the_shifts_of_scale_one(scene, dtype, scale, k):
    """Denormal float32 frames were refused as "NaN or Inf pixels" (2**-e of their peak
    overflowed float32); float64 frames beyond float32's range made the template passes'
    and the quality report's float32 sums 0 or Inf ("the reference image is constant")."""
    import warnings

    frames, runs = scene
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with np.errstate(under="ignore"):  # (the frames made: a denormal product)
            stack = (frames * scale).astype(dtype) if scale >= 1e-38 or dtype == np.float64 \
                else frames.astype(np.float32) * np.float32(scale)
        got = align(stack, device="cpu", **PASSES[k])
    want = runs[k]
    tol = 0.05 if scale == 1e-40 else 1e-3
    np.testing.assert_allclose(np.asarray(got.shifts), np.asarray(want.shifts), atol=tol)
    assert got.settings["lucas_kanade"] == want.settings["lucas_kanade"]
    np.testing.assert_allclose(got.quality.after, want.quality.after, atol=1e-3)
    assert not got.low_confidence.any()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, scale", [(np.float32, 1e-40), (np.float32, 3e38),
                                          (np.float64, 1e-310), (np.float64, 1e300)])
@pytest.mark.parametrize("k", [0, 1, 2], ids=["default", "refined", "lucas-kanade"])
def test_gpu_extreme_scales_give_the_shifts_of_scale_one(scene, dtype, scale, k):
    """The GPU's scale_free (kernels/alignment/frame_stats.cu: denormal frames in two exact
    steps), template sums and fit at the stack's one scale: the CPU's shifts at scale 1;
    float32 stacks a GPU cannot measure (denormal: CuPy compiles with -ftz=true) refused in
    one line naming the CPU."""
    frames, runs = scene
    with np.errstate(under="ignore"):
        stack = (frames * scale).astype(dtype) if scale >= 1e-38 or dtype == np.float64 \
            else frames.astype(np.float32) * np.float32(scale)
    if dtype == np.float32:  # (beyond GPU_FLOAT32_RANGE: CuPy's kernels flush denormals)
        with pytest.raises(InputError, match="float32 pixels reach at most"):
            align(stack, device="gpu", **PASSES[k])
        return
    got = align(stack, device="gpu", **PASSES[k])
    tol = 0.05 if scale == 1e-40 else 2e-3
    np.testing.assert_allclose(np.asarray(got.shifts), np.asarray(runs[k].shifts), atol=tol)
    assert not got.low_confidence.any()


def test_scale_free_of_denormal_frames_is_exact():
    f32 = np.stack([np.full((2, 3), 3 * 2.0 ** -142), np.full((2, 3), 2.0 ** 100)])
    f64 = np.stack([np.full((2, 3), 5 * 2.0 ** -1065), np.full((2, 3), -3 * 2.0 ** 900)])
    for f in (f32.astype(np.float32), f64):
        with np.errstate(all="raise"):  # (no overflow on the way)
            g = scale_free(f, np)
        assert g.dtype == f.dtype
        assert g[:, 0, 0].tolist() == ([0.75, 0.5] if f.dtype == np.float32 else [0.625, -0.75])


def test_float64_beyond_float32_refuses_the_float32_outputs(tmp_path):
    """Shifts at any scale; what is computed in float32 (the aligned stack, the patches'
    warps, a filtered stack) is refused with the pixels' range, before anything is written."""
    from cli_helpers import xcorr

    frames = _scene_stack()
    want = align(frames, device="cpu", quality=False).shifts
    for scale in (1e-300, 1e300):
        folder = tmp_path / f"{scale:.0e}"
        folder.mkdir()
        path = folder / "s.tif"
        tifffile.imwrite(path, frames * scale)
        res = xcorr("align", path, "--device", "cpu", "--out", folder / "a")
        assert res.returncode == 2 and "Traceback" not in res.stderr
        error = res.stderr.strip().splitlines()[-1]
        assert error.startswith("error: ") and "outside float32's range" in error
        assert "--no-aligned" in error and not (folder / "a").exists()
        res = xcorr("align", path, "--device", "cpu", "--no-aligned", "--patches", "2x2",
                    "--out", folder / "p")
        assert res.returncode == 2 and "without --patches" in res.stderr
        res = xcorr("filter", path, "--kernel", "gaussian:1", "--device", "cpu",
                    "--out", folder / "f.tif")
        assert res.returncode == 2 and "filtered stack" in res.stderr
        assert not (folder / "f.tif").exists()
        res = xcorr("align", path, "--device", "cpu", "--no-aligned", "--out", folder / "b")
        assert res.returncode == 0, res.stderr
        assert "RuntimeWarning" not in res.stderr
        import csv

        with open(folder / "b" / "shifts.csv") as f:
            got = [[float(r["dy"]), float(r["dx"])] for r in csv.DictReader(f)]
        np.testing.assert_allclose(got, want, atol=1e-3)
        with pytest.raises(InputError, match="outside float32's range"):
            align(frames * scale, device="cpu", out=np.empty(frames.shape, np.float32))


def test_sparse_frames_read_no_correlation_past_one():
    """Frames of a few bright pixels in one part of the field (photon counting, beads): the
    band-pass prefilter leaves the rest a haze whose ZNCC is the correlation sums' rounding;
    those shifts are not measured (peaks of 20 and shifts 50 px off came out, unflagged).
    Every peak in [-1, 1], frame 0 at (0, 0), every frame within 0.5 px of its drift."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:200, :200]
    scene = ndi.gaussian_filter(rng.standard_normal((200, 200)), 2.0) \
        + 0.6 * np.exp(-((yy - 70) ** 2 + (xx - 75) ** 2) / (2 * 12.0 ** 2))
    drift = np.vstack([[0.0, 0.0], rng.uniform(-5, 5, (11, 2))])
    bright = np.quantile(scene, 0.997)
    frames = np.stack([ndi.shift(scene, d, order=1)[36:164, 36:164] > bright
                       for d in drift]).astype(np.uint8)
    assert frames.mean() < 0.01
    res = align(frames, device="cpu")
    assert (res.peak <= 1.0 + 1e-6).all() and (res.shifts[0] == 0).all()
    assert np.abs(res.shifts + drift).max() < 0.5
