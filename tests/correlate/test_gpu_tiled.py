"""The register-tiled kernel: every tile x form x row chunking against the float64 reference."""

import pytest

from xcorr_app.correlate import FORMS
from xcorr_app.correlate._tiled import TILES

from conftest import poisoned, rel_error
from test_gpu_warp_shuffle import BOUNDS, SIZES, bounded_and_unequal, counts_for
from test_gpu_warp_shuffle import check as shuffle_check

pytestmark = pytest.mark.gpu

CASES = [(f, t, rpc) for f in FORMS for t in TILES[f] for rpc in (0, 7)]


def check(form, lshape, count, max_shift, rshape=None, **params):
    from xcorr_app.correlate._tiled import tiled_xcorr

    shuffle_check(form, lshape, count, max_shift, rshape, kernel=tiled_xcorr, **params)


@pytest.mark.parametrize("form,tile,rpc", CASES,
                         ids=[f"{f}-{'.'.join(map(str, t))}-rows{r}" for f, t, r in CASES])
def test_tile(form, tile, rpc):
    ty, tx, rights = tile
    params = dict(tile_y=ty, tile_x=tx, rights=rights, rows_per_chunk=rpc)
    for lshape in SIZES:
        for count in counts_for(form):
            check(form, lshape, count, None, **params)
    bounded_and_unequal(check, form, **params)


def test_large_frames_bounded():
    """Frames larger than a block of rows and columns, with several row chunks."""
    for rpc in (0, 100):
        check("one_to_many", (300, 290), 5, (6, 9), tile_y=6, tile_x=4, rights=1,
              rows_per_chunk=rpc)
        check("one_to_many", (300, 290), 5, 16, tile_y=4, tile_x=4, rights=2,
              rows_per_chunk=rpc)


# ------------------------------------------------------------ the lane-per-pair kernel

from xcorr_app.correlate._tiled import PAIR_FORMS, PAIR_TILES  # noqa: E402

PAIR_CASES = [(f, t, rpc) for f in PAIR_FORMS for t in PAIR_TILES for rpc in (0, 5)]
PAIR_SIZES = [(1, 1), (5, 3), (16, 16), (31, 33), (64, 64), (100, 37)]  # left fits 48 KiB


def check_pairs(form, lshape, count, max_shift, rshape=None, **params):
    from xcorr_app.correlate._tiled import pair_tiled_xcorr

    shuffle_check(form, lshape, count, max_shift, rshape, kernel=pair_tiled_xcorr, **params)


@pytest.mark.parametrize("form,tile,rpc", PAIR_CASES,
                         ids=[f"{f}-{'.'.join(map(str, t))}-rows{r}" for f, t, r in PAIR_CASES])
def test_pair_tile(form, tile, rpc):
    from xcorr_app.correlate._tiled import PAIR_MAX_SHARED, pair_shared_bytes

    params = dict(tile_y=tile[0], tile_x=tile[1], rows_per_chunk=rpc)
    sizes = [s for s in PAIR_SIZES if pair_shared_bytes(s, *tile) <= PAIR_MAX_SHARED]
    assert len(sizes) >= len(PAIR_SIZES) - 2  # 8x8 tiles: 64x64 and 100x37 lefts do not fit
    for lshape in sizes:
        for count in counts_for(form):
            check_pairs(form, lshape, count, None, **params)
    for max_shift in BOUNDS:
        for lshape in [s for s in [(5, 3), (31, 33), (100, 37)] if s in sizes]:
            check_pairs(form, lshape, 3, max_shift, **params)
    for lshape, rshape in [((31, 33), (7, 13)), ((7, 13), (40, 70)), ((1, 1), (5, 3)),
                           ((20, 9), (9, 20))]:
        check_pairs(form, lshape, 3, None, rshape, **params)
        check_pairs(form, lshape, 3, 4, rshape, **params)


