"""``static``: a pattern fixed on the sensor (hot pixels and stray light, dust, column
offsets) found in a few frames and removed from what the passes measure; stacks without one
measured exactly as before; ``off`` means off; bad values refused in one line."""

import numpy as np
import pytest
from scipy import ndimage as ndi

import xcorr_app
from xcorr_app.alignment import AlignOptions
from xcorr_app.alignment.rigid import (COLUMN, COLUMNS, StaticSource, fit_static,
                                       refined_or_first)
from xcorr_app.bench._accuracy import stack_errors
from xcorr_app.bench._accuracy_data import make_stack
from xcorr_app.errors import InputError
from xcorr_app.io import ArraySource

from cli_helpers import xcorr

SHAPE = (96, 96)  # (20 frames: auto looks at stacks of 10 frames or more)


@pytest.fixture(scope="module")
def blobs():
    """Bright blobs and hot pixels fixed on the sensor lock every frame at zero shift."""
    return make_stack("static_blobs", 0, shape=SHAPE)


def test_blobs_locked_at_zero_are_freed(blobs):
    off = xcorr_app.align(blobs.frames, device="cpu", static="off")
    assert stack_errors(off.shifts, blobs.truth)[0] > 2.0  # (the frames lock on the pattern)
    res = xcorr_app.align(blobs.frames, device="cpu")
    rms, worst = stack_errors(res.shifts, blobs.truth)
    assert rms < 0.2 and worst < 0.3
    st = res.settings["static"]
    assert st["mode"] == "auto" and st["removed"] and st["locked"] and st["frames"] == 20
    assert res.settings["options"]["prefilter"] == "dog:1,4"
    assert any(n.startswith("static auto: a pattern fixed on the sensor removed") for n in
               res.notes)
    assert not res.low_confidence.any()


def test_an_axis_held_at_zero_by_columns_is_a_lock():
    """A hot and a dead column hold every frame's x shift at zero while y moves: locked (it
    was not, as the frames are not locked on both axes), the columns removed."""
    from xcorr_app.alignment.rigid._static import _locked

    rng = np.random.default_rng(0)
    moving = np.cumsum(rng.normal(0, 1.5, (20, 2)), axis=0)
    held = moving * [1.0, 0.0] + rng.normal(0, 0.01, (20, 2)) * [0.0, 1.0]
    assert _locked(held) and _locked(held[:, ::-1]) and not _locked(moving)
    assert not _locked(moving * [1.0, 0.1])  # (barely moving along x: not held at zero)
    s = make_stack("plain", 0, image="coins", shape=SHAPE)
    frames = s.frames.copy()
    frames[:, :, 40] += 3 * frames.max()
    frames[:, :, 70] = 0
    off = xcorr_app.align(frames, device="cpu", static="off", quality=False)
    assert stack_errors(off.shifts, s.truth)[0] > 2.0
    res = xcorr_app.align(frames, device="cpu", quality=False)
    assert res.settings["static"]["removed"] and stack_errors(res.shifts, s.truth)[0] < 0.1


def test_on_removes_as_auto_does(blobs):
    auto = xcorr_app.align(blobs.frames, device="cpu", quality=False)
    on = xcorr_app.align(blobs.frames, device="cpu", quality=False, static="on")
    np.testing.assert_array_equal(on.shifts, auto.shifts)
    assert on.settings["static"]["mode"] == "on" and on.settings["static"]["removed"]


def test_dust_shadows_are_removed():
    s = make_stack("dust_vignette", 0, shape=SHAPE)
    off = xcorr_app.align(s.frames, device="cpu", static="off", quality=False)
    res = xcorr_app.align(s.frames, device="cpu", quality=False)
    assert stack_errors(off.shifts, s.truth)[0] > 2.0
    assert stack_errors(res.shifts, s.truth)[0] < 0.25
    assert res.settings["static"]["removed"]


def test_dust_over_a_high_contrast_scene_is_removed_at_a_few_per_cent():
    """Dust shadows over coins are a few per cent of the scene's band-pass energy, yet left in
    they pull the peaks by about 0.1 px (the bench's stack: 0.106 px RMS)."""
    from xcorr_app.alignment.rigid._static import STATIC_SHARE

    s = make_stack("dust_vignette", 0, image="coins", shape=(256, 256))
    res = xcorr_app.align(s.frames, device="cpu", quality=False)
    st = res.settings["static"]
    assert st["removed"] and STATIC_SHARE <= st["share"] < 0.05, st
    assert stack_errors(res.shifts, s.truth)[0] < 0.03


