"""GPU launcher of the column/row-reuse correlation kernel (``kernels/filters/reuse_conv.cu``).

One launch filters a whole ``(N, H, W)`` stack: warps compute 32-column sub-blocks with column
reuse (pack/unpack shuffles) and row reuse (a register array of the output rows in flight).  By
default the sub-blocks tile the whole frame and those at an edge map their loads by
scipy.ndimage's boundary mode (``edges="reuse"``); the papers' alternative tiles only the
interior and leaves the edge outputs and leftover columns to a direct path in trailing blocks
(``edges="direct"``).  Either way the input is never padded.  Ours also stages the rows of
float32 frames (filters up to 7x7) through a shared-memory ring per warp filled by ``cp.async``
(``loads="async"``, 2 adjacent output columns per lane), which keeps many rows of memory
requests in flight without registers; elsewhere each lane loads its columns into registers.

Filter sizes up to 11 are compiled exactly; larger ones (up to 31) run on the next compiled
capacity (:data:`CAPACITIES`) with the extra taps skipped.  1-D filters (one row or one column:
the passes of separable filters) go up to :data:`LINE_MAX_TAPS` (:data:`LINE_CAPACITIES`).
float32, float16, uint16 and uint8 frames are read as they are for filters up to
:data:`NARROW_MAX` (where memory traffic is the limit); larger, compute-bound filters read a
float32 copy.  Accumulation and output are float32.

Examples
--------
>>> import cupy as cp, numpy as np  # doctest: +SKIP
>>> stack = cp.random.rand(7, 100, 130).astype(cp.float32)  # doctest: +SKIP
>>> out = reuse_correlate(stack, np.ones((3, 3), np.float32) / 9, mode="reflect")  # doctest: +SKIP
>>> out.shape, out.dtype  # doctest: +SKIP
((7, 100, 130), dtype('float32'))
"""

from __future__ import annotations

import numpy as np

from .._cuda import KernelFamily, kept_on_device
from ..backend import xp_for
from ..errors import InputError
from ._modes import MODE_IDS

DTYPE_IDS = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.uint16): 2,
             np.dtype(np.uint8): 3}
EXACT_MAX = 11  # kernels/filters/reuse_conv.cu: EXACT_MAX
#: compiled filter extents (rows or columns); larger filters use the next one up
CAPACITIES = tuple(range(1, EXACT_MAX + 1)) + (15, 19, 23, 27, 31)
MAX_TAPS = CAPACITIES[-1]
#: the longest 1-D filter (``(1, fw)`` or ``(fh, 1)``: a separable filter's passes, e.g. a
#: gaussian of sigma 7.75 at truncate 4); 2-D filters stop at MAX_TAPS (a 31 x 31 filter's taps
#: already take 3.8 KB of kernel parameters, and each 2-D extent adds a row of instantiations)
LINE_MAX_TAPS = 63
#: compiled widths of rows beyond MAX_TAPS (column passes are compiled at every height)
LINE_CAPACITIES = tuple(range(MAX_TAPS + 4, LINE_MAX_TAPS + 1, 4))
#: filters up to this extent read uint8/uint16/float16 frames directly
NARROW_MAX = 7
#: square sizes compiled with the taps in shared memory, as in the papers (``taps="shared"``)
PAPER_SIZES = (3, 5, 7, 9, 11)
TAPS_PLACES = ("param", "shared")
ROWS_PER_BLOCK = 56  # the papers' sub-block height
#: output columns per lane compiled for the staged loads (a warp's sub-block is 32 x this wide)
ASYNC_COLUMNS = (1, 2)


def default_rows_per_block(fh: int, fw: int, staged: bool = False) -> int:
    """Sub-block height measured best (docs/kernels.md, filters): short sub-blocks for the
    memory-bound small filters (more,
    shorter-lived warps reading neighbouring rows together), the papers' 56 or more for large
    ones, where the FH - 1 halo rows cost FMAs; staged: 16 up to 3x3, 32 up to 5x5, else 64."""
    if staged:
        return 16 if fh * fw <= 9 else (32 if fh * fw <= 25 else 64)
    if fh * fw <= 25:
        return 16
    if fh * fw <= 49:
        return 32
    return max(ROWS_PER_BLOCK, 4 * (fh - 1))


