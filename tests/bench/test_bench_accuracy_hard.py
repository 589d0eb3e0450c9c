"""``xcorr bench accuracy``'s hard stacks (what microscopes add: static patterns on the sensor,
deep bleaching, rotation, a closed shutter) and the Cramer-Rao bound beside every row."""

import dataclasses
import json

import numpy as np
import pytest
from scipy import ndimage as ndi

from xcorr_app.bench import _accuracy as bench
from xcorr_app.bench import _accuracy_data as data
from xcorr_app.bench._accuracy_sensor import CAMERA_OFFSET, READ_NOISE, camera, rotation_matrix
from tests.cli_helpers import xcorr

HARD = data.HARD_KINDS


# ------------------------------------------------------------------------------ the stacks

def test_hard_kinds_are_bench_kinds_and_the_drawn_kinds_stay():
    assert data.KINDS == ("plain", "low_light", "bleaching_background", "large_drift",
                          "non_square", "circular")
    assert set(HARD) == {"static_blobs", "dust_vignette", "fixed_pattern", "deep_bleaching",
                         "rotation", "rotation_jitter", "shutter", "cosmic_rays"}
    assert data.ALL_KINDS[-len(HARD):] == HARD and not set(HARD) & set(data.KINDS)
    for k in HARD:  # four images, two shapes, several seeds, as the other kinds
        got = data.cases(k, seeds=(0, 1))
        assert len({c[0] for c in got}) >= 4 and len({c[1] for c in got}) == 2
        assert len(got) == len(set(got)) == 16


def _residual_shift(stack, i):
    """How far the stack's truth of frame ``i`` is off what its noise-free scene shows (px,
    (dy, dx), the truth minus the scene's shift): frame 0's
    scene put through the claimed motion (rotation by ``angle`` about the frame centre, then
    the centre moved by minus the truth), one least-squares fit of a further shift, gain and
    offset against frame ``i``'s scene.  Both smoothed by a gaussian first (it commutes with
    the motion), so that the spline here and the generator's Fourier shift agree."""
    scene = [ndi.gaussian_filter(np.asarray(f, np.float64), 1.5) for f in stack.scene]
    h, w = scene[0].shape
    c = np.array([(h - 1) / 2, (w - 1) / 2])
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    rel = np.stack([yy - c[0] + stack.truth[i, 0], xx - c[1] + stack.truth[i, 1]])
    src = np.einsum("ab,bhw->ahw", rotation_matrix(-stack.angle[i]), rel) + c[:, None, None]
    inside = (src[0] > 6) & (src[0] < h - 7) & (src[1] > 6) & (src[1] < w - 7)
    coeffs = ndi.spline_filter(scene[0], order=3)

    def at(dy, dx):
        return ndi.map_coordinates(coeffs, src + np.reshape([dy, dx], (2, 1, 1)), order=3,
                                   prefilter=False)[inside]

    pred = at(0, 0)
    jac = np.stack([pred, at(0.5, 0) - at(-0.5, 0), at(0, 0.5) - at(0, -0.5),
                    np.ones_like(pred)], axis=1)
    coef = np.linalg.lstsq(jac, scene[i][inside], rcond=None)[0]
    return -coef[1:3] / coef[0]


@pytest.mark.parametrize("kind", HARD)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_truth_moves_the_noise_free_scene(kind, seed):
    """The scene without the sensor's patterns, moved as the truth (and the angle) say, is
    every frame's within 0.05 px; a truth 0.1 px off, or the rotation the other way, is not."""
    s = data.make_stack(kind, seed, quick=True)
    assert s.truth[0].tolist() == [0.0, 0.0] and np.abs(s.truth).max() > 1.0
    left = np.array([_residual_shift(s, i) for i in range(1, len(s.frames))])
    assert np.abs(left).max() < 0.05, left
    off = dataclasses.replace(s, truth=s.truth + [0.0, 0.1])
    np.testing.assert_allclose(_residual_shift(off, len(s.frames) - 1), [0.0, 0.1], atol=0.03)
    if s.angle.any():
        turned = dataclasses.replace(s, angle=-s.angle)
        worst = max(np.abs(_residual_shift(turned, i)).max() for i in range(1, len(s.frames)))
        assert worst > 0.04