@pytest.mark.parametrize("kind,seed", [("plain", 1), ("low_light", 0)])
def test_a_stack_without_a_pattern_is_measured_as_before(kind, seed):
    s = make_stack(kind, seed, shape=SHAPE)
    auto = xcorr_app.align(s.frames, device="cpu")
    off = xcorr_app.align(s.frames, device="cpu", static="off")
    np.testing.assert_array_equal(auto.shifts, off.shifts)
    np.testing.assert_array_equal(auto.low_confidence, off.low_confidence)
    st = auto.settings["static"]
    assert st["mode"] == "auto" and not st["removed"] and st["share"] < 0.01
    assert not any(n.startswith("static") for n in auto.notes)
    assert auto.settings["options"]["prefilter"] == off.settings["options"]["prefilter"]


def test_the_refinement_is_judged_by_the_static_model():
    """Where a pattern was removed and auto turned Lucas-Kanade on, the model of the frames
    picks the better of its shifts and the first pass's (a stack where what is left of the
    blobs misleads the refinement: the first pass's kept, as lucas_kanade off gives them)."""
    s = make_stack("static_blobs", 0, image="retina", shape=(128, 128))
    res = xcorr_app.align(s.frames, device="cpu", quality=False)
    off = xcorr_app.align(s.frames, device="cpu", quality=False, lucas_kanade="off")
    on = xcorr_app.align(s.frames, device="cpu", quality=False, lucas_kanade="on")
    assert res.settings["static"]["removed"] and res.settings["lucas_kanade"] == "on"
    assert any(n.startswith("lucas_kanade auto: its refinement left out") for n in res.notes)
    assert res.settings["static"]["refinement"] == "first"
    # (relative to frame 0's, as every run with a template pass: off's is 4e-8 px)
    np.testing.assert_allclose(res.shifts, off.shifts, rtol=0, atol=1e-6)
    assert stack_errors(res.shifts, s.truth)[0] < 0.6 * stack_errors(on.shifts, s.truth)[0]
    assert not any(n.startswith("lucas_kanade auto: its refinement") for n in on.notes)


def test_refined_or_first_keeps_the_shifts_the_model_fits_better():
    """The table whose shifts the static model fits better, judged on the sample's frames (a
    subset of the stack, its first frame not the stack's; a frame without a shift in one table
    left out); nothing judged without a pattern removed or with too few frames."""
    rng = np.random.default_rng(3)
    scene = 50 * ndi.gaussian_filter(rng.normal(size=(90, 90)), 1.5) + 200
    pattern = np.zeros((64, 64))
    pattern[::7, ::5] = 80.0
    d = np.trunc(rng.uniform(-8, 8, (14, 2)))
    d[0] = 0
    frames = np.stack([scene[13 + int(a):77 + int(a), 13 + int(b):77 + int(b)]
                       for a, b in d]) + pattern
    noise = rng.uniform(-0.6, 0.6, d.shape)
    noise[0] = 0
    truth, off = (np.full((14, len(COLUMNS)), np.nan) for _ in range(2))
    truth[:, COLUMN["dy"]:COLUMN["dx"] + 1] = d
    off[:, COLUMN["dy"]:COLUMN["dx"] + 1] = d + noise
    off[5, COLUMN["dy"]] = np.nan  # (sampled, left out of the judgement)
    src = ArraySource(frames.astype(np.float32))
    sample = [1, 2, 3, 5, 6, 8, 9, 11, 12, 13]
    settings = {"removed": True, "sample": sample}
    got, note = refined_or_first(settings, src, truth, off, np)
    assert got is truth and note is None and settings["refinement"] == "refined"
    got, note = refined_or_first(settings, src, off, truth, np)
    assert got is truth and note.startswith("lucas_kanade auto: its refinement left out")
    assert settings["refinement"] == "first"
    unmeasured = np.where(np.arange(14)[:, None] == 0, truth, np.nan)
    for other, table in (({"removed": False, "sample": sample}, off),
                         ({"removed": True, "sample": [1, 2]}, off),  # (too few to judge by)
                         ({"removed": True, "sample": sample}, unmeasured)):
        got, note = refined_or_first(other, src, table, truth, np)
        assert got is table and note is None and "refinement" not in other


