"""The align pipeline on the CPU: sample stacks, references, normalizations, edge cases."""

import numpy as np
import pytest
import tifffile
from scipy import ndimage as ndi

from xcorr_app import align, estimate_shifts
from xcorr_app.alignment._result import agreement
from xcorr_app.errors import InputError, XcorrError

from sample_paths import SAMPLES, folder_path, stack_path, truth


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("form", ["stack", "folder"])
def test_sample_stacks_recovered_within_0_1_px(name, form):
    path = stack_path(name) if form == "stack" else folder_path(name)
    res = align(path, device="cpu")
    err = np.abs(res.shifts - truth(name))
    assert err.max() <= 0.1, f"max error {err.max():.3f} px"


@pytest.mark.parametrize("name", SAMPLES)
def test_bounded_search_equals_unbounded(name):
    full = align(stack_path(name), device="cpu", verify=False)
    bounded = align(stack_path(name), device="cpu", max_shift=10, verify=False)
    np.testing.assert_allclose(bounded.shifts, full.shifts, atol=1e-4)


def test_reference_previous_and_index(rng):
    base = ndi.gaussian_filter(rng.random((90, 110)), 2)
    steps = np.array([[0, 0], [1, -2], [2, 1], [-1, 3], [0, -1]])
    pos = np.cumsum(steps, axis=0)
    # frame i shows the base moved by pos[i]: frame[n] = base[n - pos + 10]
    stack = np.stack([base[10 - p[0]:80 - p[0], 10 - p[1]:100 - p[1]] for p in pos])
    want = -(pos - pos[0])
    prev = align(stack, "previous", device="cpu", subpixel="none", chunk_frames=2)
    np.testing.assert_array_equal(prev.shifts, want)
    idx = align(stack, 2, device="cpu", subpixel="none")
    np.testing.assert_array_equal(idx.shifts, -(pos - pos[2]))
    # (np.argmax's index, and a 0-d integer array: the frame index, not an image)
    for index in (np.int64(2), np.array(2, np.int32)):
        got = align(stack, index, device="cpu", subpixel="none")
        np.testing.assert_array_equal(got.shifts, idx.shifts)
        assert got.settings["reference"] == idx.settings["reference"]
    for bad in (1.5, np.float64(2.0), np.array(2.5)):
        with pytest.raises(InputError, match="neither a frame index"):
            align(stack, bad, device="cpu")


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("max_shift", [None, 10])
def test_fft_reference_agrees_on_every_frame(name, max_shift):
    res = align(stack_path(name), device="cpu", max_shift=max_shift)
    assert res.agree.all(), np.flatnonzero(~res.agree)
    # plain correlation of the periodic components: within 0.2 px of the truth
    assert np.abs(res.fft_shifts - truth(name)).max() <= 0.2
    assert res.summary()["rms_vs_fft"] <= 0.15
    assert res.settings["fft_reference"].startswith("cross-correlation of the periodic")


def test_phase_runs_are_checked_by_phase_correlation():
    """The moon sample, where phase correlation works: the reference is phase correlation."""
    res = align(stack_path("moon"), device="cpu", normalization="phase", window="tukey")
    assert res.settings["fft_reference"] == "phase correlation, upsample 20"
    assert np.abs(res.fft_shifts - truth("moon")).max() <= 0.15
    plain = align(stack_path("moon"), device="cpu")
    assert not np.array_equal(res.fft_shifts, plain.fft_shifts)


def test_chunking_does_not_change_results():
    path = stack_path("moon")
    a = align(path, device="cpu", chunk_frames=1)
    b = align(path, device="cpu", chunk_frames=5)
    c = align(path, device="cpu", chunk_frames=100)
    np.testing.assert_allclose(a.shifts, c.shifts, atol=1e-5)
    np.testing.assert_allclose(b.shifts, c.shifts, atol=1e-5)


