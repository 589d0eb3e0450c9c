"""``xcorr bench accuracy``: the generator's stacks (truth, determinism, each kind's property)
and the benchmark's report, in process and through the command line."""

import dataclasses
import json

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.bench import _accuracy as bench
from xcorr_app.bench import _accuracy_data as data
from xcorr_app.errors import InputError
from tests.cli_helpers import assert_clean_error, digest, xcorr


# ------------------------------------------------------------------------------ the stacks

def test_truth_is_what_a_plain_stack_aligns_to():
    s = data.make_stack("plain", seed=0)
    got = np.asarray(align(s.frames, device="cpu").shifts)
    assert s.truth[0].tolist() == [0.0, 0.0]
    assert np.abs(s.truth).max() > 2.0  # a real drift, so a sign error would show
    np.testing.assert_allclose(got, s.truth, atol=0.1)
    assert bench.stack_errors(-s.truth, s.truth)[0] > 1.0  # the opposite sign is far off


@pytest.mark.parametrize("kind", data.KINDS)
def test_same_seed_same_stack(kind):
    a, b = data.make_stack(kind, 1, quick=True), data.make_stack(kind, 1, quick=True)
    assert np.array_equal(a.frames, b.frames) and np.array_equal(a.truth, b.truth)
    c = data.make_stack(kind, 2, quick=True)
    assert not np.array_equal(a.truth, c.truth)


@pytest.mark.parametrize("kind", data.KINDS)
def test_shapes_and_dtype(kind):
    s = data.make_stack(kind, 0)
    spec = data.SPECS[kind]
    assert s.frames.shape == (spec["frames"], *spec["shape"]) and s.frames.dtype == np.float32
    assert s.truth.shape == (spec["frames"], 2) and np.all(np.isfinite(s.frames))
    assert np.abs(s.truth).max() <= spec["drift"]


def test_large_drift_is_large_and_non_square_is_not_square():
    s = data.make_stack("large_drift", 0)
    assert s.frames.shape[1:] == (512, 512) and np.abs(s.truth).max() > 15.0
    assert data.make_stack("non_square", 0).frames.shape[1:] == (200, 320)