def test_frames_past_the_detection_side_are_fitted_whole():
    """Frames larger than the sample's middle (256 px): the pattern found on the middle, fitted
    on the whole frames; a sampled frame whose NaN pixel lies outside the middle is left out of
    that last fit with its shift (it cannot be measured: its shift NaN)."""
    s = make_stack("static_blobs", 0, shape=(264, 270))
    frames = s.frames.copy()
    frames[7, 1, 2] = np.nan  # (outside the middle 256 x 256)
    res = xcorr_app.align(frames, device="cpu", quality=False)
    st = res.settings["static"]
    assert st["removed"] and 7 not in st["sample"] and len(st["sample"]) == 19
    assert np.isnan(res.shifts[7]).all()
    keep = np.arange(len(frames)) != 7
    assert stack_errors(res.shifts[keep], s.truth[keep])[0] < 0.2


def test_off_means_off(blobs):
    res = xcorr_app.align(blobs.frames, device="cpu", static="off", quality=False)
    assert res.settings["static"] == {"mode": "off", "removed": False}
    assert res.settings["options"]["static"] == "off"
    assert not any(n.startswith("static") for n in res.notes)


def test_few_frames_are_not_looked_at(blobs):
    """Below 10 frames ``auto`` reads nothing (a fit of a few frames keeps too much of the
    scene); ``on`` fits the pattern from as few as 3."""
    few = blobs.frames[:6]
    auto = xcorr_app.align(few, device="cpu", quality=False)
    assert auto.settings["static"]["not_checked"].startswith("fewer than 10 frames")
    on = xcorr_app.align(few, device="cpu", quality=False, static="on")
    assert on.settings["static"]["removed"] and on.settings["static"]["frames"] == 6


def test_a_pattern_that_cannot_be_removed_flags_every_frame():
    """40 photons over sCMOS offsets in 128x128 frames: the frames less their temporal median
    show no distinct peak, the first shifts are held by the pattern: nothing is removed, and
    no frame is trusted (without ``static`` 16 frames were off by over 0.5 px, 9 flagged)."""
    s = make_stack("fixed_pattern", 0, image="camera", shape=(128, 128))
    res = xcorr_app.align(s.frames, device="cpu", quality=False)
    st = res.settings["static"]
    assert st["unresolved"] and not st["removed"] and st["share"] > 0.05
    assert res.low_confidence.all()
    assert any("could not be told from it" in n for n in res.notes)
    off = xcorr_app.align(s.frames, device="cpu", quality=False, static="off")
    np.testing.assert_array_equal(res.shifts, off.shifts)
    assert not off.low_confidence.all()


def test_bleaching_stacks_are_left_to_the_band_pass():
    s = make_stack("bleaching_background", 0, shape=SHAPE)
    res = xcorr_app.align(s.frames, device="cpu", quality=False)
    assert res.settings["static"]["not_checked"].startswith("the brightness changes by")
    assert not res.settings["static"]["removed"]


def test_the_aligned_stack_is_the_frames_as_read(blobs):
    """The pattern is removed from what is measured, not from the aligned output."""
    frames = blobs.frames[:12]
    out = np.empty(frames.shape, np.float32)
    res = xcorr_app.align(frames, device="cpu", quality=False, out=out)
    assert res.settings["static"]["removed"]
    want = np.concatenate([chunk for _, chunk in res.apply(frames, device="cpu")])
    np.testing.assert_allclose(out, want, atol=1e-3)


def test_fit_static_recovers_column_offsets():
    """sCMOS column offsets over a drifting scene: the fitted pattern's columns are the
    offsets (its slow part aside, which the drift cannot tell from the scene)."""
    rng = np.random.default_rng(3)
    canvas = ndi.gaussian_filter(rng.normal(size=(120, 120)), 2.0) * 60.0
    cols = rng.normal(0.0, 3.0, 64)
    d = rng.integers(-10, 11, (16, 2)).astype(float)
    d[0] = 0
    frames = np.stack([canvas[20 + int(a):84 + int(a), 20 + int(b):84 + int(b)] for a, b in d])
    frames = frames + cols[None, None, :] + 100.0
    pattern, info = fit_static(frames, d, np)
    got = pattern.mean(axis=0)
    got, want = got - got.mean(), cols - cols.mean()
    assert np.abs(np.diff(got) - np.diff(want)).max() < 0.5
    assert info["share"] > 0.04 and info["covered"] > 0.5  # (auto would remove it)


