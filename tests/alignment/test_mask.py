"""``align(mask=...)`` and ``xcorr align --mask FILE``: one mask for the stack, the pixels it
leaves out take no part in any shift (Padfield's masked ZNCC, zero-normalized over the overlap
of used pixels, within max_shift, refined to subpixel by the run's fit), on the CPU and on the
GPU; the option checked once, every refusal one line naming it."""

import json

import numpy as np
import pytest
import tifffile

from cli_helpers import assert_clean_error, xcorr
from synthetic import drift_stack, write_stack
from xcorr_app import align
from xcorr_app.alignment import AlignOptions
from xcorr_app.errors import InputError

SHAPE = (61, 83)  # odd, not square


def artefact_stack(kind, seed=0):
    """``(stack, clean, truth, mask)``: 12 frames of ``SHAPE`` drifting by up to 3 px
    (subpixel) under a static artefact: a bright blob of fixed pattern (``"blob"``, float32) or
    a saturated bar (``"bar"``, uint16 at 65535); ``mask`` leaves it out."""
    clean, truth = drift_stack(np.random.default_rng(seed), n=12, shape=SHAPE, max_shift=3.0,
                               peak_counts=1000.0)
    yy, xx = np.mgrid[:SHAPE[0], :SHAPE[1]]
    if kind == "blob":
        d2 = (yy - 30) ** 2 + (xx - 50) ** 2
        stack = clean.astype(np.float32) + np.float32(8000) * np.exp(-d2 / 8.0).astype(np.float32)
        mask = d2 > 11 ** 2
    else:
        stack = clean.copy()
        stack[:, 40:44, :] = 65535
        mask = np.ones(SHAPE, bool)
        mask[37:47] = False
    return stack, clean, truth, mask


def error(res, truth):
    return float(np.abs(res.shifts - truth).max())


@pytest.mark.parametrize("kind,seed", [("blob", 1), ("bar", 0)])
def test_a_masked_artefact_no_longer_pulls_the_shifts(kind, seed):
    stack, clean, truth, mask = artefact_stack(kind, seed)
    # (static off: static auto finds and removes the fixed blob itself)
    unmasked = align(stack, device="cpu", quality=False, static="off")
    masked = align(stack, device="cpu", mask=mask)
    assert error(unmasked, truth) > 1.0  # the artefact holds the frames at zero
    assert error(masked, truth) <= 0.1
    # the left-out pixels take no part at all: the same shifts as without the artefact
    np.testing.assert_allclose(masked.shifts, align(clean, device="cpu", mask=mask).shifts,
                               atol=1e-4)
    assert masked.settings["options"]["mask"] == "array"
    assert masked.settings["verify"] is False and masked.quality is None
    assert any(n.startswith("mask: no FFT reference check") for n in masked.notes)
    before = stack.copy()
    align(stack, device="cpu", mask=mask.astype(np.uint8))  # 0/1 numbers: the same
    np.testing.assert_array_equal(stack, before)  # (the input is not modified)


def test_nan_pixels_left_out_by_the_mask_are_measured_around():
    """NaN or Inf pixels where the mask leaves them out (the reference's too) do not keep a
    frame from being measured; in the pixels it uses they still flag the frame."""
    stack, _, truth, mask = artefact_stack("blob", 1)
    stack[:, 28:33, 48:53] = np.nan
    stack[3, 30, 50] = np.inf
    stack[5, 2, 2] = np.nan  # a used pixel
    res = align(stack, device="cpu", mask=mask)
    ok = np.arange(len(stack)) != 5
    assert np.abs(res.shifts[ok] - truth[ok]).max() <= 0.1
    assert np.isnan(res.shifts[5]).all() and res.low_confidence.tolist() == (~ok).tolist()


def nan_stack(seed=4):
    """``(stack, clean, truth)``: 12 float32 frames of ``SHAPE`` with NaN pixels of their own
    (a band and a blob that move from frame to frame, the first frame's too)."""
    clean, truth = drift_stack(np.random.default_rng(seed), n=12, shape=SHAPE, max_shift=3.0,
                               peak_counts=1000.0)
    stack = clean.astype(np.float32)
    for i in range(len(stack)):
        stack[i, 5 + 3 * i:11 + 3 * i, :] = np.nan
        stack[i, 40:44, 10 + 2 * i:16 + 2 * i] = np.nan
    return stack, clean, truth


