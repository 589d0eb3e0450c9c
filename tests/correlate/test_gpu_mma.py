"""The tensor-core (3xTF32) kernel: every tile x form against the float64 reference (GPU)."""

import numpy as np
import pytest

from xcorr_app.correlate._mma import MMA_FORMS, MMA_TILES, ROW_SPLITS

from conftest import poisoned, rel_error
from test_gpu_warp_shuffle import counts_for
from test_gpu_warp_shuffle import check as shuffle_check

pytestmark = pytest.mark.gpu

CASES = [(f, t, k) for f in MMA_FORMS for t in MMA_TILES for k in ROW_SPLITS]
#: sizes whose blocks fit shared memory (a 64x64 right matrix does not: the FFT's territory)
SIZES = [(1, 1), (5, 3), (16, 16), (31, 33), (20, 45)]


def check(form, lshape, count, max_shift, rshape=None, **params):
    from xcorr_app.correlate._mma import mma_xcorr

    shuffle_check(form, lshape, count, max_shift, rshape, kernel=mma_xcorr, **params)


@pytest.mark.parametrize("form,tile,row_splits", CASES,
                         ids=[f"{f}-{t[0]}x{t[1]}-rows{k}" for f, t, k in CASES])
def test_tile(form, tile, row_splits):
    params = dict(tile_y=tile[0], tile_x=tile[1], row_splits=row_splits)
    for lshape in SIZES:
        for count in counts_for(form):
            check(form, lshape, count, None, **params)
    for max_shift in (3, (2, 40), 70):  # also wider than the images: zeros
        for lshape in [(5, 3), (31, 33)]:
            check(form, lshape, 3, max_shift, **params)
    for lshape, rshape in [((31, 33), (7, 13)), ((7, 13), (20, 45)), ((1, 1), (5, 3)),
                           ((20, 9), (9, 20))]:
        check(form, lshape, 3, None, rshape, **params)
        check(form, lshape, 3, 4, rshape, **params)


@pytest.mark.parametrize("form,m", [("one_to_many", 70), ("n_to_mn", 40), ("n_to_m", 65)])
@pytest.mark.parametrize("tile,row_splits", [((4, 8), 1), ((1, 32), 1), ((2, 8), 4)])
def test_many_rights_positive_data(rng, form, m, tile, row_splits):
    """Several groups of 16 (a partial last one), several lefts, and image-like data: positive
    values up to 65535, where the tensor cores' truncating adds would drift without the
    per-row sums."""
    import cupy as cp

    from xcorr_app.correlate import _direct as reference
    from xcorr_app.correlate._mma import mma_xcorr

    lh, lw, rh, rw = 19, 23, 17, 26
    left = rng.integers(0, 65536, (lh, lw) if form == "one_to_many" else (3, lh, lw))
    right = rng.integers(0, 65536, {"one_to_many": (m, rh, rw), "n_to_mn": (3, m, rh, rw),
                                    "n_to_m": (m, rh, rw)}[form])
    left, right = left.astype(np.float64), right.astype(np.float64)
    for max_shift in (None, (5, 30)):
        want = reference.xcorr(left, right, form, max_shift)
        out = poisoned(cp, want.shape)
        got = mma_xcorr(cp.asarray(left, cp.float32), cp.asarray(right, cp.float32), form,
                        max_shift, out=out, tile_y=tile[0], tile_x=tile[1],
                        row_splits=row_splits)
        assert got is out
        assert rel_error(got.get(), want) <= 1e-5, (form, m, tile, max_shift)


@pytest.mark.parametrize("row_splits", ROW_SPLITS)
def test_one_buffer_for_large_right_matrices(rng, row_splits):
    """40x40 matrices get one right-matrix buffer (two do not fit): still every element."""
    import cupy as cp

    from xcorr_app.correlate import _direct as reference
    from xcorr_app.correlate._mma import buffers_for, mma_xcorr
    from xcorr_app._cuda.device import device_limits

    limit = device_limits().shared_per_block
    assert buffers_for((40, 40), (40, 40), 4, 8, limit, row_splits) == 1
    left, right = rng.random((2, 40, 40)), rng.random((37, 40, 40))
    want = reference.xcorr(left, right, "n_to_m")
    out = poisoned(cp, want.shape)
    got = mma_xcorr(cp.asarray(left), cp.asarray(right), "n_to_m", out=out, tile_y=4, tile_x=8,
                    row_splits=row_splits)
    assert rel_error(got.get(), want) <= 1e-5


def test_row_splits_of_one_tile_alternate(rng):
    """One compiled tile with row splits of 8 and 1 (different shared memory, both past 48 KiB)
    launched in turns, as the planner's confirmation rounds do."""
    import cupy as cp

    from xcorr_app.correlate import _direct as reference
    from xcorr_app.correlate._mma import mma_xcorr, shared_bytes

    assert shared_bytes((32, 32), (32, 32), 4, 8, row_splits=1) > 48 * 1024
    left, right = rng.standard_normal((32, 32)), rng.standard_normal((20, 32, 32))
    want = reference.xcorr(left, right, "one_to_many")
    left, right = cp.asarray(left, cp.float32), cp.asarray(right, cp.float32)
    for splits in (8, 1, 8, 2, 1):
        out = poisoned(cp, want.shape)
        mma_xcorr(left, right, "one_to_many", out=out, tile_y=4, tile_x=8, row_splits=splits)
        assert rel_error(out.get(), want) <= 1e-5, splits


@pytest.mark.parametrize("row_splits", ROW_SPLITS)
def test_repeatable_and_inputs_unchanged(rng, row_splits):
    import cupy as cp

    from xcorr_app.correlate._mma import mma_xcorr

    left = cp.asarray(rng.standard_normal((32, 32)), cp.float32)
    right = cp.asarray(rng.standard_normal((100, 32, 32)), cp.float32)
    before = (left.copy(), right.copy())
    first = mma_xcorr(left, right, "one_to_many", tile_y=2, tile_x=16, row_splits=row_splits)
    again = mma_xcorr(left, right, "one_to_many", tile_y=2, tile_x=16, row_splits=row_splits)
    assert cp.array_equal(first, again)  # no atomics, parts added in order: bit for bit
    assert cp.array_equal(left, before[0]) and cp.array_equal(right, before[1])


def test_refuses_what_it_cannot_run():
    import cupy as cp

    from xcorr_app import cross_correlate
    from xcorr_app.errors import XcorrError

    with pytest.raises(XcorrError, match="shared memory"):
        cross_correlate(cp.zeros((64, 64), cp.float32), cp.zeros((20, 64, 64), cp.float32),
                        "one_to_many", method="mma:tile_y=4,tile_x=8")
    with pytest.raises(XcorrError, match="many right matrices"):
        cross_correlate(cp.zeros((8, 8), cp.float32), cp.zeros((8, 8), cp.float32),
                        "one_to_one", method="mma:tile_y=4,tile_x=8")
    with pytest.raises(XcorrError, match="not compiled"):
        cross_correlate(cp.zeros((8, 8), cp.float32), cp.zeros((9, 8, 8), cp.float32),
                        "one_to_many", method="mma")
    with pytest.raises(XcorrError, match="row_splits=3"):
        cross_correlate(cp.zeros((8, 8), cp.float32), cp.zeros((9, 8, 8), cp.float32),
                        "one_to_many", method="mma:tile_y=2,tile_x=8,row_splits=3")
