"""The streamed align pipeline on the CPU: accuracy on stacks with known subpixel drift, the
result independent of chunking and --max-memory, references, normalizations, windows,
confidence flags, resampling and cropping, the read-ahead thread."""

import numpy as np
import pytest
import tifffile

from synthetic import drift_stack, write_stack
from xcorr_app import align, apply_shifts
from xcorr_app.alignment import common_area
from xcorr_app.alignment._result import interpolate_flagged
from xcorr_app.errors import InputError, XcorrError
from xcorr_app.streaming import parse_memory
from xcorr_app.streaming import ChunkPrefetcher
from xcorr_app.io import ArraySource, open_stack
from xcorr_app.alignment.warp import shift_frames


def rms(a, b):
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


@pytest.mark.parametrize("image", ["astronaut", "coins"])
@pytest.mark.parametrize("peak_counts", [100, 1000])   # peak SNR 10 and 32
@pytest.mark.parametrize("max_shift", [8, None])
def test_known_subpixel_drift_within_0_05_px(rng, image, peak_counts, max_shift):
    """The defaults (zncc, gaussian:1 prefilter, 2-D gaussian peak fit) against the truth, and
    the FFT reference (correlation of the periodic components) finds the same integer peak on every frame."""
    stack, truth = drift_stack(rng, n=10, shape=(128, 160), max_shift=6,
                               peak_counts=peak_counts, image=image)
    res = align(stack, max_shift=max_shift, device="cpu")
    assert rms(res.shifts, truth) <= 0.05
    assert np.abs(res.shifts - truth).max() < 0.25
    assert res.agree.all(), np.flatnonzero(~res.agree)


# max error over 150 seeds (CPU, 2026-11-22): tukey median 0.11, 99th percentile 0.34, worst
# 0.52 (one CI seed gave 0.63); hann median 0.17, worst 0.77
@pytest.mark.parametrize("window,tol", [("tukey", 0.75), ("hann", 1.25)])
def test_phase_correlation_recovers_the_drift(rng, window, tol):
    stack, truth = drift_stack(rng, n=6, shape=(128, 160), max_shift=5, peak_counts=1000)
    res = align(stack, max_shift=10, normalization="phase", window=window, device="cpu")
    assert np.abs(res.shifts - truth).max() < tol
    assert res.plan == "phase"


# max error over 300 seeds (CPU, 2026-11-22): parabolic median 0.018, worst 0.149; none (integer
# peaks) median 0.467, worst 0.600; upsample (window-biased) median 0.303, 99th percentile 0.912,
# worst 1.185; (2026-11-25, fits along three rows and columns) gaussian3 and parabolic3 median
# 0.018, 99th percentile 0.083, worst 0.145
@pytest.mark.parametrize("subpixel,tol", [("parabolic", 0.25), ("gaussian3", 0.25),
                                          ("parabolic3", 0.25), ("none", 0.75),
                                          ("upsample", 1.5)])
def test_other_subpixel_methods_find_the_drift(rng, subpixel, tol):
    stack, truth = drift_stack(rng, n=6, shape=(128, 160), max_shift=5, peak_counts=1000)
    res = align(stack, max_shift=10, subpixel=subpixel, device="cpu")
    assert np.abs(res.shifts - truth).max() < tol


@pytest.mark.parametrize("reference", ["first", "previous", "mean", "mean:3", 4])
def test_streaming_equals_in_memory(tmp_path, rng, reference):
    """The same stack from memory, from a file in chunks of 1, 7 and all frames, and under
    --max-memory caps gives exactly the same shifts."""
    stack, _ = drift_stack(rng, n=17, shape=(72, 90), max_shift=4, peak_counts=500)
    path = write_stack(tmp_path / "s.tif", stack)
    base = align(stack, reference=reference, max_shift=6, device="cpu", chunk_frames=len(stack))
    runs = [align(path, reference=reference, max_shift=6, device="cpu", chunk_frames=c)
            for c in (1, 7, len(stack))]
    runs += [align(path, reference=reference, max_shift=6, device="cpu", max_memory=m)
             for m in ("6M", "30M")]
    assert [r.settings["chunk_frames"] for r in runs[3:]] != [len(stack)] * 2  # caps bit
    for r in runs:
        np.testing.assert_array_equal(r.shifts, base.shifts)
        np.testing.assert_array_equal(r.confidence, base.confidence)
        np.testing.assert_array_equal(r.fft_shifts, base.fft_shifts)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("reference", ["mean", "mean:5"])
