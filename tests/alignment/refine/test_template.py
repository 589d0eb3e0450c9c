"""Issue 23's options: template refinement (``reference="refined[:ITER]"``), ``prefilter="auto"``
(band-pass for stacks whose brightness changes) and ``boundary`` (wrap-around detection), on the
CPU; their GPU twins are at the end (marked ``gpu``)."""

import numpy as np
import pytest
from scipy import ndimage as ndi

from xcorr_app import align, backend
from xcorr_app.alignment.rigid import choose_prefilter
from xcorr_app.alignment.rigid._preprocess import AUTO_BANDPASS
from xcorr_app.alignment.rigid import COLUMN, COLUMNS
from xcorr_app.alignment.refine import TemplateAccumulator, relative_to_first
from xcorr_app.alignment.refine._template import fractional_references
from xcorr_app.bench._accuracy import stack_errors
from xcorr_app.bench._accuracy_data import make_stack
from xcorr_app.errors import InputError
from xcorr_app.io import ArraySource
from tests.cli_helpers import assert_clean_error, digest, xcorr
from tests.definitions import masked_correlation, wrapped_masks


# ------------------------------------------------------------------------- refined template

@pytest.mark.parametrize("seed", [0, 1])
def test_refined_template_beats_the_first_frame_at_low_light(seed):
    """25 photons at the brightest pixel: the first frame's noise is in every shift; the
    template of the aligned frames removes most of it (seed 0: 0.43 -> 0.25 px RMS, seed 1:
    0.23 -> 0.14; asked: at least 30% less); the Lucas-Kanade step (auto: on here) off."""
    s = make_stack("low_light", seed)
    first = stack_errors(align(s.frames, "first", device="cpu", lucas_kanade="off").shifts,
                         s.truth)[0]
    refined = stack_errors(align(s.frames, "refined", device="cpu",
                                 lucas_kanade="off").shifts, s.truth)[0]
    assert refined <= 0.7 * first, (first, refined)


@pytest.mark.parametrize("reference", ["refined", "refined:2"])
def test_refined_frame_zero_is_exactly_zero_and_settings_say_so(reference):
    s = make_stack("low_light", 0, quick=True)
    res = align(s.frames, reference, device="cpu")
    assert res.shifts[0].tolist() == [0.0, 0.0]
    assert res.fft_shifts[0].tolist() == [0.0, 0.0]
    assert res.settings["reference"] == reference
    assert np.isfinite(res.shifts).all()


def test_refined_does_not_depend_on_the_chunking():
    s = make_stack("plain", 0, quick=True)
    runs = [align(s.frames, "refined", device="cpu", chunk_frames=c).shifts for c in (1, 4, 64)]
    for r in runs[:2]:
        np.testing.assert_allclose(r, runs[2], atol=1e-5)


@pytest.mark.parametrize("reference,kind", [("refined:2", "plain"), ("first", "circular"),
                                            ("refined", "circular")])
def test_progress_sees_every_frame_once_over_the_passes(reference, kind):
    s = make_stack(kind, 0, quick=True)
    seen = []
    align(s.frames, reference, device="cpu", chunk_frames=2, progress=seen.append)
    assert sum(seen) == len(s.frames) and min(seen) > 0


def test_template_accumulator_leaves_out_frames_without_a_distinct_peak():
    block = np.zeros((3, len(COLUMNS)))
    block[:, COLUMN["finite"]] = 1
    block[:, COLUMN["confidence"]] = [3.0, 2.0, 1.1]
    block[:, COLUMN["dx"]] = 1.0  # every frame moved right by one pixel
    frames = np.zeros((3, 6, 7), np.float32)
    frames[0, 2, 2] = 4.0
    frames[1, 2, 2] = 2.0
    frames[2] = 100.0
    acc = TemplateAccumulator(np, (6, 7), min_confidence=1.5)  # frame 2 below it
    acc(0, frames, block)
    t = acc.template(np.full((6, 7), -1.0))
    assert t[2, 3] == pytest.approx(3.0)  # the mean of 4 and 2, where they moved to
    assert (t[:, 0] == -1.0).all()  # column 0: no frame covers it: the fallback
    assert t.max() < 100


def test_relative_to_first_moves_every_shift_column():
    table = np.zeros((2, len(COLUMNS)))
    names = ("dy", "dx", "fft_dy", "fft_dx", "fft_iy", "fft_ix")
    for name in names:
        table[:, COLUMN[name]] = [0.25, 1.5]
    table[:, COLUMN["confidence"]] = 2.0
    out = relative_to_first(table)
    assert all(out[0, COLUMN[n]] == 0 for n in names)
    assert all(out[1, COLUMN[n]] == 1.25 for n in names)
    assert out[:, COLUMN["confidence"]].tolist() == [2.0, 2.0]


