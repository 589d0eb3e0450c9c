"""The resampling of piecewise-rigid registration (alignment/piecewise/_field_resample.py): the NumPy
reference (cubic convolution, the field's spline) on the CPU, and the kernels of
kernels/alignment/patch_field.cu against it on the GPU (odd non-square frames, frames narrower than
a warp and wider than a block, several launches, outputs poisoned with NaN)."""

import numpy as np
import pytest
from scipy import ndimage as ndi

from xcorr_app.alignment.piecewise import _field_resample as fr
from xcorr_app.alignment.piecewise._field_resample import KEYS_A, cubic_sample
from xcorr_app.alignment.piecewise import field_weights
from xcorr_app.alignment.piecewise._spline import dense_field
from xcorr_app.alignment.piecewise._motion_field import warp_frames
from xcorr_app.alignment.piecewise._patches import PatchGrid, windows, windows_through
from xcorr_app.errors import InputError


def keys(d):
    """The cubic convolution kernel (Keys 1981) at distance ``d``, from its definition."""
    d = abs(d)
    a = KEYS_A
    if d <= 1:
        return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
    if d < 2:
        return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a
    return 0.0


def brute_cubic(img, y, x):
    """Cubic convolution at one point, taps clamped to the image, by the kernel's definition."""
    h, w = img.shape
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    return sum(keys(y - yy) * keys(x - xx) * float(img[min(max(yy, 0), h - 1),
                                                       min(max(xx, 0), w - 1)])
               for yy in range(y0 - 1, y0 + 3) for xx in range(x0 - 1, x0 + 3))


def test_cubic_sample_is_the_definition_and_exact_for_quadratics(rng):
    img = rng.random((9, 13)).astype(np.float32)
    cy, cx = rng.uniform(-3, 12, 300), rng.uniform(-3, 16, 300)
    cy[:20] = np.round(cy[:20])  # on pixels
    ours = cubic_sample(img, cy, cx)
    np.testing.assert_allclose(ours, [brute_cubic(img, y, x) for y, x in zip(cy, cx)],
                               rtol=0, atol=1e-12)
    yy, xx = np.mgrid[:20, :24].astype(np.float64)
    quad = (0.3 * yy ** 2 - 0.2 * yy * xx + 0.1 * xx ** 2 + yy).astype(np.float32)
    py, px = rng.uniform(2, 16, 200), rng.uniform(2, 20, 200)
    np.testing.assert_allclose(cubic_sample(quad, py, px),
                               0.3 * py ** 2 - 0.2 * py * px + 0.1 * px ** 2 + py, atol=1e-3)


def test_cpu_windows_through_are_the_same_on_any_number_of_threads(rng, monkeypatch):
    """The CPU samples each frame's windows on its own thread (``XCORR_THREADS``): the same
    numbers as one thread, frame by frame through ``cubic_sample``."""
    shape, grid = (61, 47), (2, 3)
    frames = rng.random((5, *shape)).astype(np.float32)
    g = PatchGrid.make(grid, None, 2, shape, (4, shape[0] - 4, 4, shape[1] - 4))
    field = rng.uniform(-6, 6, (5, *grid, 2))  # taps clamped at the edges too
    weights = field_weights(g.centres, shape, np)
    got = {}
    for threads in ("1", "3"):
        monkeypatch.setenv("XCORR_THREADS", threads)
        got[threads] = windows_through(frames, g, field, weights)
    np.testing.assert_array_equal(got["1"], got["3"])
    dense = dense_field(field[2:3], None, None, weights)[0]
    ys, xs = g.starts_y[1] + np.arange(g.size[0]), g.starts_x[2] + np.arange(g.size[1])
    yy, xx = np.meshgrid(ys, xs, indexing="ij")
    want = cubic_sample(frames[2], yy - dense[0][yy, xx], xx - dense[1][yy, xx])
    np.testing.assert_array_equal(got["3"][5, 2], want.astype(np.float32))