def test_static_source_reads_less_the_pattern():
    frames = np.arange(24, dtype=np.uint16).reshape(2, 3, 4)
    pattern = np.linspace(-1, 1, 12).reshape(3, 4)
    src = StaticSource(ArraySource(frames), pattern)
    assert src.dtype == np.float32 and src.stack is None
    np.testing.assert_allclose(src.read(0, 2), frames - pattern.astype(np.float32))
    out = np.zeros((1, 3, 4), np.float32)
    src.read(1, 2, out=out)
    np.testing.assert_allclose(out[0], frames[1] - pattern.astype(np.float32))
    f64 = StaticSource(ArraySource(frames.astype(np.float64)), pattern)
    assert f64.read(0, 1).dtype == np.float64


@pytest.mark.parametrize("value", ["yes", "ON", True, 1, None])
def test_bad_values_are_refused(value):
    with pytest.raises(InputError, match="unknown static"):
        AlignOptions(static=value)


@pytest.mark.parametrize("options,what", [
    ({"patches": (2, 2)}, "patches"), ({"mask": np.ones((8, 8), bool)}, "a mask"),
    ({"model": "rigid-body"}, "model rigid-body"),
    ({"reference": np.zeros((8, 8), np.float32)}, "a reference image of its own")])
def test_on_where_it_cannot_act_is_refused(options, what):
    with pytest.raises(InputError, match=f"static on .*: {what}"):
        AlignOptions(static="on", **options)
    assert AlignOptions(**options).static == "auto"  # (auto: not looked for there)


def test_on_shared_out_is_refused():
    opts = AlignOptions(static="on")
    for executor in ("gpus", "dask"):
        with pytest.raises(InputError, match="static on is found and removed in one process"):
            opts.check_executor(executor)
    AlignOptions().check_executor("gpus")