@pytest.mark.parametrize("spec", ["refined:0", "refined:x", "refined:3", "refined:"])
def test_bad_refined_specs_are_input_errors(spec):
    with pytest.raises(InputError, match="refined:ITER"):
        align(np.zeros((2, 8, 8), np.float32), spec, device="cpu")


# ------------------------------------------------------------------------- prefilter auto

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auto_prefilter_picks_the_band_pass_for_bleaching_over_a_background(seed):
    bleach = make_stack("bleaching_background", seed, quick=True).frames
    assert choose_prefilter(ArraySource(bleach))[0] == AUTO_BANDPASS
    for kind in ("plain", "low_light", "non_square", "circular"):
        assert choose_prefilter(ArraySource(make_stack(kind, seed, quick=True).frames))[0] \
            == "gaussian:1", kind


def test_auto_prefilter_is_reported_and_helps():
    s = make_stack("bleaching_background", 1)
    auto = align(s.frames, device="cpu")
    old = align(s.frames, device="cpu", prefilter="gaussian:1")
    assert auto.settings["prefilter"] == AUTO_BANDPASS
    assert "brightness changes" in auto.settings["prefilter_auto"]
    assert any(f"prefilter auto: {AUTO_BANDPASS}" in n for n in auto.summary()["notes"])
    assert stack_errors(auto.shifts, s.truth)[0] < 0.5 * stack_errors(old.shifts, s.truth)[0]
    plain = align(make_stack("plain", 0, quick=True).frames, device="cpu")
    assert plain.settings["prefilter"] == "gaussian:1" and not plain.notes


def test_auto_band_pass_holds_the_low_contrast_bleaching_stack():
    """The moon stack of seed 4 under a static background, fading to 0.6: what the band-pass
    leaves static (the background's residual, the filter's response to the frame's edges)
    pulled every dy towards zero with dog:1,8 (0.133 px RMS); the narrower band-pass of the
    default (dog:1,4) halves it (0.068)."""
    s = make_stack("bleaching_background", 4)
    got = align(s.frames, device="cpu")
    assert got.settings["prefilter"] == AUTO_BANDPASS
    assert stack_errors(got.shifts, s.truth)[0] < 0.1


def test_auto_prefilter_ignores_constant_and_nan_frames():
    f = np.random.default_rng(0).random((6, 16, 16)).astype(np.float32)
    f[2] = 50.0
    f[4, 0, 0] = np.nan
    assert choose_prefilter(ArraySource(f))[0] == "gaussian:1"


# ------------------------------------------------------------------------- boundary

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_circular_stacks_are_detected_and_cropped_ones_are_not(seed):
    circ = make_stack("circular", seed, quick=True)
    res = align(circ.frames, device="cpu")
    assert res.settings["boundary"] == "circular"
    assert any("boundary auto: circular" in n for n in res.notes)
    for kind in ("plain", "low_light", "bleaching_background", "non_square"):
        assert align(make_stack(kind, seed, quick=True).frames,
                     device="cpu").settings["boundary"] == "linear", kind


@pytest.mark.parametrize("kind,image,shape,seed,want", [
    ("circular", "moon", (128, 128), 3, "circular"),        # strips 0.73 prefiltered, whole px
    ("circular_noisy", "moon", (128, 128), 3, "circular"),  # 0.70
    ("plain", "coins", (128, 128), 1, "linear"),            # 0.78: taken for circular
    ("plain", "astronaut", (128, 128), 3, "linear"),
    # the first (linear) pass off by about a pixel at the wrapped edges: the strips compared at
    # those shifts matched at 0.23-0.66; at the shifts measured again circularly, they match
    ("circular_noisy", "retina", (64, 64), 4, "circular"),
    ("circular_noisy", "astronaut", (64, 64), 4, "circular")])
def test_the_wrap_around_test_compares_raw_frames_moved_by_their_subpixel_shift(
        kind, image, shape, seed, want):
    """The wrapped strips lie at the seam, where the prefilter's border and a whole-pixel
    move's half-pixel error hurt most: compared raw and moved by the Fourier phase, these
    bench stacks that the earlier test got wrong are told apart."""
    s = make_stack(kind, seed, image=image, shape=shape)
    assert align(s.frames, device="cpu", quality=False).settings["boundary"] == want


