"""Rotation: every run measures each aligned frame's rotation against its template and flags
``rotated`` the frames it leaves rotated by enough that a corner may be 0.5 px off (their
rotation alone moves it over 0.3 px:
:class:`~xcorr_app.alignment.piecewise.RotationProbe`); ``model="rigid-body"`` measures each
frame's rotation and shift and aligns by both in one warp (``AlignResult.rotation_deg``,
``apply``, ``shifts.json``/``shifts.csv``, ``xcorr apply``); what it cannot take is refused in
one line."""

import json

import numpy as np
import pytest
import tifffile
from scipy import ndimage as ndi

from cli_helpers import assert_clean_error, xcorr
from xcorr_app import align
from xcorr_app.alignment import AlignOptions
from xcorr_app.alignment.piecewise import fit_rigid_body
from xcorr_app.alignment.warp import corner_displacement, rigid_body_field
from xcorr_app.errors import InputError

#: the test stacks' frames: odd, not square
SHAPE = (95, 121)
#: still frames before the ramp, and the ramp's last angle (degrees)
STILL, RAMP = 8, 1.5


def rotating_stack(seed, n=20, ramp=RAMP, still=STILL, drift=3.0, noise=0.0):
    """``(frames, shifts, angles)``: ``n`` float32 frames of a smooth random scene, each moved
    by a random-walk drift and turned counter-clockwise (as shown) about the frame centre by
    ``angles`` (0 for ``still`` frames, then a ramp to ``ramp`` degrees); ``shifts`` are the
    shifts that align them (xcorr's convention: the displacement at the frame centre) and
    ``-angles`` the rotations that do."""
    rng = np.random.default_rng(seed)
    h, w = SHAPE
    m = 40
    scene = ndi.gaussian_filter(rng.random((h + 2 * m, w + 2 * m)), 2.0)
    scene = (scene - scene.mean()) / scene.std()
    c = np.array([(h - 1) / 2 + m, (w - 1) / 2 + m])
    angles = np.clip((np.arange(n) - still) / max(n - 1 - still, 1), 0.0, 1.0) * ramp
    moves = np.cumsum(rng.normal(0.0, drift / np.sqrt(n), (n, 2)), axis=0)
    moves[0] = 0.0
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    frames = []
    for a, d in zip(np.deg2rad(angles), moves):
        back = np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])  # R(-a)
        p = np.stack([yy + m - c[0] - d[0], xx + m - c[1] - d[1]])
        frames.append(ndi.map_coordinates(scene, np.tensordot(back, p, 1) + c[:, None, None],
                                          order=3))
    frames = np.array(frames) * 100.0 + 1000.0
    if noise:
        frames += rng.normal(0.0, noise, frames.shape)
    return frames.astype(np.float32), -moves, angles


@pytest.fixture(scope="module")
def turning():
    return rotating_stack(3)


@pytest.fixture(scope="module")
def runs(turning):
    frames = turning[0]
    return align(frames, device="cpu"), align(frames, device="cpu", model="rigid-body")


def _inner_rms(aligned, reference, margin=8):
    a = aligned[:, margin:-margin, margin:-margin]
    return np.sqrt(((a - reference[margin:-margin, margin:-margin]) ** 2).mean(axis=(1, 2)))


def test_the_translation_model_flags_the_frames_it_leaves_rotated(turning, runs):
    frames, _, angles = turning
    q = runs[0].quality
    moved = corner_displacement(angles, SHAPE)
    # the ramp: frames 0-9 move their corners at most 0.19 px, 10-19 at least 0.36 px (with a
    # shift's own error at the corners, 0.5 px off)
    assert moved[:STILL + 2].max() < 0.2 and moved[STILL + 2:].min() > 0.36
    assert q.rotated.tolist() == (moved > 0.35).tolist()
    assert int(q.rotated.sum()) == len(frames) - STILL - 2
    assert q.flagged[q.rotated].all()
    assert q.summary()["rotated_frames"] == np.flatnonzero(moved > 0.35).tolist()
    # the angle that would still align each frame: the ramp, turned back
    np.testing.assert_allclose(q.residual_rotation_deg, -angles, atol=0.1)
    assert runs[0].rotation_deg is None  # (the model's angles: rigid-body only)


