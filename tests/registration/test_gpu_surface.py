"""kernels/registration/zncc_peaks.cu against the CPU definitions: summed-area tables (float64
cumsum), ZNCC (normalize.zncc), peaks and confidence (peaks.find_shifts) on fresh random data."""

import numpy as np
import pytest

from conftest import poisoned, rel_error
from xcorr_app.registration import zncc
from xcorr_app.registration._peaks import confidence, peak_index
from xcorr_app.correlate import fft_geometry, first_shift, output_shape
from xcorr_app.correlate._fft import crop_indices
from xcorr_app.correlate._direct import xcorr_direct

pytestmark = pytest.mark.gpu

SIZES = [(1, 1), (5, 3), (16, 16), (31, 33), (100, 37), (257, 129)]


@pytest.mark.parametrize("shape", SIZES + [(3, 2100), (70, 1030), (1100, 45), (145, 150), (0, 40)])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("bound_rows", [None, 0, 2, 16])
def test_summed_area_tables(rng, shape, n, bound_rows):
    import cupy as cp
    from xcorr_app.registration import summed_area_tables, table_layout

    h, w = shape
    top, gap = table_layout(h, bound_rows)
    kept = [y for y in range(h + 1) if y <= top or y >= top + 1 + gap]
    if gap == 0:
        assert kept == list(range(h + 1))
        assert bound_rows is None or 2 * (bound_rows + 1) >= h + 1  # the bands meet
    else:
        assert set(range(bound_rows + 1)) | set(range(h - bound_rows, h + 1)) == set(kept)
    x = (rng.standard_normal((n,) + shape) * 3 + 1).astype(np.float32)
    out = tuple(poisoned(cp, (n, len(kept), w + 1), np.float64) for _ in range(2))
    s1, s2 = summed_area_tables(cp.asarray(x), out=out, bound_rows=bound_rows)
    assert s1 is out[0] and s2 is out[1]
    for got, v in ((s1, x.astype(np.float64)), (s2, x.astype(np.float64) ** 2)):
        want = np.zeros((n, h + 1, w + 1))
        want[:, 1:, 1:] = v.cumsum(axis=1).cumsum(axis=2)
        assert rel_error(got.get(), want[:, kept]) <= 1e-12


@pytest.mark.parametrize("segments", [8, 16, 32])
def test_summed_area_tables_with_every_segment_count(rng, monkeypatch, segments):
    """Each block shape ``sat_tables`` is launched with (``sat_segments`` picks by height),
    on heights that leave some of its segments empty and some short."""
    import cupy as cp
    from xcorr_app.registration import _surfaces

    assert segments in _surfaces.SAT_SEGMENTS
    monkeypatch.setattr(_surfaces, "sat_segments", lambda h: segments)
    for (h, w), bound in (((145, 150), 4), ((33, 7), None), ((300, 65), 14), ((7, 40), 1)):
        top, gap = _surfaces.table_layout(h, bound)
        kept = [y for y in range(h + 1) if y <= top or y >= top + 1 + gap]
        x = (rng.standard_normal((2, h, w)) * 3 + 1).astype(np.float32)
        out = tuple(poisoned(cp, (2, len(kept), w + 1), np.float64) for _ in range(2))
        s1, s2 = _surfaces.summed_area_tables(cp.asarray(x), out=out, bound_rows=bound)
        for got, v in ((s1, x.astype(np.float64)), (s2, x.astype(np.float64) ** 2)):
            want = np.zeros((2, h + 1, w + 1))
            want[:, 1:, 1:] = v.cumsum(axis=1).cumsum(axis=2)
            assert rel_error(got.get(), want[:, kept]) <= 1e-12, (h, w, bound)