def test_cubic_warp_close_to_the_bspline(rng):
    """Cubic convolution against the cubic B-spline it replaces, on smooth frames: within 1% of
    the range (a sanity bound: both interpolate the same band-limited image)."""
    f = ndi.gaussian_filter(rng.random((2, 40, 52)), (0, 2, 2)).astype(np.float32)
    dense = np.broadcast_to(np.array([[0.37, -1.61], [2.25, 0.5]])[:, :, None, None],
                            (2, 2, 40, 52))
    ours = warp_frames(f, dense, "cubic")
    yy, xx = np.mgrid[:40, :52].astype(np.float64)
    for k in range(2):
        ref = ndi.map_coordinates(f[k].astype(np.float64), [yy - dense[k, 0], xx - dense[k, 1]],
                                  order=3, mode="nearest")
        inner = (slice(4, -4), slice(4, -4))
        assert np.abs(ours[k][inner] - ref[inner]).max() < 0.01 * np.ptp(f[k])


def test_windows_outside_the_frame_are_input_errors():
    g = PatchGrid.make((2, 2), None, 2, (40, 50), (4, 36, 4, 46))
    with pytest.raises(InputError, match="leaves the frame"):
        windows(np.zeros((2, 40, 50), np.float32), g, np.array([[0, 0], [5, 0]]))


# --------------------------------------------------------------------------------- GPU

def field_case(rng, n, shape, grid=(3, 2), amp=2.5):
    """Smooth frames, a grid over their inner part and a random patch field (amplitude
    ``amp`` px, NaN for frame 1: left unshifted)."""
    h, w = shape
    frames = ndi.gaussian_filter(rng.random((n, h, w)) * 1000, (0, 1.5, 1.5)).astype(np.float32)
    g = PatchGrid.make(grid, None, 3, shape, (5, h - 5, 5, w - 5))
    field = rng.uniform(-amp, amp, (n, *grid, 2))
    if n > 1:
        field[1] = np.nan
    return frames, g, field


#: (frame shape, grid): narrower than a warp, wider than a block (128 threads), tall
SHAPES = [((23, 19), (1, 1)), ((41, 301), (3, 2)), ((64, 37), (3, 2)),
          ((97, 301), (2, 8)), ((71, 129), (3, 4))]  # (widths 8 and 4: compiled unrolled)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,grid", SHAPES)
def test_gpu_gather_windows_equal_numpy(rng, shape, grid):
    import cupy as cp

    frames, g, _ = field_case(rng, 5, shape, grid)
    shifts = rng.integers(-2, 3, (5, 2))
    ref = windows(frames, g, shifts)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    got = fr.gather_windows_gpu(cp.asarray(frames), g.starts_y, g.starts_x, g.grid[1], g.size,
                                shifts, out=out)
    assert got is out
    np.testing.assert_array_equal(got.get(), ref)
    np.testing.assert_array_equal(windows(cp.asarray(frames), g, shifts).get(), ref)


def numpy_tables(win, bound):
    """Summed-area tables (float64) of ``win`` ``(K, ph, pw)`` and of its squares with the
    rows a search of ``-bound..bound`` keeps (registration/_surfaces.table_layout)."""
    from xcorr_app.registration import table_layout

    k, ph, pw = win.shape
    full = [np.zeros((k, ph + 1, pw + 1)) for _ in range(2)]
    for t, v in zip(full, (win.astype(np.float64), win.astype(np.float64) ** 2)):
        t[:, 1:, 1:] = v.cumsum(axis=1).cumsum(axis=2)
    top, gap = table_layout(ph, bound)
    keep = [y for y in range(ph + 1) if y <= top or y >= top + 1 + gap]
    return [t[:, keep] for t in full]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,grid", SHAPES + [((37, 333), (1, 1))])  # (a window of 320 px)