@pytest.mark.parametrize("keywords", [{"lucas_kanade": "on"}, {"reference": "refined"}],
                         ids=["lucas-kanade", "refined"])
def test_after_a_template_of_the_frames_rotation_is_judged_against_frame_0(turning, keywords):
    """A template of frames that turn has their mean orientation; the shifts are in frame 0's
    place, so each frame's rotation is frame 0's less its own (against the template, the still
    frames read 0.45 degrees and were flagged, the frames turned as the mean were not)."""
    frames, _, angles = turning
    q = align(frames, device="cpu", **keywords).quality
    moved = corner_displacement(angles, SHAPE)
    assert q.rotated.tolist() == (moved > 0.35).tolist()
    np.testing.assert_allclose(q.residual_rotation_deg, -angles, atol=0.02)


def test_rigid_body_measures_rotation_and_shift_and_aligns_the_frames(turning, runs):
    frames, truth, angles = turning
    translation, rigid = runs
    np.testing.assert_allclose(rigid.rotation_deg, -angles, atol=0.05)
    err = np.hypot(*(rigid.shifts - truth).T)
    assert err.max() <= 0.1, err
    # at the corners: the translation model leaves the rotation there, rigid-body does not
    want = rigid_body_field(truth, -angles, SHAPE)[0]
    for res, lo, hi in ((rigid, 0.0, 0.15), (translation, 1.0, 3.0)):
        turn = np.zeros(len(frames)) if res.rotation_deg is None else res.rotation_deg
        got = rigid_body_field(res.shifts, turn, SHAPE)[0]
        worst = np.sqrt(((got - want) ** 2).sum(-1)).max()
        assert lo <= worst <= hi, (res.rotation_deg is None, worst)
    assert not rigid.quality.flagged.any(), rigid.quality.summary()
    assert np.abs(rigid.quality.residual_rotation_deg).max() < 0.05
    good = np.concatenate([c for _, c in rigid.apply(device="cpu")])
    bad = np.concatenate([c for _, c in translation.apply(device="cpu")])
    ref = frames[0]
    good_rms, bad_rms = _inner_rms(good, ref), _inner_rms(bad, ref)
    assert good_rms.max() < 6.0, good_rms  # (the scene's spread: 100)
    assert bad_rms[-1] > 4 * good_rms[-1] and bad_rms[-1] > 25.0, (bad_rms, good_rms)


@pytest.mark.parametrize("keywords", [{"reference": "refined"}, {"lucas_kanade": "on"},
                                      {"interpolate_low": True, "min_confidence": 1.5}])
def test_rigid_body_after_a_template_of_the_frames_is_relative_to_frame_0(turning, keywords):
    """A template of frames that turn turns as their mean: the angles and shifts are made
    frame 0's again (as the translation model's shifts after template passes), and the report
    measures against frame 0."""
    frames, truth, angles = turning
    res = align(frames, device="cpu", model="rigid-body", **keywords)
    assert res.rotation_deg[0] == 0.0 and (res.shifts[0] == 0.0).all()
    np.testing.assert_allclose(res.rotation_deg, -angles, atol=0.05)
    assert np.hypot(*(res.shifts - truth).T).max() <= 0.1
    assert not res.quality.flagged.any(), res.quality.summary()