@pytest.mark.parametrize("subpixel", ["none", "parabolic", "gaussian", "parabolic3", "gaussian3", "upsample"])
@pytest.mark.parametrize("normalization", ["zncc", "none"])
def test_every_subpixel_and_normalization_runs(subpixel, normalization):
    res = align(stack_path("hubble"), device="cpu", subpixel=subpixel,
                normalization=normalization, max_shift=8)
    # integer peaks only: half a pixel plus the bias of raw sums; raw sums shift fitted peaks
    tol = 0.75 if subpixel == "none" else (0.1 if normalization == "zncc" else 0.35)
    assert np.abs(res.shifts - truth("hubble")).max() <= tol


def test_estimate_shifts_numpy_in_numpy_out(rng):
    base = ndi.gaussian_filter(rng.random((50, 60)), 1.5)
    ref = base[5:45, 5:55]
    frames = np.stack([base[6:46, 3:53], ref])  # frame[n] = ref[n + (1, -2)]: shift (1, -2)
    shifts, peak, conf = estimate_shifts(ref, frames, max_shift=4, device="cpu")
    assert isinstance(shifts, np.ndarray)
    np.testing.assert_allclose(shifts, [[1, -2], [0, 0]], atol=0.05)


def test_constant_frame_gives_nan_and_is_flagged(rng):
    base = ndi.gaussian_filter(rng.random((50, 60)), 2)
    ref = base[5:45, 5:55]
    stack = np.stack([ref, np.full_like(ref, 7.0), base[4:44, 5:55]])  # frame 2: shift (-1, 0)
    res = align(stack, device="cpu")
    assert np.isnan(res.shifts[1]).all() and not res.agree[1]
    assert res.constant_frames.tolist() == [1]
    assert np.allclose(res.shifts[2], [-1, 0], atol=0.1)


@pytest.mark.parametrize("bad,msg", [
    (np.full((3, 10, 12), np.nan), "NaN or Inf"),
    (np.zeros((2, 1, 1)), "cannot be registered"),
    (np.zeros((0, 5, 5)), "empty"),
])
def test_bad_arrays_are_clear_errors(bad, msg):
    with pytest.raises(XcorrError, match=msg):
        align(bad, device="cpu")


def test_constant_reference_is_an_error():
    with pytest.raises(XcorrError, match="reference image is constant"):
        align(np.ones((3, 8, 8)), device="cpu")
    # float64 varying below float32's resolution at its values: said so, not "constant"
    texture = np.random.default_rng(1).random((3, 16, 16))
    with pytest.raises(InputError, match=r"varies by only 0\.99\d* about 1e\+08: below the "
                       "resolution of float32"):
        align(texture + 1e8, device="cpu")


@pytest.mark.parametrize("kw", [dict(reference="nope"), dict(reference=99), dict(subpixel="x"),
                                dict(normalization="x"), dict(max_shift=-1),
                                dict(prefilter="median:3"), dict(device="tpu")])
def test_bad_arguments_are_clear_errors(rng, kw):
    with pytest.raises(XcorrError):
        align(rng.random((3, 16, 16)), **{"device": "cpu", **kw})


def test_agreement_rule():
    sh = np.array([[2.49, 0.0], [2.0, 0.0], [5.0, 0.0], [9.0, 0.0]])
    fft = np.array([[2.52, 0.0], [3.0, 0.0], [5.0, 0.0], [-20.0, 0.0]])
    fft_int = np.array([[3, 0], [3, 0], [5, 0], [-20, 0]])
    # half-pixel tie agrees; a whole-pixel difference does not; an FFT peak outside the bound
    # does not agree (the drift may exceed the window), even where the integer peaks match
    assert agreement(sh, fft, fft_int, (10, 10)).tolist() == [True, False, True, False]
    assert agreement(sh, fft, fft_int, None).tolist() == [True, False, True, False]
    assert agreement(sh[2:3], fft[2:3], fft_int[2:3], (4, 4)).tolist() == [False]
    assert agreement(sh[2:3], fft[2:3], fft_int[2:3], (5, 5)).tolist() == [True]


