"""``lucas_kanade`` (issue 23, low light): the Gauss-Newton refinement of every frame against the
leave-one-out, smoothed template, and ``auto``'s choice from the noise; on the CPU, with GPU twins
at the end (marked ``gpu``)."""

import numpy as np
import pytest
from scipy import ndimage as ndi

from xcorr_app import align
from xcorr_app.alignment.refine._refine_lk import gauss_newton_shifts, solve4
from xcorr_app.bench._accuracy import stack_errors
from xcorr_app.bench._accuracy_data import make_stack
from xcorr_app.errors import InputError


def _scene(rng, shape=(64, 72)):
    return ndi.gaussian_filter(rng.random(shape), 2.0).astype(np.float32) * 100


def _moved(img, d):
    return ndi.shift(img, d, order=3, mode="nearest").astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1])
def test_auto_turns_it_on_at_low_light_and_beats_the_template_alone(seed):
    """25 photons at the brightest pixel: ``auto`` is on, and the fit beats both the single pass
    of before (seed 0: 0.43 -> 0.13 px RMS, seed 1: 0.23 -> 0.12) and the refined template
    alone (0.25, 0.14): asked at least 40% and 10% less."""
    s = make_stack("low_light", seed)
    res = align(s.frames, device="cpu")
    lk = stack_errors(res.shifts, s.truth)[0]
    off = stack_errors(align(s.frames, device="cpu", lucas_kanade="off").shifts, s.truth)[0]
    refined = stack_errors(align(s.frames, "refined", device="cpu",
                                 lucas_kanade="off").shifts, s.truth)[0]
    assert res.settings["lucas_kanade"] == "on"
    assert any(n.startswith("lucas_kanade auto: on") for n in res.notes), res.notes
    assert res.shifts[0].tolist() == [0.0, 0.0]
    assert lk <= 0.6 * off and lk <= 0.9 * refined, (lk, off, refined)


@pytest.mark.parametrize("kind", ["plain", "bleaching_background", "non_square"])
def test_auto_leaves_ordinary_stacks_to_the_reference_fit(kind):
    """Not noisy: ``auto`` builds no template (the fit against the reference instead, in the
    one pass), says nothing, and the shifts are those of ``lucas_kanade="reference"``."""
    s = make_stack(kind, 1)
    auto = align(s.frames, device="cpu")
    fitted = align(s.frames, device="cpu", lucas_kanade="reference")
    assert auto.settings["lucas_kanade"] == "reference"
    assert not any("lucas_kanade" in n for n in auto.notes)
    np.testing.assert_array_equal(auto.shifts, fitted.shifts)


def test_gauss_newton_recovers_a_subpixel_shift_with_a_brightness_change(rng):
    t = _scene(rng)
    truth = np.array([[0.37, -0.81], [-1.2, 0.45]])
    frames = np.stack([0.6 * _moved(t, -d) + 5.0 for d in truth])  # frame(x) = a T(x + d) + b
    start = np.round(truth)
    got = gauss_newton_shifts(frames, np.stack([t, t]), start, np, iterations=4)
    np.testing.assert_allclose(got, truth, atol=0.02)
    assert np.abs(np.round(truth) - truth).max() > 0.3  # the start was far enough off


def test_solve4_is_numpys_solve_and_det(rng):
    """Non-symmetric systems, Gauss-Newton's normal matrices (symmetric, entries of very
    different scales: the template's values, 1, its gradients), and singular ones."""
    m = rng.standard_normal((500, 4, 4)) * rng.uniform(0.1, 1e3, (500, 1, 1))
    r = rng.standard_normal((500, 4))
    x, det = solve4(m, r)
    want = np.linalg.det(m)
    np.testing.assert_allclose(det, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())
    np.testing.assert_allclose(x, np.linalg.solve(m, r[..., None])[..., 0], rtol=1e-6,
                               atol=1e-9)
    j = rng.standard_normal((300, 4, 50)) * np.array([1e3, 1, 10, 10])[None, :, None]
    m = j @ j.transpose(0, 2, 1)
    r = rng.standard_normal((300, 4)) * 100
    want = np.linalg.solve(m, r[..., None])[..., 0]
    np.testing.assert_allclose(solve4(m, r)[0], want, rtol=1e-8,
                               atol=1e-10 * np.abs(want).max())
    m[:, 3] = m[:, 2]  # a repeated row, a zero column, a NaN: singular or not finite
    m[:10, :, 2] = 0
    m[20, 0, 0] = np.nan
    with np.errstate(divide="raise"):  # singular systems divide by no 0
        x, det = solve4(m, r)
    assert (det[:20] == 0).all() and np.isnan(det[20])