def test_a_cropped_stacks_circular_peaks_on_the_seams_leave_it_linear():
    """Measured again circularly, this cropped, noisy coins stack's frames peak on the cross
    of the FFT's seams (a pixel or more off) and their thin strips then match; the shift
    whose overlap matches better is kept: the linear pass's."""
    from xcorr_app.bench._align_data import nonrigid_stack

    stack, _ = nonrigid_stack(np.random.default_rng(2854983740), 6, (192, 192), 10.0, 0.0,
                              400.0, "coins")
    assert align(stack, device="cpu", quality=False).settings["boundary"] == "linear"


def test_fractional_references_move_by_the_fourier_phase():
    rng = np.random.default_rng(3)
    ref = rng.random((9, 11))  # (odd: no Nyquist term, which a real image cannot move)
    frac = np.array([[0.25, -0.4], [0.0, 0.0], [-0.5, 0.5]])
    got = fractional_references(ref, frac, np)
    for g, (fy, fx) in zip(got, frac):  # scipy's Fourier shift moves content the other way
        want = np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(ref), (-fy, -fx))).real
        np.testing.assert_allclose(g, want, atol=1e-12)
    np.testing.assert_allclose(got[1], ref, atol=1e-12)


@pytest.mark.parametrize("shape", [(9, 11), (40, 33), (64, 50)])
def test_the_wrap_around_tests_sums_are_the_masked_definitions(rng, shape):
    """The CPU's correlations over the overlap and the wrapped strips (moments over views,
    the whole shift by the Fourier phase) against the masked float64 definition of the
    reference moved circularly by its fraction and then rolled: flat frames, shifts of
    every sign and past the frame included."""
    from xcorr_app.alignment.refine._template import _wrap_sums

    h, w = shape
    ref = rng.standard_normal(shape)
    shifts = np.array([[0.3, -0.4], [-2.0, 3.5], [h - 1.2, -(w - 1.0)], [0.0, 0.0],
                       [h + 2.4, 1.0], [5.5, -0.5]])
    frames = rng.standard_normal((len(shifts), h, w)).astype(np.float32)
    frames[1] = (np.roll(ref, (2, -3), axis=(0, 1)) + 0.3 * frames[1]).astype(np.float32)
    frames[3] = 3.0  # flat: 0 on both
    got = _wrap_sums(frames, ref, shifts, np, False)
    whole = np.round(shifts)
    moved = fractional_references(ref, shifts - whole, np)
    for k, (dy, dx) in enumerate(whole.astype(int)):
        rolled = np.roll(moved[k], (-dy, -dx), axis=(0, 1))
        want = [masked_correlation(frames[k], rolled, m) for m in wrapped_masks(shape, dy, dx)]
        np.testing.assert_allclose(got[k], want, rtol=1e-9, atol=1e-12, err_msg=str(k))
    assert (got[3] == 0).all() and np.abs(got[1, 0]) > 0.3


def test_circular_boundary_meets_the_target_on_circular_stacks():
    """The linear correlation alone is pulled by the wrapped edges; the fit against the
    reference over the frame's overlap is not (the wrapped strips lie outside it)."""
    s = make_stack("circular", 0)
    lin = stack_errors(align(s.frames, device="cpu", boundary="linear",
                             lucas_kanade="off").shifts, s.truth)[0]
    fitted = stack_errors(align(s.frames, device="cpu", boundary="linear").shifts, s.truth)[0]
    auto = stack_errors(align(s.frames, device="cpu").shifts, s.truth)[0]
    assert auto <= 0.05 < lin and fitted <= 0.05


def test_bad_boundary_is_an_input_error():
    with pytest.raises(InputError, match="unknown boundary 'wrap'"):
        align(np.zeros((2, 8, 8), np.float32), device="cpu", boundary="wrap")


# ------------------------------------------------------------------------- command line

@pytest.fixture(scope="module")
def small_tif(tmp_path_factory):
    import tifffile

    p = tmp_path_factory.mktemp("tpl") / "circ.tif"
    tifffile.imwrite(p, make_stack("circular", 0, quick=True).frames)
    return p


@pytest.mark.parametrize("spec", ["refined:0", "refined:x"])
def test_cli_bad_refined_spec_is_one_line(small_tif, tmp_path, spec):
    before = digest(small_tif)
    res = xcorr("align", small_tif, "--out", tmp_path / "o", "--device", "cpu",
                "--reference", spec)
    assert res.returncode == 2
    assert_clean_error(res, "refined:ITER")
    assert digest(small_tif) == before and not (tmp_path / "o").exists()