WARPS_PER_BLOCK = 4
MAX_GRID_YZ = 65535


def capacity(n: int, exact: bool = False, line: bool = False) -> int:
    """The compiled extent that holds a filter extent ``n`` (``1 <= n <= MAX_TAPS``, or
    :data:`LINE_MAX_TAPS` with ``line``: a 1-D filter, one row or one column); with ``exact``
    (the rows of a column pass, ``fw == 1``) every extent is compiled.

    >>> capacity(13), capacity(33, line=True), capacity(33, exact=True, line=True)
    (15, 35, 33)
    """
    limit = LINE_MAX_TAPS if line else MAX_TAPS
    if exact and 1 <= n <= limit:
        return n
    for c in CAPACITIES + (LINE_CAPACITIES if line else ()):
        if c >= n:
            return c
    if line:
        raise InputError(f"filter extent {n} is larger than the {LINE_MAX_TAPS} taps the GPU "
                         "kernels hold for a 1-D filter")
    raise InputError(f"filter extent {n} is larger than the {MAX_TAPS} taps the GPU kernels hold "
                     f"for a 2-D filter ({LINE_MAX_TAPS} for one row or one column)")


def _instantiations():
    out = []
    for fh in CAPACITIES:
        for fw in CAPACITIES:
            narrow = fh <= NARROW_MAX and fw <= NARROW_MAX
            for dt in (sorted(DTYPE_IDS.values()) if narrow else (0,)):
                out.append((dt, fh, fw, False, 1, False))
            if narrow:
                out.append((0, fh, fw, False, 4, False))
                out += [(0, fh, fw, False, q, True) for q in ASYNC_COLUMNS]
    # column passes of separable filters: every height, so the row loop has no skipped taps
    out += [(0, fh, 1, False, 1, False) for fh in range(1, LINE_MAX_TAPS + 1)
            if fh not in CAPACITIES]
    # row passes beyond MAX_TAPS (1-D only: no 2-D combinations of these extents)
    out += [(0, 1, fw, False, 1, False) for fw in LINE_CAPACITIES]
    out += [(0, s, s, True, 1, False) for s in PAPER_SIZES]
    return out


REUSE_CORRELATE = KernelFamily("reuse_conv.cu", "reuse_correlate", _instantiations())


def _taps_scalar(w: np.ndarray, fh_cap: int, fw_cap: int):
    """The filter as the by-value ``Taps<FH, FW>`` argument (row stride ``fw_cap``)."""
    padded = np.zeros((fh_cap, fw_cap), np.float32)
    padded[: w.shape[0], : w.shape[1]] = w
    struct = np.zeros((), np.dtype([("w", np.float32, (fh_cap * fw_cap,))]))
    struct["w"] = padded.ravel()
    return struct[()]


EDGES = ("reuse", "direct")
#: how the sub-blocks load their rows: "registers" (each lane loads its columns a few rows
#: ahead into registers, the papers' column reuse) or "async" (ours: cp.async copies rows into a
#: shared-memory ring per warp, 7 to 10 rows ahead); "auto" picks "async" where it can run
LOADS = ("auto", "registers", "async")


#: output columns per lane of the staged loads by default: 2 measured faster than 1 for 3x3,
#: 5x5 and 7x7 (docs/kernels.md, filters)
ASYNC_DEFAULT_COLUMNS = 2


