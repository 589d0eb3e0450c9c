"""alignment/warp/_warp.py: ``shift_frames``, the bilinear shift of every frame. On the CPU its NumPy
lines are the definition (checked here against a float64 loop); on the GPU one kernel of ours
(``kernels/alignment/warp_shift.cu``) does the same float32 operations: equal bit for bit, on odd,
non-square frames smaller than a warp and larger than a block, every pixel type it reads, NaN,
infinite and far shifts, one shift for all frames, a fill value, NaN pixels, a poisoned memory
pool."""

import numpy as np
import pytest

from xcorr_app.alignment.warp import shift_frames
from xcorr_app.errors import InputError


def loop_definition(frames, shifts, fill):
    """float64 loop: out = sum of the inside taps' weights x pixels + (1 - their sum) x fill."""
    n, h, w = frames.shape
    out = np.empty((n, h, w))
    for k in range(n):
        dy, dx = np.nan_to_num(np.asarray(shifts, np.float64)[k if len(shifts) > 1 else 0])
        for y in range(h):
            for x in range(w):
                ys, xs = y - dy, x - dx
                y0, x0 = int(np.floor(ys)), int(np.floor(xs))
                ty, tx = ys - y0, xs - x0
                acc = wsum = 0.0
                for a, wy in ((0, 1 - ty), (1, ty)):
                    for b, wx in ((0, 1 - tx), (1, tx)):
                        yy, xx = y0 + a, x0 + b
                        if 0 <= yy < h and 0 <= xx < w:
                            acc += wy * wx * frames[k, yy, xx]
                            wsum += wy * wx
                out[k, y, x] = acc + (1 - wsum) * fill
    return out


def test_cpu_bilinear_is_the_loop_definition(rng):
    frames = rng.random((3, 7, 9)) * 100
    shifts = np.array([[0.3, -1.7], [-2.25, 4.5], [8.0, 0.0]])
    got = shift_frames(frames, shifts, fill=5.0)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, loop_definition(frames.astype(np.float32), shifts, 5.0),
                               rtol=1e-5, atol=1e-4)


CASES = [((1, 5, 7), [[0.25, -1.5]]),                       # smaller than a warp
         ((3, 37, 301), [[0.3, -1.7], [-2.25, 4.5], [36.5, -300.25]]),  # wider than a block
         ((4, 20, 13), [[np.nan, 0.5], [np.inf, 0.0], [-0.0, -np.inf], [1e9, 2.0]]),
         ((5, 16, 16), [[0.75, -0.125]])]                     # one shift for every frame


@pytest.mark.gpu
@pytest.mark.parametrize("shape, shifts", CASES)
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64,
                                   np.int32])