def test_circular_frames_are_exact_circular_shifts():
    from scipy import ndimage as ndi

    s = data.make_stack("circular", 0, quick=True)
    f0 = s.frames[0].astype(np.float64)

    def back(f, t):  # the spectrum of f shifted back by t, without the Nyquist row and column
        spec = ndi.fourier_shift(np.fft.fft2(f.astype(np.float64)), t)
        return np.delete(np.delete(spec, f.shape[0] // 2, 0), f.shape[1] // 2, 1)

    want = back(f0, (0, 0))
    scale = np.abs(want).max()
    for f, t in zip(s.frames[1:], s.truth[1:]):  # shifting back by the truth gives frame 0
        # exactly (float32 rounding), but for the Nyquist terms the real part of a shift drops
        assert np.abs(back(f, t) - want).max() < 1e-5 * scale
        assert np.abs(back(f, t + [0.1, 0]) - want).max() > 1e-3 * scale
    # a circular shift keeps every pixel's content: the sum is the same
    assert np.allclose(s.frames.sum(axis=(1, 2)), s.frames[0].sum(), rtol=1e-5)


def test_cropped_kinds_do_not_wrap_around():
    s = data.make_stack("plain", 0)
    i = int(np.argmax(np.abs(s.truth[:, 1])))
    dx = -int(round(s.truth[i, 1]))  # the content's drift along x
    f0, fi = s.frames[0].astype(float), s.frames[i].astype(float)
    # the overlap agrees (up to noise and the subpixel part) much better than a wrapped copy
    inner = fi[:, max(dx, 0) + 2:fi.shape[1] + min(dx, 0) - 2]
    ref = f0[:, max(-dx, 0) + 2:f0.shape[1] + min(-dx, 0) - 2]
    rows = slice(10, -10)
    good = np.corrcoef(inner[rows].ravel(), ref[rows].ravel())[0, 1]
    assert good > 0.5


def test_bleaching_frames_fall_over_a_static_background():
    s = data.make_stack("bleaching_background", 0)
    means = s.frames.mean(axis=(1, 2))
    assert np.all(np.diff(means) < 0.01 * means[0] + 1)  # falling (up to noise)
    assert means[-1] < 0.95 * means[0] and means[-1] > 0.5 * means[0]
    # the background stays: the last frame is far from 0.6 x the first (it would be, alone)
    assert means[-1] > 0.6 * means[0] * 1.05


def test_low_light_is_about_25_photons_at_the_peak():
    s = data.make_stack("low_light", 0)
    assert np.array_equal(s.frames, np.round(s.frames))  # photon counts
    assert 20 <= s.frames.max() <= 60 and 1 < s.frames.mean() < 25
    assert s.info["peak_photons"] == 25.0


def test_unknown_kind_is_an_input_error():
    with pytest.raises(InputError, match="unknown stack kind"):
        data.make_stack("nope")
    with pytest.raises(InputError, match="unknown stack kind"):
        bench.main(kinds=["nope"], echo=lambda s: None)


# ------------------------------------------------------------------------------ the report

def test_report_and_targets():
    rows = [{"kind": k, "seed": s, "method": m, "shape": [4, 8, 8], "image": "x", "error": "",
             "rms": rms, "max": 2 * rms}
            for k, rms in (("plain", 0.02), ("circular", 0.2)) for s in (0, 1)
            for m in (bench.DEFAULT, "skimage pcc phase")]
    text = "\n".join(bench.report_lines(rows))
    assert "### plain (4 frames of 8x8; seeds 0, 1)" in text
    assert "| xcorr default | 0.020 | 0.020-0.020 | 0.040 |" in text
    assert "on every kind: no (worst: circular 0.200)" in text
    assert "mean over all stacks <= 0.04 px: no (0.110)" in text
    assert "circular <= 0.05 px: no (0.200)" in text
    rows = [dict(r, rms=0.01) for r in rows]
    text = "\n".join(bench.report_lines(rows))
    assert "every kind: yes" in text and "0.04 px: yes" in text and "0.05 px: yes" in text


def test_quick_bench_reports_every_method(tmp_path):
    lines = []
    path = tmp_path / "acc.json"
    assert bench.main(quick=True, kinds=["plain", "circular"], echo=lines.append,
                      json_path=path) == 0
    text = "\n".join(lines)
    for m in bench.METHODS:
        assert text.count(f"| {m} |") == 2, m
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == 2 * len(bench.METHODS) and all(r["error"] == "" for r in rows)
    plain = {r["method"]: r["rms"] for r in rows if r["kind"] == "plain"}
    assert plain[bench.DEFAULT] < 0.2  # the truth's sign is xcorr's
    with pytest.raises(Exception, match="exists"):
        bench.main(quick=True, kinds=["plain"], echo=lines.append, json_path=path)


def test_cli_quick_and_errors(tmp_path):
    out = tmp_path / "a.json"
    res = xcorr("bench", "accuracy", "--quick", "--json", out)
    assert res.returncode == 0, res.stderr
    for k in data.KINDS:
        assert f"### {k} " in res.stdout
    for m in bench.METHODS:
        assert res.stdout.count(f"| {m} |") == len(data.KINDS), m
    assert "- default <= 0.1 px RMS on every kind:" in res.stdout
    assert res.stdout.count(f"| {bench.ORACLE} |") == len(data.KINDS)
    assert "| kind | seed | image | default RMS px | oracle RMS px |" in res.stdout
    before = digest(out)
    assert_clean_error(xcorr("bench", "accuracy", "--quick", "--json", out), "exists")
    assert digest(out) == before
    assert_clean_error(xcorr("bench", "accuracy", "--only", "nope"), "unknown stack kind")
    assert_clean_error(xcorr("bench", "accuracy", "--seeds", "a,b"), "--seeds")


def test_the_band_pass_row_is_prefilter_autos_band_pass():
    from xcorr_app.alignment._preprocess import AUTO_BANDPASS

    assert bench.METHODS[f"xcorr prefilter={AUTO_BANDPASS} alone"]["prefilter"] == AUTO_BANDPASS


# ------------------------------------------------------------------------------ the oracle

def test_fourier_shift_gradient_is_the_exact_derivative():
    yy, xx = np.mgrid[:64, :64].astype(float)
    blob = np.exp(-((yy - 30.0) ** 2 + (xx - 33.0) ** 2) / 40.0)
    moved, (gy, gx) = data._fourier_shift(blob, (1.3, -2.6), gradient=True)
    want = np.exp(-((yy - 31.3) ** 2 + (xx - 30.4) ** 2) / 40.0)
    np.testing.assert_allclose(moved, want, atol=1e-9)
    np.testing.assert_allclose(gy, -2 * (yy - 31.3) / 40.0 * want, atol=1e-9)
    np.testing.assert_allclose(gx, -2 * (xx - 30.4) / 40.0 * want, atol=1e-9)


@pytest.mark.parametrize("kind", data.KINDS)
def test_the_clean_scene_is_what_the_frames_were_drawn_from(kind):
    s = data.make_stack(kind, 0, quick=True)
    assert s.clean.shape == s.frames.shape and s.gradient.shape == (len(s.frames), 2,
                                                                     *s.frames.shape[1:])
    assert s.static.shape == s.frames.shape[1:]
    assert (s.static.any()) == (kind == "bleaching_background")
    mean = s.frames.mean(axis=(1, 2))  # Poisson draws: the frame means agree with the scene's
    np.testing.assert_allclose(mean, s.clean.mean(axis=(1, 2)), rtol=0.02, atol=0.1)
    # the gradient is the derivative of the moving part: like its finite difference (which
    # misses the fine detail that the spectrum keeps: 0.6 on the circular one)
    g = np.gradient(s.clean[1] - s.static)
    assert np.corrcoef(g[0].ravel(), s.gradient[1, 0].ravel())[0, 1] > 0.5
    assert np.corrcoef(g[1].ravel(), s.gradient[1, 1].ravel())[0, 1] > 0.5


@pytest.mark.parametrize("kind", ["plain", "bleaching_background"])
def test_oracle_recovers_a_known_offset_relative_to_frame_0(kind):
    """Frames made of the scene moved (to first order) by known offsets, with a gain and an
    offset: the fit returns the truth plus each offset less frame 0's, and ignores the gain
    and offset (a sign error, or the static part fitted as moving, would show)."""
    s = data.make_stack(kind, 0, quick=True)
    delta = np.random.default_rng(3).uniform(-0.05, 0.05, (len(s.frames), 2))
    moving = s.clean - s.static
    frames = s.clean + np.einsum("nc,nchw->nhw", delta, s.gradient.astype(np.float64))
    frames = frames + 0.1 * moving + 2.0
    got = bench.oracle_shifts(dataclasses.replace(s, frames=frames.astype(np.float32)))
    np.testing.assert_allclose(got, s.truth + delta - delta[0], atol=2e-3)
    assert got[0].tolist() == [0.0, 0.0]


def test_oracle_is_the_floor_of_the_low_light_stack():
    s = data.make_stack("low_light", 0)
    oracle = bench.stack_errors(bench.oracle_shifts(s), s.truth)[0]
    first = bench.stack_errors(align(s.frames, device="cpu", lucas_kanade="off").shifts,
                               s.truth)[0]
    assert 0.05 < oracle < 0.1 < first


def test_report_has_the_oracle_per_kind_and_per_stack():
    rows = [{"kind": "plain", "seed": s, "method": bench.DEFAULT, "shape": [4, 8, 8],
             "image": "x", "error": "", "rms": 0.02, "max": 0.04, "oracle": o}
            for s, o in ((0, 0.01), (1, 0.03))]
    text = "\n".join(bench.report_lines(rows))
    assert f"| {bench.ORACLE} | 0.020 | 0.010-0.030 | |" in text
    assert "| plain | 1 | x | 0.020 | 0.030 |" in text


# ------------------------------------------------------------------- the error's split

def test_error_split_is_exact_and_tells_a_shared_offset_from_scatter(rng):
    truth = rng.normal(0, 3, (12, 2))
    truth[0] = 0
    offset = truth + np.array([0.3, -0.4])  # every frame off by the same (0.3, -0.4)
    offset[0] = 0
    assert bench.error_split(offset, truth) == (0.5, 0.0)
    noisy = truth + rng.normal(0, 0.1, truth.shape)
    noisy -= noisy[0]  # relative to frame 0, as every method's shifts
    rms = bench.stack_errors(noisy, truth)[0]
    shared, frame = bench.error_split(noisy, truth)
    assert frame > 0 and shared > 0
    assert abs(np.hypot(shared, frame) - rms) < 2e-4
    assert bench.error_split(truth[:1], truth[:1]) == (0.0, 0.0)
    bad = noisy.copy()
    bad[3, 1] = np.nan
    assert bench.error_split(bad, truth) == (np.inf, np.inf)


def test_measure_splits_the_default_and_the_oracle():
    (row,) = bench.measure("plain", 0, quick=True, methods=[bench.DEFAULT])
    assert abs(np.hypot(row["shared"], row["per_frame"]) - row["rms"]) < 2e-4
    assert abs(np.hypot(row["oracle_shared"], row["oracle_per_frame"]) - row["oracle"]) < 2e-4


def test_report_shows_the_split_per_stack_and_its_mean_per_kind():
    rows = [{"kind": "low_light", "seed": s, "method": bench.DEFAULT, "shape": [4, 8, 8],
             "image": "x", "error": "", "rms": r, "max": 0.4, "shared": sh, "per_frame": pf,
             "oracle": 0.08, "oracle_shared": 0.05, "oracle_per_frame": 0.06}
            for s, r, sh, pf in ((0, 0.13, 0.05, 0.12), (1, 0.17, 0.13, 0.10))]
    text = "\n".join(bench.stack_lines(rows))
    assert "| low_light | 1 | x | 0.170 (0.130 / 0.100) | 0.080 (0.050 / 0.060) |" in text
    assert "| low_light | mean |  | 0.150 (0.090 / 0.110) | 0.080 (0.050 / 0.060) |" in text
    one = "\n".join(bench.stack_lines(rows[:1]))
    assert "| mean |" not in one  # one seed: no mean row


def test_cli_seeds_take_ranges():
    res = xcorr("bench", "accuracy", "--quick", "--only", "plain", "--seeds", "2-4")
    assert res.returncode == 0, res.stderr
    assert "plain seed 2 (" in res.stdout and "seed 3" not in res.stdout  # quick: the first
    assert_clean_error(xcorr("bench", "accuracy", "--seeds", "4-2"), "--seeds")
    assert_clean_error(xcorr("bench", "accuracy", "--seeds", "1-x"), "--seeds")
