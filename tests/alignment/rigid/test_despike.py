"""despike: bright specks of one frame (cosmic rays) taken out of what the passes measure
(xcorr_app/alignment/rigid/_despike.py)."""

import numpy as np
import pytest
from scipy import ndimage as ndi

import xcorr_app
from xcorr_app.alignment import AlignOptions
from xcorr_app.alignment.rigid import DespikedSource, decide_despike, despiked, opened
from xcorr_app.bench._accuracy import stack_errors
from xcorr_app.bench._accuracy_data import make_stack
from xcorr_app.errors import InputError
from xcorr_app.io import ArraySource

from cli_helpers import xcorr


@pytest.fixture(scope="module")
def rays():
    """A cosmic_rays stack of the accuracy bench that every frame's specks throw off."""
    return make_stack("cosmic_rays", 0, image="coins", shape=(128, 128))


def test_opening_is_scipys_inside_and_never_above_the_frame():
    f = np.random.default_rng(0).random((3, 19, 23)).astype(np.float32)
    o = opened(f, np)
    assert (o <= f).all()
    np.testing.assert_array_equal(o[:, 1:-1, 1:-1],
                                  ndi.grey_opening(f, size=(1, 2, 2))[:, 1:-1, 1:-1])


def test_specks_go_and_features_two_pixels_across_stay():
    y, x = np.mgrid[:40, :45]
    scene = (50 + 20 * np.sin(y / 3.0) * np.cos(x / 4.0)).astype(np.float32)
    f = np.stack([scene] * 3)
    f[1, 10, 12] += 2000  # a single pixel
    f[1, 20, 5:9] += 1500  # a track a pixel wide
    f[2, 30:33, 30:33] += 2000  # a blob 3 px across: not a speck of this kind
    out = despiked(f, np)
    np.testing.assert_array_equal(out[0], f[0])  # (nothing to take: the scene as it is)
    assert out[1].max() < scene.max() + 1
    np.testing.assert_array_equal(out[2], f[2])
    assert out.dtype == np.float32 and f[1].max() > 1000  # (a new array: the input kept)


def test_noise_is_not_a_speck():
    rng = np.random.default_rng(1)
    low = rng.poisson(np.full((8, 64, 64), 25.0)).astype(np.float32)  # 25 photons, flat
    assert decide_despike("auto", ArraySource(low)) == ("off", None)


def _star_field(n_stars, sigma, seed, frames=12, side=128):
    """Undersampled stars (gaussian PSF of ``sigma`` px, fluxes over three decades) drifting
    by a random walk under Poisson noise; and the drift."""
    from scipy.special import erf

    rng = np.random.default_rng(seed)
    ys, xs = rng.uniform(0, side, n_stars), rng.uniform(0, side, n_stars)
    flux = 200 / (1 - rng.uniform(0, 0.999, n_stars))
    drift = np.cumsum(rng.normal(0, 0.4, (frames, 2)), 0)
    drift -= drift[0]
    c = np.arange(side)[:, None]

    def pixels(p):  # (each pixel's share of a star at p)
        return 0.5 * (erf((c + 0.5 - p) / (sigma * 2 ** 0.5))
                      - erf((c - 0.5 - p) / (sigma * 2 ** 0.5)))

    return np.stack([rng.poisson((pixels(ys + a) * flux) @ pixels(xs + b).T + 100)
                     for a, b in drift]).astype(np.float32), drift


def test_stars_of_an_undersampled_field_are_no_specks():
    """The brightest stars stand out of the opening as a speck does, but they move with the
    scene from frame to frame: auto leaves them (despiked, their shifts were 5-10x worse)."""
    stars, _ = _star_field(60, 0.5, 7)
    assert decide_despike("auto", ArraySource(stars)) == ("off", None)
    rays = stars.copy()
    rays[5, 40, 50:53] += 30 * stars.max()
    assert decide_despike("auto", ArraySource(rays))[0] == "on"


def test_two_frames_and_sparse_counts():
    stars, _ = _star_field(60, 1.0, 3, frames=2)
    stars[1, 50, 60:63] += 50 * stars.max()  # (a speck in one of two frames: not a hot pixel)
    assert decide_despike("auto", ArraySource(stars))[0] == "on"
    counts = np.random.default_rng(3).poisson(0.05, (20, 64, 64)).astype(np.uint16)
    assert decide_despike("auto", ArraySource(counts))[0] == "off"  # (every count stands out)


def test_auto_takes_cosmic_rays_out_and_the_output_keeps_them(rays):
    frames = rays.frames
    off = xcorr_app.align(frames, device="cpu", despike="off", quality=False)
    assert stack_errors(off.shifts, rays.truth)[0] > 5  # (what the specks do)
    out = np.empty(frames.shape, np.float32)
    res = xcorr_app.align(frames, device="cpu", out=out)
    assert stack_errors(res.shifts, rays.truth)[0] < 0.05
    assert not res.quality.flagged.any() and not res.low_confidence.any()
    assert res.settings["options"]["despike"] == "on"
    assert any(n.startswith("despike auto: on") for n in res.notes)
    # the aligned stack is the frames as they came, shifted: their specks too
    np.testing.assert_array_equal(out, np.concatenate([c for _, c in res.apply(frames, device="cpu")]))
    assert out.max() > 10 * np.median(out)