@pytest.mark.parametrize("bound", [0, 1, 4, 30])  # (30: the two bands of rows meet)
def test_gpu_gather_windows_with_their_tables(rng, shape, grid, bound, monkeypatch):
    """The windows and their summed-area tables in one pass (``patch_windows_tables``): the
    windows NumPy gathers, the tables of their float64 definition (outputs poisoned; two
    launches: the frame offset)."""
    import cupy as cp

    monkeypatch.setattr(fr, "MAX_GRID", 3)
    frames, g, _ = field_case(rng, 5, shape, grid)
    shifts = rng.integers(-2, 3, (5, 2))
    ref = windows(frames, g, shifts)
    out = cp.full(ref.shape, cp.nan, cp.float32)
    got, tables = fr.gather_windows_gpu(cp.asarray(frames), g.starts_y, g.starts_x, g.grid[1],
                                        g.size, shifts, out=out, bound_rows=bound)
    assert got is out
    np.testing.assert_array_equal(got.get(), ref)
    want = numpy_tables(ref.reshape(-1, *g.size), bound)
    for t, w in zip(tables, want):
        assert t.shape == w.shape
        np.testing.assert_allclose(t.get(), w, rtol=1e-12, atol=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("shape,grid", SHAPES)
def test_gpu_windows_through_equal_float64_reference(rng, shape, grid, monkeypatch):
    import cupy as cp

    monkeypatch.setattr(fr, "MAX_GRID", 2)  # 4 frames: two launches, the frame offset n0
    frames, g, field = field_case(rng, 4, shape, grid)
    weights = field_weights(g.centres, shape, np)
    ref = windows_through(frames, g, field, weights)  # float64 sums, rounded once
    out = cp.full(ref.shape, cp.nan, cp.float32)
    got = fr.windows_through_gpu(cp.asarray(frames), g.starts_y, g.starts_x, g.size,
                                 cp.asarray(field), field_weights(g.centres, shape, cp), out=out)
    assert got is out and bool(cp.isfinite(got).all())
    np.testing.assert_allclose(got.get(), ref, rtol=0, atol=1e-5 * float(np.ptp(frames)))


@pytest.mark.gpu
@pytest.mark.parametrize("shape,grid", SHAPES)
@pytest.mark.parametrize("resample", ["bilinear", "cubic"])
@pytest.mark.parametrize("dtype", [np.uint16, np.float32])
def test_gpu_warp_equals_float64_reference(rng, shape, grid, resample, dtype, monkeypatch):
    import cupy as cp

    monkeypatch.setattr(fr, "MAX_GRID", 2)  # 5 frames: three launches
    frames, g, field = field_case(rng, 5, shape, grid, amp=4.0)
    field[0] = 6.0  # frame 0: sources 6 px up and left, outside the frame at the top left
    frames = frames.astype(dtype)
    if dtype == np.float32:
        frames[3, 5, 7] = np.nan  # that frame: bilinear also with cubic, the NaN stays local
    h, w = shape
    box = (2, h - 1, 3, w - 2)
    dense = dense_field(field, g.centres, shape)
    ref = warp_frames(frames, dense, resample, fill=-7.0)[:, box[0]:box[1], box[2]:box[3]]
    out = cp.full(ref.shape, cp.nan, cp.float32)
    got = fr.warp_gpu(cp.asarray(frames), cp.asarray(field), field_weights(g.centres, shape, cp),
                      cubic=resample == "cubic", fill=-7.0, box=box, out=out).get()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.isnan(got).sum() <= 4
    assert (got[0, :3, :3] == -7.0).all()  # frame 0's sources outside the frame
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=0,
                               atol=1e-5 * float(np.nanmax(frames) - np.nanmin(frames)))


@pytest.mark.gpu
def test_gpu_launchers_refuse_mismatched_shapes(rng):
    import cupy as cp

    frames, g, field = field_case(rng, 2, (30, 40))
    wrong = field_weights(g.centres, (31, 40), cp)
    with pytest.raises(InputError, match="does not match"):
        fr.warp_gpu(cp.asarray(frames), cp.asarray(field), wrong)
    with pytest.raises(InputError, match="leaves the frame"):
        fr.gather_windows_gpu(cp.asarray(frames), g.starts_y, g.starts_x, g.grid[1], g.size,
                              np.array([[0, 0], [9, 0]]))


