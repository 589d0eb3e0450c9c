"""kernels/registration/peak_math.cu (via the GPU branches of _peaks and _fft_register) against
the NumPy code of the same functions, on fresh random inputs: odd sizes, 1 to more than 256
surfaces, peaks inside and on the border, NaN and constant surfaces, every subpixel method."""

import numpy as np
import pytest

from tests.definitions import masked_correlation, wrapped_masks
from xcorr_app.registration import SUBPIXEL_METHODS, fft_shifts, on_border, refined_shifts
from xcorr_app.registration._fft_register import refine_peak
from xcorr_app.registration._peaks import (peak_index, subpixel_fit2d, subpixel_gaussian,
                                           subpixel_parabolic)

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (3, 1, 5), (4, 2, 2), (5, 2, 7), (7, 5, 3), (300, 9, 11), (2, 31, 17)]


def _surfaces(rng, shape, dtype):
    """Peaked surfaces (a gaussian or a paraboloid around a random point, inside or on the
    border), with a few special ones: constant, NaN at the peak or beside it, non-positive
    values, an exact integer peak, noise."""
    n, ho, wo = shape
    yy, xx = np.mgrid[:ho, :wo].astype(np.float64)
    out = np.empty(shape)
    for i in range(n):
        py, px = rng.uniform(-0.7, ho - 0.3), rng.uniform(-0.7, wo - 0.3)
        a, b, c = rng.uniform(0.3, 2), rng.uniform(-0.5, 0.5), rng.uniform(0.3, 2)
        q = a * (yy - py) ** 2 + 2 * b * (yy - py) * (xx - px) + c * (xx - px) ** 2
        kind = i % 6
        out[i] = np.exp(-q / 3) if kind in (0, 1) else 1 - q / 10  # 1 - q/10 can be <= 0
        if kind == 2:
            out[i] += 0.01 * rng.standard_normal((ho, wo))
        if kind == 3 and i % 4 == 3:
            out[i] = rng.uniform(-1, 1)  # constant
        if kind == 4:
            out[i] = rng.standard_normal((ho, wo))  # noise: any fit, any fallback
    if n > 4:
        out[4, rng.integers(ho), rng.integers(wo)] = np.nan
    return out.astype(dtype)