def test_gpu_bilinear_equals_the_cpu_bit_for_bit(rng, shape, shifts, dtype):
    import cupy as cp

    frames = (rng.random(shape) * 250).astype(dtype)
    if np.dtype(dtype).kind == "f":
        frames[0, shape[1] // 2, shape[2] // 2] = np.nan  # spreads to its taps, as on the CPU
    shifts = np.array(shifts, np.float64)
    # the shifts as NumPy and CuPy float64, and as CuPy float32 (the CPU given the same values)
    for s, as_given in ((shifts, shifts), (cp.asarray(shifts), shifts),
                        (cp.asarray(shifts, cp.float32), shifts.astype(np.float32))):
        with np.errstate(invalid="ignore"):  # (NumPy casts the infinite shifts' floors)
            want = shift_frames(frames, as_given, fill=-3.5)
        poison = cp.full(frames.size * 8, np.nan, cp.float32)  # freed into the output's pool
        del poison
        got = shift_frames(cp.asarray(frames), s, fill=-3.5)
        assert isinstance(got, cp.ndarray) and got.dtype == cp.float32
        np.testing.assert_array_equal(got.get(), want)
    if np.dtype(dtype).kind == "f":
        assert np.isnan(want).any()  # (the NaN pixel is in the comparison)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("shape, shifts", CASES)
@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
def test_an_area_is_that_region_of_the_whole_result(rng, device, shape, shifts, dtype):
    """``area``: the same values as the whole shifted frames cut to it, C-contiguous (on the
    GPU only the area is computed, the check that matters): whole frames, inner regions, empty
    ones, one corner; into the frames' integer type (in the kernel) and another (after it)."""
    frames = (rng.random(shape) * 250).astype(dtype)
    shifts = np.array(shifts, np.float64)
    n, h, w = shape
    areas = [(0, h, 0, w), (1, h - 1, 2, w - 1), (h // 2, h // 2, 0, w), (0, 1, w - 1, w),
             (h // 3, h, w // 4, w // 2 + 1)]
    if device == "gpu":
        import cupy as cp

        frames = cp.asarray(frames)
    for out in (None, dtype, np.uint8):  # (uint8 from either: converted after the warp)
        with np.errstate(invalid="ignore"):
            whole = shift_frames(frames, shifts, fill=-3.5, dtype=out)
        for y0, y1, x0, x1 in areas:
            with np.errstate(invalid="ignore"):
                got = shift_frames(frames, shifts, fill=-3.5, dtype=out, area=(y0, y1, x0, x1))
            assert type(got) is type(whole) and got.dtype == whole.dtype
            assert got.shape == (n, y1 - y0, x1 - x0) and got.flags.c_contiguous
            np.testing.assert_array_equal(np.asarray(got.tolist()),
                                          np.asarray(whole[:, y0:y1, x0:x1].tolist()))


def test_an_area_of_the_fourier_shift_is_that_region_of_it(rng):
    frames = rng.random((3, 12, 10)).astype(np.float32)
    shifts = np.array([[0.5, -1.25], [2.0, 3.5], [-4.75, 0.0]])
    whole = shift_frames(frames, shifts, fill=1.5, method="fourier")
    got = shift_frames(frames, shifts, fill=1.5, method="fourier", area=(2, 9, 1, 10))
    np.testing.assert_array_equal(got, whole[:, 2:9, 1:10])


@pytest.mark.parametrize("area", [(0, 6, 0, 7), (-1, 3, 0, 7), (3, 2, 0, 7), (0, 5, 0, 8),
                                  (0, 5, 0), "all", (0, 2.5, 0, 7), (0, True, 0, 7), "0123"])
def test_an_area_outside_the_frames_is_refused(rng, area):
    with pytest.raises(InputError, match="area"):
        shift_frames(rng.random((2, 5, 7)), np.zeros((2, 2)), area=area)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16])
def test_shifted_into_an_integer_type_are_the_float32_frames_rounded(rng, dtype):
    frames = rng.random((2, 9, 7)) * 300 - 20
    shifts = np.array([[0.5, -1.5], [3.25, 0.0]])
    info = np.iinfo(dtype)
    for fill in (0.0, -3.5, np.nan, 1e6):
        floats = shift_frames(frames, shifts, fill=fill)
        want = np.rint(np.clip(np.nan_to_num(floats, nan=0.0), info.min, info.max))
        got = shift_frames(frames, shifts, fill=fill, dtype=dtype)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want.astype(dtype))
    assert shift_frames(frames, shifts, dtype=np.float64).dtype == np.float32
    for bad in (np.complex64, "no type"):
        with pytest.raises(InputError, match="float32 or an integer type"):
            shift_frames(frames, shifts, dtype=bad)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, shifts", CASES)
@pytest.mark.parametrize("frame_type, dtype", [(np.uint8, np.uint8), (np.uint16, np.uint16),
                                               (np.int16, np.int16), (np.float32, np.uint16),
                                               (np.uint16, np.int16)])
def test_gpu_bilinear_into_an_integer_type_equals_the_cpu(rng, shape, shifts, frame_type,
                                                          dtype):
    """Rounded in the kernel where the type is the frames' own (the others after it): the
    CPU's float32 frames rounded, bit for bit, with fills that clip, round to even and are
    NaN (as 0), on frames that hold the type's extremes."""
    import cupy as cp

    info = np.iinfo(frame_type) if np.dtype(frame_type).kind in "iu" else np.iinfo(np.uint16)
    frames = rng.integers(info.min, int(info.max) + 1, shape).astype(frame_type)
    frames.reshape(-1)[:2] = info.min, info.max
    shifts = np.array(shifts, np.float64)
    for fill in (0.0, -3.5, 2.5, np.nan, 1e6):
        with np.errstate(invalid="ignore"):
            want = shift_frames(frames, shifts, fill=fill, dtype=dtype)
        poison = cp.full(frames.size * 8, 0x5A, cp.uint8)  # freed into the output's pool
        del poison
        got = shift_frames(cp.asarray(frames), cp.asarray(shifts), fill=fill, dtype=dtype)
        assert isinstance(got, cp.ndarray) and got.dtype == dtype
        np.testing.assert_array_equal(got.get(), want)


@pytest.mark.gpu
def test_gpu_bilinear_of_many_frames_and_bad_shifts(rng):
    """More frames than a launch's grid holds are split; shifts that fit no frame count are an
    InputError."""
    import cupy as cp

    from xcorr_app.alignment.warp import _warp

    frames = cp.asarray(rng.random((7, 6, 5)).astype(np.float32))
    shifts = rng.normal(0, 2, (7, 2))
    want = shift_frames(frames.get(), shifts)
    old = _warp.MAX_GRID
    try:
        _warp.MAX_GRID = 3
        np.testing.assert_array_equal(shift_frames(frames, shifts).get(), want)
    finally:
        _warp.MAX_GRID = old
    for bad in (np.zeros((3, 2)), np.zeros((7, 3)), np.zeros(2)):
        with pytest.raises(InputError):
            shift_frames(frames, bad)


# ------------------------------------------------------------- add_shifted: a template's sums

def sums_definition(frames, shifts, idx):
    """float64 loop of the definition: the chosen frames (non-finite pixels as 0) shifted by
    the float64 loop above, summed; the coverage, the same of frames of ones."""
    f = np.nan_to_num(np.asarray(frames, np.float64)[idx], nan=0.0, posinf=0.0, neginf=0.0)
    total = loop_definition(f, shifts, 0.0).sum(axis=0)
    cover = loop_definition(np.ones_like(f), shifts, 0.0).sum(axis=0)
    return total, cover


def test_add_shifted_on_the_cpu_is_the_loop_definition(rng):
    frames = rng.random((12, 9, 11)) * 100
    frames[3, 4, 5] = np.nan
    idx = np.array([0, 3, 4, 5, 6, 7, 8, 9, 10, 11])  # more than a batch, frame 1 and 2 left out
    shifts = rng.uniform(-4, 4, (len(idx), 2))
    total, cover = np.full((9, 11), 2.0), np.full((9, 11), 1.0)  # it adds to what is there
    from xcorr_app.alignment.warp import add_shifted

    add_shifted(total, cover, frames, shifts, idx)
    want_t, want_c = sums_definition(frames.astype(np.float32), shifts, idx)
    np.testing.assert_allclose(total, want_t + 2.0, rtol=1e-5)
    np.testing.assert_allclose(cover, want_c + 1.0, rtol=1e-6)
    with pytest.raises(InputError, match="shifts"):
        add_shifted(total, cover, frames, shifts[:2], idx)


def circular_sums_definition(frames, shifts, idx):
    """float64: each frame moved circularly by scipy's Fourier shift (NaN pixels as 0)."""
    from scipy import ndimage as ndi

    f = np.nan_to_num(np.asarray(frames, np.float64)[idx], nan=0.0, posinf=0.0, neginf=0.0)
    moved = [np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(a), s)).real for a, s in zip(f, shifts)]
    return np.sum(moved, axis=0), np.full(frames.shape[1:], float(len(idx)))


