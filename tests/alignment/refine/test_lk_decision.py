"""``lucas_kanade="auto"``'s judgement of the noise (``alignment/refine/_lk_decision.py``): the
predicted precision on the CPU, the row sums the GPU adds up (a NumPy reference of the kernel,
judged by the host code the GPU path uses), and the GPU's judgement against the CPU's (marked
``gpu``)."""

import numpy as np
import pytest
from scipy import ndimage as ndi

from xcorr_app.alignment.refine import _lk_decision as lkd
from xcorr_app.bench._accuracy_data import KINDS, make_stack
from xcorr_app.filters import gaussian_light
from xcorr_app.io import ArraySource


def reference_row_sums(frames, smooth):
    """What ``precision_sums`` writes, in float64 NumPy: per row, the sum of |Laplacian| (0 on
    the edge rows), of gy^2 + gx^2 of ``smooth`` (np.gradient) and the count of NaN/Inf."""
    out = []
    for f, s in zip(np.asarray(frames, np.float64), np.asarray(smooth, np.float64)):
        h, w = f.shape
        lap = np.zeros((h, w))
        lap[1:-1, 1:-1] = np.abs(
            f[:-2, :-2] - 2 * f[:-2, 1:-1] + f[:-2, 2:] - 2 * f[1:-1, :-2] + 4 * f[1:-1, 1:-1]
            - 2 * f[1:-1, 2:] + f[2:, :-2] - 2 * f[2:, 1:-1] + f[2:, 2:])
        with np.errstate(all="ignore"):
            gy, gx = np.gradient(s)
            energy = gy * gy + gx * gx
        out.append(np.stack([lap.sum(1),
                             energy.sum(1), (~np.isfinite(f)).sum(1)], axis=1))
    return np.stack(out)


def test_predicted_precision_separates_the_noisy_stacks():
    for kind in KINDS:
        for seed in (0, 1, 2):
            p = lkd.predicted_precision(make_stack(kind, seed).frames[0])
            assert (p > lkd.NOISY_PRECISION) == (kind == "low_light"), (kind, seed, p)


def test_predicted_precision_of_unusable_frames_is_infinite():
    assert lkd.predicted_precision(np.full((16, 16), 3.0)) == float("inf")
    f = np.ones((16, 16))
    f[2, 3] = np.nan
    assert lkd.predicted_precision(f) == float("inf")
    assert lkd.predicted_precision(np.ones((2, 40))) == float("inf")


def test_large_frames_are_judged_on_a_central_crop_scaled_to_their_area():
    rng = np.random.default_rng(5)
    side = 2 * lkd.PRECISION_CROP + 37
    scene = ndi.gaussian_filter(rng.random((side, side)), 3) * 400
    frame = rng.poisson(np.clip(scene, 0, None) + 20).astype(np.float64)
    whole = lkd.predicted_precision(frame)
    assert lkd._precision_of(frame) == pytest.approx(whole, rel=0.2)
    small = frame[:300, :260]
    assert lkd._precision_of(small) == lkd.predicted_precision(small)  # small frames: whole


@pytest.mark.parametrize("kind", KINDS)
def test_the_gpu_paths_host_judgement_of_row_sums_is_the_cpus(kind):
    """The host half of the GPU path (row sums -> verdict) on the sums the kernel must write
    (here from NumPy, smoothed as the CPU smooths): the CPU's verdict and precision."""
    frames = make_stack(kind, 1, quick=True).frames
    idx = lkd.spread_frames(len(frames), lkd.NOISE_FRAMES)
    y0, x0, ch, cw = lkd.crop_box(frames.shape[1:])
    crops = frames[idx][:, y0:y0 + ch, x0:x0 + cw].astype(np.float32)
    smooth = np.stack([gaussian_light(c, lkd.PRECISION_SIGMA) for c in crops])
    noisy, p = lkd.judged_sums(reference_row_sums(crops, smooth), frames.shape[1:])
    want = lkd.noisy_stack(ArraySource(frames))
    assert noisy == want[0]
    assert p == pytest.approx(want[1], rel=1e-9)


