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


@pytest.mark.parametrize("kind", data.ALL_KINDS)
def test_same_seed_same_stack(kind):
    a, b = data.make_stack(kind, 1, quick=True), data.make_stack(kind, 1, quick=True)
    assert np.array_equal(a.frames, b.frames) and np.array_equal(a.truth, b.truth)
    c = data.make_stack(kind, 2, quick=True)
    assert not np.array_equal(a.truth, c.truth)


@pytest.mark.parametrize("kind", data.ALL_KINDS)
def test_shapes_and_dtype(kind):
    spec = data.SPECS[kind]
    s = data.make_stack(kind, 0, quick=kind == "piecewise")  # (its full size: a few seconds)
    n, shape = spec["quick"] if kind == "piecewise" else (spec["frames"], spec["shape"])
    assert s.frames.shape == (n, *shape) and s.frames.dtype == np.float32
    assert s.truth.shape == (n, 2) and np.all(np.isfinite(s.frames))
    assert np.abs(s.truth).max() <= spec["drift"] + spec.get("deform", 0.0)


@pytest.mark.parametrize("kind", data.ALL_KINDS)
def test_every_kind_is_drawn_from_four_images_at_two_sizes_and_five_seeds(kind):
    got = data.cases(kind)
    assert len({c[0] for c in got}) >= 4 and len({c[1] for c in got}) == 2
    assert {c[2] for c in got} == {0, 1, 2, 3, 4}
    assert len(got) == len(set(got)) >= 40
    assert data.cases(kind, quick=True) == [(data.SPECS[kind]["bench_images"][0],
                                             data.SPECS[kind]["quick"][1], 0)]


def test_a_case_is_its_image_and_shape_and_the_default_stacks_stay():
    a = data.make_stack("plain", 1, image="astronaut", shape=(64, 80))
    assert a.image == "astronaut" and a.frames.shape == (20, 64, 80)
    b = data.make_stack("plain", 1, image="camera", shape=(64, 80))
    assert not np.array_equal(a.truth, b.truth)  # each case its own draws
    # the stacks other tests draw do not move: the kind's image of the seed, its draws
    assert data.make_stack("plain", 1).image == "moon"
    assert np.array_equal(data.make_stack("plain", 1, quick=True).truth,
                          data.make_stack("plain", 1, quick=True).truth)


def test_noisy_circular_stacks_are_photon_counts_of_circular_shifts():
    s = data.make_stack("circular_noisy", 0, image="microaneurysms", shape=(64, 64))
    assert np.array_equal(s.frames, np.round(s.frames)) and s.frames.max() > 600
    assert s.info["peak_photons"] == 800.0 and s.truth[0].tolist() == [0.0, 0.0]
    assert np.abs(s.truth).max() <= 6.0 and np.abs(s.truth[1:]).min() > 0
    # the expected frames are circular shifts: the same total in every frame
    np.testing.assert_allclose(s.clean.sum(axis=(1, 2)), s.clean[0].sum(), rtol=1e-3)


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

def _rows(kind, default, peers, oracle=0.01, seeds=(0, 1)):
    """Rows of a kind's stacks: the default's RMS and scikit-image's two, per seed."""
    out = []
    for s, d, (none, phase) in zip(seeds, default, peers):
        for m, v in ((bench.DEFAULT, d), (bench.SKIMAGE[0], none), (bench.SKIMAGE[1], phase)):
            out.append({"kind": kind, "seed": s, "method": m, "shape": [4, 8, 8], "image": "x",
                        "error": "", "rms": v, "max": 2 * v, "oracle": oracle})
    return out


def test_report_compares_every_stack_with_scikit_images_better_normalization():
    rows = _rows("plain", [0.02, 0.03], [(0.04, 0.021), (0.02, 0.5)]) \
        + _rows("circular_noisy", [0.06, 0.01], [(0.07, 0.2), (0.0102, 0.3)])
    text = "\n".join(bench.report_lines(rows))
    # median / worst of the default and of scikit-image's better one; wins / ties / loses
    assert "| plain | 2 | 0.025 / 0.030 | 0.021 / 0.021 | 0.010 | 0 / 1 / 1 |" in text
    assert "| circular_noisy | 2 | 0.035 / 0.060 | 0.040 / 0.070 | 0.010 | 1 / 1 / 0 |" in text
    assert "| plain | x | 8x8 | 1 | 0.030 | 0.020 | 0.500 | 1.500 | loses | 0.010 |" in text
    assert "| plain | x | 8x8 | 0 | 0.020 | 0.040 | 0.021 | 0.952 | tie | 0.010 |" in text
    assert "default median <= 0.1 px on every rigid kind: yes" in text
    assert "every circular_noisy stack <= 0.05 px: no (1 of 2; worst 0.060, x 8x8 seed 0, " \
           "whose oracle is 0.010)" in text
    assert "on every stack: no (3 of 4)" in text
    assert "  - loses: plain x 8x8 seed 1: 0.030 against 0.020" in text
    assert "every method" not in text  # (only the compared ones ran)
    rows = [dict(r, rms=0.01) for r in rows]
    text = "\n".join(bench.report_lines(rows))
    assert "<= 0.05 px: yes" in text and "on every stack: yes (4 of 4)" in text