@pytest.mark.parametrize("shape", [(12, 9, 11), (10, 16, 24)])
def test_add_shifted_circularly_is_scipys_fourier_shift(rng, shape, monkeypatch):
    """Wrap-around frames (``circular``): moved by their Fourier phase, what leaves one edge
    comes in at the other, every pixel covered by every frame; odd and even sizes (the
    Nyquist terms), whole and fractional shifts, a NaN pixel, frames left out."""
    from xcorr_app.alignment.warp import _warp
    from xcorr_app.alignment.warp import add_shifted

    frames = rng.random(shape) * 100
    frames[3, 4, 5] = np.nan
    idx = np.array([0, 3, 4, 5, 6, 7, 8, 9])  # frames 1 and 2 left out
    shifts = rng.uniform(-4, 4, (len(idx), 2))
    shifts[1] = (2.0, -3.0)
    total, cover = np.full(shape[1:], 2.0), np.full(shape[1:], 1.0)
    # batches of 3 frames: the sums over several batches
    monkeypatch.setattr(_warp, "CIRCULAR_BATCH", 3)
    add_shifted(total, cover, frames.astype(np.float32), shifts, idx, circular=True)
    want_t, want_c = circular_sums_definition(frames.astype(np.float32), shifts, idx)
    np.testing.assert_allclose(total, want_t + 2.0, rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(cover, want_c + 1.0)
    # a whole-pixel shift is np.roll: the content wrapped, none lost
    one, c1 = np.zeros(shape[1:]), np.zeros(shape[1:])
    add_shifted(one, c1, frames[[4]].astype(np.float32), [(2.0, -3.0)], circular=True)
    np.testing.assert_allclose(one, np.roll(frames[4], (2, -3), axis=(0, 1)), atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 5, 7), (70, 37, 30)])