def _positions(rng, corr):
    """Integer peaks (NumPy's peak_index), some moved to random places and to the borders."""
    n, ho, wo = corr.shape
    iy, ix = peak_index(corr)
    iy, ix = iy.copy(), ix.copy()
    pick = rng.random(n) < 0.3
    iy[pick], ix[pick] = rng.integers(0, ho, pick.sum()), rng.integers(0, wo, pick.sum())
    edge = rng.random(n) < 0.15
    iy[edge] = rng.choice([0, ho - 1], edge.sum())
    return iy, ix


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subpixel_kernel_matches_numpy(rng, shape, dtype):
    import cupy as cp

    corr = _surfaces(rng, shape, dtype)
    iy, ix = _positions(rng, corr)
    g = cp.asarray(corr), cp.asarray(iy), cp.asarray(ix)
    origin = (shape[1] // 2 + 0.5, shape[2] // 2)
    for method in SUBPIXEL_METHODS:
        want = refined_shifts(corr, iy, ix, origin, method)
        got = refined_shifts(*g, origin, method)
        assert isinstance(got, cp.ndarray) and got.shape == want.shape and got.dtype == np.float64
        # log may differ from the host's by an ulp: gaussian fits to 1e-9 px, the rest exact
        tol = 1e-9 if "gaussian" in method else 0.0
        np.testing.assert_allclose(got.get(), want, rtol=0, atol=tol, err_msg=method)
    for fn, kw in ((subpixel_parabolic, {}), (subpixel_gaussian, {}),
                   (subpixel_fit2d, {"log": False}), (subpixel_fit2d, {"log": True})):
        for a, b in zip(fn(corr, iy, ix, **kw), fn(*g, **kw)):
            assert b.shape == a.shape
            np.testing.assert_allclose(b.get(), a, rtol=0, atol=1e-9, err_msg=fn.__name__)
            assert not np.signbit(b.get()[b.get() == 0]).any()  # no -0.0, as on the CPU


def test_subpixel_kernel_single_surface_and_fallback_dtypes(rng):
    import cupy as cp

    corr = _surfaces(rng, (1, 9, 8), np.float64)[0]
    iy, ix = peak_index(corr)
    for method in SUBPIXEL_METHODS:
        want = refined_shifts(corr, iy, ix, (4, 4), method)
        got = refined_shifts(cp.asarray(corr), cp.asarray(iy), cp.asarray(ix), (4, 4), method)
        assert got.shape == (2,)
        np.testing.assert_allclose(got.get(), want, atol=1e-12)
    # int32 positions and float16 surfaces take the CuPy code (same numbers)
    c16 = corr.astype(np.float16)
    want = refined_shifts(c16, iy, ix, (4, 4), "gaussian")
    got = refined_shifts(cp.asarray(c16), cp.asarray(iy, np.int32)[()], cp.asarray(ix), (4, 4),
                         "gaussian")
    np.testing.assert_allclose(got.get(), want, atol=1e-9)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 300), (5, 17, 15), (2, 300, 257),
                                   (600, 3, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_peak_index_kernel_matches_numpy(rng, shape, dtype):
    import cupy as cp

    corr = rng.integers(-3, 4, shape).astype(dtype)  # many ties: the first maximum
    n = shape[0]
    corr[n // 2] = -np.inf
    if n > 2:
        corr[1].flat[rng.integers(corr[1].size, size=2)] = np.nan  # the first NaN, as NumPy
        corr[2].flat[-1] = np.inf
    want = peak_index(corr)
    got = peak_index(cp.asarray(corr))
    for a, b in zip(want, got):
        assert b.dtype == np.int64 and b.shape == a.shape
        np.testing.assert_array_equal(b.get(), a)


@pytest.mark.parametrize("shape", [(5, 301, 517), (1, 700, 900), (66000, 1, 2)])
@pytest.mark.parametrize("kind", ["float32", "abs float32", "abs float64", "complex64"])
def test_surface_argmax_in_slices_matches_numpy(rng, shape, kind):
    """Surfaces scanned by several blocks each (the first two shapes: 9 and 38 slices) or in
    launches of at most 65535 (the third): NumPy's first maximum of x, |x| or a magnitude, ties
    across slices, the first NaN, -inf and inf surfaces, the value and the signed shifts; the
    blocks' counters back at 0."""
    import cupy as cp

    from xcorr_app._cuda import stream_counters
    from xcorr_app.registration import surface_argmax
    from xcorr_app.registration._peak_math import argmax_slices

    n, h, w = shape
    if n < 10:
        assert argmax_slices(n, h * w, 132) > 1
    corr = rng.integers(-3, 4, shape).astype(np.float64)  # ties everywhere
    corr[0].flat[[h * w - 1, h * w // 2]] = 9  # the same maximum in a late and a middle slice
    if n > 1:
        corr[1].flat[[h * w - 2, h * w // 3 + 1]] = np.nan  # the first NaN wins
    if n > 3:
        corr[3] = -np.inf
    if n > 2:
        corr[2].flat[(h * w // 2 + 7) % (h * w)] = np.inf
    absolute = kind.startswith("abs")
    if kind == "complex64":
        corr = (corr + 1j * rng.integers(-3, 4, shape)).astype(np.complex64)
    else:
        corr = corr.astype(kind.split()[-1])
    mag = np.abs(corr) if absolute or corr.dtype.kind == "c" else corr
    want = mag.reshape(n, -1).argmax(axis=1)
    iy, ix, value, shifts = surface_argmax(cp.asarray(corr), absolute=absolute, copies=2)
    np.testing.assert_array_equal(iy.get() * w + ix.get(), want)
    np.testing.assert_allclose(value.get(), mag.reshape(n, -1)[np.arange(n), want],
                               rtol=1e-6 if kind == "complex64" else 0)  # hypotf: an ulp
    wy, wx = np.divmod(want, w)
    signed = np.stack([np.where(wy > h // 2, wy - h, wy), np.where(wx > w // 2, wx - w, wx)], -1)
    np.testing.assert_array_equal(shifts.get(), np.stack([signed, signed]))
    assert not stream_counters(1)[:min(n, 65535)].any()
    iy2 = surface_argmax(cp.asarray(corr), absolute=absolute)[0]
    np.testing.assert_array_equal(iy2.get(), iy.get())


def test_on_border_kernel_matches_numpy(rng):
    import cupy as cp

    iy, ix = rng.integers(-2, 12, 500), rng.integers(-2, 12, 500)
    for origin, bound in [((4, 4), (4, 4)), ((0, 3), (0, 3)), ((5, 2), (3, 0)), ((5, 5), (0, 0))]:
        want = on_border(iy, ix, origin, bound)
        got = on_border(cp.asarray(iy), cp.asarray(ix), origin, bound)
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got.get(), want)


def _product(rng, n, h, w, dtype, halves):
    """Phase-correlation cross-power spectra of shifted smooth images (a clear peak)."""
    from scipy import ndimage as ndi

    base = ndi.gaussian_filter(rng.standard_normal((h, w)), 1.5)
    moves = rng.uniform(-3, 3, (n, 2))
    spec = np.fft.fft2(base)
    fy, fx = np.fft.fftfreq(h)[:, None], np.fft.fftfreq(w)[None, :]
    frames = [spec * np.exp(-2j * np.pi * (m[0] * fy + m[1] * fx)) for m in moves]
    prod = spec[None] * np.conj(np.stack(frames))
    prod /= np.maximum(np.abs(prod), 1e-12)
    if halves:
        prod = prod[..., :w // 2 + 1]
    shifts = np.round(-moves)  # the integer start
    return prod.astype(dtype), shifts


@pytest.mark.parametrize("hw", [(32, 32), (33, 45), (40, 31), (17, 2), (6, 1)])
@pytest.mark.parametrize("halves", [False, True])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_refine_peak_kernels_match_numpy(rng, hw, halves, dtype):
    import cupy as cp

    h, w = hw
    n = 3 if h > 20 else 260  # and more than 256 frames
    prod, shifts = _product(rng, n, h, w, dtype, halves)
    fw = w if halves else None
    for u, coarse in ((20, None), (10, 4), (3, None)):
        want_s, want_p = refine_peak(prod, shifts, u, fw, coarse)
        got_s, got_p = refine_peak(cp.asarray(prod), cp.asarray(shifts), u, fw, coarse)
        assert got_s.dtype == np.float64 and got_s.shape == (n, 2) and got_p.shape == (n,)
        # the grid is 1/u px: the same sample, to the rounding of the shift arithmetic; in
        # complex64 cuBLAS's and NumPy's sums differ by ~1e-6, so two samples within that of
        # each other at the top (rare) may come out in either order
        err = np.abs(got_s.get() - want_s)
        if dtype == np.complex128:
            assert err.max() <= 1e-12
        else:
            assert err.max() <= 1 / u + 1e-12 and np.mean(err.max(axis=1) <= 1e-12) >= 0.95
        rtol = 1e-5 if dtype == np.complex64 else 1e-10
        np.testing.assert_allclose(got_p.get(), want_p, rtol=rtol)


@pytest.mark.parametrize("shape", [(4, 48, 64), (3, 37, 51), (2, 20, 1)])
@pytest.mark.parametrize("periodic", [False, True])
@pytest.mark.parametrize("normalization", ["phase", None])
@pytest.mark.parametrize("complex_ref", [False, True])
def test_fft_shifts_gpu_matches_cpu(rng, shape, periodic, normalization, complex_ref):
    import cupy as cp
    from scipy import ndimage as ndi

    n, h, w = shape
    base = ndi.gaussian_filter(rng.standard_normal((h + 12, w + 12)), 1.5)
    ref = base[6:6 + h, 6:6 + w]
    moves = rng.integers(-3, 4, (n, 2))
    if w == 1:
        moves[:, 1] = 0
    frames = np.stack([base[6 + a:6 + a + h, 6 + b:6 + b + w] for a, b in moves])
    ref = ref.astype(np.float32)
    frames = (frames + 0.02 * rng.standard_normal(frames.shape)).astype(np.float32)
    if complex_ref:
        ref = ref.astype(np.complex64)
    kw = dict(upsample_factor=20, normalization=normalization, periodic=periodic,
              return_integer=True)
    want = fft_shifts(ref, frames, **kw)
    got = fft_shifts(cp.asarray(ref), cp.asarray(frames), **kw)
    for a, b in zip(want, got):
        assert isinstance(b, cp.ndarray) and b.dtype == np.float64 and b.shape == a.shape
    np.testing.assert_array_equal(got[2].get(), want[2])  # the integer peaks
    # cuFFT and pocketfft differ in float32: the same 1/20 px sample but for near-ties at the
    # top of a broad peak (plain correlation), one sample apart at most
    err = np.abs(got[0].get() - want[0])
    assert err.max() <= 0.051 and (normalization is None or np.mean(err <= 1e-9) >= 0.75)
    np.testing.assert_allclose(got[1].get(), want[1], rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("subpixel", ["gaussian", "parabolic", "gaussian3", "parabolic3",
                                      "none"])
@pytest.mark.parametrize("max_shift", [8, None])
def test_align_gpu_matches_cpu_every_subpixel(rng, subpixel, max_shift):
    from xcorr_app import align

    from synthetic import drift_stack

    stack, _ = drift_stack(rng, n=6, shape=(67, 81), max_shift=5, peak_counts=300)
    gpu = align(stack, max_shift=max_shift, subpixel=subpixel, device="gpu")
    cpu = align(stack, max_shift=max_shift, subpixel=subpixel, device="cpu")
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=2e-3)
    np.testing.assert_allclose(gpu.fft_shifts, cpu.fft_shifts, atol=0.051)
    np.testing.assert_array_equal(gpu.border, cpu.border)


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (40, 300), (67, 33)])
def test_wrapped_correlations_match_numpy(rng, shape):
    import cupy as cp
    from xcorr_app.registration import wrapped_correlations

    h, w = shape
    ref = rng.standard_normal(shape).astype(np.float32)
    frame = (0.5 * np.roll(ref, (-2, 3), axis=(0, 1)) + rng.standard_normal(shape)).astype(
        np.float32)
    flat = np.full(shape, 3.0, np.float32)
    for a, b in ((frame, ref), (flat, ref), (frame, flat)):
        for dy, dx in ((0, 0), (-2, 3), (h - 1, -(w - 1)), (1, 0), (0, -1), (h + 2, 0)):
            moved = np.roll(b, (-dy, -dx), axis=(0, 1))
            want = tuple(masked_correlation(a, moved, m) for m in wrapped_masks(shape, dy, dx))
            got = wrapped_correlations(cp.asarray(a), cp.asarray(b), (dy, dx))
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=str((dy, dx)))
            into = cp.full((3, 2), cp.nan)  # poisoned; row 1 written, not waited for
            assert wrapped_correlations(cp.asarray(a), cp.asarray(b), (dy, dx),
                                        out=into[1]) is None
            into = into.get()
            assert list(into[1]) == list(got) and np.isnan(into[[0, 2]]).all()


def test_wrapped_correlations_of_many_frames_at_once(rng):
    """Frames (F, H, W) with their shifts (F, 2): each frame's pair as the single call gives it
    (the same sums), into a poisoned ``out`` and a new array; flat and NaN frames included."""
    import cupy as cp
    from xcorr_app.registration import wrapped_correlations

    h, w = 37, 70  # (more than 32 rows: each lane of the totals' warp sums several)
    ref = rng.standard_normal((h, w)).astype(np.float32)
    shifts = np.array([[0, 0], [-2, 3], [h - 1, -(w - 1)], [5, -7], [1, 0], [-3, -3]])
    frames = np.stack([(0.5 * np.roll(ref, (-dy, -dx), axis=(0, 1))
                        + rng.standard_normal((h, w))).astype(np.float32) for dy, dx in shifts])
    frames[4] = 3.0  # flat: 0, 0
    frames[5, 3, 4] = np.nan
    want = np.array([wrapped_correlations(cp.asarray(f), cp.asarray(ref), s)
                     for f, s in zip(frames, shifts)])
    assert want[4].tolist() == [0.0, 0.0]
    got = wrapped_correlations(cp.asarray(frames), cp.asarray(ref), shifts)
    np.testing.assert_array_equal(got.get(), want)
    out = cp.full((6, 2), cp.nan)
    assert wrapped_correlations(cp.asarray(frames), cp.asarray(ref), shifts, out=out) is None
    np.testing.assert_array_equal(out.get(), want)


def test_wrapped_correlations_with_one_reference_per_frame(rng):
    """A reference per frame (F, H, W): each frame's pair as the call with its own reference."""
    import cupy as cp
    from xcorr_app.registration import wrapped_correlations

    h, w = 37, 41
    refs = rng.standard_normal((4, h, w)).astype(np.float32)
    shifts = np.array([[0, 0], [-2, 3], [5, -7], [1, 0]])
    frames = np.stack([(0.5 * np.roll(r, (-dy, -dx), axis=(0, 1))
                        + rng.standard_normal((h, w))).astype(np.float32)
                       for r, (dy, dx) in zip(refs, shifts)])
    want = np.array([wrapped_correlations(cp.asarray(f), cp.asarray(r), s)
                     for f, r, s in zip(frames, refs, shifts)])
    got = wrapped_correlations(cp.asarray(frames), cp.asarray(refs), shifts)
    np.testing.assert_array_equal(got.get(), want)
    assert (want[:, 0] > 0.3).all()


@pytest.mark.parametrize("shape", [(1, 1), (9, 11), (40, 300), (67, 34)])
def test_phase_ramps_move_a_reference_as_numpy_does(rng, shape):
    """cuFFT and the ramps' kernel against the float64 NumPy definition
    (``fractional_references``), odd and even sizes, fractions of both signs."""
    import cupy as cp
    from xcorr_app.alignment.refine._template import fractional_references

    ref = rng.standard_normal(shape).astype(np.float32)
    frac = np.array([[0.0, 0.0], [0.3, -0.45], [-0.5, 0.5], [0.49, 0.01]])
    want = fractional_references(ref, frac, np)
    got = fractional_references(cp.asarray(ref), frac, cp)
    assert got.dtype == cp.float32 and got.shape == (4,) + shape
    np.testing.assert_allclose(got.get(), want, atol=2e-5 * np.abs(ref).max())


def test_phase_ramps_refuse_a_mismatched_width():
    import cupy as cp
    from xcorr_app.errors import InputError
    from xcorr_app.registration import phase_ramps

    spec = cp.ones((5, 4), cp.complex64)
    with pytest.raises(InputError, match="half spectrum of width 5"):
        phase_ramps(spec, 8, [(0.1, 0.1)])
    with pytest.raises(InputError, match="finite"):
        phase_ramps(spec, 7, [(np.nan, 0.1)])


def test_wrapped_correlations_refuse_a_bad_out():
    import cupy as cp
    from xcorr_app.errors import InputError
    from xcorr_app.registration import wrapped_correlations

    a = cp.ones((5, 6), cp.float32)
    for out in (cp.empty(3), cp.empty(2, cp.float32), cp.empty((2, 2))[:, 0]):
        with pytest.raises(InputError):
            wrapped_correlations(a, a, (1, 1), out=out)
    many = cp.ones((3, 5, 6), cp.float32)
    with pytest.raises(InputError, match="take 3 shifts"):
        wrapped_correlations(many, a, [(1, 1)] * 2)
    with pytest.raises(InputError, match="take 3 shifts"):
        wrapped_correlations(many, cp.ones((5, 7), cp.float32), [(1, 1)] * 3)
    with pytest.raises(InputError, match=r"shape \(3, 2\)"):
        wrapped_correlations(many, a, [(1, 1)] * 3, out=cp.empty(2))
    with pytest.raises(InputError, match="finite"):
        wrapped_correlations(many, a, [(1, 1), (np.nan, 0), (0, 0)])
    # shifts given as a CuPy array: read from the device
    np.testing.assert_array_equal(
        wrapped_correlations(many, a, cp.asarray([[1, 1]] * 3)).get(),
        wrapped_correlations(many, a, [(1, 1)] * 3).get())


@pytest.mark.parametrize("shape", [(1, 1), (3, 4, 1), (2, 5, 7), (3, 2, 70, 33)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_edge_differences_match_numpy(rng, shape, dtype):
    import cupy as cp
    from xcorr_app.registration._peak_math import edge_differences

    img = rng.standard_normal(shape).astype(dtype)
    a, b = edge_differences(cp.asarray(img))
    assert a.dtype == b.dtype == dtype
    np.testing.assert_array_equal(a.get(), img[..., -1, :] - img[..., 0, :])
    np.testing.assert_array_equal(b.get(), img[..., :, -1] - img[..., :, 0])
