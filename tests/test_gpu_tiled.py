"""The register-tiled kernel: every tile x form x row chunking against the float64 reference."""

import pytest

from xcorr_app.forms import FORMS
from xcorr_app.gpu_tiled import TILES

from test_gpu_warp_shuffle import SIZES, bounded_and_unequal, counts_for
from test_gpu_warp_shuffle import check as shuffle_check

pytestmark = pytest.mark.gpu

CASES = [(f, t, rpc) for f in FORMS for t in TILES[f] for rpc in (0, 7)]


def check(form, lshape, count, max_shift, rshape=None, **params):
    from xcorr_app.gpu_tiled import tiled_xcorr

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
