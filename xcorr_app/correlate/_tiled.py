"""GPU launchers of the register-tiled kernels (``kernels/correlate/tiled_xcorr.cu``): the column
strip (:func:`tiled_xcorr`) and the lane-per-pair kernel (:func:`pair_tiled_xcorr`).

Our addition beyond the thesis: a warp owns a tile of ``tile_y x tile_x`` shifts, 32 right
columns and a chunk of ``rows_per_chunk`` right rows, and keeps a sliding window of left values
in registers, so each right row costs ``tile_x`` left loads and ``rights`` right loads for
``tile_y * tile_x * rights`` FMAs and no shuffles.  It suits bounded searches on large frames,
where the warp-shuffle kernels leave most lanes without a shift.

The lane-per-pair kernel is for many small matrices: the 32 lanes of a warp take 32 right
matrices of one left and the same ``tile_y x tile_x`` shifts, so the left values are the same
in every lane (staged in shared memory, read by broadcast) and each lane slides a window of
``tile_x`` values along its own right row: ``tile_y`` shared loads and one right load for
``tile_y * tile_x`` FMAs.  The right matrices are first rearranged with the matrix index
fastest (:func:`arranged_rights`), so that load is coalesced.

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

from ..errors import InputError
from ._forms import FORMS, FORM_IDS
from ._overlap import MAX_GRID_Z, as_float32, check_out
from ._warp_shuffle import geometry, launch
from .._cuda import KernelFamily

#: (tile_y, tile_x, rights) compiled for every form; more right matrices where there are several
_ONE_RIGHT = [(2, 2, 1), (3, 3, 1), (4, 4, 1), (6, 4, 1), (8, 2, 1)]
_MANY_RIGHTS = [(3, 3, 2), (4, 2, 2), (4, 4, 2), (8, 2, 2), (2, 4, 4), (4, 2, 4)]
TILES = {f: _ONE_RIGHT + ([] if f == "one_to_one" else _MANY_RIGHTS) for f in FORMS}

TILED = KernelFamily("tiled_xcorr.cu", "tiled_xcorr",
                     [(FORM_IDS[f],) + t for f in FORMS for t in TILES[f]])
#: (tile_y, tile_x) of the lane-per-pair kernel, compiled for the forms with many right matrices
PAIR_TILES = [(4, 4), (4, 8), (8, 4), (8, 8)]
PAIR_FORMS = ("one_to_many", "n_to_mn", "n_to_m")
PAIR_TILED = KernelFamily("tiled_xcorr.cu", "pair_tiled_xcorr",
                          [(FORM_IDS[f],) + t for f in PAIR_FORMS for t in PAIR_TILES])
ARRANGE_RIGHTS = KernelFamily("tiled_xcorr.cu", "arrange_rights",
                             sorted({(tx,) for _, tx in PAIR_TILES}))
#: zero columns before each rearranged right row (``PAIR_PAD_LEFT`` of the kernel source)
PAIR_PAD_LEFT = 8
#: shared memory of the staged left matrix (the default dynamic limit)
PAIR_MAX_SHARED = 48 * 1024
WARPS_PER_BLOCK = 4  # __launch_bounds__(128, 4)
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


def pair_shared_bytes(left_shape, tile_y, tile_x) -> int:
    """Shared memory of the lane-per-pair kernel: the left matrix with ``tile_y - 1`` zero rows
    above and below and 4 to 7 zero columns on either side, in chunks of 4 columns
    (``pair_col_chunks`` of ``kernels/correlate/tiled_xcorr.cu``, at its widest), and each warp's
    sums on their way out (33 words per sum)."""
    cols = 4 * ((7 + left_shape[-1] + 6) // 4)
    return 4 * ((left_shape[-2] + 2 * (tile_y - 1)) * cols +
                WARPS_PER_BLOCK * tile_y * tile_x * 33)


def pair_row_chunks(right_w, tile_x) -> int:
    """float4 chunks of one rearranged right row (``pair_row_chunks`` of the kernel source):
    :data:`PAIR_PAD_LEFT` zeros, the row, ``tile_x - 1`` zeros, rounded up to 4 floats."""
    return (PAIR_PAD_LEFT + right_w + tile_x - 1 + 3) // 4


def configure_tiled(form, left_shape, right_shape, max_shift, params):
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
    return launch(configure_tiled, left, right, form, max_shift, out, params)


def configure_pairs(form, left_shape, right_shape, max_shift, params):
    lay, out_shape, geom = geometry(form, left_shape, right_shape, max_shift)
    ho, wo = out_shape[-2:]
    ty, tx = params["tile_y"], params["tile_x"]
    if lay.form not in PAIR_FORMS:
        raise InputError(f"the lane-per-pair kernel needs many right matrices per left "
                         f"(forms {', '.join(PAIR_FORMS)}), not {lay.form}")
    smem = pair_shared_bytes(lay.left_shape, ty, tx)
    if smem > PAIR_MAX_SHARED:
        raise InputError(f"a left matrix of {lay.left_shape} does not fit the "
                         f"{PAIR_MAX_SHARED // 1024} KiB of shared memory of this kernel")
    lane_groups = -(-lay.m // 32)
    if lane_groups > MAX_GRID_YZ or lay.n_left > MAX_GRID_YZ:
        raise InputError(f"too many matrices for one launch ({lay.n_left} x {lay.m})")
    fn = PAIR_TILED.get(lay.form_id, ty, tx)
    rh = lay.right_shape[0]
    rpc = min(params["rows_per_chunk"] or rh, rh)
    tiles_x = -(-wo // tx)
    n_tiles = -(-ho // ty) * tiles_x
    n_items = n_tiles * -(-rh // rpc)
    grid = (min(-(-n_items // WARPS_PER_BLOCK), MAX_GRID_X), lane_groups, lay.n_left)
    i32 = np.int32
    scalars = geom + (i32(lay.m), i32(rpc), i32(n_tiles), i32(tiles_x), i32(n_items),
                      i32(lane_groups * 32))
    return (fn, grid, (32, WARPS_PER_BLOCK, 1), scalars, smem, rpc < rh, out_shape,
            _arrange_launch(lay, tx))


def _arrange_launch(lay, tile_x):
    """``(fn, grid, block, shape, scalars)`` of :func:`arrange_rights` for this layout."""
    rh, rw = lay.right_shape
    groups = lay.n_left if lay.form == "n_to_mn" else 1
    chunks = pair_row_chunks(rw, tile_x)
    m_pad = -(-lay.m // 32) * 32
    i32 = np.int32
    return (ARRANGE_RIGHTS.get(tile_x), (-(-rh * 4 * chunks // 32), m_pad // 32, groups),
            (32, 8, 1), (groups, rh, chunks, m_pad, 4), (i32(lay.m), i32(m_pad), i32(rh), i32(rw)))


def arranged_rights(right, lay, tile_x, out=None):
    """The right matrices as the lane-per-pair kernel reads them: chunks of 4 columns with the
    matrix index next, ``[g][y][c][r][k] = right[g][r][y][4c + k - PAIR_PAD_LEFT]``, zero
    outside the row (``c < pair_row_chunks(right_w, tile_x)``) and for the padding matrices
    (``r`` up to a multiple of 32); ``g`` is the left's group for ``n_to_mn`` (else one group).
    One pass of :func:`arrange_rights` (``kernels/correlate/tiled_xcorr.cu``); every element of
    ``out`` is written."""
    import cupy as cp

    fn, grid, block, shape, scalars = _arrange_launch(lay, tile_x)
    out = check_out(out, shape, cp)
    fn(grid, block, (as_float32(right, cp), out) + scalars)
    return out


def pair_tiled_xcorr(left, right, form="one_to_many", max_shift=None, out=None, *, tile_y=4,
                     tile_x=8, rows_per_chunk=0):
    """Cross-correlate CuPy arrays with the lane-per-pair register-tiled kernel.

    Parameters
    ----------
    left, right, form, max_shift, out
        As :func:`xcorr_app.cross_correlate` (float32 CuPy result); ``form`` one of
        :data:`PAIR_FORMS`.
    tile_y, tile_x : int
        Shifts per thread along y and x (a compiled pair, see :data:`PAIR_TILES`).
    rows_per_chunk : int
        Right rows one thread sums (0: all); smaller chunks give more warps, whose sums are
        then added to the output atomically.

    Returns
    -------
    cupy.ndarray
        ``batch_shape + (Ho, Wo)`` float32.

    Examples
    --------
    >>> import cupy as cp  # doctest: +SKIP
    >>> ref, frames = cp.random.rand(32, 32), cp.random.rand(4000, 32, 32)  # doctest: +SKIP
    >>> pair_tiled_xcorr(ref, frames, "one_to_many", tile_y=8, tile_x=8).shape  # doctest: +SKIP
    (4000, 63, 63)
    """
    params = (("tile_y", tile_y), ("tile_x", tile_x), ("rows_per_chunk", rows_per_chunk))
    return launch(configure_pairs, left, right, form, max_shift, out, params)