def test_quick_bench_reports_every_kind_against_scikit_image(tmp_path):
    lines = []
    path = tmp_path / "acc.json"
    assert bench.main(quick=True, kinds=["plain", "circular_noisy"], echo=lines.append,
                      json_path=path) == 0
    text = "\n".join(lines)
    assert text.count("| plain | 1 |") == 1 and text.count("| circular_noisy | 1 |") == 1
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == 2 * len(bench.COMPARED) and all(r["error"] == "" for r in rows)
    plain = {r["method"]: r["rms"] for r in rows if r["kind"] == "plain"}
    assert plain[bench.DEFAULT] < 0.2  # the truth's sign is xcorr's
    assert plain[bench.SKIMAGE[0]] < 1.0  # and scikit-image's
    with pytest.raises(Exception, match="exists"):
        bench.main(quick=True, kinds=["plain"], echo=lines.append, json_path=path)


def test_every_method_on_request():
    lines = []
    assert bench.main(quick=True, kinds=["plain"], echo=lines.append, methods="all") == 0
    text = "\n".join(lines)
    for m in bench.METHODS:  # (all but the GPU's row, which asks for a GPU)
        assert text.count(f"\n| {m} |") == (m != bench.DEFAULT_GPU), m
    with pytest.raises(InputError, match="unknown method"):
        bench.main(quick=True, methods=["nope"], echo=lines.append)


def test_the_gpus_row_against_the_cpus(monkeypatch):
    """``gpu=True`` adds the default on the GPU and a table of its distance from the CPU's
    shifts and flags: here the "GPU" row runs on the CPU, so the distance is 0 (rigid and
    piecewise: its motion field)."""
    from xcorr_app import backend

    monkeypatch.setitem(bench.METHODS, bench.DEFAULT_GPU, {"device": "cpu"})
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    lines = []
    assert bench.main(quick=True, kinds=["plain", "piecewise"], echo=lines.append,
                      gpu=True) == 0
    text = "\n".join(lines)
    assert "(and the default on the GPU)" in text
    assert "### the default on the GPU against the CPU" in text
    assert "| plain | 1 | 0.0e+00 / 0.0e+00 | 0 |" in text
    assert "| piecewise | 1 | 0.0e+00 / 0.0e+00 | n/a |" in text
    assert "- the GPU's shifts within 0.001 px of the CPU's on every stack: yes" in text
    assert "GPU - CPU 0.0e+00 px" in text  # (the stack's own line)


def test_the_gpu_cpu_distance_counts_nan_and_flags():
    nan = float("nan")
    cpu = (np.array([[0.0, 0.0], [1.0, nan], [nan, nan]]), np.array([False, True, False]))
    assert bench._vs_cpu(cpu, (cpu[0] + [[0, 0], [2e-3, 0], [0, 0]], cpu[1])) == (
        pytest.approx(2e-3), 0)
    gpu = (np.array([[0.0, 0.0], [1.0, 0.5], [nan, nan]]), np.array([True, True, True]))
    assert bench._vs_cpu(cpu, gpu) == (np.inf, 2)  # (a number where the CPU has none)
    rows = [{"kind": "plain", "seed": 3, "image": "moon", "shape": [4, 8, 6],
             "method": bench.DEFAULT_GPU, "vs_cpu": v, "flags_differ": f}
            for v, f in ((2e-3, 1), (1e-5, None))]
    text = "\n".join(bench.gpu_lines(rows))
    assert "| plain | 2 | 1.0e-03 / 2.0e-03 | 1 |" in text
    assert "on every stack: no (worst 2.0e-03 px, plain moon 8x6 seed 3)" in text
    assert bench.gpu_lines([]) == []


@pytest.mark.gpu
def test_the_gpus_shifts_are_the_cpus():
    pytest.importorskip("skimage")  # (the stacks' images; a GPU machine may lack it)
    lines = []
    assert bench.main(quick=True, kinds=["plain", "static_blobs", "piecewise"],
                      echo=lines.append, gpu=True) == 0
    # (the line goes on with the worst stack)
    assert any(ln.startswith("- the GPU's shifts within 0.001 px of the CPU's on every stack: "
                             "yes (worst ") for ln in lines), "\n".join(lines)