def test_a_frame_turned_counter_clockwise_is_turned_back(turning, runs):
    """``rotation_deg`` is the rotation that aligns a frame (counter-clockwise as shown): a
    frame whose content turned by +a gets -a, and its field moves its corners as R(-a) does."""
    _, _, angles = turning
    assert runs[1].rotation_deg[-1] == pytest.approx(-RAMP, abs=0.05)
    field, corners = rigid_body_field([[0.0, 0.0]], [90.0], (5, 5))
    # turned 90 degrees about (2, 2): the output's top-left corner reads the frame's top right
    assert (corners[0, 0] - field[0, 0, 0]).round(9).tolist() == [0.0, 4.0]


def test_a_stack_that_only_drifts_gets_no_rotation(rng):
    frames, truth, angles = rotating_stack(11, ramp=0.0, noise=5.0)
    assert not angles.any()
    res = align(frames, device="cpu")
    assert not res.quality.rotated.any()
    assert np.abs(res.quality.residual_rotation_deg).max() < 0.05
    rigid = align(frames, device="cpu", model="rigid-body")
    assert np.abs(rigid.rotation_deg).max() < 0.05
    np.testing.assert_allclose(rigid.shifts, truth, atol=0.1)


@pytest.mark.parametrize("kind", ["plain", "low_light", "bleaching_background", "large_drift",
                                  "non_square", "circular", "circular_noisy"])
def test_the_bench_stacks_that_do_not_rotate_get_no_rotated_flag(kind):
    from xcorr_app.bench._accuracy_data import cases, make_stack

    image, shape, seed = cases(kind, [0])[-1]  # (the smaller of the kind's two sizes)
    s = make_stack(kind, seed, image=image, shape=shape)
    q = align(s.frames, device="cpu").quality
    assert not q.rotated.any(), (kind, q.residual_rotation_deg)
    assert np.nanmax(np.abs(q.residual_rotation_deg)) < 0.3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_tests_drift_stacks_get_no_rotated_flag(seed):
    from synthetic import drift_stack

    stack, _ = drift_stack(np.random.default_rng(seed), n=16, shape=(80, 96), max_shift=5,
                           peak_counts=200)
    q = align(stack, device="cpu").quality
    assert not q.rotated.any(), q.residual_rotation_deg
    assert not (q.flagged & ~(q.worse | q.poor)).any()


def test_apply_and_out_and_xcorr_apply_give_the_aligned_stack(turning, runs, tmp_path):
    frames = turning[0]
    rigid = runs[1]
    out = np.zeros(frames.shape, np.float32)
    again = align(frames, device="cpu", model="rigid-body", out=out, quality=False)
    np.testing.assert_array_equal(again.rotation_deg, rigid.rotation_deg)
    applied = np.concatenate([c for _, c in rigid.apply(device="cpu")])
    np.testing.assert_array_equal(out, applied)
    other = frames * 0.5 + 7.0  # (another channel of the same frames)
    moved = np.concatenate([c for _, c in rigid.apply(other)])
    inside = applied != 0.0  # (the fill, 0, where a frame moved away)
    np.testing.assert_allclose(moved[inside], applied[inside] * 0.5 + 7.0, rtol=1e-5, atol=1e-3)
    with pytest.raises(InputError, match="rotates frames of 95x121"):
        next(iter(rigid.apply(np.zeros((20, 96, 121), np.float32))))
    with pytest.raises(InputError, match="resample=fourier"):
        rigid.save(tmp_path / "bad", resample="fourier")
    assert not (tmp_path / "bad").exists()
    # the files: shifts.json and shifts.csv carry the angles; xcorr apply reads either
    path = tmp_path / "stack.tif"
    tifffile.imwrite(path, frames, imagej=True, metadata={"axes": "TYX"})
    res = xcorr("align", path, "--device", "cpu", "--model", "rigid-body", "--out",
                tmp_path / "run")
    assert res.returncode == 0, res.stderr
    assert "model rigid-body: |rotation|" in res.stdout
    doc = json.loads((tmp_path / "run" / "shifts.json").read_text())
    assert doc["settings"]["options"]["model"] == "rigid-body"
    got = np.array([f["rotation_deg"] for f in doc["frames"]])
    np.testing.assert_allclose(got, rigid.rotation_deg, atol=1e-9)
    assert (tmp_path / "run" / "shifts.csv").read_text().splitlines()[0].endswith(
        ",agree,rotation_deg")
    written = tifffile.imread(tmp_path / "run" / "aligned.tif")
    np.testing.assert_allclose(written, applied, atol=1e-3)
    for table in ("shifts.json", "shifts.csv"):
        dest = tmp_path / f"applied_{table}.tif"
        res = xcorr("apply", tmp_path / "run" / table, path, "--device", "cpu", "--out", dest)
        assert res.returncode == 0, res.stderr
        np.testing.assert_allclose(tifffile.imread(dest), written, atol=1e-3)
    res = xcorr("apply", tmp_path / "run" / "shifts.json", path, "--device", "cpu",
                "--resample", "fourier", "--out", tmp_path / "f.tif")
    assert_clean_error(res, "--resample fourier", "rigid-body")
    assert not (tmp_path / "f.tif").exists()