def test_mask_nan_measures_each_frame_on_its_own_finite_pixels():
    stack, clean, truth = nan_stack()
    res = align(stack, device="cpu", mask="nan")
    assert error(res, truth) <= 0.1 and not res.low_confidence.any()
    assert res.settings["options"]["mask"] == "nan" and res.quality is None
    # without it the reference's NaN pixels are one error that names the option
    with pytest.raises(InputError, match="give mask='nan'"):
        align(stack, device="cpu")
    # frames with NaN pixels against a finite reference: unmasked, each one is flagged
    some = clean.astype(np.float32)
    some[1:, 20:30, 30:40] = np.nan
    assert np.isnan(align(some, device="cpu", quality=False).shifts[1:]).all()
    assert error(align(some, device="cpu", mask="nan"), truth) <= 0.1


def test_mask_nan_without_nan_is_the_mask_of_every_pixel():
    _, clean, _ = nan_stack(5)
    np.testing.assert_array_equal(align(clean, device="cpu", mask="nan").shifts,
                                  align(clean, device="cpu", mask=np.ones(SHAPE, bool)).shifts)


def test_mask_nan_flags_a_frame_without_a_finite_pixel():
    stack, _, truth = nan_stack()
    stack[4] = np.nan
    res = align(stack, device="cpu", mask="nan")
    ok = np.arange(len(stack)) != 4
    assert np.isnan(res.shifts[4]).all() and res.low_confidence.tolist() == (~ok).tolist()
    assert np.abs(res.shifts[ok] - truth[ok]).max() <= 0.1


@pytest.mark.parametrize("reference", ["previous", "mean", "mean:4"])
def test_mask_nan_refuses_the_previous_and_mean_references(reference):
    with pytest.raises(InputError, match=f"reference={reference!r} is not available"):
        AlignOptions(mask="nan", reference=reference)


def test_mask_nan_decides_the_prefilter_and_the_line_offset_on_the_finite_pixels():
    from xcorr_app.alignment import correct_bidi

    stack, clean, truth = nan_stack()
    fading = stack * np.linspace(1.0, 0.5, len(stack), dtype=np.float32)[:, None, None]
    assert "dog:1,4" in " ".join(align(fading, device="cpu", mask="nan").notes)
    scanned = correct_bidi(clean.astype(np.float32), -1.5)
    scanned[:, 20:24, :] = np.nan
    scanned[:, :, 60:64] = np.nan
    res = align(scanned, device="cpu", mask="nan", bidi="auto")
    assert abs(res.settings["bidi"] - 1.5) <= 0.1


def test_masked_surfaces_refuse_masks_that_do_not_fit():
    from xcorr_app.registration import masked_zncc_surfaces

    frames = np.zeros((3, 20, 24), np.float32)
    per_frame = np.ones((3, 20, 24), bool)
    with pytest.raises(ValueError, match="reference_mask"):
        masked_zncc_surfaces(frames[0], frames, per_frame, (2, 2))
    with pytest.raises(ValueError, match="one reference_mask"):
        masked_zncc_surfaces(frames[0], frames, per_frame, (2, 2), reference_mask=per_frame)


def test_the_command_line_aligns_with_mask_nan(tmp_path):
    stack, _, truth = nan_stack()
    write_stack(tmp_path / "s.tif", stack)
    out = tmp_path / "o"
    res = xcorr("align", tmp_path / "s.tif", "--mask", "nan", "--out", out, "--device", "cpu")
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "shifts.json").read_text())
    shifts = np.array([[r["dy"], r["dx"]] for r in doc["frames"]])
    assert np.abs(shifts - truth).max() <= 0.1 and doc["settings"]["options"]["mask"] == "nan"
    res = xcorr("align", tmp_path / "s.tif", "--out", tmp_path / "u", "--device", "cpu")
    assert_clean_error(res, "NaN", "--mask nan")
    assert not (tmp_path / "u").exists()


