"""GPU launchers of the warp-shuffle kernels (``kernels/correlate/warp_shuffle_xcorr.cu``).

* :func:`warp_shuffle_xcorr`: split-row warp shuffle with work distribution (``none``,
  ``rectangle``, ``triangle``, and ours, ``block``: a block's warps share a group's rows and add
  their sums in shared memory), ``lefts`` left and ``rights`` right matrices per thread,
  ``shifts`` consecutive y-shifts per thread and ``left_rows`` left rows per iteration.
* :func:`warp_per_shift_xcorr`: one warp per output element, optionally staging the right
  matrix in shared memory, for the smallest matrices.

Only the parameter combinations in :data:`VARIANTS` are compiled (and compile-checked by CI).

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> a = cp.random.rand(32, 32, dtype=cp.float32)  # doctest: +SKIP
>>> c = warp_shuffle_xcorr(a, a[None], "one_to_many", rights=1, shifts=4)  # doctest: +SKIP
>>> c.shape  # doctest: +SKIP
(1, 63, 63)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import InputError
from ._forms import FORMS, FORM_IDS, form_layout
from ._overlap import MAX_GRID_Z, as_float32, c_contiguous, check_out
from .._cuda import KernelFamily, PreparedLaunch
from ._shifts import first_shift, normalize_max_shift, output_shape
from ._work_distribution import schedule

#: (shifts, left_rows) of the multi-row variants
_MULTI_ROW = [(2, 1), (4, 1), (8, 1), (4, 2), (8, 2)]
#: several right matrices per thread, alone and with a few y-shifts
_MULTI_RIGHT = [(r, 1, 1) for r in (2, 4, 8)] + [(2, 2, 1), (2, 4, 1), (4, 2, 1), (4, 4, 1),
                                                  (8, 2, 1)]

#: (lefts, rights, shifts, left_rows) compiled for each form
VARIANTS = {
    "one_to_one": [(1, 1, 1, 1)] + [(1, 1, s, lr) for s, lr in _MULTI_ROW],
    "one_to_many": [(1, 1, 1, 1)] + [(1, 1, s, lr) for s, lr in _MULTI_ROW]
    + [(1, r, s, lr) for r, s, lr in _MULTI_RIGHT],
}
VARIANTS["n_to_mn"] = list(VARIANTS["one_to_many"])
VARIANTS["n_to_m"] = VARIANTS["one_to_many"] + [(2, r, 1, 1) for r in (1, 2, 4, 8)] + [(2, 4, 2, 1)]

WARP_SHUFFLE = KernelFamily("warp_shuffle_xcorr.cu", "warp_shuffle_xcorr",
                            [(FORM_IDS[f],) + v for f in FORMS for v in VARIANTS[f]])
WARP_SHUFFLE_BLOCK = KernelFamily("warp_shuffle_xcorr.cu", "warp_shuffle_block_xcorr",
                                  WARP_SHUFFLE.instantiations)
WARP_PER_SHIFT = KernelFamily("warp_shuffle_xcorr.cu", "warp_per_shift_xcorr",
                              [(FORM_IDS[f], s) for f in FORMS for s in (False, True)])

WARPS_PER_BLOCK = 4  # __launch_bounds__(128) of warp_shuffle_xcorr
SHIFT_WARPS = 8  # __launch_bounds__(256) of warp_per_shift_xcorr
MAX_GRID_Y = 65535
#: dynamic shared memory the shared warp-per-shift variant may use (no opt-in needed)
MAX_STAGED_BYTES = 48 * 1024

_LAUNCHES: dict = {}


class Launch(NamedTuple):
    """One problem's launches, prepared once from what a ``configure`` function returns.

    ``kernel`` is ``None`` when no shift overlaps (the output is all zeros); ``zero_first``
    asks for the output to be zeroed before the kernel adds to it; ``arrange``, if given, is a
    kernel that rewrites the right matrices into a float32 array of ``arranged_shape`` that the
    main kernel reads in their place.
    """

    kernel: PreparedLaunch | None
    zero_first: bool
    out_shape: tuple
    arrange: PreparedLaunch | None = None
    arranged_shape: tuple = ()

    @classmethod
    def prepare(cls, fn, grid, block, scalars, shared_mem, zero_first, out_shape, arrange=None):
        """From ``configure``'s ``(fn, grid, block, scalars, shared_mem, zero_first,
        out_shape[, (fn, grid, block, shape, scalars) of the rearrangement])``."""
        kernel = None if fn is None else PreparedLaunch(fn, grid, block, 3, scalars, shared_mem)
        if arrange is None:
            return cls(kernel, zero_first, out_shape)
        afn, agrid, ablock, shape, ascalars = arrange
        return cls(kernel, zero_first, out_shape, PreparedLaunch(afn, agrid, ablock, 2, ascalars),
                   tuple(shape))


def launch(configure, left, right, form, max_shift, out, params, arranged=None):
    """Compile (once), configure (once per problem) and launch one kernel.

    ``configure(form, left_shape, right_shape, max_shift, params)`` returns what
    :meth:`Launch.prepare` takes; it runs once per (kernel, shapes, bound, parameters, device)
    and is kept (:func:`prepare`), so a repeated call costs little more than the launch itself
    (on the smallest problems the host's time is most of the time).  ``arranged`` (development
    probes) is the right matrices already rewritten by the problem's ``arrange`` kernel.
    """
    cfg = prepare(configure, form, left.shape, right.shape, max_shift, params)
    return run_prepared(cfg, left, right, out, arranged)


def prepare(configure, form, left_shape, right_shape, max_shift, params) -> Launch:
    """The :class:`Launch` of a problem on the current device, configured once and kept."""
    import cupy as cp

    if max_shift is not None:
        max_shift = normalize_max_shift(max_shift)
    key = (configure, form, tuple(left_shape), tuple(right_shape), max_shift, params,
           cp.cuda.runtime.getDevice())
    cfg = _LAUNCHES.get(key)
    if cfg is None:
        if len(_LAUNCHES) > 512:
            _LAUNCHES.clear()
        cfg = _LAUNCHES[key] = Launch.prepare(*configure(form, tuple(left_shape),
                                                         tuple(right_shape), max_shift,
                                                         dict(params)))
    return cfg


def run_prepared(cfg: Launch, left, right, out=None, arranged=None):
    """Launch a prepared problem on the current stream: inputs converted to C-contiguous
    float32 where they are not, ``out`` checked (or allocated), zeroed first where the kernel
    adds to it, the right matrices rearranged into ``arranged`` (allocated if ``None``) where
    the kernel reads them so."""
    import cupy as cp

    left, right = as_float32(left, cp), as_float32(right, cp)
    if not (isinstance(out, cp.ndarray) and out.shape == cfg.out_shape
            and out.dtype.char == "f" and c_contiguous(out)):  # the common case, quickly
        out = check_out(out, cfg.out_shape, cp)  # allocates, or raises saying what is wrong
    if cfg.zero_first or cfg.kernel is None:
        cp.cuda.runtime.memsetAsync(out.data.ptr, 0, out.nbytes, cp.cuda.get_current_stream().ptr)
    if cfg.kernel is None:
        return out
    if cfg.arrange is not None:
        if arranged is None:
            arranged = cp.empty(cfg.arranged_shape, cp.float32)
            cfg.arrange(right, arranged)
        right = arranged
    cfg.kernel(left, right, out)
    return out


def geometry(form, left_shape, right_shape, max_shift):
    """``(layout, out_shape, int32 kernel arguments left_h ... shift_x0)`` of a problem."""
    lay = form_layout(form, left_shape, right_shape)
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, kx0 = first_shift(lay.left_shape, lay.right_shape, max_shift)
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    i32 = np.int32
    return lay, lay.batch_shape + (ho, wo), (i32(lh), i32(lw), i32(rh), i32(rw), i32(ho),
                                             i32(wo), i32(ky0), i32(kx0))


def configure_per_shift(form, left_shape, right_shape, max_shift, params):
    lay, out_shape, geom = geometry(form, left_shape, right_shape, max_shift)
    ho, wo = out_shape[-2:]
    i32 = np.int32
    smem = staged_bytes(lay.right_shape) if params["shared"] else 0
    if smem > MAX_STAGED_BYTES:
        raise InputError(f"right matrices of {lay.right_shape} do not fit the "
                         f"{MAX_STAGED_BYTES // 1024} KiB of shared memory of the staged "
                         "variant")
    stage_left = bool(params["shared"]) and smem + staged_bytes(lay.left_shape) <= \
        MAX_STAGED_BYTES  # the left matrix too, where it fits beside the right one
    if stage_left:
        smem += staged_bytes(lay.left_shape)
    fn = WARP_PER_SHIFT.get(lay.form_id, bool(params["shared"]))
    warps = max(1, min(SHIFT_WARPS, wo))  # a block's warps: x-shifts of one y-shift
    grid = (-(-wo // warps), min(ho, MAX_GRID_Y), min(lay.n_results, MAX_GRID_Z))
    scalars = geom + (i32(lay.m), i32(lay.n_results), i32(stage_left))
    return fn, grid, (32, warps, 1), scalars, smem, False, out_shape


def configure_shuffle(form, left_shape, right_shape, max_shift, params):
    import cupy as cp

    lay, out_shape, geom = geometry(form, left_shape, right_shape, max_shift)
    ho, wo = out_shape[-2:]
    (lh, _), (rh, _) = lay.left_shape, lay.right_shape
    ky0 = int(geom[6])
    i32 = np.int32
    lefts, rights, shifts = params["lefts"], params["rights"], params["shifts"]
    variant = (lay.form_id, lefts, rights, shifts, params["left_rows"])
    sched = schedule(params["distribution"], lh, rh, ky0, ho, shifts,
                     params["rows_per_worker"])
    if sched.n_workers == 0:  # no shift overlaps: all zeros
        return None, None, None, (), 0, True, out_shape
    pair_groups = -(-lay.n_left // lefts) * -(-lay.m // rights)
    if sched.distribution == "block":
        warps = sched.max_tasks
        grid = (-(-wo // 32), min(sched.n_groups, MAX_GRID_Y), min(pair_groups, MAX_GRID_Z))
        smem = 4 * warps * lefts * rights * shifts * 32  # each warp's sums, added by the block
        scalars = geom + (i32(lay.n_left), i32(lay.m), i32(sched.n_groups))
        return (WARP_SHUFFLE_BLOCK.get(*variant), grid, (32, warps, 1), scalars, smem, False,
                out_shape)
    fn = WARP_SHUFFLE.get(*variant)
    pieces = cp.asarray(sched.pieces if sched.pieces.size else np.zeros((1, 5), np.int32))
    grid = (-(-wo // 32), min(-(-sched.n_workers // WARPS_PER_BLOCK), MAX_GRID_Y),
            min(pair_groups, MAX_GRID_Z))
    scalars = geom + (i32(lay.n_left), i32(lay.m), i32(sched.dist_id),
                      i32(sched.rows_per_worker), i32(sched.n_groups), i32(sched.n_workers),
                      i32(sched.max_tasks), pieces, i32(len(sched.pieces)))
    zero = sched.distribution != "none"  # workers add their partial sums (atomicAdd)
    return fn, grid, (32, WARPS_PER_BLOCK, 1), scalars, 0, zero, out_shape


def warp_shuffle_xcorr(left, right, form="one_to_one", max_shift=None, out=None, *, lefts=1,
                       rights=1, shifts=1, left_rows=1, distribution="none", rows_per_worker=0):
    """Cross-correlate CuPy arrays with the split-row warp-shuffle kernel.

    Parameters
    ----------
    left, right, form, max_shift, out
        As :func:`xcorr_app.cross_correlate` (float32 CuPy result).
    lefts, rights : int
        Left (``n_to_m`` only) and right matrices one thread correlates at once.
    shifts : int
        Consecutive y-shifts per thread (multi-row / grouped overlap).
    left_rows : int
        Left rows loaded per iteration and reused for every shift they meet.
    distribution : {"none", "rectangle", "triangle", "block"}
    rows_per_worker : int
        Rows of one task (rectangle and triangle); with ``block``, the block has as many warps
        as the longest domain has tasks (at most
        :data:`~xcorr_app.correlate._work_distribution.MAX_BLOCK_WARPS`).

    Returns
    -------
    cupy.ndarray
        ``batch_shape + (Ho, Wo)`` float32.
    """
    params = (("lefts", lefts), ("rights", rights), ("shifts", shifts),
              ("left_rows", left_rows), ("distribution", distribution),
              ("rows_per_worker", rows_per_worker if distribution != "none" else 0))
    return launch(configure_shuffle, left, right, form, max_shift, out, params)


def staged_bytes(shape) -> int:
    """Bytes of shared memory one matrix of ``shape`` takes when the shared warp-per-shift
    variant stages it (the right matrix always, the left one where both fit)."""
    return 4 * int(shape[-2]) * int(shape[-1])


def warp_per_shift_xcorr(left, right, form="one_to_one", max_shift=None, out=None, *,
                         shared=False):
    """Cross-correlate CuPy arrays with one warp per output element.

    ``shared=True`` stages each right matrix in shared memory first (at most
    :data:`MAX_STAGED_BYTES`).  Other parameters as :func:`warp_shuffle_xcorr`.
    """
    return launch(configure_per_shift, left, right, form, max_shift, out,
                  (("shared", bool(shared)),))