def test_the_translation_model_writes_its_tables_as_before(turning, runs, tmp_path):
    """A translation run's shifts.csv keeps its columns; its shifts.json gives each frame's
    residual rotation (not a rotation to apply: xcorr apply shifts only)."""
    csv = runs[0].csv_text().splitlines()[0]
    assert csv == "frame,source,dy,dx,peak,confidence,low_confidence,fft_dy,fft_dx,agree"
    path = tmp_path / "stack.tif"
    tifffile.imwrite(path, turning[0], imagej=True, metadata={"axes": "TYX"})
    res = xcorr("align", path, "--device", "cpu", "--out", tmp_path / "run")
    assert res.returncode == 0, res.stderr
    assert f"{len(turning[0]) - STILL - 2} frames flagged rotated" in res.stdout
    assert "--model rigid-body aligns them" in res.stdout
    doc = json.loads((tmp_path / "run" / "shifts.json").read_text())
    assert "rotation_deg" not in doc["frames"][-1]
    assert doc["frames"][-1]["quality_flag"] == "rotated"
    assert doc["frames"][-1]["residual_rotation_deg"] == pytest.approx(-RAMP, abs=0.1)


def test_the_fit_recovers_a_rotation_and_leaves_a_patch_without_texture_out():
    rng = np.random.default_rng(0)
    u = np.stack(np.meshgrid([-30.0, 0.0, 30.0], [-40.0, 0.0, 40.0], indexing="ij"), -1)
    u = u.reshape(-1, 2)
    phi = np.deg2rad([0.0, 0.7, -2.5])
    t = np.array([[0.0, 0.0], [1.5, -2.0], [-3.0, 0.25]])
    back = np.stack([np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]]) for a in phi])
    s = u[None] - np.einsum("nij,pj->npi", back, u) + t[:, None]
    noisy = s + rng.normal(0.0, 0.01, s.shape)
    noisy[1, 4] += [3.0, -2.0]  # (a patch that matched something else)
    got, shift, se = fit_rigid_body(noisy, u, np.ones((3, 9), bool), np)
    np.testing.assert_allclose(np.rad2deg(got), np.rad2deg(phi), atol=0.02)
    np.testing.assert_allclose(shift, t, atol=0.02)
    assert (se[:, 0] < np.deg2rad(0.05)).all()
    few = fit_rigid_body(noisy, u, np.eye(9, dtype=bool)[:3], np)[0]
    assert np.isnan(few).all()  # (fewer than three patches: no fit)


@pytest.mark.parametrize("keywords, words", [
    ({"model": "rotation"}, ["unknown model 'rotation'", "rigid-body"]),
    ({"model": "rigid-body", "patches": (2, 2)}, ["patches"]),
    ({"model": "rigid-body", "reference": "previous"}, ["previous"]),
    ({"model": "rigid-body", "bidi": 1.0}, ["bidi"]),
])
def test_what_rigid_body_cannot_take_is_refused(keywords, words):
    with pytest.raises(InputError) as err:
        AlignOptions(**keywords)
    for w in words:
        assert w in str(err.value)