def test_cli_static_choices(tmp_path):
    r = xcorr("align", "sample_data/cell_drift.tif", "--static", "maybe",
              "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "maybe" in r.stderr and "Traceback" not in r.stderr
    r = xcorr("align", "sample_data/cell_drift.tif", "--static", "on", "--patches", "2x2",
              "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "static on" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.gpu
def test_gpu_mirrors_the_cpu(blobs):
    import cupy

    frames = blobs.frames
    cpu = xcorr_app.align(frames, device="cpu", quality=False)
    for given in (frames, cupy.asarray(frames)):
        gpu = xcorr_app.align(given, device="gpu", quality=False)
        assert gpu.settings["static"]["removed"]
        assert gpu.settings["static"]["locked"] == cpu.settings["static"]["locked"]
        assert stack_errors(gpu.shifts, blobs.truth)[0] < 0.2
    pattern, _ = fit_static(cupy.asarray(frames), blobs.truth, cupy)
    want, _ = fit_static(frames, blobs.truth, np)
    np.testing.assert_allclose(cupy.asnumpy(pattern), want, atol=1e-6 * np.abs(want).max())


def test_the_one_step_share_is_the_fits_where_the_shifts_spread():
    """``auto`` passes over the fit where :func:`quick_share` is below half the threshold: it
    must agree with the fit's share, on a stack with a pattern and one without."""
    from xcorr_app.alignment.rigid._static import STATIC_SHARE, quick_share

    rng = np.random.default_rng(0)
    scene = 10 * ndi.gaussian_filter(rng.normal(size=(110, 120)), 1.5)
    d = np.trunc(rng.uniform(-9, 9, (16, 2)))
    d[0] = 0
    frames = np.stack([scene[12 + int(a):88 + int(a), 12 + int(b):100 + int(b)] for a, b in d])
    frames = frames + rng.normal(0, 0.2, frames.shape)
    pattern = np.zeros(frames.shape[1:])
    pattern[::6, ::5] = 10.0
    for f, has in ((frames, False), (frames + pattern, True)):
        quick, fit = quick_share(f, d, np), fit_static(f, d, np)[1]["share"]
        assert abs(quick - fit) <= 0.1 * abs(fit) + 0.003, (quick, fit)
        assert (quick > STATIC_SHARE) == has


@pytest.mark.parametrize("pixel_sd", [1.5, 30.0])
def test_the_removed_pattern_leaves_no_correlation_at_zero_shift(pixel_sd):
    """A pattern estimated as the mean of K frames holds their noise over K: removed whole, it
    leaves the frames' noises anti-correlated where the sensor's pixels meet (a dip that
    pushes peaks away from zero shift); left in, it pulls them to zero.  The weighed pattern
    balances the two, keeps the column offsets whole, and passes a strong pattern nearly
    whole."""
    from xcorr_app.alignment.rigid._static import _unbiased

    rng = np.random.default_rng(5)
    k, shape, sigma = 20, (128, 128), 5.0
    cols = rng.normal(0.0, 2.0, (1, shape[1]))
    pattern = cols + rng.normal(0.0, pixel_sd, shape)
    frames = pattern + rng.normal(0.0, sigma, (k,) + shape)  # (no scene: the fit's mean)
    fitted = frames.mean(axis=0)

    def zero_shift(removed):
        c = frames - (removed - removed.mean())
        c = c - c.mean(axis=(1, 2), keepdims=True)
        pairs = [np.mean(c[t] * c[s]) for t in range(k) for s in range(t + 1, k)]
        return float(np.mean(pairs))

    weighed = _unbiased(fitted, {"residual": sigma}, k, np)
    noise = sigma ** 2 / k
    assert zero_shift(fitted) < -0.8 * noise  # (removed whole: the dip)
    assert abs(zero_shift(weighed)) < 0.15 * noise
    np.testing.assert_allclose(weighed.mean(axis=0), fitted.mean(axis=0), atol=1e-9)
    kept = np.std(weighed - weighed.mean(axis=0)) / np.std(fitted - fitted.mean(axis=0))
    want = 1 - np.sqrt(noise / (pixel_sd ** 2 + noise))
    assert abs(kept - want) < 0.05, (kept, want)


def test_a_model_whose_shifts_shrink_the_motion_trusts_no_frame():
    """40 photons over sCMOS offsets, 128x128: the model's own shifts move the frames less than
    the first (it took the scene's motion for the pattern) and the first shifts are not
    confident: nothing is removed (what was, left the frames locked at zero shift) and no
    frame is trusted."""
    from xcorr_app.alignment.rigid import still_locked

    s = make_stack("fixed_pattern", 1, image="retina", shape=(128, 128))
    res = xcorr_app.align(s.frames, device="cpu", quality=False)
    st = res.settings["static"]
    assert st["shrunk"] and st["unresolved"] and not st["removed"]
    assert res.low_confidence.all()
    assert any("could not be told from it" in n for n in res.notes)
    # (no frame trusted: none to interpolate the frames below min_confidence from, every
    # shift kept as measured)
    floor = float(np.median(res.confidence[1:]))
    kw = dict(device="cpu", quality=False, min_confidence=floor)
    kept = xcorr_app.align(s.frames, **kw)
    assert 0 < (kept.confidence < floor).sum() < len(s.frames) - 1
    low = xcorr_app.align(s.frames, interpolate_low=True, **kw)
    np.testing.assert_array_equal(low.shifts, kept.shifts)
    assert low.low_confidence.all() and low.interpolated_frames() == 0
    assert any(n.startswith("interpolate_low: no frame was confident enough") for n in low.notes)
    moving = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, -1.0], [0.6, 0.0]])
    assert still_locked({"removed": True}, moving) is None
    assert still_locked({"removed": False}, np.zeros((4, 2))) is None
    assert still_locked({"removed": True}, np.zeros((4, 2))) is not None


def test_a_process_first_gpu_estimate_is_made_on_the_host(monkeypatch):
    """A process's first one-step estimate of a GPU run on the host (on a fresh machine the
    GPU's routines compile for seconds at a first use), later ones on the device; a CPU run's
    all on the host, counting nothing."""
    import itertools
    from types import SimpleNamespace

    from xcorr_app.alignment.rigid import _static

    monkeypatch.setattr(_static, "_GPU_ESTIMATES", itertools.count(1))
    gpu = SimpleNamespace(asarray=lambda a: ("on the device", a))
    frames = np.zeros((3, 4, 4))
    got, on = _static._estimate_on(frames, np)
    assert got is frames and on is np
    got, on = _static._estimate_on(frames, gpu)
    assert got is frames and on is np
    for _ in range(2):
        got, on = _static._estimate_on(frames, gpu)
        assert got == ("on the device", frames) and on is gpu