def test_patches_are_measured_without_specks_and_warp_the_frames_as_they_came(rays):
    frames = rays.frames
    out = np.empty(frames.shape, np.float32)
    res = xcorr_app.align(frames, device="cpu", patches=(2, 2), out=out)
    assert res.settings["options"]["despike"] == "on"
    assert np.abs(res.motion_field - rays.truth[:, None, None, :]).max() < 0.1
    # (the report's figures are of the frames the pass measured: no speck flags a patch)
    assert not res.quality.flagged.any() and not res.quality.patch_poor.any()
    np.testing.assert_array_equal(out, np.concatenate(
        [c for _, c in res.apply(frames, device="cpu")]))


def test_a_refined_patch_template_is_made_without_specks():
    """The mean of the frames keeps each speck over their number: too faint to be found in
    it, enough to pull the patches (this stack's field was 1.8 px off)."""
    s = make_stack("cosmic_rays", 1, image="camera", shape=(128, 128))
    res = xcorr_app.align(s.frames, device="cpu", patches=(2, 2), reference="refined",
                          quality=False)
    assert np.abs(res.motion_field - s.truth[:, None, None, :]).max() < 0.3


def test_nan_fill_is_despiked_around():
    s = make_stack("cosmic_rays", 0, image="coins", shape=(128, 128))
    frames = s.frames.copy()
    frames[:, :3] = np.nan  # (another tool's fill)
    res = xcorr_app.align(frames, device="cpu", mask="nan")
    assert res.settings["options"]["despike"] == "on"
    assert stack_errors(res.shifts, s.truth)[0] < 0.05


def test_auto_leaves_a_stack_without_specks_as_it_was():
    s = make_stack("plain", 0, quick=True)
    auto = xcorr_app.align(s.frames, device="cpu")
    off = xcorr_app.align(s.frames, device="cpu", despike="off")
    np.testing.assert_array_equal(auto.shifts, off.shifts)
    assert auto.settings["options"]["despike"] == "off"
    assert not any("despike" in n for n in auto.notes)


def test_the_source_reads_despiked_frames():
    frames = np.zeros((2, 6, 7), np.float64)
    frames[1, 2, 3] = 1000
    src = DespikedSource(ArraySource(frames))
    assert src.dtype == np.float64 and src.read(0, 2).max() == 0
    into = np.ones((2, 6, 7))
    assert src.read(0, 2, out=into) is into and into.max() == 0


def test_a_run_shared_out_says_it_measures_the_specks(rays):
    from types import SimpleNamespace

    from xcorr_app.alignment.rigid import decide_specks

    src = ArraySource(rays.frames)
    for name in ("gpus", "dask"):
        opts, note = decide_specks(AlignOptions(), src, SimpleNamespace(name=name))
        assert opts.despike == "off"
        assert note.startswith("despike auto:") and "measured with them" in note
    clean = ArraySource(make_stack("plain", 0, quick=True).frames)
    assert decide_specks(AlignOptions(), clean, SimpleNamespace(name="dask"))[1] is None


@pytest.mark.parametrize("value", ["yes", "ON", True, None])
def test_bad_values_are_refused(value):
    with pytest.raises(InputError, match="unknown despike"):
        AlignOptions(despike=value)


def test_on_shared_out_is_refused():
    for executor in ("gpus", "dask"):
        with pytest.raises(InputError, match="despike on takes bright specks out"):
            AlignOptions(despike="on").check_executor(executor)
    AlignOptions().check_executor("gpus")


def test_cli_despike(tmp_path):
    r = xcorr("align", "sample_data/cell_drift.tif", "--despike", "maybe",
              "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "maybe" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.gpu
def test_gpu_mirrors_the_cpu(rays):
    import cupy

    frames = rays.frames
    cpu = xcorr_app.align(frames, device="cpu")
    np.testing.assert_array_equal(cupy.asnumpy(despiked(cupy.asarray(frames), cupy)),
                                  despiked(frames, np))
    for given in (frames, cupy.asarray(frames)):
        gpu = xcorr_app.align(given, device="gpu")
        assert gpu.settings["options"]["despike"] == "on"
        np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=1e-3)
        assert (gpu.quality.flagged == cpu.quality.flagged).all()
    cpu = xcorr_app.align(frames, device="cpu", patches=(2, 2))
    out = cupy.empty(frames.shape, cupy.float32)
    gpu = xcorr_app.align(cupy.asarray(frames), device="gpu", patches=(2, 2), out=out)
    np.testing.assert_allclose(gpu.motion_field, cpu.motion_field, atol=1e-3)
    assert (gpu.quality.patch_poor == cpu.quality.patch_poor).all()
    # (the frames as they came, warped by the GPU's field: the CPU's field, within 1e-3 px,
    # puts a few edge pixels on the other side of the frame's edge)
    np.testing.assert_allclose(cupy.asnumpy(out), np.concatenate(
        [cupy.asnumpy(c) for _, c in gpu.apply(frames, device="gpu")]), atol=1e-3)