def test_gpu_add_shifted_circularly_matches_the_cpu(rng, shape):
    """The circular sums on the GPU (cuFFT, float32) against the CPU's and scipy's: odd sizes
    under a warp, more frames than a GPU batch, NaN pixels."""
    import cupy as cp

    from xcorr_app.alignment.warp import add_shifted

    n, h, w = shape
    frames = (rng.random(shape) * 250).astype(np.float32)
    frames[0, h // 2, w // 2] = np.nan
    idx = np.arange(n)[::-1][: max(1, n - 1)]
    shifts = rng.uniform(-3, 3, (len(idx), 2))
    start_t, start_c = rng.random((h, w)), rng.random((h, w))  # it adds to what is there
    want_t, want_c = start_t.copy(), start_c.copy()
    add_shifted(want_t, want_c, frames, shifts, idx, circular=True)
    got_t, got_c = cp.asarray(start_t), cp.asarray(start_c)
    add_shifted(got_t, got_c, cp.asarray(frames), cp.asarray(shifts), idx, circular=True)
    scale = np.abs(want_t).max()
    np.testing.assert_allclose(got_t.get(), want_t, atol=2e-6 * scale)
    np.testing.assert_allclose(got_c.get(), want_c, rtol=1e-15)
    loop_t, _ = circular_sums_definition(frames, shifts, idx)
    np.testing.assert_allclose(got_t.get() - start_t, loop_t, atol=2e-6 * scale)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(3, 5, 7), (9, 37, 301), (4, 20, 13)])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64, np.int32])