def test_without_scikit_image_the_bench_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "skimage", None)  # (import skimage raises ImportError)
    with pytest.raises(InputError, match="install scikit-image"):
        bench.main(quick=True, kinds=["plain"], echo=lambda s: None)


def test_piecewise_is_measured_on_the_motion_field():
    rows = bench.measure("piecewise", 0, quick=True)
    got = {r["method"]: r for r in rows}
    assert all(r["error"] == "" for r in rows) and np.isnan(rows[0]["oracle"])
    assert got[bench.DEFAULT]["rms"] < 0.5  # the field, not the rigid shift (a pixel off)
    s = data.make_stack("piecewise", 0, quick=True)
    rigid = np.asarray(align(s.frames, device="cpu").shifts)
    assert bench.stack_errors(rigid, s.truth)[0] > got[bench.DEFAULT]["rms"]


def test_skimage_field_finds_a_rigid_shift_on_every_patch():
    from scipy import ndimage as ndi
    from skimage import data as images

    canvas = images.camera()[100:240, 200:350].astype(np.float64)
    move = np.array([3.4, -2.2])  # the content's move; the shift to recover is minus it
    moved = np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(canvas), move)).real
    frames = np.stack([canvas, moved])[:, 20:116, 20:124]
    centres = np.stack(np.meshgrid([24.0, 48.0, 72.0], [26.0, 52.0, 78.0], indexing="ij"), -1)
    for norm in (None, "phase"):
        field = bench.skimage_field(frames, centres, (40, 44), norm)
        assert field.shape == (2, 3, 3, 2) and np.abs(field[0]).max() == 0
        np.testing.assert_allclose(field[1], np.broadcast_to(-move, (3, 3, 2)), atol=0.3)


def test_cli_quick_and_errors(tmp_path):
    out = tmp_path / "a.json"
    res = xcorr("bench", "accuracy", "--quick", "--json", out)
    assert res.returncode == 0, res.stderr
    for k in data.ALL_KINDS:
        assert res.stdout.count(f"| {k} | 1 |") == 1, k
    assert "| kind | image | shape | seed | default | skimage none | skimage phase |" in res.stdout
    assert "- default median <= 0.1 px on every rigid kind:" in res.stdout
    assert "- default on every circular_noisy stack <= 0.05 px:" in res.stdout
    before = digest(out)
    assert_clean_error(xcorr("bench", "accuracy", "--quick", "--json", out), "exists")
    assert digest(out) == before
    assert_clean_error(xcorr("bench", "accuracy", "--only", "nope"), "unknown stack kind")
    assert_clean_error(xcorr("bench", "accuracy", "--seeds", "a,b"), "--seeds")
    from xcorr_app import backend

    if not backend.gpu_available():
        assert_clean_error(xcorr("bench", "accuracy", "--quick", "--gpu"), "usable GPU")


def test_the_band_pass_row_is_prefilter_autos_band_pass():
    from xcorr_app.alignment.rigid._preprocess import AUTO_BANDPASS

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


@pytest.mark.parametrize("kind", data.KINDS + ("circular_noisy",))
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
    rows = _rows("plain", [0.02, 0.02], [(0.03, 0.04), (0.03, 0.04)], oracle=0.01)
    rows[3]["oracle"] = rows[4]["oracle"] = rows[5]["oracle"] = 0.03
    text = "\n".join(bench.report_lines(rows))
    assert "| plain | 2 | 0.020 / 0.020 | 0.030 / 0.030 | 0.020 | 2 / 0 / 0 |" in text
    assert "| plain | x | 8x8 | 1 | 0.020 | 0.030 | 0.040 | 0.667 | wins | 0.030 |" in text


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


def test_report_shows_the_split_per_stack():
    rows = _rows("low_light", [0.13, 0.17], [(0.2, 0.3), (0.2, 0.3)], oracle=0.08)
    rows[3].update(shared=0.13, per_frame=0.10)
    text = "\n".join(bench.stack_lines(rows))
    assert "| low_light | x | 8x8 | 1 | 0.170 (0.130 / 0.100) | 0.200 | 0.300 | 0.850 | wins " \
           "| 0.080 |" in text
    assert "| low_light | x | 8x8 | 0 | 0.130 | 0.200 |" in text  # (no split given)


def test_cli_seeds_take_ranges():
    res = xcorr("bench", "accuracy", "--quick", "--only", "plain", "--seeds", "2-4")
    assert res.returncode == 0, res.stderr
    assert "plain camera 96x96 seed 2:" in res.stdout and "seed 3" not in res.stdout  # quick
    assert_clean_error(xcorr("bench", "accuracy", "--seeds", "4-2"), "--seeds")
    assert_clean_error(xcorr("bench", "accuracy", "--seeds", "1-x"), "--seeds")