def test_gauss_newton_flat_template_is_nan():
    t = np.full((1, 20, 20), 2.0, np.float32)
    got = gauss_newton_shifts(t, t, np.zeros((1, 2)), np)
    assert np.isnan(got).all()


def test_it_does_not_depend_on_the_chunking():
    s = make_stack("low_light", 0, quick=True)
    runs = [align(s.frames, device="cpu", lucas_kanade="on", chunk_frames=c).shifts
            for c in (1, 4, 64)]
    for r in runs[:2]:
        np.testing.assert_allclose(r, runs[2], atol=1e-6)


def test_unusable_frames_keep_nan_and_the_others_are_fitted():
    s = make_stack("low_light", 0)
    frames = s.frames.copy()
    frames[5] = np.nan
    frames[9] = 7.0
    res = align(frames, device="cpu", lucas_kanade="on")
    assert np.isnan(res.shifts[[5, 9]]).all()
    keep = np.setdiff1d(np.arange(len(frames)), [5, 9])
    assert stack_errors(res.shifts[keep], s.truth[keep])[0] < 0.2


@pytest.mark.parametrize("kwargs", [{"lucas_kanade": "maybe"},
                                    {"lucas_kanade": "on", "reference": "previous"},
                                    {"lucas_kanade": "on", "reference": "mean"},
                                    {"lucas_kanade": "on", "normalization": "phase"}])
def test_impossible_choices_are_input_errors(kwargs):
    s = make_stack("plain", 0, quick=True)
    with pytest.raises(InputError, match="lucas_kanade"):
        align(s.frames, device="cpu", **kwargs)


def test_auto_with_a_reference_it_cannot_use_is_off():
    s = make_stack("low_light", 0, quick=True)
    res = align(s.frames, "previous", device="cpu")
    assert res.settings["lucas_kanade"] == "off"


# ------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_gpu_gauss_newton_matches_numpy(rng):
    import cupy as cp

    t = np.stack([_scene(rng) for _ in range(5)])
    truth = rng.uniform(-2, 2, (5, 2))
    frames = np.stack([_moved(x, -d) for x, d in zip(t, truth)])
    frames += rng.normal(0, 2.0, frames.shape).astype(np.float32)
    start = np.round(truth)
    want = gauss_newton_shifts(frames, t, start, np)
    got = gauss_newton_shifts(cp.asarray(frames), cp.asarray(t), cp.asarray(start), cp)
    np.testing.assert_allclose(cp.asnumpy(got), want, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("seed,reference", [(0, None), (1, None), (0, "refined:2")])
def test_gpu_matches_cpu_at_low_light(seed, reference):
    """The same choice, template and fit (CuPy) as the CPU: shifts within 1e-3 px."""
    s = make_stack("low_light", seed)
    cpu = align(s.frames, reference, device="cpu")
    gpu = align(s.frames, reference, device="gpu")
    assert gpu.settings["device"] == "gpu"
    assert gpu.settings["lucas_kanade"] == cpu.settings["lucas_kanade"] == "on"
    assert gpu.shifts[0].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=1e-3)


@pytest.mark.gpu
def test_gpu_auto_leaves_plain_stacks_to_the_reference_fit():
    s = make_stack("plain", 0)
    gpu = align(s.frames, device="gpu")
    assert gpu.settings["lucas_kanade"] == "reference"