def test_gpu_add_shifted_matches_the_cpu(rng, shape, dtype):
    """The kernel against the CPU's lines (the same float32 warps; float64 sums, in another
    order) and the float64 loop: odd sizes under a warp and over a block, NaN and infinite
    pixels, far shifts, frames left out, totals that already hold sums."""
    import cupy as cp

    from xcorr_app.alignment.warp import add_shifted

    n, h, w = shape
    frames = (rng.random(shape) * 250).astype(dtype)
    if np.dtype(dtype).kind == "f":
        frames[0, h // 2, w // 2] = np.nan
        frames[-1, 0, 0] = np.inf
    idx = np.arange(n)[::-1][: max(1, n - 1)]  # the last frame first, one left out
    shifts = rng.uniform(-3, 3, (len(idx), 2))
    shifts[0] = (h + 0.5, -0.25)  # entirely outside along y
    start_t, start_c = rng.random((h, w)), rng.random((h, w))
    want_t, want_c = start_t.copy(), start_c.copy()
    add_shifted(want_t, want_c, frames, shifts, idx)
    got_t, got_c = cp.asarray(start_t), cp.asarray(start_c)
    add_shifted(got_t, got_c, cp.asarray(frames), cp.asarray(shifts), idx)
    np.testing.assert_allclose(got_t.get(), want_t, rtol=1e-13, atol=1e-9)
    np.testing.assert_allclose(got_c.get(), want_c, rtol=1e-13, atol=1e-12)
    loop_t, loop_c = sums_definition(frames.astype(np.float32), shifts, idx)
    np.testing.assert_allclose(got_t.get() - start_t, loop_t, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(got_c.get() - start_c, loop_c, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_add_shifted_checks_its_operands():
    import cupy as cp

    from xcorr_app.alignment.warp import add_shifted

    frames = cp.ones((2, 4, 5), cp.float32)
    with pytest.raises(InputError, match="float64"):
        add_shifted(cp.zeros((4, 5), cp.float32), cp.zeros((4, 5)), frames, np.zeros((2, 2)))
    with pytest.raises(InputError, match="indices"):
        add_shifted(cp.zeros((4, 5)), cp.zeros((4, 5)), frames, np.zeros((1, 2)), [2])


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_non_finite_pixel_stays_where_a_whole_pixel_shift_moves_it(device, bad, dtype):
    """A tap of weight 0 on a NaN or Inf pixel adds nothing: at a whole-pixel shift the
    pixel moves alone (0 * inf made NaN of its neighbours, and a RuntimeWarning); at a
    fractional one it reaches the pixels it weighs in."""
    import warnings

    frames = np.arange(2 * 6 * 7, dtype=dtype).reshape(2, 6, 7)
    frames[:, 2, 3] = bad
    shifts = np.array([[1.0, -2.0], [0.0, 0.0]])
    xp = np
    if device == "gpu":
        import cupy as xp
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = shift_frames(xp.asarray(frames), shifts)
        half = shift_frames(xp.asarray(frames), [[0.5, 0.0], [0.0, 0.0]])
    got, half = (a.get() if device == "gpu" else a for a in (got, half))
    want = np.zeros((2, 6, 7), np.float32)
    want[0, 1:, :5] = frames[0, :5, 2:]
    want[1] = frames[1]
    np.testing.assert_array_equal(got, want)
    assert (~np.isfinite(got)).sum() == 2  # (the pixel itself, one a frame)
    assert (~np.isfinite(half[0])).sum() == 2 and not np.isfinite(half[0, 2:4, 3]).any()


@pytest.mark.parametrize("fill", [0.0, 5.0, np.nan, -np.inf])
@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (7, 1), (5, 33), (40, 37)])
def test_cpu_frame_by_frame_is_the_batched_definition_bit_for_bit(rng, shape, fill):
    """The CPU's shift a frame at a time (each tap's rows and columns taken along one axis,
    then the other) gives the batched definition's bits: whole frames and windows, shifts
    tiny, whole, past the frame, far and NaN, NaN and infinite pixels, integer frames."""
    from xcorr_app.alignment.warp._warp import (FAR_SHIFT, _bilinear_by_frame,
                                                _shift_gathered)

    h, w = shape
    shifts = np.array([[0.0, 0.0], [1e-17, -1e-17], [0.3, -1.7], [-2.25, 4.5], [3.0, -2.0],
                       [h + 0.5, 0.25], [-0.5, -(w + 3.75)], [1e15, -0.1], [0.49999999, 2.5],
                       [0.1 + 0.2, 1 / 3]])
    n = len(shifts)
    for frames in (rng.random((n, h, w)).astype(np.float32) * 100 - 20,
                   rng.integers(0, 4000, (n, h, w)).astype(np.uint16).astype(np.float32)):
        bad = frames.copy()
        bad[1, h // 2, w // 2] = np.nan
        bad[2, 0, -1] = np.inf
        for f, skip in ((frames, False), (bad, True)):
            s = np.clip(np.nan_to_num(shifts), -FAR_SHIFT, FAR_SHIFT)
            want = _shift_gathered(f, s, fill, skip, np)
            for window in (None, (0, h, 0, w), (h // 3, h - h // 4, w // 2, w), (0, 0, 0, w)):
                got = _bilinear_by_frame(f, s, fill, skip, window)
                y0, y1, x0, x1 = window or (0, h, 0, w)
                np.testing.assert_array_equal(got.view(np.uint32),
                                              want[:, y0:y1, x0:x1].view(np.uint32))
            one = s[3:4]  # (one shift for every frame)
            np.testing.assert_array_equal(_bilinear_by_frame(f, one, fill, skip).view(np.uint32),
                                          _shift_gathered(f, one, fill, skip, np).view(np.uint32))
    nan_shift = shift_frames(frames[:1], np.array([[np.nan, 0.5]]))
    np.testing.assert_array_equal(nan_shift, shift_frames(frames[:1], np.array([[0.0, 0.5]])))
    assert _bilinear_by_frame(frames[:0], shifts[:0], 0.0, False).shape == (0, h, w)