def _drifting(rng, n, shape):
    """A smooth reference and frames that are noisy shifted views of it (a clear peak)."""
    from scipy import ndimage as ndi

    h, w = shape
    base = ndi.gaussian_filter(rng.standard_normal((h + 8, w + 8)), 1.2)
    ref = base[4:4 + h, 4:4 + w]
    frames = []
    for _ in range(n):
        dy, dx = rng.integers(-min(3, h // 3), min(3, h // 3) + 1), \
            rng.integers(-min(3, w // 3), min(3, w // 3) + 1)
        f = base[4 + dy:4 + dy + h, 4 + dx:4 + dx + w]
        frames.append(f + 0.05 * rng.standard_normal(f.shape))
    return ref.astype(np.float32), np.stack(frames).astype(np.float32)


def _tables(cp, a, bound_rows=None):
    from xcorr_app.registration import summed_area_tables

    return summed_area_tables(cp.asarray(a), bound_rows=bound_rows)


def _cpu_peaks(z):
    iy, ix = peak_index(z)
    flat = z.reshape(len(z), -1)
    return iy, ix, flat[np.arange(len(z)), iy * z.shape[-1] + ix], confidence(z, iy, ix)


def _check(got, z_want, exact_values=False):
    z, iy, ix, peak, conf = (a.get() for a in got)
    assert rel_error(z, z_want) <= (0 if exact_values else 1e-5)
    wy, wx, wpeak, wconf = _cpu_peaks(z if not exact_values else z_want)
    np.testing.assert_array_equal(iy, wy)
    np.testing.assert_array_equal(ix, wx)
    np.testing.assert_allclose(peak, wpeak, rtol=1e-6)
    np.testing.assert_allclose(conf, wconf, rtol=1e-5)


@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("per_frame_left", [False, True])
@pytest.mark.parametrize("bound", ["half", "small", "beyond"])
def test_zncc_dense_matches_normalize_zncc(rng, shape, n, per_frame_left, bound):
    """The dense path: the same float32 sums go into the kernel and into normalize.zncc."""
    import cupy as cp
    from xcorr_app.registration import surface_peaks

    h, w = shape
    ms = {"half": (h // 2, w // 2), "small": (min(2, h - 1), min(3, w - 1)),
          "beyond": (h + 2, w + 1)}[bound]
    ref, mov = _drifting(rng, n, shape)
    left = np.stack([ref] * n) if per_frame_left else ref
    form = "n_to_mn" if per_frame_left else "one_to_many"
    right = mov[:, None] if per_frame_left else mov
    corr = xcorr_direct(left, right, form, ms).reshape((n,) + output_shape(shape, shape, ms))
    corr = corr.astype(np.float32)
    want = zncc(corr, left, mov, ms)
    out = poisoned(cp, want.shape)
    got = surface_peaks(cp.asarray(corr), shape, first_shift(shape, shape, ms),
                        left_tables=_tables(cp, left if per_frame_left else left[None], ms[0]),
                        right_tables=_tables(cp, mov, ms[0]), out=out)
    assert got[0] is out
    _check(got, want)


@pytest.mark.parametrize("shape", SIZES)
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("bound", ["half", "small", "beyond"])
def test_circular_reads_the_fft_correlation_modulo_its_size(rng, shape, normalize, bound):
    """The circular path: the kernel reads an un-cropped FFT correlation at k mod size; the
    CPU gets the same values cropped (and masked) by the FFT path's own indices."""
    import cupy as cp
    from xcorr_app.registration import surface_peaks

    h, w = shape
    ms = {"half": (h // 2, w // 2), "small": (min(2, h - 1), min(3, w - 1)),
          "beyond": (h + 2, w + 1)}[bound]
    n = 3
    ref, mov = _drifting(rng, n, shape)
    geo = fft_geometry(shape, shape, ms)
    size, (ho, wo) = geo.size, geo.shape
    iy, ix, mask = crop_indices(np, geo)
    circ = np.fft.irfft2(np.fft.rfft2(ref, s=size) * np.conj(np.fft.rfft2(mov, s=size)),
                         s=size).astype(np.float32)
    dense = circ[..., iy, ix] * (1 if mask is None else mask)
    want = zncc(dense, ref, mov, ms) if normalize else dense
    kw = dict(left_tables=_tables(cp, ref[None], ms[0]), right_tables=_tables(cp, mov, ms[0])) \
        if normalize else {}
    got = surface_peaks(cp.asarray(circ), shape, first_shift(shape, shape, ms), (ho, wo),
                        circular=True, normalize=normalize, out=poisoned(cp, (n, ho, wo)), **kw)
    _check(got, want)


@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (6, 1), (9, 11), (3, 33), (40, 300), (7, 513)])
def test_peaks_and_confidence_on_ties_plateaus_and_borders(rng, shape):
    """Small integers make ties, plateaus and border maxima common: the first maximum in
    row-major order and the strict-local-maximum rule must match peaks.py exactly."""
    import cupy as cp
    from xcorr_app.registration import surface_peaks

    z = rng.integers(0, 4, (5,) + shape).astype(np.float32)
    z[1] = 2.0  # constant
    z[2] = 0.0
    z[2, 0, 0] = 1.0  # a single peak at a corner
    _check(surface_peaks(cp.asarray(z), normalize=False), z, exact_values=True)


@pytest.mark.parametrize("wo", [300, 513])
def test_second_peaks_across_the_lanes_of_a_warp_and_the_block(rng, wo):
    """``second_peaks`` takes a pixel's row neighbours from the lanes beside it and reads them
    at a warp's edges (columns 31 | 32) and the block's (255 | 256): a value beside a higher
    one there is no local maximum. Planted: the peak 100, a 50 in its exclusion window, a 40
    just across the edge beside the 50; the second peak is then the background's (< 0.1), and
    a 40 taken for a local maximum would make the confidence 2.5."""
    import cupy as cp
    from xcorr_app.registration import surface_peaks

    cases = [(b, side) for b in (32, 256) for side in ("right", "left")]
    z = (rng.random((len(cases), 5, wo)) * 0.1).astype(np.float32)
    for f, (b, side) in enumerate(cases):
        if side == "right":  # column b - 1 (a warp's last lane) beside b
            z[f, 2, b + 2], z[f, 2, b], z[f, 2, b - 1] = 100.0, 50.0, 40.0
        else:  # column b (a warp's first lane) beside b - 1
            z[f, 2, b - 3], z[f, 2, b - 1], z[f, 2, b] = 100.0, 50.0, 40.0
    got = surface_peaks(cp.asarray(z), normalize=False)
    _check(got, z, exact_values=True)
    assert (got[4].get() > 1000).all()


@pytest.mark.parametrize("rows", [1, 3, 8, 17, 64])
def test_extrema_blocks_of_any_rows_give_the_same_peaks(rng, monkeypatch, rows):
    """A ``surface_extrema`` block covers ``block_rows`` surface rows, a warp one at a time:
    counts that leave warps idle, that do not divide the surface's rows and that exceed them,
    on surfaces whose ties, peaks and minima fall in different blocks."""
    import cupy as cp
    from xcorr_app.registration import _surfaces

    monkeypatch.setattr(_surfaces, "block_rows", lambda threads, ho, count: rows)
    for shape in ((41, 37), (70, 300), (9, 20)):
        z = rng.integers(0, 4, (4,) + shape).astype(np.float32)
        z[1] = 2.0
        z[2] = 0.0
        z[2, -1, -1] = 1.0  # a single peak in the last block
        _check(_surfaces.surface_peaks(cp.asarray(z), normalize=False), z, exact_values=True)


def test_gpu_estimate_shifts_match_cpu_for_every_normalization(rng):
    import cupy as cp
    from xcorr_app import estimate_shifts

    ref, mov = _drifting(rng, 5, (90, 77))
    for norm in ("zncc", "none", "phase"):
        for ms in (None, 5):
            cpu = estimate_shifts(ref, mov, max_shift=ms, normalization=norm, device="cpu")
            gpu = estimate_shifts(cp.asarray(ref), cp.asarray(mov), max_shift=ms,
                                  normalization=norm)
            np.testing.assert_allclose(gpu[0].get(), cpu[0], atol=1e-3)
            np.testing.assert_allclose(gpu[1].get(), cpu[1], rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(gpu[2].get(), cpu[2], rtol=1e-3)


def test_families_of_one_source_with_equal_arguments_are_distinct_kernels():
    """The loader's cache is keyed by kernel name too (surface_extrema<256> and
    second_peaks<256> come from one source with the same template arguments)."""
    from xcorr_app.registration._surfaces import SECOND_PEAKS, SURFACE_EXTREMA, THREADS

    assert SECOND_PEAKS.get(THREADS) is not SURFACE_EXTREMA.get(THREADS)


def test_empty_overlaps_read_minus_one_on_both_devices(rng):
    """Frames mostly empty (a few bright pixels over a faint haze, what a band-pass leaves of
    sparse frames): a shift whose overlap holds at most ``EMPTY`` of a frame's variance reads
    -1 in the kernel as in ``normalize.zncc`` (there the correlation sums' rounding would be
    the ZNCC), and no value passes 1."""
    import cupy as cp
    from xcorr_app.registration import surface_peaks

    h, w, ms = 41, 37, (20, 18)
    frames = 1e-6 * rng.standard_normal((4, h, w))
    for f in frames:  # (the bright pixels in one corner: the far shifts see haze alone)
        f[rng.integers(0, 12, 6), rng.integers(0, 12, 6)] = 100.0
    ref, mov = frames[0], frames[1:]
    corr = xcorr_direct(ref, mov, "one_to_many", ms).reshape(
        (3,) + output_shape((h, w), (h, w), ms)).astype(np.float32)
    want = zncc(corr, ref, mov, ms)
    assert (want <= 1.0 + 1e-6).all() and (want == -1.0).mean() > 0.2
    got = surface_peaks(cp.asarray(corr), (h, w), first_shift((h, w), (h, w), ms),
                        left_tables=_tables(cp, ref[None], ms[0]),
                        right_tables=_tables(cp, mov, ms[0]))
    _check(got, want)