@pytest.mark.parametrize("kind", HARD)
def test_frames_are_a_cameras_reading_of_the_clean_frames(kind):
    s = data.make_stack(kind, 0)
    lam = s.clean - s.offset  # the Poisson mean
    assert s.read_noise == READ_NOISE and lam.min() >= 0 and s.scene.max() > 0
    resid = s.frames - s.clean
    if kind == "cosmic_rays":  # (the tracks: a few pixels a frame, far above the scene)
        tracks = resid > 4 * s.clean.max()
        assert 0 < tracks.sum() < 1e-3 * resid.size and tracks.any(axis=(1, 2)).mean() > 0.5
        resid = np.where(tracks, 0.0, resid)
    assert abs(resid.mean()) < 0.02 * np.sqrt(lam.mean() + READ_NOISE ** 2)
    # Poisson plus read noise: the variance of the residual is the mean plus the read noise's
    np.testing.assert_allclose(resid.var(), lam.mean() + READ_NOISE ** 2, rtol=0.05)
    dark = lam < 0.5  # (a dark pixel shows the read noise alone)
    if dark.sum() > 1000:
        np.testing.assert_allclose(resid[dark].std(), READ_NOISE, rtol=0.15)
    # the moving part is the scene seen through a gain fixed on the sensor
    lit = s.scene > 1e-3 * s.scene.max()
    gain = (s.clean - s.static) / np.where(lit, s.scene, np.nan)
    assert np.nanmax(np.nanstd(gain, axis=0)) < 1e-9
    assert s.gradient.shape == (len(s.frames), 2, *s.frames.shape[1:])


def test_static_blobs_and_hot_pixels_stay_on_the_sensor():
    peak = data.SPECS["static_blobs"]["peak"]
    s = data.make_stack("static_blobs", 0)
    glow = s.static - s.offset
    hot = glow > 5 * peak
    assert hot.sum() >= 20 and (glow > peak).mean() < 0.05  # hot pixels, a few blobs
    assert np.all(np.median(s.frames, axis=0)[hot] > 4 * peak)  # they stay where they are
    np.testing.assert_allclose(s.clean - s.static, s.scene)  # no gain


def test_dust_and_vignette_take_light_where_they_are():
    s = data.make_stack("dust_vignette", 0)
    gain = (s.clean - s.static)[0] / s.scene[0]
    assert gain.max() <= 1.0 and gain.min() < 0.5  # a dust shadow takes most of the light
    assert gain[:8, :8].mean() < 0.8 * gain[120:136, 120:136].mean()  # vignetted corners
    assert np.all(s.static == CAMERA_OFFSET)


def test_fixed_pattern_is_column_and_pixel_offsets_and_gain_at_40_photons():
    s = data.make_stack("fixed_pattern", 0)
    assert s.scene.max() == pytest.approx(40.0)
    columns = s.offset.mean(axis=0)
    assert 1.0 < columns.std() < 4.0 and (s.offset - columns).std() > 1.0
    gain = (s.clean - s.static) / np.where(s.scene > 1, s.scene, np.nan)
    assert 0.02 < np.nanstd(gain) < 0.05


def test_deep_bleaching_falls_20_times():
    s = data.make_stack("deep_bleaching", 0)
    light = s.scene.sum(axis=(1, 2))
    np.testing.assert_allclose(light[0] / light[-1], 20.0, rtol=0.1)
    assert np.all(np.diff(light) < 0) and np.all(s.static == CAMERA_OFFSET)


def test_rotation_is_a_ramp_and_jitter_is_not():
    s = data.make_stack("rotation", 0)
    np.testing.assert_allclose(s.angle / s.angle[-1], np.linspace(0, 1, len(s.angle)),
                               atol=1e-12)
    assert 1.0 <= abs(s.angle[-1]) <= 2.0
    s = data.make_stack("rotation_jitter", 0)
    assert s.angle[0] == 0 and np.abs(s.angle).max() <= 0.5
    assert np.abs(np.diff(s.angle)).mean() > 0.1 and not np.all(np.diff(s.angle) > 0)
    assert data.make_stack("plain", 0, quick=True).angle is None
    assert not data.make_stack("static_blobs", 0, quick=True).angle.any()


def test_the_shutter_closes_on_half_the_frames():
    s = data.make_stack("shutter", 0)
    closed = s.info["closed"]
    assert len(closed) == len(s.frames) // 2 and 0 not in closed
    lit = [i for i in range(len(s.frames)) if i not in closed]
    ratio = s.scene[closed].mean() / s.scene[lit].mean()
    assert 0.008 < ratio < 0.012  # 1% of the light, and the same camera noise
    resid = (s.frames - s.clean)[closed]
    np.testing.assert_allclose(resid.var(), (s.clean - s.offset)[closed].mean()
                               + READ_NOISE ** 2, rtol=0.1)


# ------------------------------------------------------------------------------ the bound