@pytest.mark.parametrize("options", [dict(max_shift=4, subpixel="parabolic"),
                                     dict(reference="mean:4"), dict(reference="previous"),
                                     dict(prefilter="dog:1,4"), dict(prefilter="none"),
                                     dict(chunk_frames=5)])
def test_the_mask_holds_with_other_options(options):
    stack, _, truth, mask = artefact_stack("bar")
    res = align(stack, device="cpu", mask=mask, **options)
    unmasked = align(stack, device="cpu", quality=False, **options)
    if options.get("reference", "").startswith("mean"):  # (relative to the mean: less theirs)
        truth = truth + (res.shifts - truth).mean(axis=0)
    assert error(res, truth) <= 0.2 < error(unmasked, truth)


def test_a_bound_excludes_peaks_beyond_it():
    """A frame moved past max_shift: its peak is the best inside the window, on its border,
    flagged (as unmasked runs flag it)."""
    stack, _, truth, mask = artefact_stack("bar")
    far = np.flatnonzero(np.abs(truth).max(axis=1) > 2.2)
    res = align(stack, device="cpu", mask=mask, max_shift=2)
    assert len(far) and (np.abs(res.shifts) <= 2).all()
    assert res.border[far].all() and res.low_confidence[far].all()


def test_a_mask_file_reads_as_the_array(tmp_path):
    stack, _, _, mask = artefact_stack("bar")
    tifffile.imwrite(tmp_path / "m.tif", mask.astype(np.uint8) * 255)
    np.save(tmp_path / "m.npy", mask)
    by_array = align(stack, device="cpu", mask=mask)
    for name in ("m.tif", "m.npy"):
        res = align(stack, device="cpu", mask=tmp_path / name)
        np.testing.assert_array_equal(res.shifts, by_array.shifts)
        assert res.settings["options"]["mask"] == str(tmp_path / name)


@pytest.mark.parametrize("mask,words", [
    (np.ones((60, 83), bool), "mask is 60x83 but the frames are 61x83"),
    (np.ones((83, 61), bool), "mask is 83x61 but the frames are 61x83"),
    (np.zeros(SHAPE, np.uint16), "mask leaves out every pixel"),
    (np.ones((2, *SHAPE), bool), "mask has shape (2, 61, 83); it must be one 2-D image"),
    (np.full(SHAPE, np.nan), "mask has NaN or infinite values"),
    (np.ones(SHAPE, complex), "mask holds values of type complex128"),
    ("", "mask is empty"),
    ([[1, 0]], "mask must be an image file or a 2-D array"),
    ("no_such_mask.tif", "mask no_such_mask.tif does not exist"),
])
def test_a_bad_mask_is_one_error_naming_it(mask, words):
    stack = artefact_stack("bar")[0]
    with pytest.raises(InputError, match="^mask") as err:
        align(stack, device="cpu", mask=mask)
    assert words in str(err.value)


@pytest.mark.parametrize("options,words", [
    (dict(normalization="phase"), "normalization='phase' is not available with a mask"),
    (dict(normalization="none"), "normalization='none'"),
    (dict(subpixel="upsample"), "subpixel='upsample'"),
    (dict(upsample=10), "upsample=10"),
    (dict(boundary="circular"), "boundary='circular'"),
    (dict(lucas_kanade="on"), "lucas_kanade='on'"),
    (dict(reference="refined:2"), "reference='refined:2'"),
    (dict(patches=(2, 2)), "patches is not available with a mask"),
])
def test_what_measures_unmasked_is_refused_with_a_mask(options, words):
    with pytest.raises(InputError, match="^mask measures every frame") as err:
        AlignOptions(mask=np.ones(SHAPE, bool), **options)
    assert words in str(err.value)


@pytest.mark.parametrize("executor", ["gpus", "dask"])
def test_a_mask_runs_in_one_process(executor):
    with pytest.raises(InputError, match="mask is measured in one process"):
        AlignOptions(mask=np.ones(SHAPE, bool)).check_executor(executor)