@pytest.mark.gpu
@pytest.mark.parametrize("at", [(3, 3), (0, 0), (40, 36)])
def test_gpu_warp_spreads_a_nan_as_the_cpu_on_a_zero_field(rng, at):
    """A zero field puts every output on a pixel: SciPy would multiply the taps of weight 0 (a
    NaN pixel spread up and left); both devices skip them, the NaN stays on its pixel
    (outputs poisoned)."""
    import cupy as cp

    frames, g, field = field_case(rng, 2, (41, 37))
    frames = frames.astype(np.float32)
    frames[1][at] = np.nan
    field[:] = 0.0
    ref = warp_frames(frames, dense_field(field, g.centres, (41, 37)), "bilinear", fill=0.0)
    out = cp.full(frames.shape, 5.0, cp.float32)
    got = fr.warp_gpu(cp.asarray(frames), cp.asarray(field), field_weights(g.centres, (41, 37), cp),
                      out=out).get()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.isnan(ref[1]).sum() == 1 and not np.isnan(ref[0]).any()
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=0, atol=1e-4)


@pytest.mark.gpu
def test_the_field_as_the_kernels_read_it_is_nan_to_num():
    """``finite_field`` (a kernel of ours, instead of CuPy's nan_to_num): NaN 0, +-inf the
    largest double, the rest unchanged, on a field of odd shape; weights and shapes checked."""
    import cupy as cp

    rng = np.random.default_rng(9)
    field = rng.normal(0, 3, (5, 3, 7, 2))
    field[1] = np.nan
    field[2, 1, 4, 0], field[3, 0, 0, 1], field[4, 2, 6, 1] = np.inf, -np.inf, np.nan
    centres = np.stack(np.meshgrid(np.linspace(10, 50, 3), np.linspace(8, 70, 7),
                                   indexing="ij"), -1)
    weights = field_weights(centres, (61, 79), cp)
    frames = cp.zeros((5, 61, 79), cp.float32)
    wy, wx_t, s = fr.device_weights(weights, cp.asarray(field), frames)
    np.testing.assert_array_equal(s.get(), np.nan_to_num(field, nan=0.0))
    assert s.flags.c_contiguous and s.dtype == np.float64
    # wx transposed, as the kernels read it: kept with the cached weights, made for others
    plain = tuple(cp.array(a) for a in weights)
    for given in (weights, plain, tuple(a.get() for a in weights)):
        t = fr.device_weights(given, cp.asarray(field), frames)[1]
        assert t.flags.c_contiguous and t.shape == (7, 79)
        np.testing.assert_array_equal(t.get(), weights[1].get().T)
    with pytest.raises(InputError, match="does not match"):
        fr.device_weights(weights, cp.asarray(field[:, :2]), frames)


@pytest.mark.gpu
def test_add_fields_is_cupy_s_addition():
    """The patch pass's field sums by ``add_fields`` (a kernel of ours): a transposed view plus
    a broadcast row, a broadcast column, plain arrays, fewer axes, other types (CuPy's
    addition), bit for bit against ``a + b``; an empty field."""
    import cupy as cp

    rng = np.random.default_rng(12)
    s = cp.asarray(rng.normal(size=(7, 5, 2)))  # (P, N, 2)
    off = cp.asarray(rng.normal(size=(5, 2)))
    off[1] = cp.nan
    d = cp.asarray(rng.normal(size=(5, 7, 2)))
    for a, b in ((s.transpose(1, 0, 2), off[:, None, :]), (off[:, None, :], d), (d, d[::-1]),
                 (d[:, 3], off), (d.astype(cp.float32), d), (d[:0], d[:0])):
        got = fr.add_fields(a, b)
        want = a + b
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got.get(), want.get())