def test_rigid_body_is_refused_on_several_gpus_dask_and_small_frames():
    opts = AlignOptions(model="rigid-body")
    for executor, word in (("gpus", "gpus"), ("dask", "Dask")):
        with pytest.raises(InputError, match=f"model rigid-body runs in one process.*{word}"):
            opts.check_executor(executor)
    with pytest.raises(InputError, match="frames of 16x20 px are too small"):
        align(np.random.default_rng(0).random((4, 16, 20)).astype(np.float32), device="cpu",
              model="rigid-body")


def test_the_command_line_refuses_a_bad_model_in_one_line(tmp_path):
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, rotating_stack(1, n=4)[0], imagej=True, metadata={"axes": "TYX"})
    for args, words in ((["--model", "affine"], ["--model", "affine"]),
                        (["--model", "rigid-body", "--patches", "2x2"], ["patches"]),
                        (["--model", "rigid-body", "--resample", "fourier"], ["fourier"]),
                        (["--model", "rigid-body", "--volumes"], ["--model"])):
        res = xcorr("align", path, "--device", "cpu", "--out", tmp_path / "o", *args)
        assert res.returncode == 2, res.stderr
        assert_clean_error(res, *words)
        assert not (tmp_path / "o").exists()


@pytest.mark.gpu
def test_rigid_body_on_cupy_input_matches_the_cpu(turning, runs):
    import cupy as cp

    frames = turning[0]
    res = align(cp.asarray(frames), device="gpu", model="rigid-body")
    np.testing.assert_allclose(res.rotation_deg, runs[1].rotation_deg, atol=0.01)
    np.testing.assert_allclose(res.shifts, runs[1].shifts, atol=0.01)
    assert res.quality.rotated.tolist() == runs[1].quality.rotated.tolist()
    gpu = align(cp.asarray(frames), device="gpu").quality
    assert gpu.rotated.tolist() == runs[0].quality.rotated.tolist()
    out = cp.zeros(frames.shape, cp.float32)
    align(cp.asarray(frames), device="gpu", model="rigid-body", out=out)
    np.testing.assert_allclose(out.get(), np.concatenate([c for _, c in runs[1].apply()]),
                               atol=0.05)