def test_the_host_judgement_skips_frames_with_nan_and_crops_large_frames():
    rng = np.random.default_rng(3)
    frames = (ndi.gaussian_filter(rng.random((3, 700, 40)), (0, 3, 3)) * 500
              + rng.normal(0, 2, (3, 700, 40))).astype(np.float32)
    frames[1, 5, 5] = np.nan  # outside the crop: the CPU does not see it either
    frames[2, 350, 20] = np.inf  # inside: that frame does not count
    y0, x0, ch, cw = lkd.crop_box(frames.shape[1:])
    assert (ch, cw) == (lkd.PRECISION_CROP, 40)
    crops = frames[:, y0:y0 + ch, x0:x0 + cw]
    smooth = np.stack([gaussian_light(np.nan_to_num(c), lkd.PRECISION_SIGMA) for c in crops])
    got = lkd.judged_sums(reference_row_sums(crops, smooth), frames.shape[1:])
    want = lkd.verdict([lkd._precision_of(f) for f in frames])
    assert np.isinf(lkd._precision_of(frames[2])) and np.isfinite(lkd._precision_of(frames[1]))
    assert got[0] == want[0] and got[1] == pytest.approx(want[1], rel=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 3, 3), (2, 5, 7), (3, 37, 300), (1, 290, 33)])
def test_gpu_precision_sums_match_the_float64_reference(shape):
    import cupy as cp

    from xcorr_app.alignment.rigid import precision_sums

    rng = np.random.default_rng(sum(shape))
    f = (rng.random(shape) * 1000).astype(np.float32)
    s = (rng.random(shape) * 50).astype(np.float32)
    if shape[0] > 1:
        f[1, shape[1] // 2, shape[2] // 2] = np.nan
        f[1, 0, 0] = np.inf
    out = cp.full((shape[0], shape[1], 3), cp.nan)  # poisoned
    got = precision_sums(cp.asarray(f), cp.asarray(s), out=out).get()
    want = reference_row_sums(f, s)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-9)


