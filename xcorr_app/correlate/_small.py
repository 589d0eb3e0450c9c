"""GPU launcher of the few-pair kernel (``kernels/correlate/small_xcorr.cu``): one pair, or a few,
spread over the whole GPU.

Our addition beyond the thesis.  The batch kernels give each warp many shifts or many pairs;
on one small pair that leaves most SMs idle, and the kernel's own time (not the arithmetic: a
full 64x64 correlation is 16.7M multiply-adds) sets the pace.  Here a block owns a tile of
``tile_y`` y-shifts x 32 x-shifts of one result (a lane per x-shift, ``tile_y`` sums in
registers), stages the right rows and the left window its tile reads in shared memory (zeros
outside the matrices: no bounds test in the inner loop), and its ``row_splits`` warps split
the right rows and add their sums in shared memory in a fixed order.  Every output element is
stored once: no atomics, no zeroed output, one launch per call.  The planner offers it for
problems of at most :data:`MAX_RESULTS` results whose tile fits :data:`MAX_SHARED` bytes of
shared memory (:func:`small_candidates`).

Examples
--------
>>> shared_bytes((64, 64), tile_y=4, warps=8)  # the right rows and the left window they meet
41844
>>> import cupy as cp  # doctest: +SKIP
>>> a = cp.random.rand(48, 48, dtype=cp.float32)  # doctest: +SKIP
>>> small_xcorr(a, a, tile_y=4, row_splits=8).shape  # doctest: +SKIP
(95, 95)
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._forms import FORMS, FORM_IDS
from ._overlap import MAX_GRID_Z
from ._shifts import output_shape
from ._warp_shuffle import geometry, launch
from .._cuda import KernelFamily, device_limits

__all__ = ["SMALL", "TILES", "WARPS", "MAX_RESULTS", "MAX_SHARED", "shared_bytes",
           "configure_small", "small_xcorr", "small_candidates"]

#: y-shifts per lane (``TY`` of the kernel), compiled for every form
TILES = (1, 2, 4, 8)
#: warps per block the candidates try (``row_splits`` of the plan; any 1 to 16 runs)
WARPS = (16,)  # 4 and 8 lost to 16 on nearly every bench problem measured
MAX_WARPS = 16  # __launch_bounds__(512)
#: results (pairs) up to which the planner offers the kernel: beyond, the batch kernels win
MAX_RESULTS = 8
#: shared memory of one block the candidates allow (the default limit: no opt-in, and several
#: blocks per SM)
MAX_SHARED = 48 * 1024
MAX_GRID_Y = 65535
SMALL = KernelFamily("small_xcorr.cu", "small_xcorr",
                     [(FORM_IDS[f], ty) for f in FORMS for ty in TILES])


def shared_bytes(right_shape, tile_y, warps) -> int:
    """Dynamic shared memory of a block at most: the right rows that meet its tile (columns
    in quads of 4), the left window they meet (``tile_y - 1`` rows and 31 columns more), or
    after the sums each warp's ``tile_y x 32`` partial sums, whichever is larger."""
    rh, rw = int(right_shape[-2]), int(right_shape[-1])
    rw4 = 4 * -(-rw // 4)
    return 4 * max(rh * rw4 + (rh + tile_y - 1) * (rw4 + 31), warps * tile_y * 32)


def configure_small(form, left_shape, right_shape, max_shift, params):
    lay, out_shape, geom = geometry(form, left_shape, right_shape, max_shift)
    ho, wo = out_shape[-2:]
    ty, warps = params["tile_y"], params["row_splits"]
    if ty not in TILES:
        raise InputError(f"tile_y of the small kernel must be one of {TILES}, got {ty}")
    if not 1 <= warps <= MAX_WARPS:
        raise InputError(f"row_splits (warps per block) of the small kernel must be 1 to "
                         f"{MAX_WARPS}, got {warps}")
    if lay.n_results == 0:
        return None, None, None, (), 0, True, out_shape
    smem = shared_bytes(lay.right_shape, ty, warps)
    limit = device_limits().shared_per_block
    if smem > limit:
        raise InputError(f"right matrices of {lay.right_shape} need {smem // 1024} KiB of shared "
                         f"memory per block in the small kernel; this GPU has {limit // 1024} KiB")
    if -(-ho // ty) > MAX_GRID_Y:
        raise InputError(f"{ho} rows of shifts are too many for the small kernel")
    i32 = np.int32
    grid = (-(-wo // 32), -(-ho // ty), min(lay.n_results, MAX_GRID_Z))
    scalars = geom + (i32(lay.m), i32(lay.n_results))
    return (SMALL.get(lay.form_id, ty), grid, (32, warps, 1), scalars, smem, False,
            out_shape)


def small_xcorr(left, right, form="one_to_one", max_shift=None, out=None, *, tile_y=4,
                row_splits=8):
    """Cross-correlate CuPy arrays with the few-pair kernel.

    Parameters
    ----------
    left, right, form, max_shift, out
        As :func:`xcorr_app.cross_correlate` (float32 CuPy result).
    tile_y : int
        y-shifts per lane (one of :data:`TILES`).
    row_splits : int
        Warps per block, which split the right rows (1 to 16).

    Returns
    -------
    cupy.ndarray
        ``batch_shape + (Ho, Wo)`` float32.
    """
    params = (("tile_y", tile_y), ("row_splits", row_splits))
    return launch(configure_small, left, right, form, max_shift, out, params)


def small_candidates(lay, max_shift) -> list:
    """``[(tile_y, warps)]`` the planner tries: problems of at most :data:`MAX_RESULTS`
    results whose blocks fit :data:`MAX_SHARED`; tiles no taller than the output (but 1)
    and at most one warp per right row."""
    if lay.n_results > MAX_RESULTS:
        return []
    ho, _ = output_shape(lay.left_shape, lay.right_shape, max_shift)
    rh = lay.right_shape[0]
    return [(ty, w) for ty in TILES for w in WARPS
            if (ty == 1 or ty <= ho) and (w == WARPS[0] or w <= rh)
            and shared_bytes(lay.right_shape, ty, w) <= MAX_SHARED]