def test_mean_reference_leaves_out_frames_with_nan_pixels(rng, reference, device):
    """A frame with a NaN pixel is left out of the mean (and measured as such a frame is: NaN
    shifts, flagged), not a refusal of the whole run: the other frames' shifts are those
    against the mean of the finite frames; a mean of no finite frame is refused, once."""
    stack, _ = drift_stack(rng, n=6, shape=(64, 80), max_shift=3, peak_counts=500)
    stack = stack.astype(np.float32)
    stack[2, 5, 5] = np.nan
    res = align(stack, reference=reference, max_shift=6, device=device)
    finite = [0, 1, 3, 4] + ([5] if reference == "mean" else [])
    want = align(stack, reference=stack[finite].astype(np.float64).mean(axis=0), max_shift=6,
                 device=device)
    assert np.isnan(res.shifts[2]).all() and res.nonfinite[2] and res.low_confidence[2]
    # (the same mean: on the CPU the same shifts; the GPU's passes differ by its 1e-6 px)
    np.testing.assert_allclose(res.shifts, want.shifts, rtol=0, atol=0 if device == "cpu"
                               else 1e-4)
    stack[:, 0, 0] = np.inf
    with pytest.raises(InputError, match="every frame of the mean reference has NaN or Inf"):
        align(stack, reference=reference, max_shift=6, device=device)


def test_max_memory_too_small_is_a_clear_error(rng):
    stack, _ = drift_stack(rng, n=3, shape=(64, 64))
    with pytest.raises(XcorrError, match="too small for frames of 64x64"):
        align(stack, max_memory="10K", device="cpu")
    with pytest.raises(XcorrError, match="memory size"):
        parse_memory("lots")
    for value in (float("nan"), float("inf")):  # (ValueError and OverflowError from int())
        with pytest.raises(InputError, match="positive memory size"):
            align(stack, max_memory=value, device="cpu")


@pytest.mark.parametrize("kw,msg", [({"window": "kaiser"}, "unknown window"),
                                    ({"window": "tukey:2"}, "ALPHA"),
                                    ({"normalization": "fancy"}, "unknown normalization"),
                                    ({"reference": "mean:0"}, "mean:N"),
                                    ({"reference": "nosuch.tif"}, "unknown reference"),
                                    ({"min_confidence": -1}, "min_confidence")])
def test_bad_options_are_clear_errors(rng, kw, msg):
    stack, _ = drift_stack(rng, n=3, shape=(64, 64))
    with pytest.raises(XcorrError, match=msg):
        align(stack, device="cpu", **kw)


def test_low_confidence_frames_are_flagged_and_interpolated(rng):
    stack, truth = drift_stack(rng, n=9, shape=(96, 112), max_shift=3, peak_counts=1000)
    xx = np.arange(stack.shape[2])
    stack[4] = 500 + 400 * np.cos(2 * np.pi * xx / 4)  # stripes: equal peaks every 4 px
    res = align(stack, max_shift=6, min_confidence=10.0, device="cpu")
    assert res.low_confidence[4] and res.low_confidence.sum() <= 2
    fixed = align(stack, max_shift=6, min_confidence=10.0, interpolate_low=True, device="cpu")
    np.testing.assert_allclose(fixed.shifts[4], (fixed.shifts[3] + fixed.shifts[5]) / 2)
    ok = ~res.low_confidence
    np.testing.assert_array_equal(fixed.shifts[ok], res.shifts[ok])
    assert "low_confidence" in res.csv_text().splitlines()[0]
    assert res.summary()["low_confidence_frames"] == int(res.low_confidence.sum())


def test_interpolate_flagged_ends_and_nan():
    s = np.array([[9.0, 9.0], [1.0, 1.0], [np.nan, np.nan], [3.0, 5.0], [9.0, 9.0]])
    out = interpolate_flagged(s, np.array([True, False, False, False, True]))
    np.testing.assert_array_equal(out[[0, 4]], [[1.0, 1.0], [3.0, 5.0]])
    assert np.isnan(out[2]).all()