def _spot(shape, centre, sigma, photons):
    """A gaussian spot of ``photons`` (its mean), ``sigma`` px or ``(sigma_y, sigma_x)``, and
    its derivative with respect to the shift of ``centre``."""
    sy, sx = np.broadcast_to(np.asarray(sigma, np.float64), (2,))
    yy, xx = np.mgrid[:shape[0], :shape[1]].astype(np.float64)
    dy, dx = yy - centre[0], xx - centre[1]
    spot = photons * np.exp(-dy ** 2 / (2 * sy ** 2) - dx ** 2 / (2 * sx ** 2)) \
        / (2 * np.pi * sy * sx)
    return spot, np.stack([dy / sy ** 2, dx / sx ** 2]) * spot


@pytest.mark.parametrize("sigma,photons", [(1.5, 2000.0), (2.5, 8000.0), ((1.2, 2.6), 500.0)])
def test_cramer_rao_of_a_gaussian_spot_is_sigma_over_root_photons(sigma, photons):
    spot, grad = _spot((64, 64), (31.3, 32.6), sigma, photons)
    got = bench.cramer_rao(spot[None], grad[None])
    want = np.broadcast_to(np.asarray(sigma, float), (2,)) / np.sqrt(photons)
    np.testing.assert_allclose(got, [want], rtol=0.01)  # (dy, dx) in that order
    # read noise lowers the information; a flat frame has none
    assert np.all(bench.cramer_rao(spot[None], grad[None], read_noise=3.0) > 1.05 * got)
    assert bench.cramer_rao(spot[None], 0 * grad[None]).tolist() == [[np.inf, np.inf]]


def test_cramer_rao_is_what_a_maximum_likelihood_fit_reaches():
    """Monte-Carlo: a weighted Gauss-Newton fit of the spot's position in Poisson photons
    plus read noise (dim: the read noise matters) scatters as the bound says, per axis."""
    rng = np.random.default_rng(7)
    centre, sigma, photons, background, read = (8.2, 7.6), 1.3, 300.0, 2.0, 3.0
    spot, _ = _spot((16, 16), centre, sigma, photons)
    lam = spot + background
    fits = []
    for _ in range(1500):
        frame = rng.poisson(lam) + rng.normal(0, read, lam.shape)
        c = np.array(centre)
        for _ in range(3):  # Gauss-Newton from the truth, weighted by the expected variance
            s, g = _spot(lam.shape, c, sigma, photons)
            jac = g.reshape(2, -1).T
            w = 1.0 / (s + background + read ** 2).ravel()
            c = c + np.linalg.solve(jac.T @ (jac * w[:, None]),
                                    jac.T @ (w * (frame - s - background).ravel()))
        fits.append(c)
    scatter = np.std(fits, axis=0)
    _, grad = _spot((16, 16), centre, sigma, photons)
    bound = bench.cramer_rao(lam[None], grad[None], read_noise=read)[0]
    np.testing.assert_allclose(scatter, bound, rtol=0.08)
    # without the read noise in it, the bound would be well below what the fit reaches
    assert np.all(bench.cramer_rao(lam[None], grad[None])[0] < 0.9 * scatter)


def test_stack_bound_adds_frame_0s_bound():
    spot, grad = _spot((32, 32), (15.5, 15.5), 2.0, 400.0)
    s = data.make_stack("plain", 0, quick=True)
    n = 3
    two = dataclasses.replace(s, frames=np.zeros((n, 32, 32), np.float32),
                              clean=np.stack([spot, 4 * spot, spot]),
                              gradient=np.stack([grad, 4 * grad, grad]))
    rms, rel = bench.stack_bound(two)
    one = 2.0 / np.sqrt(400.0)  # a frame's bound per axis: sigma / sqrt(photons)
    np.testing.assert_allclose(rel, [0, np.sqrt(2 * one ** 2 * (1 + 1 / 4)),
                                     np.sqrt(4 * one ** 2)], rtol=0.01)
    assert rms == pytest.approx(np.sqrt(np.mean(rel[1:] ** 2)), abs=1e-4)
    # the camera's offset is no light: taking it out of the mean is what the bound uses
    cam = dataclasses.replace(two, clean=two.clean + 100.0, offset=np.full((32, 32), 100.0))
    np.testing.assert_allclose(bench.stack_bound(cam)[1], rel, rtol=1e-9)
    assert bench.stack_bound(data.make_stack("circular", 0, quick=True))[0] == 0.0
    assert np.isnan(bench.stack_bound(data.make_stack("piecewise", 0, quick=True))[0])


def test_the_oracle_scatters_as_the_bound_on_a_camera_stack():
    """The oracle (a likelihood fit against the noise-free frames, weighted by the camera's
    variance) over fresh camera noise: as the bound says, frame by frame."""
    s = data.make_stack("fixed_pattern", 0, quick=True)
    rng = np.random.default_rng(1)
    errs = np.array([bench.oracle_shifts(dataclasses.replace(
        s, frames=camera(s.clean - s.offset, s.offset, rng).astype(np.float32))) - s.truth
        for _ in range(60)])
    got = np.sqrt((errs[:, 1:] ** 2).sum(-1).mean(0))
    np.testing.assert_allclose(got, bench.stack_bound(s)[1][1:], rtol=0.25)


