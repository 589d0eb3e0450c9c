"""The ``xcorr bench filter`` benchmark: the reuse convolution kernels against the peers.

One float32 stack (32 frames of 2048x2048 unless told otherwise) is filtered with each problem
of :data:`PROBLEMS` (3x3, 5x5, 7x7 and 11x11 random filters, and a 31-tap separable gaussian),
all with scipy.ndimage's ``reflect`` boundary, and timed with
:func:`xcorr_app._cuda.timing.time_gpu`:

* **ours**: :func:`xcorr_app.filters._reuse.reuse_correlate` with the taps in the
  kernel-parameter bank (the default), or :func:`xcorr_app.filters._api.gaussian` (two 1-D passes),
* **paper**: the same kernel with the papers' layout, the taps in shared memory (square sizes of
  :data:`xcorr_app.filters._reuse.PAPER_SIZES` only; blank elsewhere),
* **cupyx**: ``cupyx.scipy.ndimage.correlate`` (``gaussian_filter`` for the gaussian),
* **torch**: PyTorch ``conv2d`` in fp32 (cuDNN autotuned, TF32 off) after a reflect ``F.pad``.

The table gives the ratio of the fastest peer to ours, the ratio of cupyx to ours, and the share
of the memory roofline: the input read once plus the output written once, at the copy bandwidth
measured on the same stack in the same run (:func:`copy_bandwidth`).  Ours (and the papers'
layout) are checked against cupyx: a relative error above :data:`TOLERANCE` is a ``MISMATCH``.

Run it as ``xcorr bench filter [--quick] [--frames N] [--size HxW] [--only NAME,...]``.

Examples
--------
>>> filter_shape("11x11"), filter_shape("gaussian31")
((11, 11), (31, 31))
>>> roofline_ms(1 << 30, 1 << 30, copy_gbps=2147.483648)  # 2 GiB at 2.1 TB/s: 1 ms
1.0
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import InputError, XcorrError
from ._common import (TIMING, cell, fmt_ms, free_gpu_memory, markdown_header, measure_paths,
                      parse_size, torch_unavailable_reason, utc_now, versions_line)

#: the rows of the table, in order
PROBLEMS = ("3x3", "5x5", "7x7", "11x11", "gaussian31")
#: the timed paths, in table order; the peers are the other libraries
PATHS = ("ours", "paper", "cupyx", "torch")
PEERS = ("cupyx", "torch")
#: the separable gaussian: sigma 3.75 truncated at 4 sigma is scipy's 31-tap filter
GAUSS_SIGMA = 3.75
GAUSS_TRUNCATE = 4.0
GAUSS_NAME = "gaussian31"
#: the boundary of every path (scipy.ndimage's name)
MODE = "reflect"
#: relative error (max |ours - cupyx| / max |cupyx|) above which a row is a MISMATCH
TOLERANCE = 1e-5
#: the full run and the ``--quick`` smoke run: (frames, height, width)
DEFAULT_SHAPE = (32, 2048, 2048)
QUICK_SHAPE = (4, 512, 512)
#: smallest frame side: the gaussian's 31 taps (and torch's reflect pad of 15) must fit
MIN_SIDE = 31
#: the issue's targets: ours / cupyx speed-up on the small filters, roofline share of 3x3, 5x5
TARGET_VS_CUPYX = 4.0
TARGET_VS_CUPYX_ROWS = ("3x3", "5x5", "7x7", "11x11")
TARGET_ROOFLINE = 0.70
TARGET_ROOFLINE_ROWS = ("3x3", "5x5")


# ------------------------------------------------------------------------------ problems

def filter_shape(name) -> tuple:
    """``(fh, fw)`` of a problem of :data:`PROBLEMS` (the gaussian's 2-D extent)."""
    if name == GAUSS_NAME:
        n = gaussian_size()
        return n, n
    fh, fw = name.split("x")
    return int(fh), int(fw)


def gaussian_size() -> int:
    """Taps of the benchmark's gaussian (31 for sigma 3.75, truncate 4)."""
    from ..filters import gaussian_taps

    return int(gaussian_taps(GAUSS_SIGMA, GAUSS_TRUNCATE).size)


def make_weights(name, seed=0) -> np.ndarray:
    """The float32 ``(fh, fw)`` filter of a problem: standard normal, seeded by ``seed`` and
    the size (the gaussian's is the outer product of its 1-D taps, for reference only)."""
    if name == GAUSS_NAME:
        from ..filters import gaussian_taps

        taps = gaussian_taps(GAUSS_SIGMA, GAUSS_TRUNCATE)
        return np.outer(taps, taps).astype(np.float32)
    fh, fw = filter_shape(name)
    rng = np.random.default_rng([seed, fh, fw])
    return rng.standard_normal((fh, fw)).astype(np.float32)


def make_stack(frames, h, w, seed=0):
    """A standard-normal float32 CuPy stack ``(frames, h, w)`` (zero mean, so a wrong tap or
    boundary shows as a large error in the check)."""
    import cupy as cp

    return cp.random.RandomState(seed).standard_normal((frames, h, w), dtype=cp.float32)


def paper_allowed(name) -> bool:
    """True when the papers' configuration (``taps="shared"``) is compiled for this problem."""
    from ..filters import PAPER_SIZES

    fh, fw = filter_shape(name)
    return name != GAUSS_NAME and fh == fw and fh in PAPER_SIZES


# ------------------------------------------------------------------------------ the paths

def ours(stack, name, weights, out=None):
    """Our default path as a callable: ``reuse_correlate`` (taps in the parameter bank) into a
    preallocated ``out``, or :func:`xcorr_app.filters._api.gaussian` for the gaussian (two 1-D
    passes; its intermediate and output come from CuPy's memory pool)."""
    import cupy as cp

    if name == GAUSS_NAME:
        from ..filters import gaussian

        return lambda: gaussian(stack, GAUSS_SIGMA, truncate=GAUSS_TRUNCATE, mode=MODE)
    from ..filters import reuse_correlate

    out = cp.empty(stack.shape, cp.float32) if out is None else out
    return lambda: reuse_correlate(stack, weights, mode=MODE, out=out)


def paper(stack, name, weights, out=None):
    """The papers' configuration as a callable: taps in shared memory, one column per lane,
    56-row sub-blocks and the direct edge path; None where it is not compiled."""
    import cupy as cp

    if not paper_allowed(name):
        return None
    from ..filters import reuse_correlate

    out = cp.empty(stack.shape, cp.float32) if out is None else out
    return lambda: reuse_correlate(stack, weights, mode=MODE, taps="shared", edges="direct",
                                   columns_per_lane=1, rows_per_block=56, out=out)


def cupyx_peer(stack, name, weights):
    """The cupyx peer as a callable: ``cupyx.scipy.ndimage.correlate`` with the filter shaped
    ``(1, fh, fw)`` for the 3-D stack, or ``gaussian_filter`` with sigma ``(0, s, s)``."""
    import cupy as cp
    import cupyx.scipy.ndimage as ndi

    if name == GAUSS_NAME:
        sigma = (0.0, GAUSS_SIGMA, GAUSS_SIGMA)
        return lambda: ndi.gaussian_filter(stack, sigma, truncate=GAUSS_TRUNCATE, mode=MODE)
    w = cp.asarray(weights, cp.float32)[None]
    return lambda: ndi.correlate(stack, w, mode=MODE)


def torch_peer(stack, name, weights):
    """The PyTorch peer: ``F.conv2d`` in fp32 (cuDNN autotuned, TF32 off) on ``(N, 1, H, W)``
    after ``F.pad(..., mode="reflect")``; the gaussian is two 1-D convs, ``(1, 31)`` then
    ``(31, 1)``, each with its own pad.  The stack is shared through DLPack (no copies).

    PyTorch's ``reflect`` is scipy's ``mirror`` (the edge pixel is not repeated): the same
    work, other edge values, so its output is timed but not checked.

    Returns
    -------
    callable or None
        ``fn()`` -> a torch tensor ``(N, 1, H, W)``; None when PyTorch or its CUDA is missing.
    """
    if torch_unavailable_reason():
        return None
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n, h, w = stack.shape
    x = torch.from_dlpack(stack).reshape(n, 1, h, w)
    if name == GAUSS_NAME:
        from ..filters import gaussian_taps

        taps = torch.as_tensor(gaussian_taps(GAUSS_SIGMA, GAUSS_TRUNCATE), dtype=torch.float32,
                               device=x.device)
        r = taps.numel() // 2
        wx, wy = taps.reshape(1, 1, 1, -1), taps.reshape(1, 1, -1, 1)

        def fn():
            y = F.conv2d(F.pad(x, (r, r, 0, 0), mode="reflect"), wx)
            return F.conv2d(F.pad(y, (0, 0, r, r), mode="reflect"), wy)

        return fn
    fh, fw = weights.shape
    wt = torch.as_tensor(weights, dtype=torch.float32, device=x.device).reshape(1, 1, fh, fw)
    pads = (fw // 2, (fw - 1) // 2, fh // 2, (fh - 1) // 2)  # scipy's centre: origin 0
    return lambda: F.conv2d(F.pad(x, pads, mode="reflect"), wt)


# ------------------------------------------------------------------------------ measuring

def copy_bandwidth(stack) -> float:
    """GB/s (1e9 bytes/s) of ``cupy.copyto`` of the stack: ``2 * stack.nbytes`` moved."""
    import cupy as cp

    from .._cuda import time_gpu

    dst = cp.empty_like(stack)
    ms = time_gpu(lambda: cp.copyto(dst, stack), **TIMING)
    return 2 * stack.nbytes / (ms * 1e-3) / 1e9


def roofline_ms(nbytes_in, nbytes_out, copy_gbps) -> float:
    """Milliseconds to read ``nbytes_in`` and write ``nbytes_out`` at ``copy_gbps`` GB/s.

    >>> roofline_ms(100e6, 100e6, 1000.0)  # 200 MB at 1 TB/s
    0.2
    """
    return (nbytes_in + nbytes_out) / (copy_gbps * 1e9) * 1e3


def row_status(row) -> str:
    """``ERROR`` (ours failed), ``MISMATCH`` (an error above :data:`TOLERANCE`, or NaN),
    ``unchecked`` (no check, or the cupyx peer failed) or ``ok``."""
    if row["ms"]["ours"] is None:
        return "ERROR"
    errors = [e for e in row["rel_error"].values() if e is not None]
    if not errors:
        return "unchecked"
    return "ok" if all(e <= TOLERANCE for e in errors) else "MISMATCH"


def summarise(row) -> dict:
    """Add ``peer_ms``, ``ratio`` (fastest peer / ours), ``vs_cupyx`` (cupyx / ours),
    ``roofline_share`` (roofline / ours) and ``status`` to a measured row."""
    ms = row["ms"]
    ours_ms = ms["ours"]
    peers = [ms[p] for p in PEERS if ms.get(p) is not None]
    row["peer_ms"] = min(peers) if peers else None
    row["ratio"] = row["peer_ms"] / ours_ms if peers and ours_ms else None
    row["vs_cupyx"] = ms["cupyx"] / ours_ms if ms.get("cupyx") and ours_ms else None
    row["roofline_share"] = row["roofline_ms"] / ours_ms if ours_ms else None
    row["status"] = row_status(row)
    return row


def _output_or_none(fn):
    """``fn()``, or None when it fails (the path's own measurement then says why)."""
    try:
        return fn()
    except Exception:  # noqa: BLE001 - reported by measure_paths(), not fatal
        return None


def bench_problem(stack, name, copy_gbps, check=True, seed=0, out=None) -> dict:
    """Check and time one problem on ``stack``; returns its row (see :func:`run`)."""
    weights = make_weights(name, seed)
    cupyx = cupyx_peer(stack, name, weights)
    want = _output_or_none(cupyx) if check else None
    makers = {"ours": lambda: ours(stack, name, weights, out),
              "paper": lambda: paper(stack, name, weights, out),
              "cupyx": lambda: cupyx,
              "torch": lambda: torch_peer(stack, name, weights)}
    missing = {"ours": "not available", "paper": "",  # blank: not compiled for this size
               "cupyx": "not available", "torch": torch_unavailable_reason() or "not available"}
    row = {"problem": name, "filter": list(filter_shape(name)), "separable": name == GAUSS_NAME,
           "shape": list(stack.shape), "copy_gbps": copy_gbps,
           "roofline_ms": roofline_ms(stack.nbytes, stack.nbytes, copy_gbps),
           "ms": {}, "rel_error": {}, "na": {}}
    wants = {path: want if path in ("ours", "paper") else None for path in PATHS}
    row["ms"], row["rel_error"], row["na"] = measure_paths({p: makers[p] for p in PATHS}, wants,
                                                           missing)
    return summarise(row)


# ------------------------------------------------------------------------------ reporting

COLUMNS = ("problem", "ours ms", "papers' config ms", "cupyx ms", "torch ms", "best peer / ours",
           "cupyx / ours", "memory roofline", "check", "notes")


def _ms_cell(row, path) -> str:
    """Milliseconds, ``n/a`` for a missing or failed path, blank where it does not apply."""
    ms = row["ms"].get(path)
    if ms is None and not row["na"].get(path):
        return ""
    return fmt_ms(ms)


def _ratio(value) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def format_row(row) -> str:
    """One Markdown table line of a row of :func:`run`."""
    notes = [f"{p}: {row['na'][p]}" for p in PATHS if row["na"].get(p)]
    notes += [f"{p} error {e:.1e}" for p, e in row["rel_error"].items()
              if e is not None and not e <= TOLERANCE]
    share = row.get("roofline_share")
    cells = [row["problem"]] + [_ms_cell(row, p) for p in PATHS]
    cells += [_ratio(row.get("ratio")), _ratio(row.get("vs_cupyx")),
              "n/a" if share is None else f"{100 * share:.1f}%", row["status"], "; ".join(notes)]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def table_header() -> str:
    """The two Markdown header lines of the table."""
    return markdown_header(COLUMNS)


def header_lines(device, shape, copy_gbps) -> list:
    """Device, date, versions, stack and copy bandwidth lines printed above the table."""
    n, h, w = shape
    mib = n * h * w * 4 / 2**20
    return [f"xcorr bench filter on {device}, {utc_now()}",
            f"versions: {versions_line()}",
            f"stack: {n} frames of {h}x{w} float32 ({mib:.0f} MiB), mode {MODE}; "
            f"copy bandwidth {copy_gbps:.0f} GB/s (cupy.copyto, read + write)"]


def format_table(rows, header=()) -> str:
    """The ``header`` lines, then a Markdown table of the rows of :func:`run`.

    ``best peer / ours`` > 1 means ours is faster than the fastest of cupyx and torch;
    ``memory roofline`` is the time to read the stack once and write it once at the measured
    copy bandwidth over our time.  A missing or failed path reads ``n/a`` (the reason is in
    ``notes``); the papers' layout is blank where it is not compiled.

    Examples
    --------
    >>> row = {"problem": "3x3", "roofline_ms": 0.5, "ms": {"ours": 1.0, "paper": None,
    ...        "cupyx": 4.0, "torch": None}, "rel_error": {"ours": 0.0}, "na": {"torch": "no"}}
    >>> print(format_table([summarise(row)]).splitlines()[2])
    | 3x3 | 1 |  | 4 | n/a | 4.00x | 4.00x | 50.0% | ok | torch: no |
    """
    return "\n".join(list(header) + [table_header()] + [format_row(r) for r in rows])


def target_lines(rows) -> list:
    """One line per target of the issue that the measured rows speak to: met or missed."""
    by_name = {r["problem"]: r for r in rows}
    lines = []
    for key, goal, names, text in (
            ("vs_cupyx", TARGET_VS_CUPYX, TARGET_VS_CUPYX_ROWS,
             f">= {TARGET_VS_CUPYX:g}x faster than cupyx"),
            ("roofline_share", TARGET_ROOFLINE, TARGET_ROOFLINE_ROWS,
             f">= {100 * TARGET_ROOFLINE:.0f}% of the memory roofline")):
        got = {n: by_name[n].get(key) for n in names if n in by_name}
        if not got:
            continue
        missed = [n for n, v in got.items() if v is None or not v >= goal]
        verdict = "met" if not missed else "missed by " + ", ".join(missed)
        lines.append(f"target {text} ({', '.join(got)}): {verdict}")
    return lines


# ------------------------------------------------------------------------------ running

def run(names=PROBLEMS, frames=DEFAULT_SHAPE[0], size=DEFAULT_SHAPE[1:], check=True,
        echo=print, seed=0) -> list:
    """Benchmark the problems ``names`` on one stack; print the table as rows complete.

    Parameters
    ----------
    names : sequence of str
        Problems of :data:`PROBLEMS`, in the order to run them.
    frames : int
    size : (int, int)
        Frame height and width.
    check : bool
        Compare ours and the papers' layout once with the cupyx peer.
    echo : callable
        Receives each printed line (``print`` by default).
    seed : int
        Seeds the stack and the filters.

    Returns
    -------
    list of dict
        One JSON-serialisable row per problem: ``problem``, ``filter`` (``[fh, fw]``),
        ``separable``, ``shape``, ``copy_gbps``, ``roofline_ms``, ``ms``/``rel_error``/``na``
        (dicts over :data:`PATHS`), ``peer_ms``, ``ratio`` (fastest peer / ours), ``vs_cupyx``,
        ``roofline_share`` and ``status``.
    """
    import cupy as cp

    from .._cuda import device_name

    h, w = size
    stack = make_stack(frames, h, w, seed)
    gbps = copy_bandwidth(stack)
    free_gpu_memory()
    for line in header_lines(device_name(), stack.shape, gbps) + [table_header()]:
        echo(line)
    out = cp.empty(stack.shape, cp.float32)  # shared by ours and the papers' layout
    rows = []
    for name in names:
        row = bench_problem(stack, name, gbps, check=check, seed=seed, out=out)
        row["device"] = device_name()
        rows.append(row)
        echo(format_row(row))
        free_gpu_memory()
    for line in target_lines(rows):
        echo(line)
    return rows


def select(only=None) -> list:
    """The problems named in ``only`` (``"3x3,gaussian31"``; all when None), in table order."""
    if only is None:
        return list(PROBLEMS)
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in PROBLEMS]
    if unknown or not wanted:
        raise InputError(f"--only takes names of {', '.join(PROBLEMS)} (comma-separated), "
                         f"got {only!r}")
    return [n for n in PROBLEMS if n in wanted]


def main(quick=False, frames=None, size=None, only=None, check=True, json_path=None,
         force=False, echo=print) -> int:
    """What ``xcorr bench filter`` does: check the options, run, write the JSON.

    Returns
    -------
    int
        0, or 1 when a row is a ``MISMATCH`` or an ``ERROR``.

    Raises
    ------
    XcorrError
        For a bad option, no usable GPU, or an existing ``json_path`` without ``force``.
    """
    from .. import backend
    from ..io import prepare_outputs, write_text

    names = select(only)
    shape = QUICK_SHAPE if quick else DEFAULT_SHAPE
    h, w = shape[1:] if size is None else parse_size(size, MIN_SIDE)
    frames = shape[0] if frames is None else int(frames)
    if frames < 1:
        raise InputError(f"--frames must be at least 1, got {frames}")
    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench filter needs a GPU: {backend.gpu_unavailable_reason()}")
    if json_path is not None:
        prepare_outputs([json_path], force)
    rows = run(names, frames=frames, size=(h, w), check=check, echo=echo)
    if json_path is not None:
        write_text(json_path, json.dumps(rows, indent=1))
    return 0 if all(r["status"] in ("ok", "unchecked") for r in rows) else 1