def test_cli_refined_and_circular_notes(small_tif, tmp_path):
    import json

    before = digest(small_tif)
    res = xcorr("align", small_tif, "--out", tmp_path / "o", "--device", "cpu",
                "--reference", "refined", "--no-aligned")
    assert res.returncode == 0, res.stderr
    assert "reference refined" in res.stdout and "boundary auto: circular" in res.stdout
    doc = json.loads((tmp_path / "o" / "shifts.json").read_text())
    assert doc["settings"]["boundary"] == "circular"
    assert doc["frames"][0]["dy"] == 0 and doc["frames"][0]["dx"] == 0
    assert digest(small_tif) == before


@pytest.mark.skipif(backend.gpu_available(),
                    reason="a GPU runs it (test_run_equality: refined through gpus)")
def test_cli_refined_with_gpus_but_no_gpu_is_one_line(small_tif, tmp_path):
    res = xcorr("align", small_tif, "--out", tmp_path / "o", "--reference", "refined",
                "--gpus", "0")
    assert res.returncode == 2
    assert_clean_error(res, "--gpus")


# ------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("kind,reference", [("low_light", "refined"),
                                            ("low_light", "refined:2"),
                                            ("bleaching_background", "first"),
                                            ("bleaching_background", "refined"),
                                            ("circular", "first"), ("circular", "refined"),
                                            ("plain", "refined")])
def test_gpu_matches_cpu(kind, reference):
    """The GPU runs the same passes, choices and template (CuPy) as the CPU: shifts equal
    within 1e-3 px, the same choices."""
    s = make_stack(kind, 0)
    cpu = align(s.frames, reference, device="cpu")
    gpu = align(s.frames, reference, device="gpu")
    assert gpu.settings["device"] == "gpu"
    for key in ("prefilter", "boundary", "subpixel"):
        assert gpu.settings[key] == cpu.settings[key], key
    if reference.startswith("refined"):  # reported against frame 0: exactly 0
        assert gpu.shifts[0].tolist() == [0.0, 0.0]
    else:  # frame 0 against itself: 0 up to the float32 rounding of the surface's fit
        assert np.abs(gpu.shifts[0]).max() <= 1e-5
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=1e-3)


@pytest.mark.gpu
def test_gpu_template_accumulator_matches_numpy():
    import cupy as cp

    rng = np.random.default_rng(3)
    frames = rng.random((11, 40, 48)).astype(np.float32)
    block = np.zeros((11, len(COLUMNS)))
    block[:, COLUMN["finite"]] = 1
    block[:, COLUMN["dy"]:COLUMN["dx"] + 1] = rng.uniform(-3, 3, (11, 2))
    block[:, COLUMN["confidence"]] = rng.uniform(1, 3, 11)
    block[4, COLUMN["border"]] = 1
    block[7, COLUMN["dy"]] = np.nan
    want = TemplateAccumulator(np, (40, 48), 1.2)
    want(0, frames, block)
    got = TemplateAccumulator(cp, (40, 48), 1.2)
    got(0, cp.asarray(frames), cp.asarray(block))
    np.testing.assert_allclose(got.template(cp.asarray(frames[0])).get(),
                               want.template(frames[0]), atol=1e-5)


@pytest.mark.parametrize("kw, later", [(dict(patches=(2, 2), max_shift=6), "measure_range"),
                                       (dict(max_shift=6), "_rows_part")])
def test_progress_goes_on_through_the_patch_pass_and_the_quality_report(monkeypatch, kw, later):
    """The bar filled with the measuring passes, then stood still through the patch pass (most
    of a --patches run) and the quality report's pass: each now fills a share of it, every
    frame still counted once in all."""
    import xcorr_app.alignment._quality as Q
    import xcorr_app.alignment.piecewise._patch_pass as PP

    s = make_stack("plain", 0, quick=True)
    seen, at_start = [], []
    owner = PP if later == "measure_range" else Q
    original = getattr(owner, later)

    def marked(*args, **kwargs):
        at_start.append(sum(seen))
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, later, marked)
    align(s.frames, device="cpu", chunk_frames=2, progress=seen.append, **kw)
    n = len(s.frames)
    assert sum(seen) == n and min(seen) > 0
    assert at_start and at_start[0] < n  # (the later pass had its share to fill)


def test_progress_is_whole_on_dask_without_a_client_too():
    """An executor that reports no chunk of the quality report's pass: the bar stopped at 75%
    (the report's share filled only as its chunks were reported)."""
    pytest.importorskip("dask")
    import xcorr_app.dask as xd

    s = make_stack("plain", 0, quick=True)
    seen = []
    xd.align(s.frames, device="cpu", progress=seen.append)
    assert sum(seen) == len(s.frames)