def fit_inputs(n=600, p=9, seed=5):
    """Patch displacements of ``n`` frames (rotations, shifts, noise, outliers, NaN patches,
    frames of too few patches), their peaks and the patches' tensors."""
    rng = np.random.default_rng(seed)
    side = int(round(np.sqrt(p)))
    u = np.stack(np.meshgrid(np.linspace(-40, 40, side), np.linspace(-55, 55, p // side),
                             indexing="ij"), -1).reshape(-1, 2)
    phi = np.deg2rad(rng.uniform(-3, 3, n))
    t = rng.uniform(-2, 2, (n, 2))
    back = np.stack([[np.cos(phi), np.sin(phi)], [-np.sin(phi), np.cos(phi)]]).transpose(2, 0, 1)
    d = u[None] - np.einsum("nij,pj->npi", back, u) + t[:, None]
    d += rng.normal(0, 0.05, d.shape)
    d[rng.random((n, p)) < 0.1] += rng.normal(0, 3, 2)  # (patches that matched elsewhere)
    d[rng.random((n, p)) < 0.05] = np.nan
    peak = rng.uniform(0.2, 1.0, (n, p))
    peak[rng.random((n, p)) < 0.05] = np.nan
    peak[:10, 2:] = 0.0  # (two patches left: no fit)
    m = rng.normal(size=(p, 2, 2))
    return d, u, peak, m @ m.transpose(0, 2, 1) + 0.5 * np.eye(2)


def test_the_fit_from_peaks_weighs_them_and_leaves_nan_patches_out():
    d, u, peak, tensors = fit_inputs()
    from xcorr_app.alignment.piecewise._rotation import peak_weights

    want = fit_rigid_body(d, u, np.isfinite(d).all(-1) * peak_weights(peak, np), np, tensors)
    got = fit_rigid_body(d, u, peak, np, tensors, peaks=True)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert np.isnan(got[0][:10]).all() and np.isfinite(got[0][10:]).mean() > 0.9


@pytest.mark.gpu
@pytest.mark.parametrize("p", [9, 4])  # (9: the kernel; others on the host)
@pytest.mark.parametrize("peaks", [False, True])
def test_the_gpu_fit_is_the_host_fit(p, peaks):
    import cupy as cp

    from xcorr_app.alignment.piecewise._rotation import peak_weights

    d, u, peak, tensors = fit_inputs(p=p)
    weights = peak if peaks else np.isfinite(d).all(-1) * peak_weights(peak, np)
    want = fit_rigid_body(d, u, weights, np, tensors, peaks=peaks)
    got = fit_rigid_body(cp.asarray(d), u, cp.asarray(weights), cp, tensors, peaks=peaks)
    for a, b in zip(got, want):
        assert isinstance(a, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(a), b, rtol=1e-9, atol=1e-11)


def test_rigid_body_refines_over_the_whole_frame(monkeypatch):
    """The bench's worst rigid-body stack before the whole-frame steps (moon 128x128 seed 1
    of the ``rotation`` kind: a dim, smooth scene whose nine patches measure the angle to about
    a tenth of a degree, 0.154 px RMS): the Gauss-Newton steps of each whole frame against the
    frames' mean bring it under 0.1 px, and under the patches' fit alone."""
    from xcorr_app.alignment import _rotation
    from xcorr_app.bench._accuracy_data import make_stack

    s = make_stack("rotation", 1, image="moon", shape=(128, 128))

    def rms(res):
        return float(np.sqrt(((res.shifts - s.truth)[1:] ** 2).sum(axis=1).mean()))

    ours = rms(align(s.frames, device="cpu", model="rigid-body"))
    monkeypatch.setattr(_rotation, "WHOLE_FRAME", False)  # (the patches' fit alone)
    patches = rms(align(s.frames, device="cpu", model="rigid-body"))
    assert ours <= 0.1 and ours <= 0.7 * patches, (ours, patches)


def test_rigid_body_with_a_frame_as_reference_leaves_that_frame_unmoved(turning):
    """The whole-frame steps fit every frame against the frames' mean: with a frame index as
    reference the result is made that frame's again (its transform none), as frame 0's is for
    ``first``."""
    frames, truth, angles = turning
    res = align(frames, device="cpu", model="rigid-body", reference=3)
    assert res.rotation_deg[3] == 0.0 and (res.shifts[3] == 0.0).all()
    first = align(frames, device="cpu", model="rigid-body")
    # (frame 3 is still: its own transform against frame 0 is its drift alone)
    np.testing.assert_allclose(res.rotation_deg, first.rotation_deg - first.rotation_deg[3],
                               atol=0.02)


def test_a_constant_frame_of_a_rigid_body_run_has_no_angle(turning):
    """Its shift NaN, its angle was a fit's leftover (0.0048 deg); NaN too, and the frame is
    left as it is by apply."""
    frames = turning[0].copy()
    frames[3] = frames[3].mean()
    res = align(frames, device="cpu", model="rigid-body")
    assert np.isnan(res.shifts[3]).all() and np.isnan(res.rotation_deg[3])
    assert np.isfinite(res.rotation_deg[[0, 1, 2, 4]]).all()
    aligned = np.concatenate([c for _, c in res.apply(frames, device="cpu")])
    np.testing.assert_array_equal(aligned[3], frames[3].astype(np.float32))
