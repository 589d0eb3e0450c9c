"""The column/row-reuse correlation kernel against float64 scipy.ndimage.correlate.

Every boundary mode, filter sizes from 1x1 to 31x31 (odd, even, non-square, larger than the
frame), frames from 1x1 to 1000x1000 and stacks of 1 and 7, every input dtype, origins, the
papers' shared-memory taps and sub-block heights; outputs are poisoned before each run.
"""

import numpy as np
import pytest

from conftest import poisoned, rel_error
from xcorr_app.filters._modes import MODE_IDS
from xcorr_app.filters import PAPER_SIZES
from xcorr_app.filters._reuse import EDGES
from xcorr_app.filters._reference import correlate_reference

pytestmark = pytest.mark.gpu

MODES = tuple(MODE_IDS)
FILTERS = [(1, 1), (2, 4), (3, 3), (3, 7), (5, 5), (7, 7), (11, 11), (31, 31)]
IMAGES = [(1, 1), (5, 300), (33, 65)]
TOL = 1e-5


def check(rng, shape, fshape, mode, *, dtype=np.float32, origin=(0, 0), cval=0.75, **kw):
    import cupy as cp

    from xcorr_app.filters import reuse_correlate

    if np.dtype(dtype).kind == "u":
        stack = rng.integers(0, np.iinfo(dtype).max, size=shape, endpoint=True).astype(dtype)
    else:
        stack = (rng.standard_normal(shape) + 0.5).astype(dtype)
    # Taps with a positive mean: a sum of many taps does not cancel to near zero, which would
    # make the relative error of a 1x1 frame meaningless.
    w = (rng.standard_normal(fshape) * 0.5 + 0.5).astype(np.float32)
    out = poisoned(cp, shape)
    got = reuse_correlate(cp.asarray(stack), w, mode=mode, cval=cval, origin=origin, out=out,
                          **kw)
    assert got is out
    ref = correlate_reference(stack, w, mode, cval, origin)
    err = rel_error(got.get(), ref)
    assert err <= TOL, f"{shape} {fshape} {mode} {dtype} origin={origin} {kw}: rel error {err}"


#: (edges, columns_per_lane, loads): ours (staged cp.async loads where they apply), ours with
#: the papers' column-reuse loads into registers, the papers' direct edge path
PATHS = [("reuse", 0, "auto"), ("reuse", 1, "registers"), ("direct", 0, "auto")]
PATH_IDS = [f"{e}-cols{c}-{lo}" for e, c, lo in PATHS]


