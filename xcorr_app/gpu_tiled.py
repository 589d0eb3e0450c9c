"""GPU launcher of the register-tiled column-strip kernel (``kernels/tiled_xcorr.cu``).

Our addition beyond the thesis: a warp owns a tile of ``tile_y x tile_x`` shifts, 32 right
columns and a chunk of ``rows_per_chunk`` right rows, and keeps a sliding window of left values
in registers, so each right row costs ``tile_x`` left loads and ``rights`` right loads for
``tile_y * tile_x * rights`` FMAs and no shuffles.  It suits bounded searches on large frames,
where the warp-shuffle kernels leave most lanes without a shift.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> ref, frames = cp.random.rand(512, 512), cp.random.rand(8, 512, 512)  # doctest: +SKIP
>>> c = tiled_xcorr(ref, frames, "one_to_many", max_shift=4, tile_y=3, tile_x=3)  # doctest: +SKIP
>>> c.shape  # doctest: +SKIP
(8, 9, 9)
"""

from __future__ import annotations

import numpy as np

from .forms import FORMS, FORM_IDS
from .gpu_overlap import MAX_GRID_Z
from .gpu_warp_shuffle import geometry, launch
from .kernel_loader import KernelFamily

#: (tile_y, tile_x, rights) compiled for every form; more right matrices where there are several
_ONE_RIGHT = [(2, 2, 1), (3, 3, 1), (4, 4, 1), (6, 4, 1), (8, 2, 1)]
_MANY_RIGHTS = [(3, 3, 2), (4, 2, 2), (4, 4, 2), (8, 2, 2), (2, 4, 4), (4, 2, 4)]
TILES = {f: _ONE_RIGHT + ([] if f == "one_to_one" else _MANY_RIGHTS) for f in FORMS}

TILED = KernelFamily("tiled_xcorr.cu", "tiled_xcorr",
                     [(FORM_IDS[f],) + t for f in FORMS for t in TILES[f]])
WARPS_PER_BLOCK = 4  # __launch_bounds__(128, 4)
MAX_GRID_X = 2**31 - 1


def _configure(form, left_shape, right_shape, max_shift, params):
    lay, out_shape, geom = geometry(form, left_shape, right_shape, max_shift)
    ho, wo = out_shape[-2:]
    ty, tx, rights = params["tile_y"], params["tile_x"], params["rights"]
    fn = TILED.get(lay.form_id, ty, tx, rights)
    rh, rw = lay.right_shape
    rpc = params["rows_per_chunk"] or rh
    n_chunks = -(-rh // rpc)
    tiles_x = -(-wo // tx)
    n_tiles = -(-ho // ty) * tiles_x
    n_items = n_tiles * n_chunks
    pair_groups = lay.n_left * -(-lay.m // rights)
    grid = (min(-(-n_items // WARPS_PER_BLOCK), MAX_GRID_X), -(-rw // 32),
            min(pair_groups, MAX_GRID_Z))
    i32 = np.int32
    scalars = geom + (i32(lay.n_left), i32(lay.m), i32(rpc), i32(n_tiles), i32(tiles_x),
                      i32(n_items))
    return fn, grid, (32, WARPS_PER_BLOCK, 1), scalars, 0, True, out_shape


def tiled_xcorr(left, right, form="one_to_one", max_shift=None, out=None, *, tile_y=4,
                tile_x=4, rights=1, rows_per_chunk=0):
    """Cross-correlate CuPy arrays with the register-tiled column-strip kernel.

    Parameters
    ----------
    left, right, form, max_shift, out
        As :func:`xcorr_app.cross_correlate` (float32 CuPy result).
    tile_y, tile_x : int
        Shifts per warp along y and x (a compiled pair, see :data:`TILES`).
    rights : int
        Right matrices summed at once (``one_to_one``: 1).
    rows_per_chunk : int
        Right rows one warp sums (0: all); smaller chunks give more warps.

    Returns
    -------
    cupy.ndarray
        ``batch_shape + (Ho, Wo)`` float32.
    """
    params = (("tile_y", tile_y), ("tile_x", tile_x), ("rights", rights),
              ("rows_per_chunk", rows_per_chunk))
    return launch(_configure, left, right, form, max_shift, out, params)