@pytest.mark.parametrize("method", ["bilinear", "fourier"])
def test_shift_frames_moves_content(rng, method):
    """A band-limited periodic image: its shifted version is known exactly."""
    h, w = 40, 52
    yy, xx = np.mgrid[:h, :w]
    waves = [(int(rng.integers(0, 4)), int(rng.integers(0, 4)), rng.uniform(0, 6)) for _ in range(4)]

    def image(dy=0.0, dx=0.0):
        return sum(np.cos(2 * np.pi * (fy * (yy - dy) / h + fx * (xx - dx) / w) + ph)
                   for fy, fx, ph in waves)

    shift = np.array([[2.25, -3.5]])
    out = shift_frames(image()[None], shift, method=method, fill=-7.0)[0]
    want = image(*shift[0])
    inner = (slice(3, -1), slice(1, -4))  # sources inside the frame
    tol = 1e-4 if method == "fourier" else 0.1
    np.testing.assert_allclose(out[inner], want[inner], atol=tol * np.abs(want).max())
    assert (out[:2] == -7.0).all() and (out[:, -3:] == -7.0).all()  # shifted in from outside


def test_crop_keeps_the_common_area(rng, tmp_path):
    stack, _ = drift_stack(rng, n=4, shape=(60, 70))
    shifts = np.array([[0.0, 0.0], [2.5, -1.0], [-3.0, 4.2], [np.nan, np.nan]])
    assert common_area(shifts, (60, 70)) == (3, 57, 5, 69)
    chunks = list(apply_shifts(stack, shifts, crop=True, device="cpu", chunk_frames=3))
    assert [c.shape for _, c in chunks] == [(3, 54, 64), (1, 54, 64)]
    assert np.isfinite(np.concatenate([c for _, c in chunks])).all()
    with pytest.raises(XcorrError, match="no area in common"):
        common_area(np.array([[0.0, 0.0], [70.0, 0.0]]), (60, 70))


def shift_error_px(out, want, margin=8):
    """Per frame, the RMS difference of the interior pixels over the RMS gradient (per axis):
    about the error, in px, of the shift ``out`` was warped with against that of ``want``."""
    inner = (slice(None), slice(margin, -margin), slice(margin, -margin))
    a, b = np.asarray(out, np.float64)[inner], np.asarray(want, np.float64)[inner]
    grad = np.array([np.mean(np.square(np.gradient(f)).sum(axis=0) / 2) for f in b])
    return np.sqrt(np.mean((a - b) ** 2, axis=(1, 2)) / grad)


@pytest.mark.parametrize("resample", ["bilinear", "fourier"])
def test_result_applies_its_shifts(rng, resample):
    """The aligned output's content: its interior pixels against the frames warped with the
    known true shifts by the same resampler.  Measured shifts are within 0.05 px of the truth
    (the metric reads about 0.04); the check must fail for a 0.2 px error (it reads 0.25 there,
    0.35 and more at 0.3 px, 0.5 to 2 px for half the shifts), as asserted below."""
    stack, truth = drift_stack(rng, n=6, shape=(96, 112), max_shift=4, peak_counts=1000)
    res = align(stack, max_shift=8, device="cpu")
    aligned = np.concatenate([c for _, c in res.apply(device="cpu", resample=resample)])
    assert aligned.shape == stack.shape and aligned.dtype == np.float32
    frames = stack.astype(np.float32)
    want = shift_frames(frames, truth, method=resample)
    tol = 0.15
    assert shift_error_px(aligned, want).max() < tol
    # the check sees a 0.2 px error on every moved frame, and half the shifts applied
    for wrong in (truth + [0.2, 0.0], truth + [0.0, -0.2], truth / 2):
        err = shift_error_px(shift_frames(frames, wrong, method=resample), want)
        moved = np.abs(wrong - truth).max(axis=1) >= 0.2
        assert (err[moved] > tol).all(), err


def test_prefetcher_reads_every_frame_once_in_order(tmp_path, rng):
    stack = rng.integers(0, 60000, size=(11, 9, 13), dtype=np.uint16)
    path = write_stack(tmp_path / "p.tif", stack)
    with open_stack(path) as src, ChunkPrefetcher(src, 4, depth=2) as chunks:
        assert chunks.held_bytes == 3 * 4 * 9 * 13 * 2
        got = []
        for start, frames, slot in chunks:
            got.append((start, frames.copy()))
            chunks.release(slot)
    assert [s for s, _ in got] == [0, 4, 8]
    np.testing.assert_array_equal(np.concatenate([f for _, f in got]), stack)


