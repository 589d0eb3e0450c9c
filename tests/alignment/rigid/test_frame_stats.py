"""The GPU kernels of the preparation (kernels/alignment/frame_stats.cu) against a float64 NumPy
reference, and prepare() on the GPU against prepare() on the CPU."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

# sizes: smaller than a warp, odd and non-square, rows longer than a block of 256 threads,
# frames larger than the subtraction's 64 blocks of 256 threads, and
# more frames than the grid's y extent (65535) holds
SHAPES = [(1, 1, 1), (3, 5, 7), (2, 33, 300), (4, 257, 129), (2, 300, 301), (65537, 2, 3)]
DTYPES = [np.uint8, np.uint16, np.int16, np.float16, np.float32, np.float64]


def _frames(rng, shape, dtype):
    if np.dtype(dtype).kind == "u":
        return rng.integers(0, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-30000, 30000, shape).astype(dtype)
    return (rng.standard_normal(shape) * 100 + 7).astype(dtype)


def _special_frames(rng, shape, dtype):
    """:func:`_frames` with, where there are more than two frames, frame 1 constant and (float
    types) a NaN in frame 2 and an Inf in the last."""
    a = _frames(rng, shape, dtype)
    if shape[0] > 2:
        a[1] = a[1, 0, 0]
    if shape[0] > 2 and a.dtype.kind == "f":
        a[2, -1, -1] = np.nan
        a[-1, 0, -1] = np.inf
    return a


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_converted_stats_match_float64_reference(rng, shape, dtype):
    import cupy as cp

    from xcorr_app.alignment.rigid import converted_stats

    a = _special_frames(rng, shape, dtype)
    f, mean, finite, constant = converted_stats(cp.asarray(a))
    f32 = a.astype(np.float32)
    np.testing.assert_array_equal(f.get(), f32)  # every pixel written, as NumPy converts
    ref = f32.astype(np.float64).reshape(len(a), -1)
    with np.errstate(invalid="ignore"):
        expect = (ref.sum(axis=1) / ref.shape[1]).astype(np.float32)
    np.testing.assert_allclose(mean.get(), expect, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(finite.get(), np.isfinite(f32).all(axis=(1, 2)))
    np.testing.assert_array_equal(constant.get(), (f32 == f32[:, :1, :1]).all(axis=(1, 2)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_demeaned_is_converted_stats_less_the_means(rng, shape, dtype):
    import cupy as cp

    from xcorr_app.alignment.rigid import converted_stats, demeaned

    a = _special_frames(rng, shape, dtype)
    raw, mean, finite, constant, fmean = demeaned(cp.asarray(a))
    assert fmean is None
    f, mean2, finite2, constant2 = converted_stats(cp.asarray(a))
    for got, want in ((mean, mean2), (finite, finite2), (constant, constant2)):
        np.testing.assert_array_equal(got.get(), want.get())
    # every pixel written: the float32 pixels less the frame's float32 mean, as NumPy does it
    with np.errstate(invalid="ignore"):
        expect = a.astype(np.float32) - mean.get()[:, None, None]
    assert raw.dtype == cp.float32 and raw.shape == a.shape
    np.testing.assert_array_equal(raw.get(), expect)


@pytest.mark.parametrize("shape", SHAPES)
def test_subtract_means_in_place(rng, shape):
    import cupy as cp

    from xcorr_app.alignment.rigid._frame_stats import frame_means, subtract_means

    a = rng.standard_normal(shape).astype(np.float32) * 10 + 3
    f = cp.asarray(a)
    mean = frame_means(f)
    np.testing.assert_allclose(mean.get(), a.astype(np.float64).mean(axis=(1, 2)), rtol=1e-6,
                               atol=1e-6)
    out = subtract_means(f, mean)
    assert out is f
    np.testing.assert_array_equal(f.get(), a - mean.get()[:, None, None])


@pytest.mark.parametrize("prefilter,window", [(None, None), ("gaussian:1", None),
                                              ("dog:1,4", "hann")])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
def test_prepare_gpu_matches_cpu(rng, prefilter, window, dtype):
    import cupy as cp

    from xcorr_app.alignment.rigid import parse_prefilter, prepare, window as make_window

    a = _frames(rng, (5, 37, 61), dtype)
    a[3] = a[3, 0, 0]
    got, want = [prepare(xp.asarray(a), xp, parse_prefilter(prefilter),
                         make_window(window, a.shape[1:], xp)) for xp in (cp, np)]
    for name in ("frames", "raw"):
        w = getattr(want, name)
        np.testing.assert_allclose(getattr(got, name).get(), w, rtol=0,
                                   atol=1e-5 * (float(np.abs(w).max()) + 1), err_msg=name)
    for name in ("constant", "finite"):
        np.testing.assert_array_equal(getattr(got, name).get(), getattr(want, name))
    assert got.constant.get().tolist() == [False, False, False, True, False]


@pytest.mark.parametrize("shape", [(3, 1, 1), (4, 5, 7), (2, 70, 131), (3, 263, 37)])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float64])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.3])
def test_prepare_gpu_gaussian_mean_known_before_the_filter(rng, shape, dtype, sigma):
    """The fused path (the filtered frames' means from the frames' statistics, subtracted as
    the fused kernel stores) against the same filter with its output's means measured and
    subtracted after it; and every prepared frame's mean near 0 (float32 rounding)."""
    import cupy as cp

    from xcorr_app.alignment.rigid import Prefilter, parse_prefilter, prepare

    a = _frames(rng, shape, dtype)
    a[1] = a[1, 0, 0]
    fused = parse_prefilter(f"gaussian:{sigma}")
    assert fused.taps is not None
    unfused = Prefilter(fused.fn, None)
    got, want = (prepare(cp.asarray(a), cp, p, None) for p in (fused, unfused))
    w = want.frames.get()
    scale = float(np.abs(w).max()) + float(np.abs(a.astype(np.float64)).max()) * 1e-3 + 1e-30
    np.testing.assert_allclose(got.frames.get(), w, rtol=0, atol=2e-6 * scale)
    np.testing.assert_array_equal(got.raw.get(), want.raw.get())
    means = got.frames.get().astype(np.float64).mean(axis=(1, 2))
    assert (np.abs(means) <= 2e-6 * scale).all(), means