def geometry(h: int, w: int, fh_cap: int, fw_cap: int, cy: int, cx: int, rows_per_block: int,
             edges: str = "reuse", vec: int = 1):
    """Where the sub-blocks go: ``(y_first, n_rows, x_first, n_sub_blocks, row_blocks,
    n_edge)`` for one frame.

    ``edges="reuse"`` (ours): sub-blocks of ``32 * vec`` columns (``vec`` columns per lane: 1,
    2 with the staged loads, or 4) tile the whole frame and those at an edge map their loads by
    the boundary mode; ``n_edge`` is 0.  ``edges="direct"`` (the papers'): 32-column sub-blocks
    tile only the interior, where every tap of the ``fh_cap x fw_cap`` capacity is inside the
    frame, and the ``n_edge`` other outputs go to the direct path.
    """
    if edges == "reuse":
        return 0, h, 0, -(-w // (32 * vec)), max(1, -(-h // rows_per_block)), 0
    inner_h = max(0, h - fh_cap + 1)
    inner_w = max(0, w - fw_cap + 1)
    n_sub = inner_w // 32 if inner_h else 0
    row_blocks = max(1, -(-inner_h // rows_per_block))
    return cy, inner_h, cx, n_sub, row_blocks, h * w - inner_h * 32 * n_sub


def reuse_correlate(stack, weights, mode="reflect", cval=0.0, origin=(0, 0), *,
                    rows_per_block=None, taps="param", edges="reuse",
                    columns_per_lane=0, loads="auto", out=None):
    """Correlate every frame of a CuPy stack with ``weights`` (``scipy.ndimage.correlate``).

    Parameters
    ----------
    stack : cupy.ndarray
        ``(H, W)`` or ``(N, H, W)``; float32, float16, uint16 or uint8 (others are converted to
        float32 first).
    weights : array_like
        ``(fh, fw)`` filter, at most ``MAX_TAPS`` in each extent (``LINE_MAX_TAPS`` for a
        filter of one row or one column).
    mode, cval, origin
        As ``scipy.ndimage.correlate``; ``origin`` is a ``(row, column)`` pair already checked.
    rows_per_block : int, optional
        Output rows of one warp's sub-block (the papers used 56); default
        :func:`default_rows_per_block`.
    taps : {"param", "shared"}
        Where the interior reads the taps: the kernel-parameter constant bank (ours, default) or
        shared memory (the papers'; compiled for square sizes in :data:`PAPER_SIZES`).
    edges : {"reuse", "direct"}
        How outputs near the frame's edges are computed: by the reuse sub-blocks with
        boundary-mapped loads (ours, default) or by the papers' separate direct path.
    columns_per_lane : {0, 1, 2, 4}
        1: one output column per lane (with register loads, the papers' column reuse).  4
        (ours, register loads): a lane computes 4 columns from one 16-byte load and takes its
        halo from its neighbours by shuffle; only for float32 frames of a width divisible by 4,
        filters up to 7x7, the default column origin and ``edges="reuse"``.  2 (staged loads
        only): a lane computes 2 adjacent columns of a 64-column sub-block, reading pairs of
        ring words with 8-byte loads and storing 8 bytes at a time.  0 (default):
        :data:`ASYNC_DEFAULT_COLUMNS` with staged loads, else 1.
    loads : {"auto", "registers", "async"}
        How the sub-blocks read their rows (:data:`LOADS`).  "async" needs
        float32 frames of a width divisible by 4 on a 16-byte aligned base, a filter up to 7x7
        at the default column origin and ``edges="reuse"``; "auto" uses it there.
    out : cupy.ndarray, optional
        float32 array of the stack's shape to write into.

    Returns
    -------
    cupy.ndarray
        float32, the shape of ``stack``.
    """
    cp = xp_for("gpu")  # (without CuPy: an InputError saying what to install)

    w = np.asarray(weights, dtype=np.float32)
    fh, fw = w.shape
    if mode not in MODE_IDS:
        raise InputError(f"unknown mode {mode!r}; use one of {', '.join(MODE_IDS)}")
    if edges not in EDGES:
        raise InputError(f"edges must be one of {', '.join(EDGES)}, got {edges!r}")
    if rows_per_block is not None and int(rows_per_block) < 1:
        raise InputError(f"rows_per_block must be >= 1, got {rows_per_block}")
    if taps not in TAPS_PLACES:
        raise InputError(f"taps must be one of {', '.join(TAPS_PLACES)}, got {taps!r}")
    shared = taps == "shared"
    if shared and not (fh == fw and fh in PAPER_SIZES):
        raise InputError(f"taps='shared' is compiled for square filters of {PAPER_SIZES} only")
    line = fh == 1 or fw == 1
    fh_cap, fw_cap = capacity(fh, exact=fw == 1, line=line), capacity(fw, line=line)
    frames = stack if stack.ndim == 3 else stack[None]
    narrow = fh_cap <= NARROW_MAX and fw_cap <= NARROW_MAX and not shared
    dt = DTYPE_IDS.get(frames.dtype) if narrow else (0 if frames.dtype == np.float32 else None)
    if dt is None:
        frames, dt = frames.astype(cp.float32), 0
    frames = cp.ascontiguousarray(frames)
    n, h, wd = frames.shape
    if out is None:
        out = cp.empty(stack.shape, cp.float32)
    elif out.shape != stack.shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise InputError(f"out must be a C-contiguous float32 array of shape {stack.shape}")
    o = out if out.ndim == 3 else out[None]
    cy, cx = fh // 2 + int(origin[0]), fw // 2 + int(origin[1])
    vec_ok = (edges == "reuse" and dt == 0 and not shared and fh_cap <= NARROW_MAX
              and fw_cap <= NARROW_MAX and wd % 4 == 0 and cx == fw // 2)
    if columns_per_lane not in (0, 1, 2, 4):
        raise InputError(f"columns_per_lane must be 0, 1, 2 or 4, got {columns_per_lane}")
    if columns_per_lane == 4 and not vec_ok:
        raise InputError("columns_per_lane=4 needs float32 frames of a width divisible by 4, a "
                         "filter up to 7x7 at the default column origin and edges='reuse'")
    if loads not in LOADS:
        raise InputError(f"loads must be one of {', '.join(LOADS)}, got {loads!r}")
    async_ok = vec_ok and frames.data.ptr % 16 == 0 and columns_per_lane != 4
    if loads == "async" and not async_ok:
        raise InputError("loads='async' needs float32 frames of a width divisible by 4 on a "
                         "16-byte aligned base, a filter up to 7x7 at the default column origin, "
                         "edges='reuse' and 1 or 2 columns per lane")
    use_async = async_ok and loads != "registers"
    if columns_per_lane == 2 and not use_async:
        raise InputError("columns_per_lane=2 runs with the staged loads only (loads='async')")
    if use_async:
        vec = columns_per_lane or ASYNC_DEFAULT_COLUMNS
    else:
        vec = 4 if columns_per_lane == 4 else 1
    if rows_per_block is None:
        rows_per_block = default_rows_per_block(fh, fw, use_async)
    y_first, n_rows, x_first, n_sub, row_blocks, n_edge = geometry(
        h, wd, fh_cap, fw_cap, cy, cx, int(rows_per_block), edges, vec)
    interior_bx = -(-n_sub // WARPS_PER_BLOCK)
    threads = 32 * WARPS_PER_BLOCK
    edge_bx = -(-n_edge // (row_blocks * threads)) if n_edge else 0
    if row_blocks > MAX_GRID_YZ:
        raise InputError(f"frames of {h} rows need rows_per_block >= {-(-h // MAX_GRID_YZ)}")
    fn = REUSE_CORRELATE.get(dt, fh_cap, fw_cap, shared, vec, use_async)
    taps_global = kept_on_device(w)
    i32 = np.int32
    args_tail = (_taps_scalar(w, fh_cap, fw_cap), taps_global, i32(h), i32(wd), i32(fh), i32(fw),
                 i32(cy), i32(cx), i32(MODE_IDS[mode]), np.float32(cval), i32(y_first),
                 i32(n_rows), i32(x_first), i32(n_sub), i32(rows_per_block), i32(interior_bx),
                 i32(n_edge))
    for f0 in range(0, n, MAX_GRID_YZ):
        nz = min(MAX_GRID_YZ, n - f0)
        grid = (interior_bx + edge_bx, row_blocks, nz)
        fn(grid, (32, WARPS_PER_BLOCK, 1), (frames[f0:f0 + nz], o[f0:f0 + nz]) + args_tail)
    return out