@pytest.mark.parametrize("copy_threads", [2, 3])
@pytest.mark.parametrize("folder", [False, True])
def test_prefetcher_copies_a_chunk_with_several_threads(tmp_path, rng, copy_threads, folder,
                                                        monkeypatch):
    """A memory-mapped file is copied by several threads at once (each into its own part of
    the buffer); a folder of files, whose reader keeps one file open, by one."""
    stack = rng.integers(0, 60000, size=(13, 9, 13), dtype=np.uint16)
    if folder:
        (tmp_path / "f").mkdir()
        for i, frame in enumerate(stack):
            tifffile.imwrite(tmp_path / "f" / f"{i:02d}.tif", frame)
        path = tmp_path / "f"
    else:
        path = write_stack(tmp_path / "p.tif", stack)
    import threading

    reads = []
    with open_stack(path) as src:
        real = type(src).read

        def spy(self, start, stop, out=None):
            reads.append((start, stop, threading.current_thread().name))
            return real(self, start, stop, out)

        monkeypatch.setattr(type(src), "read", spy)
        with ChunkPrefetcher(src, 5, depth=1, copy_threads=copy_threads) as chunks:
            got = []
            for start, frames, slot in chunks:
                got.append(frames.copy())
                chunks.release(slot)
    np.testing.assert_array_equal(np.concatenate(got), stack)
    pieces = sorted((a, b) for a, b, _ in reads)
    if folder:
        assert pieces == [(0, 5), (5, 10), (10, 13)]
    else:  # each chunk in copy_threads pieces, the first by the reader, the others by helpers
        assert len(pieces) == 3 * copy_threads
        assert [a for a, _ in pieces[1:]] == [b for _, b in pieces[:-1]]
        assert {t.startswith("xcorr-copy") for a, _, t in reads if a % 5} == {True}
        assert {t == "xcorr-reader" for a, _, t in reads if a % 5 == 0} == {True}


def test_prefetcher_hands_reader_errors_to_the_consumer():
    class Broken(ArraySource):
        def read(self, start, stop, out=None):
            if start >= 4:
                raise OSError("disk gone")
            return super().read(start, stop, out)

    with ChunkPrefetcher(Broken(np.zeros((9, 3, 3))), 4) as chunks:
        with pytest.raises(OSError, match="disk gone"):
            for _, _, slot in chunks:
                chunks.release(slot)


def test_prefetcher_close_midway_does_not_hang():
    chunks = ChunkPrefetcher(ArraySource(np.zeros((50, 3, 3))), 2, depth=2)
    it = iter(chunks)
    next(it)
    chunks.close()  # the reader waits for a free buffer: close must wake it


def test_folder_with_a_wrong_shape_in_the_middle_names_the_file(tmp_path, rng):
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(5):
        shape = (30, 40) if i != 2 else (30, 41)
        tifffile.imwrite(folder / f"f{i}.tif", rng.integers(0, 100, shape, dtype=np.uint16))
    with pytest.raises(XcorrError, match=r"f2\.tif has frames of 30x41"):
        align(folder, device="cpu")