# ------------------------------------------------------------------------------ the bench

def test_quick_bench_of_the_hard_kinds(tmp_path):
    lines = []
    path = tmp_path / "hard.json"
    assert bench.main(quick=True, kinds=HARD, echo=lines.append, json_path=path) == 0
    text = "\n".join(lines)
    assert "| CRB (median) | frames > 0.5 px off (flagged) |" in text
    rows = json.loads(path.read_text())["rows"]
    # (the stacks that rotate: the rigid-body model's row too)
    assert {r["kind"] for r in rows} == set(HARD)
    assert len(rows) == len(HARD) * 3 + len(bench.ROTATING)
    assert {r["kind"] for r in rows if r["method"] == bench.RIGID_BODY} == set(bench.ROTATING)
    for r in rows:
        assert r["error"] == "" and np.isfinite(r["crb"]) and 0 < r["crb"], r
        assert r["crb"] < r["rms"] or r["method"] == bench.RIGID_BODY, r
        assert isinstance(r["off"], int)
        assert (r["off_flagged"] is None) == r["method"].startswith("skimage")
        assert text.count(f"| {r['kind']} | 1 |") == 1
    default = {r["kind"]: r for r in rows if r["method"] == bench.DEFAULT}
    # the static patterns hold the correlation at zero: the bench must show that
    assert default["static_blobs"]["rms"] > 1.0 and default["static_blobs"]["off"] >= 3
    assert 0 <= default["static_blobs"]["off_flagged"] <= default["static_blobs"]["off"]


def test_rotating_stacks_count_their_corners_and_flag_them():
    """On the stacks that rotate a frame is off where its corners are (the rotation the
    translation model leaves moves them); the default flags every such frame, and the
    rigid-body model aligns them (its row: within 0.1 px at the centre, no frame off).  Frame 3
    only because the flag allows for the estimate's bias and the shift's own error: its centre
    is 0.15 px off, its corner 0.615 px, and its probe's angle (0.223 degrees) moves the
    corners 0.352 px, over the flag's 0.3 px (with 0.35, until 2026-11-28, it was left)."""
    rows = bench.measure("rotation", 0, image="camera", shape=(128, 128),
                         methods=[bench.DEFAULT, bench.RIGID_BODY])
    default, rigid = rows
    assert default["off"] == 17 and default["off_flagged"] == 17, default
    assert rigid["off"] == 0 and rigid["rms"] <= 0.1, rigid
    err = bench.corner_errors([[0.0, 0.0]], [0.0], [[0.0, 0.0]], [1.0], (101, 101))
    assert err[0] == pytest.approx(2 * np.hypot(50, 50) * np.sin(np.deg2rad(0.5)))


def test_report_shows_the_bound_and_the_frames_off():
    rows = []
    for seed, (d, crb, off, flagged) in enumerate([(0.4, 0.05, 3, 1), (2.0, 0.07, 5, 5)]):
        for m, v in ((bench.DEFAULT, d), (bench.SKIMAGE[0], 1.0), (bench.SKIMAGE[1], 3.0)):
            rows.append({"kind": "shutter", "seed": seed, "method": m, "shape": [4, 8, 8],
                         "image": "x", "error": "", "rms": v, "max": v, "oracle": 0.01,
                         "crb": crb, "off": off if m == bench.DEFAULT else 9,
                         "off_flagged": flagged if m == bench.DEFAULT else None})
    text = "\n".join(bench.report_lines(rows))
    assert "| shutter | 2 | 1.200 / 2.000 | 1.000 / 1.000 | 0.010 | 1 / 0 / 1 | 0.060 | " \
           "8 (6) |" in text
    assert "| shutter | x | 8x8 | 1 | 2.000 | 1.000 | 3.000 | 2.000 | loses | 0.010 | 0.070 " \
           "| 5 (5) |" in text
    rows = [{k: v for k, v in r.items() if k not in ("crb", "off", "off_flagged")}
            for r in rows]  # (rows of a run before the bound: n/a)
    assert "| 1 / 0 / 1 | n/a | n/a |" in "\n".join(bench.report_lines(rows))


def test_cli_kinds_runs_the_hard_kinds_alone():
    res = xcorr("bench", "accuracy", "--quick", "--kinds", "shutter,rotation")
    assert res.returncode == 0, res.stderr
    assert "| shutter | 1 |" in res.stdout and "| rotation | 1 |" in res.stdout
    assert "| plain |" not in res.stdout and "CRB" in res.stdout