@pytest.mark.parametrize("n", [1, 7, 300])
def test_pack_rows_equals_the_concatenation(rng, n):
    """The result rows of one kernel against CuPy's concatenate + astype, for every piece type
    and absent FFT columns (NaN); a piece of another type is refused (None)."""
    import cupy as cp

    from xcorr_app.alignment.rigid._frame_stats import pack_rows

    s = rng.standard_normal((n, 2))
    pk = rng.standard_normal(n).astype(np.float32)
    cf = rng.standard_normal(n)
    constant, finite, border = (rng.random(n) < 0.5 for _ in range(3))
    fs = rng.standard_normal((n, 2))
    fi = rng.integers(-9, 9, (n, 2)).astype(np.int64)
    pieces = [s, pk, cf, constant, finite, fs, fi, border]
    want = np.concatenate([s, pk[:, None], cf[:, None], constant[:, None], finite[:, None], fs,
                           fi, border[:, None]], axis=1).astype(np.float64)
    got = pack_rows([cp.asarray(a) for a in pieces], n)
    np.testing.assert_array_equal(got.get(), want)
    absent = pack_rows([cp.asarray(a) for a in pieces[:5]] + [None, None, cp.asarray(border)], n)
    want[:, 6:10] = np.nan
    np.testing.assert_array_equal(absent.get(), want)
    assert pack_rows([cp.asarray(a) for a in pieces[:6]]
                     + [cp.asarray(fi.astype(np.int32)), cp.asarray(border)], n) is None


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.float16, np.float64])
@pytest.mark.parametrize("fade", [1.0, 0.5])
def test_choose_prefilter_on_device_frames_as_on_host(rng, dtype, fade):
    """prefilter auto of a stack on the GPU (its sampled frames' statistics by the kernels)
    decides as the host does, frames with NaN pixels and constant frames left out; float64
    frames (not exact in float32) are judged on the host."""
    import cupy as cp

    from xcorr_app.alignment.rigid import _preprocess
    from xcorr_app.alignment.rigid import choose_prefilter
    from xcorr_app.io import ArraySource

    n = 30
    a = (rng.random((n, 19, 23)) * 200 + 100) * np.linspace(1.0, fade, n)[:, None, None]
    a = a.astype(dtype)
    a[0] = a[0, 0, 0]  # constant: left out
    if a.dtype.kind == "f":
        a[-1, 3, 4] = np.nan  # left out
    on_host = choose_prefilter(ArraySource(a))
    index = _preprocess.spread_frames(n, _preprocess.AUTO_SAMPLES)
    frames = [cp.asarray(a[i:i + 1]) for i in index]
    means = _preprocess._means_on_device(frames)
    if a.dtype == np.float64:
        assert means is None
    else:
        host = [np.nan if (not np.isfinite(f).all() or f.max() == f.min())
                else float(f.astype(np.float64).mean()) for f in (x.get() for x in frames)]
        np.testing.assert_allclose(means, host, rtol=1e-6)
    assert choose_prefilter(ArraySource(cp.asarray(a))) == on_host
    assert on_host[0] == ("dog:1,4" if fade < 1 else "gaussian:1")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("shape,area", [((3, 5, 7), (0, 5, 0, 7)), ((2, 13, 29), (1, 12, 3, 28)),
                                        ((4, 300, 411), (4, 299, 0, 407))])
def test_gpu_area_float_cuts_and_converts_as_numpy(rng, dtype, shape, area):
    """``area_float`` against NumPy's slice and ``astype``, exactly, into an output poisoned
    with NaN (every pixel written)."""
    import cupy as cp

    from xcorr_app._cuda import stride_blocks
    from xcorr_app.alignment.rigid import area_float
    from xcorr_app.alignment.rigid._frame_stats import AREA_FLOAT, THREADS

    frames = (rng.random(shape) * 250).astype(dtype)
    y0, y1, x0, x1 = area
    want = frames[:, y0:y1, x0:x1].astype(np.float32)
    np.testing.assert_array_equal(area_float(cp.asarray(frames), area).get(), want)
    np.testing.assert_array_equal(area_float(cp.asarray(frames)).get(), frames.astype(np.float32))
    out = cp.full(want.shape, np.nan, cp.float32)
    ctype = {np.uint8: "unsigned char", np.uint16: "unsigned short", np.int16: "short",
             np.float32: "float", np.float64: "double"}[dtype]
    AREA_FLOAT.get(ctype, THREADS)(
        (min(3, stride_blocks(out.size, THREADS)),), (THREADS,),
        (cp.asarray(frames), np.int64(shape[0]), np.int32(shape[1]), np.int32(shape[2]),
         np.int32(y0), np.int32(x0), np.int32(y1 - y0), np.int32(x1 - x0), out))
    np.testing.assert_array_equal(out.get(), want)  # (three blocks: the grid-stride loop)
