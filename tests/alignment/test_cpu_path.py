"""The CPU path: threads, the reference's kept spectrum and ZNCC terms, and the two-stage
refinement of the FFT reference change no result."""

import numpy as np
import pytest
from scipy import ndimage as ndi

import xcorr_app
from xcorr_app.correlate import fft_geometry, padded_spectra, xcorr_fft
from xcorr_app.registration import fft_shifts, zncc, zncc_left


def _drifting(rng, n, shape, pad=12):
    h, w = shape
    scene = ndi.gaussian_filter(rng.random((h + 2 * pad, w + 2 * pad)), 2) * 4000 + 500
    shifts = rng.uniform(-pad / 2, pad / 2, (n, 2))
    shifts[0] = 0
    frames = [ndi.shift(scene, s, order=1)[pad:pad + h, pad:pad + w] for s in shifts]
    return rng.poisson(np.stack(frames)).astype(np.uint16), shifts


@pytest.mark.parametrize("reference", ["first", "previous"])
@pytest.mark.parametrize("max_shift", [None, 5])
def test_threads_and_chunks_change_no_result(rng, monkeypatch, reference, max_shift):
    stack, _ = _drifting(rng, 11, (37, 53))
    tables = []
    for threads, chunk in ((1, 64), (3, 4), (2, 1), (4, 5)):
        monkeypatch.setenv("XCORR_THREADS", str(threads))
        res = xcorr_app.align(stack, device="cpu", reference=reference, max_shift=max_shift,
                              chunk_frames=chunk)
        tables.append(np.column_stack([res.shifts, res.peak, res.confidence]))
    for t in tables[1:]:
        np.testing.assert_array_equal(t, tables[0])


@pytest.mark.parametrize("shape", [(37, 53), (70, 66)])
def test_the_quality_report_is_the_same_on_any_threads(rng, monkeypatch, shape):
    """The report's figures do not depend on the run's threads (frames of 4096 pixels and
    more shifted one at a time, smaller ones as a batch)."""
    stack, _ = _drifting(rng, 11, shape)
    rows = []
    for threads in (1, 3, 2):
        monkeypatch.setenv("XCORR_THREADS", str(threads))
        q = xcorr_app.align(stack, device="cpu", max_shift=6, static="off").quality
        rows.append(np.column_stack([q.before, q.after, q.residual, q.residual_rotation_deg]))
    assert np.isfinite(rows[0][:, :4]).all()
    for r in rows[1:]:
        np.testing.assert_array_equal(r, rows[0])


def test_cpu_measures_the_drift(rng):
    stack, truth = _drifting(rng, 9, (61, 47))
    res = xcorr_app.align(stack, device="cpu")
    err = np.asarray(res.shifts) + truth  # shifts undo the drift
    assert np.abs(err).max() < 0.2, err


def test_kept_spectrum_and_zncc_terms_equal_fresh_ones(rng):
    ref = rng.standard_normal((23, 31)).astype(np.float32)
    mov = rng.standard_normal((3, 23, 31)).astype(np.float32)
    for bound in (None, (4, 6)):
        size = fft_geometry(ref.shape, mov.shape[1:], bound).size
        kept = padded_spectra(ref, size)
        fresh = xcorr_fft(ref, mov, "one_to_many", bound, dtype="float32")
        np.testing.assert_array_equal(
            xcorr_fft(ref, mov, "one_to_many", bound, dtype="float32", left_spectrum=kept), fresh)
        assert fresh.flags.c_contiguous
        part = zncc_left(ref, mov.shape, bound)
        np.testing.assert_array_equal(zncc(fresh, ref, mov, bound, left_part=part),
                                      zncc(fresh, ref, mov, bound))


def test_two_stage_refinement_same_grid(rng):
    """In float64 the two-stage refinement finds the single stage's grid point; in float32 at
    most one grid step away (near-ties)."""
    for _ in range(6):
        h, w = rng.integers(30, 90, 2)
        scene = ndi.gaussian_filter(rng.random((h + 20, w + 20)), 2)
        t = rng.uniform(-4, 4, (4, 2))
        frames = np.stack([ndi.shift(scene, s, order=3)[10:-10, 10:-10] for s in t])
        ref = scene[10:-10, 10:-10]
        for dt, tol in ((np.float64, 0.0), (np.float32, 0.05 + 1e-9)):
            one, _ = fft_shifts(ref.astype(dt), frames.astype(dt), upsample_factor=20,
                                normalization=None, periodic=True)
            two, _ = fft_shifts(ref.astype(dt), frames.astype(dt), upsample_factor=20,
                                normalization=None, periodic=True, coarse=4)
            assert np.abs(one - two).max() <= tol
            np.testing.assert_allclose(two, -t, atol=0.5)  # small non-periodic crops: biased


def test_tune_reaches_the_measurer_and_changes_nothing_on_the_cpu(rng):
    from xcorr_app.alignment import AlignOptions
    from xcorr_app.alignment.rigid import Measurer

    assert Measurer.of(AlignOptions(tune=True, max_shift=3), np, (20, 24)).tune is True
    assert Measurer.of(AlignOptions(max_shift=3), np, (20, 24)).tune is False
    stack, _ = _drifting(rng, 4, (30, 34))
    a = xcorr_app.align(stack, device="cpu", max_shift=6, tune=True)
    b = xcorr_app.align(stack, device="cpu", max_shift=6)
    np.testing.assert_array_equal(a.shifts, b.shifts)