def test_the_options_decide_what_a_mask_implies():
    opts = AlignOptions(mask=np.ones(SHAPE, np.uint8))
    assert (opts.boundary, opts.lucas_kanade, opts.verify, opts.quality) == \
        ("linear", "off", False, False)
    assert opts.mask_image.dtype == bool and opts.settings()["mask"] == "array"
    assert AlignOptions().mask_image is None


def test_the_command_line_aligns_with_a_mask_file(tmp_path):
    stack, _, truth, mask = artefact_stack("bar")
    write_stack(tmp_path / "s.tif", stack)
    tifffile.imwrite(tmp_path / "m.tif", mask.astype(np.uint8))
    out = tmp_path / "o"
    res = xcorr("align", tmp_path / "s.tif", "--mask", tmp_path / "m.tif", "--out", out,
                "--device", "cpu", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "shifts.json").read_text())
    assert doc["settings"]["options"]["mask"] == str(tmp_path / "m.tif")
    rows = doc["frames"]
    shifts = np.array([[r["dy"], r["dx"]] for r in rows])
    assert np.abs(shifts - truth).max() <= 0.1
    assert (out / "aligned.tif").exists() and not (out / "quality.png").exists()


@pytest.mark.parametrize("make,words", [
    (lambda p: tifffile.imwrite(p, np.ones((60, 83), np.uint8)),
     "--mask {m} is 60x83 but the frames are 61x83"),
    (lambda p: tifffile.imwrite(p, np.zeros(SHAPE, np.float32)), "leaves out every pixel"),
    (lambda p: p.write_bytes(b"not an image at all"), "--mask {m}: cannot read"),
    (lambda p: tifffile.imwrite(p, np.ones((3, *SHAPE), np.uint8), photometric="minisblack"),
     "holds 3 frames"),
    (lambda p: None, "--mask {m} does not exist"),
])
def test_a_bad_mask_file_is_one_error_line_and_nothing_written(tmp_path, make, words):
    stack = artefact_stack("bar")[0]
    write_stack(tmp_path / "s.tif", stack)
    m = tmp_path / "m.tif"
    make(m)
    res = xcorr("align", tmp_path / "s.tif", "--mask", m, "--out", tmp_path / "o",
                "--device", "cpu")
    assert res.returncode == 2
    assert_clean_error(res, words.format(m=m))
    assert not (tmp_path / "o").exists()


def test_the_command_line_refuses_a_mask_with_patches(tmp_path):
    write_stack(tmp_path / "s.tif", artefact_stack("bar")[0])
    np.save(tmp_path / "m.npy", np.ones(SHAPE, bool))
    res = xcorr("align", tmp_path / "s.tif", "--mask", tmp_path / "m.npy", "--patches", "2x2",
                "--out", tmp_path / "o", "--device", "cpu")
    assert res.returncode == 2
    assert_clean_error(res, "--mask measures every frame", "patches is not available")
    assert not (tmp_path / "o").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("kind,seed", [("blob", 1), ("bar", 0)])
@pytest.mark.parametrize("options", [{}, dict(max_shift=4), dict(reference="previous")])
def test_the_gpu_measures_the_mask_as_the_cpu(kind, seed, options):
    import cupy as cp

    stack, _, truth, mask = artefact_stack(kind, seed)
    gpu = align(cp.asarray(stack), device="gpu", mask=cp.asarray(mask), **options)
    cpu = align(stack, device="cpu", mask=mask, **options)
    unmasked = align(cp.asarray(stack), device="gpu", quality=False, **options)
    assert gpu.settings["device"] == "gpu"
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=2e-3)
    assert error(gpu, truth) <= (0.1 if not options else 0.2) < error(unmasked, truth)


@pytest.mark.gpu
@pytest.mark.parametrize("options", [{}, dict(max_shift=4)])
def test_the_gpu_measures_mask_nan_as_the_cpu(options):
    import cupy as cp

    stack, _, truth = nan_stack()
    gpu = align(cp.asarray(stack), device="gpu", mask="nan", **options)
    cpu = align(stack, device="cpu", mask="nan", **options)
    assert gpu.settings["device"] == "gpu"
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=2e-3)
    assert error(gpu, truth) <= 0.1