@pytest.mark.parametrize("edges,cols,loads", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("fshape", FILTERS, ids=[f"{h}x{w}" for h, w in FILTERS])
@pytest.mark.parametrize("mode", MODES)
def test_small_images(rng, mode, fshape, edges, cols, loads):
    for image in IMAGES:
        for n in (1, 7):
            check(rng, (n,) + image, fshape, mode, edges=edges, columns_per_lane=cols,
                  loads=loads)


@pytest.mark.parametrize("edges,cols,loads", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("fshape", FILTERS, ids=[f"{h}x{w}" for h, w in FILTERS])
@pytest.mark.parametrize("mode", MODES)
def test_large_image(rng, mode, fshape, edges, cols, loads):
    """1000x1000: many sub-blocks, row blocks, a partial sub-block and edge bands."""
    check(rng, (1, 1000, 1000), fshape, mode, edges=edges, columns_per_lane=cols, loads=loads)


@pytest.mark.parametrize("fh", range(1, 8))
def test_four_columns_per_lane(rng, fh):
    """Every filter up to 7x7 on widths around the 128-column sub-block, 4 columns per lane."""
    for fw in range(1, 8):
        for width in (4, 128, 132, 260, 392):
            mode = MODES[(fh + fw + width) % len(MODES)]
            check(rng, (2, 67, width), (fh, fw), mode, columns_per_lane=4)


def test_four_columns_per_lane_refused_where_it_does_not_apply(rng):
    import cupy as cp

    from xcorr_app.errors import XcorrError
    from xcorr_app.filters import reuse_correlate

    w = np.ones((3, 3), np.float32)
    for stack, kw in [(cp.ones((2, 40, 130), cp.float32), {}),  # width not divisible by 4
                      (cp.ones((2, 40, 128), cp.uint16), {}),
                      (cp.ones((2, 40, 128), cp.float32), {"origin": (0, 1)}),
                      (cp.ones((2, 40, 128), cp.float32), {"edges": "direct"})]:
        with pytest.raises(XcorrError, match="columns_per_lane=4"):
            reuse_correlate(stack, w, columns_per_lane=4, **kw)


@pytest.mark.parametrize("edges,cols,loads", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("fshape", [(3, 3), (5, 5)])
def test_large_stack(rng, fshape, edges, cols, loads):
    check(rng, (7, 1000, 1000), fshape, "reflect", edges=edges, columns_per_lane=cols,
          loads=loads)


@pytest.mark.parametrize("cols", [1, 2])
@pytest.mark.parametrize("fh", range(1, 8))
def test_async_loads(rng, fh, cols):
    """The staged cp.async loads for every filter up to 7x7, with 1 and 2 output columns per
    lane: widths below, at and around the 32- and 64-column sub-blocks (edge sub-blocks fill
    their ring by the boundary mode), heights below and around the sub-block and the rows of
    one copy group, several sub-block heights."""
    for fw in range(1, 8):
        for k, (height, width) in enumerate([(1, 4), (3, 36), (67, 32), (40, 100), (9, 292),
                                             (20, 64), (11, 196)]):
            mode = MODES[(fh + fw + k) % len(MODES)]
            rows = (1, 5, 16, 33)[(fw + k) % 4]
            check(rng, (2, height, width), (fh, fw), mode, loads="async", rows_per_block=rows,
                  columns_per_lane=cols)


def test_async_loads_refused_where_they_do_not_apply(rng):
    """Explicit loads='async' gives a clear error where the staged copies cannot run; the
    default falls back to the register loads there and stays correct (a 4-byte offset base)."""
    import cupy as cp

    from xcorr_app.errors import XcorrError
    from xcorr_app.filters import reuse_correlate

    w = np.ones((3, 3), np.float32)
    base = cp.asarray((rng.standard_normal(2 * 40 * 128 + 1) + 0.5).astype(np.float32))
    offset = base[1:].reshape(2, 40, 128)  # C-contiguous, 4 bytes past a 16-byte boundary
    for stack, kw in [(cp.ones((2, 40, 130), cp.float32), {}),  # width not divisible by 4
                      (cp.ones((2, 40, 128), cp.uint16), {}),
                      (cp.ones((2, 40, 128), cp.float32), {"origin": (0, 1)}),
                      (cp.ones((2, 40, 128), cp.float32), {"edges": "direct"}),
                      (cp.ones((2, 40, 128), cp.float32), {"columns_per_lane": 4}),
                      (cp.ones((2, 40, 128), cp.float32), {"taps": "shared"}),
                      (offset, {})]:
        with pytest.raises(XcorrError, match="loads='async'"):
            reuse_correlate(stack, w, loads="async", **kw)
    for stack, kw in [(offset, {}), (cp.ones((2, 40, 128), cp.float32), {"loads": "registers"})]:
        with pytest.raises(XcorrError, match="columns_per_lane=2"):
            reuse_correlate(stack, w, columns_per_lane=2, **kw)
    out = poisoned(cp, offset.shape)
    reuse_correlate(offset, w, mode="wrap", out=out)
    ref = correlate_reference(offset.get(), w, "wrap", 0.0, (0, 0))
    assert rel_error(out.get(), ref) <= TOL
    with pytest.raises(XcorrError, match="loads must be"):
        reuse_correlate(offset, w, loads="shared")


@pytest.mark.parametrize("dtype", [np.float16, np.uint16, np.uint8])
def test_narrow_inputs(rng, dtype):
    """Frames read as they are (filters up to 7) or through a float32 copy (larger)."""
    for fshape in [(3, 3), (5, 5), (7, 7), (2, 4), (9, 9), (1, 31)]:
        for mode in ("reflect", "constant"):
            for edges in EDGES:
                check(rng, (3, 70, 101), fshape, mode, dtype=dtype, edges=edges)


def test_every_compiled_extent(rng):
    """Each compiled capacity, exact or padded, with the true size one below it."""
    from xcorr_app.filters._reuse import CAPACITIES

    for c in CAPACITIES:
        for fshape in [(c, 3), (2, c), (max(1, c - 1), max(1, c - 2))]:
            for edges, cols, loads in PATHS:
                check(rng, (2, 90, 140), fshape, "mirror", edges=edges, columns_per_lane=cols,
                      loads=loads)


def test_origins(rng):
    for fshape in [(3, 3), (4, 6), (5, 2), (12, 13)]:
        for origin in [(-(fshape[0] // 2), (fshape[1] - 1) // 2), ((fshape[0] - 1) // 2, 0)]:
            for mode in ("reflect", "wrap"):
                for edges in EDGES:
                    check(rng, (2, 47, 99), fshape, mode, origin=origin, edges=edges)


@pytest.mark.parametrize("size", PAPER_SIZES)
def test_taps_in_shared_memory(rng, size):
    """The papers' layout: the taps in shared memory."""
    for mode in ("reflect", "nearest"):
        for edges in EDGES:
            check(rng, (3, 130, 257), (size, size), mode, taps="shared", edges=edges)


def test_sub_block_heights(rng):
    for rows in (1, 5, 56, 300):
        for edges, cols, loads in PATHS:
            kw = dict(rows_per_block=rows, edges=edges, columns_per_lane=cols, loads=loads)
            check(rng, (2, 211, 296), (5, 5), "reflect", **kw)
            check(rng, (2, 211, 96), (11, 3), "constant", **kw)
            check(rng, (2, 211, 296), (7, 4), "wrap", **kw)


def test_two_dimensional_input(rng):
    import cupy as cp

    from xcorr_app.filters import reuse_correlate

    img = rng.random((45, 77)).astype(np.float32)
    w = rng.random((3, 5)).astype(np.float32)
    got = reuse_correlate(cp.asarray(img), w)
    assert got.shape == img.shape
    assert rel_error(got.get(), correlate_reference(img, w)) <= TOL


def test_repeatable(rng):
    import cupy as cp

    from xcorr_app.filters import reuse_correlate

    stack = cp.asarray(rng.random((3, 200, 150)).astype(np.float32))
    w = rng.random((5, 5)).astype(np.float32)
    a = reuse_correlate(stack, w)
    b = reuse_correlate(stack, w)
    assert bool((a == b).all())


NAMED = [("gaussian", (1.7,)), ("gaussian", (3.75,)), ("box", (4,)), ("box", (5,)),
         ("sobel", (0,)), ("sobel", (1,)), ("sobel", (None,)), ("laplace", ()),
         ("dog", (1.0, 3.0))]


@pytest.mark.parametrize("name,args", NAMED, ids=[f"{n}{a}" for n, a in NAMED])
@pytest.mark.parametrize("mode", MODES)
def test_named_filters(rng, name, args, mode):
    """Separable filters run as two 1-D reuse passes; compared with float64 scipy."""
    import cupy as cp

    from xcorr_app import filters

    stack = rng.random((3, 61, 130)).astype(np.float32)
    fn = getattr(filters, name)
    got = fn(cp.asarray(stack), *args, mode=mode, cval=0.25)
    want = fn(stack.astype(np.float64), *args, mode=mode, cval=0.25)
    assert isinstance(got, cp.ndarray) and got.dtype == np.float32
    assert rel_error(got.get(), want) <= TOL


def test_api_uint16_stack_stays_on_kernels(rng):
    """correlate2d on a CuPy uint16 stack gives float32 equal to the float64 reference."""
    import cupy as cp

    from xcorr_app import filters

    stack = rng.integers(0, 65535, size=(4, 50, 90)).astype(np.uint16)
    w = rng.standard_normal((3, 3)).astype(np.float32)
    got = filters.correlate2d(cp.asarray(stack), w, mode="nearest")
    assert got.dtype == np.float32
    assert rel_error(got.get(), correlate_reference(stack, w, "nearest")) <= TOL
    conv = filters.convolve2d(cp.asarray(stack), w, mode="nearest")
    want = correlate_reference(stack, w[::-1, ::-1], "nearest", origin=(0, 0))
    assert rel_error(conv.get(), want) <= TOL


def test_nan_outside_the_true_window(rng):
    """A padded capacity (13 -> 15 taps) never multiplies pixels outside the true window."""
    import cupy as cp

    from xcorr_app.filters import reuse_correlate

    stack = rng.random((1, 64, 96)).astype(np.float32)
    stack[0, 40, 50] = np.nan
    w = rng.random((13, 13)).astype(np.float32)
    for edges in EDGES:
        got = reuse_correlate(cp.asarray(stack), w, mode="nearest", edges=edges).get()
        want = correlate_reference(stack, w, "nearest")
        assert np.array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert rel_error(got[ok], want[ok]) <= TOL