def test_the_sample_is_read_where_the_stack_lies():
    """A file's or NumPy's frames: the sample on the host whatever the run's device; CuPy's:
    on their device (the GPU test)."""
    from types import SimpleNamespace

    from xcorr_app.alignment.rigid import _static

    src = ArraySource(np.zeros((12, 8, 8), np.uint16))
    assert _static._sample_on(src, np) is np
    assert _static._sample_on(src, SimpleNamespace()) is np


@pytest.mark.gpu
def test_a_cupy_stack_sample_stays_on_its_device():
    cp = pytest.importorskip("cupy")
    from xcorr_app.alignment.rigid import _static

    assert _static._sample_on(ArraySource(cp.zeros((12, 8, 8), cp.uint16)), cp) is cp


@pytest.mark.parametrize("jitter", [0.0, 0.3])
def test_a_scene_that_barely_moves_is_measured_as_it_is(jitter):
    """A still stack (its frames locked at zero, with no pattern to hold them) flagged every
    frame; 0.3 px of jitter, or a stack aligned before, was taken for a pattern and its shifts
    came out up to 0.67 px off: with no pattern's share, or a pattern model that fits the
    frames no better than none at the first shifts, nothing is removed and nothing flagged."""
    rng = np.random.default_rng(4)
    base = ndi.gaussian_filter(rng.random((128, 128)), 3)
    base = (base - base.min()) / np.ptp(base)
    truth = jitter * np.stack([np.sin(np.arange(20) / 3), np.cos(np.arange(20) / 4)], axis=1)
    frames = np.stack([ndi.shift(base, t, order=3) * 3000 + rng.poisson(50, base.shape)
                       for t in truth]).astype(np.float32)
    res = xcorr_app.align(frames, device="cpu")
    want = -(truth - truth[0])
    assert np.abs(res.shifts - want).max() < 0.02, res.settings["static"]
    assert not res.low_confidence.any() and not res.settings["static"]["removed"]


def test_a_pattern_that_locks_every_frame_exactly_is_still_removed():
    """Bright blobs so strong that every frame measures exactly zero: the fit at those shifts
    cannot tell the pattern from the scene (its share about 0), so a share test on locked
    frames took them for a still scene and left every shift 0 (8 px off, unflagged); the
    frames less their median show the scene's motion, and the pattern is removed."""
    rng = np.random.default_rng(1)
    scene = ndi.gaussian_filter(rng.random((200, 200)), 2)
    scene = (scene - scene.min()) / np.ptp(scene) * 100
    truth = np.round(rng.uniform(-8, 8, (20, 2)))
    truth[0] = 0
    blobs = np.zeros((128, 128))
    at = rng.integers(0, 128, (60, 2))
    blobs[at[:, 0], at[:, 1]] = 5000
    blobs = ndi.gaussian_filter(blobs, 1.5) * 10
    frames = np.stack([scene[36 + int(a):164 + int(a), 36 + int(b):164 + int(b)] + blobs
                       + rng.poisson(20, (128, 128)) for a, b in truth]).astype(np.float32)
    res = xcorr_app.align(frames, device="cpu", quality=False)
    st = res.settings["static"]
    assert st["locked"] and st["removed"] and not st.get("still")
    assert np.abs(res.shifts - truth).max() < 0.2


def test_a_blank_frame_stays_blank_when_a_pattern_is_removed(blobs):
    """A frame behind a closed shutter (constant) less the pattern was the pattern: a pass
    measured a shift for it (-0.8, -4.0 px) and flagged nothing; it stays constant: NaN,
    flagged, a constant frame."""
    frames = blobs.frames.copy()
    frames[5] = 0.0
    res = xcorr_app.align(frames, device="cpu", quality=False)
    assert res.settings["static"]["removed"]
    assert np.isnan(res.shifts[5]).all() and res.low_confidence[5]
    assert 5 in list(res.constant_frames)