@pytest.mark.parametrize("dtype", [">f4", ">u2"])
def test_a_big_endian_array_aligns_as_its_native_copy(dtype):
    """Big-endian pixels (an instrument's raw file mapped with np.memmap) were refused as a
    pixel type to convert; a TIFF of them was read."""
    stack = (1000 * tifffile.imread(stack_path("cell"))[:6].astype(np.float32)
             / 4096).astype(dtype[1:])
    native = align(stack, device="cpu", max_shift=8)
    swapped = stack.astype(dtype)
    got = align(swapped, device="cpu", max_shift=8)
    np.testing.assert_array_equal(got.shifts, native.shifts)
    assert swapped.dtype.byteorder == ">"  # (the input as it was)
    # a big-endian reference image, estimate_shifts' frames and reference, a Dask array of
    # them (astropy's FITS arrays): refused as a type to convert to, which they were
    by_image = align(swapped, swapped[0], device="cpu", max_shift=8)
    np.testing.assert_array_equal(by_image.shifts, align(stack, stack[0], device="cpu",
                                                         max_shift=8).shifts)
    # (on the CPU: on a GPU a first call and a second may take different kernels, whose
    # roundings differ)
    np.testing.assert_array_equal(
        estimate_shifts(swapped[0], swapped, max_shift=8, device="cpu")[0],
        estimate_shifts(stack[0], stack, max_shift=8, device="cpu")[0])
    da = pytest.importorskip("dask.array")
    lazy = align(da.from_array(swapped, chunks=(2, -1, -1)), device="cpu", max_shift=8)
    np.testing.assert_array_equal(lazy.shifts, native.shifts)


@pytest.mark.parametrize("reference, own", [("first", 0), (3, 3), (-2, 10)])
def test_the_reference_frame_itself_gets_exactly_no_shift(reference, own):
    """Its fit's rounding (about 1e-8 px) blended an edge of the aligned reference with the
    fill: a row of NaN with fill=nan."""
    frames = tifffile.imread(stack_path("cell"))
    res = align(frames, reference, device="cpu")
    assert res.shifts[own].tolist() == [0.0, 0.0]
    aligned = np.concatenate([c for _, c in res.apply(frames, fill=np.nan, device="cpu")])
    assert not np.isnan(aligned[own]).any()


def test_a_misspelt_keyword_of_apply_is_an_input_error_naming_the_nearest():
    """AlignResult.apply passed its keywords on: a misspelt one was a TypeError of
    apply_shifts (a patches result's: of apply_field)."""
    frames = tifffile.imread(stack_path("cell"))[:4]
    for res in (align(frames, device="cpu", max_shift=8),
                align(frames, device="cpu", max_shift=8, patches=2)):
        with pytest.raises(InputError, match="unknown option 'fil'; did you mean fill"):
            res.apply(fil=0.0)
    with pytest.raises(InputError, match="unknown option 'max_shfit'; did you mean max_shift"):
        align(frames, device="cpu", max_shfit=8)


def test_previous_without_the_fft_check_reports_no_check():
    """reference='previous' with verify=False chained the check's NaN steps as zeros: FFT
    shifts of 0 in the table and an RMS difference to a check never made."""
    frames = tifffile.imread(stack_path("cell"))[:6]
    res = align(frames, "previous", device="cpu", max_shift=8, verify=False)
    assert np.isnan(res.fft_shifts).all()
    summary = res.summary()
    assert np.isnan(summary["rms_vs_fft"]) and np.isnan(summary["agreement"])
    checked = align(frames, "previous", device="cpu", max_shift=8)
    assert np.isfinite(checked.fft_shifts).all() and checked.summary()["rms_vs_fft"] < 0.1