@pytest.mark.parametrize("form,m", [("one_to_many", 70), ("n_to_mn", 40), ("n_to_m", 65)])
@pytest.mark.parametrize("tile", [(4, 8), (8, 8)])
def test_pair_tiled_many_rights(rng, form, m, tile):
    """More right matrices than one warp's 32 lanes (a partial last lane group), several lefts."""
    import cupy as cp

    from xcorr_app.correlate import _direct as reference
    from xcorr_app.correlate._tiled import pair_tiled_xcorr


    lh, lw, rh, rw = 19, 23, 17, 26
    left = rng.standard_normal((lh, lw) if form == "one_to_many" else (3, lh, lw))
    right = rng.standard_normal({"one_to_many": (m, rh, rw), "n_to_mn": (3, m, rh, rw),
                                 "n_to_m": (m, rh, rw)}[form])
    for max_shift, rpc in [(None, 0), (None, 6), ((5, 30), 0)]:
        want = reference.xcorr(left, right, form, max_shift)
        out = poisoned(cp, want.shape)
        got = pair_tiled_xcorr(cp.asarray(left, cp.float32), cp.asarray(right, cp.float32),
                               form, max_shift, out=out, tile_y=tile[0], tile_x=tile[1],
                               rows_per_chunk=rpc)
        assert got is out
        assert rel_error(got.get(), want) <= 1e-5, (form, m, tile, max_shift, rpc)


def test_pair_tiled_refuses_what_it_cannot_run():
    import cupy as cp

    from xcorr_app import cross_correlate
    from xcorr_app.errors import XcorrError

    big = cp.zeros((257, 129), cp.float32)
    with pytest.raises(XcorrError, match="shared memory"):
        cross_correlate(big, cp.zeros((4, 257, 129), cp.float32), "one_to_many",
                        method="pair_tiled")
    with pytest.raises(XcorrError, match="many right matrices"):
        cross_correlate(cp.zeros((8, 8), cp.float32), cp.zeros((8, 8), cp.float32),
                        "one_to_one", method="pair_tiled")


@pytest.mark.parametrize("form,lshape,rshape", [
    ("one_to_many", (5, 7), (70, 5, 7)), ("one_to_many", (1, 1), (3, 1, 1)),
    ("n_to_mn", (3, 9, 4), (3, 33, 9, 4)), ("n_to_m", (2, 17, 40), (31, 17, 40))])
@pytest.mark.parametrize("tile_x", [4, 8])
def test_arranged_rights_layout(rng, form, lshape, rshape, tile_x):
    """Every element of the rearranged copy (poisoned first) against a NumPy construction."""
    import numpy as np
    import cupy as cp

    from xcorr_app.correlate import form_layout
    from xcorr_app.correlate._tiled import PAIR_PAD_LEFT, arranged_rights, pair_row_chunks

    lay = form_layout(form, lshape, rshape)
    right = rng.standard_normal(rshape).astype(np.float32)
    groups = lay.n_left if form == "n_to_mn" else 1
    rh, rw = lay.right_shape
    chunks, m_pad = pair_row_chunks(rw, tile_x), -(-lay.m // 32) * 32
    assert 4 * chunks >= PAIR_PAD_LEFT + rw + tile_x - 1
    rows = np.zeros((groups, rh, 4 * chunks, m_pad), np.float32)  # [g][y][column][r]
    rows[:, :, PAIR_PAD_LEFT:PAIR_PAD_LEFT + rw, :lay.m] = right.reshape(
        groups, lay.m, rh, rw).transpose(0, 2, 3, 1)
    want = rows.reshape(groups, rh, chunks, 4, m_pad).transpose(0, 1, 2, 4, 3)  # [g][y][c][r][k]
    out = poisoned(cp, want.shape)
    got = arranged_rights(cp.asarray(right), lay, tile_x, out=out)
    assert got is out
    np.testing.assert_array_equal(got.get(), want)