@pytest.mark.gpu
def test_gpu_precision_sums_refuse_bad_arrays():
    import cupy as cp

    from xcorr_app.alignment.rigid import precision_sums

    with pytest.raises(ValueError):
        precision_sums(cp.zeros((1, 2, 9), cp.float32), cp.zeros((1, 2, 9), cp.float32))
    with pytest.raises(ValueError):
        precision_sums(cp.zeros((1, 4, 9), cp.float64), cp.zeros((1, 4, 9), cp.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("on_device", [False, True])
def test_gpu_judgement_is_the_cpus(kind, on_device):
    import cupy as cp

    frames = make_stack(kind, 2, quick=True).frames
    src = ArraySource(cp.asarray(frames) if on_device else frames)
    judgement = lkd.noisy_stack_on_gpu(src)
    noisy, p, change = judgement.result()
    assert judgement.done() and judgement.exception() is None
    want = lkd.noisy_stack(ArraySource(frames))
    assert noisy == want[0]
    assert p == pytest.approx(want[1], rel=1e-5)  # the GPU's gaussian in float32
    assert change == pytest.approx(want[2], rel=1e-5, abs=1e-7)


@pytest.mark.gpu
def test_gpu_judgement_of_large_uint16_frames_and_tiny_ones():
    import cupy as cp

    rng = np.random.default_rng(11)
    scene = ndi.gaussian_filter(rng.random((560, 530)), 3) * 3000
    frames = rng.poisson(np.clip(scene, 0, None) + 50, (5, 560, 530)).astype(np.uint16)
    got = lkd.noisy_stack_on_gpu(ArraySource(cp.asarray(frames))).result()
    want = lkd.noisy_stack(ArraySource(frames))
    assert got[0] == want[0] and got[1] == pytest.approx(want[1], rel=1e-5)
    assert got[2] == pytest.approx(want[2], rel=1e-5, abs=1e-7)
    tiny = lkd.noisy_stack_on_gpu(ArraySource(cp.ones((4, 2, 50), cp.float32))).result()
    assert tiny == (False, float("inf"), 0.0) == lkd.noisy_stack(ArraySource(np.ones((4, 2, 50))))


@pytest.mark.gpu
def test_gpu_brightness_change_of_a_bleaching_uint16_stack_is_the_cpus():
    import cupy as cp

    rng = np.random.default_rng(5)
    scene = ndi.gaussian_filter(rng.random((90, 70)), 2) * 400
    fade = np.geomspace(1, 0.05, 9)[:, None, None]
    frames = rng.poisson(scene * fade + 100).astype(np.uint16)
    frames[4] = 7  # a constant frame does not count
    got = lkd.noisy_stack_on_gpu(ArraySource(cp.asarray(frames))).result()[2]
    want = lkd.noisy_stack(ArraySource(frames))[2]
    assert got == pytest.approx(want, rel=1e-6) and 0.3 < want < 0.9


def test_the_brightness_change_is_that_of_the_crops_means():
    """(the brightness from the crops' means as read: each frame's own scale does not hide it,
    a frame with NaN or a constant one does not count)"""
    rng = np.random.default_rng(4)
    base = ndi.gaussian_filter(rng.random((40, 50)), 2).astype(np.float32)
    frames = np.stack([base * k for k in (1.0, 0.8, 0.5, 0.25)])
    frames = np.concatenate([frames, np.full((1, 40, 50), 9.0, np.float32)])
    frames[1, 3, 3] = np.nan
    change = lkd.noisy_stack(ArraySource(frames))[2]
    assert change == pytest.approx(0.75, rel=1e-6)


def test_auto_stays_off_where_the_brightness_changes():
    from xcorr_app.alignment import AlignOptions
    from xcorr_app.alignment.refine import lucas_kanade_choice

    opts = AlignOptions()
    on, note = lucas_kanade_choice(opts, True, 0.2, 0.05)
    assert on.lucas_kanade == "on" and "noisy frames" in note
    off, note = lucas_kanade_choice(opts, True, 0.2, 0.6)
    assert off.lucas_kanade == "off" and "brightness changes by 60%" in note
    quiet, note = lucas_kanade_choice(opts, False, 0.01, 0.9)
    assert quiet.lucas_kanade == "off" and note is None


def test_a_deeply_bleached_noisy_stack_is_measured_without_the_fit():
    """20-fold bleaching: Lucas-Kanade's template of bright and dim frames misled it (45 px
    RMS on this stack, 0.2 px without it)."""
    from xcorr_app import align

    stack = make_stack("deep_bleaching", 1, image="moon", shape=(128, 128))
    res = align(stack.frames, device="cpu")
    assert res.settings["lucas_kanade"] == "off"
    assert any("brightness changes by" in n for n in res.notes)
    err = np.hypot(*(np.asarray(res.shifts) - stack.truth).T)
    assert np.sqrt(np.mean(err ** 2)) < 0.3


def test_a_zero_centred_noisy_stack_keeps_the_fit():
    """Frames less their mean: no brightness to compare (a range over means near zero read
    as 196% and turned the fit off: 28 px RMS)."""
    from xcorr_app import align

    stack = make_stack("low_light", 0, image="retina", shape=(128, 128))
    res = align(stack.frames - stack.frames.mean(), device="cpu")
    assert res.settings["lucas_kanade"] == "on"
    err = np.hypot(*(np.asarray(res.shifts) - stack.truth).T)
    assert np.sqrt(np.mean(err[1:] ** 2)) < 0.3


def test_the_template_pass_falls_back_to_the_first_in_one_frame_of_reference():
    """Frame 0 jumping against the template (weaker): the first pass kept whole, not a mix of
    two frames of reference; one frame jumping alone: that frame's first-pass shift."""
    from xcorr_app.alignment.refine import kept_from_first
    from xcorr_app.alignment.rigid import COLUMN

    def table(dy, conf):
        t = np.zeros((len(dy), len(COLUMN)))
        t[:, COLUMN["dy"]], t[:, COLUMN["confidence"]] = dy, conf
        return t

    first = table([0, 1, 2, 3, 4], 0.8)
    out, n = kept_from_first(table([3, 1, 2, 3, 4], [0.5, 0.9, 0.4, 0.9, 0.4]), first)
    assert out[:, COLUMN["dy"]].tolist() == [0, 1, 2, 3, 4] and n == 1
    out, n = kept_from_first(table([0.1, 1.1, 9, 3.1, 4.1], [0.9, 0.9, 0.5, 0.9, 0.9]), first)
    assert np.allclose(out[:, COLUMN["dy"]], [0, 1, 2, 3, 4]) and n == 1
    out, n = kept_from_first(table([0.1, 1.1, 9, 3.1, 4.1], [0.9, 0.9, 0.9, 0.9, 0.9]), first)
    assert np.allclose(out[:, COLUMN["dy"]], [0, 1, 8.9, 3, 4]) and n == 0  # (a stronger peak)
