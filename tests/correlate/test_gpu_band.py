"""The warp-per-result kernel (``band``): every compiled search and lane width against the
float64 reference, into poisoned outputs; shapes smaller than a warp, wider than a column group
(several groups a warp), left and right of different sizes; and what it refuses."""

import pytest

from xcorr_app.correlate import band_fits
from xcorr_app.correlate._band import BAND_COLUMNS, BAND_SHIFTS, lane_columns
from xcorr_app.errors import InputError

from test_gpu_warp_shuffle import check as shuffle_check

#: right widths that pick each lane width (C = 2, 3, 4, 5) and two column groups (C = 3)
WIDTHS = {2: 7, 3: 70, 4: 101, 5: 145}
WIDE = 333  # two groups of 32 x 5 columns and a third of 13 (C = 4: 3 groups of 128)


def test_lane_widths_cover_the_compiled_ones():
    assert sorted({lane_columns(w) for w in WIDTHS.values()}) == list(BAND_COLUMNS)
    assert {k: lane_columns(w) for k, w in WIDTHS.items()} == {c: c for c in BAND_COLUMNS}


def check(form, lshape, count, max_shift, rshape=None):
    from xcorr_app.correlate._band import band_xcorr

    shuffle_check(form, lshape, count, max_shift, rshape, kernel=band_xcorr)


@pytest.mark.gpu
@pytest.mark.parametrize("shifts", BAND_SHIFTS)
@pytest.mark.parametrize("columns", BAND_COLUMNS)
def test_band_against_reference(shifts, columns):
    d = (shifts - 1) // 2
    w = WIDTHS[columns]
    h = max(2 * d + 1, 13 if w < 32 else 37)  # odd, non-square; rows beyond a warp's 32
    check("n_to_mn", (h, w), 3, d)  # 3 lefts x 3 rights each (shapes of the shuffle tests)
    check("n_to_mn", (h, w), 1, d, rshape=(h - 2, w - 1))  # right smaller than left
    check("n_to_mn", (h - 2, w - 1), 2, d, rshape=(h, w))  # and larger


@pytest.mark.gpu
def test_band_wide_and_tall():
    """Several column groups a warp and rows beyond a block (4 results a block: 33 x 3)."""
    check("n_to_mn", (161, WIDE), 33, 4)
    check("n_to_mn", (9, 9), 33, 4)  # the search as large as the matrices
    check("n_to_mn", (3, 5), 2, 4)  # shifts past the matrices: zeros


@pytest.mark.gpu
def test_band_as_a_plan():
    """``cross_correlate(..., method="band")`` runs it; the result matches the planner's."""
    import cupy as cp
    import numpy as np

    from xcorr_app import cross_correlate

    rng = np.random.default_rng(7)
    t = cp.asarray(rng.standard_normal((5, 41, 29)), cp.float32)
    w = cp.asarray(rng.standard_normal((5, 6, 41, 29)), cp.float32)
    got = cross_correlate(t, w, "n_to_mn", max_shift=4, method="band")
    want = cross_correlate(t, w, "n_to_mn", max_shift=4, method="fft")
    assert got.shape == (5, 6, 9, 9)
    np.testing.assert_allclose(got.get(), want.get(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("form,lshape,rshape,bound", [
    ("n_to_mn", (2, 20, 20), (2, 3, 20, 20), 5),          # +-5: not compiled
    ("n_to_mn", (2, 20, 20), (2, 3, 20, 20), (2, 3)),     # not the same along both axes
    ("n_to_mn", (2, 20, 20), (2, 3, 20, 20), None),       # every shift
    ("one_to_many", (20, 20), (3, 20, 20), 2),            # another form
])
def test_band_refuses(form, lshape, rshape, bound):
    assert not band_fits(form, lshape, rshape, bound)
    from xcorr_app.correlate._band import configure_band

    with pytest.raises(ValueError, match="band kernel runs n_to_mn"):
        configure_band(form, lshape, rshape, bound, {})


def test_band_plan_string():
    from xcorr_app.correlate import Plan

    assert str(Plan.parse("band")) == "band" and Plan.parse("band").on_gpu_only
    with pytest.raises(InputError, match="takes no parameters"):
        Plan.parse("band:tile_y=2")