def test_rect_sums_match_direct_sums(rng):
    from xcorr_app.registration._normalize import _rect_sums

    x = rng.random((2, 13, 17))
    y0, y1 = np.array([0, 3, 5, 7]), np.array([13, 10, 6, 13])
    x0, x1 = np.array([0, 2, 16, 4]), np.array([17, 9, 17, 4])
    want = np.array([[[x[b, a:c, d:e].sum() for d, e in zip(x0, x1)] for a, c in zip(y0, y1)]
                     for b in range(2)])
    np.testing.assert_allclose(_rect_sums(x, y0, y1, x0, x1, np), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("block", [None, 7])
@pytest.mark.parametrize("shape,max_shift", [((5, 3), (7, 4)), ((9, 12), (4, 5)), ((1, 1), 0),
                                             ((6, 7), None)])
def test_zncc_matches_its_definition(rng, monkeypatch, shape, max_shift, block):
    """Per shift: Pearson correlation of the two overlapping parts; -1 for too little overlap
    (none at all when the bound reaches beyond the frame) or a constant part.  ``block``: the
    CPU's surface a row or two at a time (a 1024x1024 frame's: 32 rows)."""
    from xcorr_app.registration import _normalize, zncc
    from xcorr_app.correlate import first_shift
    from xcorr_app.correlate._direct import xcorr_direct

    if block is not None:
        monkeypatch.setattr(_normalize, "ZNCC_BLOCK", block)

    a = rng.random(shape).astype(np.float32)
    b = rng.random((2,) + shape).astype(np.float32)
    b[1, : shape[0] // 2] = 0.5  # constant on some overlaps
    corr = xcorr_direct(a, b, "one_to_many", max_shift).astype(np.float32)
    got = zncc(corr, a, b, max_shift)
    ky0, kx0 = first_shift(shape, shape, max_shift)
    h, w = shape
    for f in range(2):
        for iy in range(got.shape[1]):
            for ix in range(got.shape[2]):
                ky, kx = ky0 + iy, kx0 + ix
                ya, yb, xa, xb = max(0, -ky), min(h, h - ky), max(0, -kx), min(w, w - kx)
                want = -1.0
                if yb > ya and xb > xa and (yb - ya) * (xb - xa) >= max(0.25 * h * w, 1):
                    pa = a[ya + ky:yb + ky, xa + kx:xb + kx].astype(np.float64).ravel()
                    pb = b[f, ya:yb, xa:xb].astype(np.float64).ravel()
                    if pa.std() > 1e-6 and pb.std() > 1e-6:
                        want = np.corrcoef(pa, pb)[0, 1]
                assert abs(got[f, iy, ix] - want) <= 1e-5, (f, ky, kx)


@pytest.mark.parametrize("left_planes", [False, True])
def test_zncc_by_row_blocks_is_the_whole_surfaces_bit_for_bit(rng, monkeypatch, left_planes):
    """The CPU's ZNCC a block of rows at a time against the whole surface at once, a left
    image a plane or one for all, bounded and not."""
    from xcorr_app.registration import _normalize, zncc
    from xcorr_app.correlate._direct import xcorr_direct

    shape = (23, 61)
    b = rng.random((3,) + shape).astype(np.float32)
    b[1, :9] = 0.5
    a = rng.random((3,) + shape if left_planes else shape).astype(np.float32)
    for bound in (None, (5, 30)):
        corr = (np.stack([xcorr_direct(a[k], b[k], "one_to_one", bound) for k in range(3)])
                if left_planes else xcorr_direct(a, b, "one_to_many", bound)).astype(np.float32)
        monkeypatch.setattr(_normalize, "ZNCC_BLOCK", 10 ** 9)
        whole = zncc(corr, a, b, bound)
        monkeypatch.setattr(_normalize, "ZNCC_BLOCK", 150)  # (2 rows a block)
        np.testing.assert_array_equal(zncc(corr, a, b, bound), whole)


@pytest.mark.parametrize("crop", [False, True])
def test_apply_into_out_gives_the_chunks_numbers(rng, crop):
    """``apply_shifts(..., out=)`` and ``AlignResult.apply(out=)``: the chunks written into one
    float32 array, the same numbers as the chunks handed out; a wrong out is an InputError."""
    from xcorr_app.errors import InputError

    stack = rng.random((7, 20, 24)).astype(np.float32)
    shifts = np.array([[0, 0], [0.5, -1.25], [2, 1], [-1.5, 0.25], [0, 3], [np.nan, 0], [1, 1]])
    want = np.concatenate([c for _, c in apply_shifts(stack, shifts, crop=crop, chunk_frames=3,
                                                      device="cpu")])
    out = np.full(want.shape, np.nan, np.float32)
    views = list(apply_shifts(stack, shifts, crop=crop, chunk_frames=3, device="cpu", out=out))
    assert [a for a, _ in views] == [0, 3, 6]
    assert all(np.shares_memory(v, out) for _, v in views)
    np.testing.assert_array_equal(out, want)
    for bad in (np.zeros(want.shape, np.float64), np.zeros((7, 20, 25), np.float32),
                np.zeros(want.shape, np.float32).T.copy().T):
        with pytest.raises(InputError, match="out must be"):
            list(apply_shifts(stack, shifts, crop=crop, device="cpu", out=bad))
    res = align(stack, max_shift=4, device="cpu", verify=False)
    full = np.concatenate([c for _, c in res.apply(stack, chunk_frames=3, device="cpu")])
    into = np.zeros_like(full)
    for _ in res.apply(stack, chunk_frames=3, device="cpu", out=into):
        pass
    np.testing.assert_array_equal(into, full)
