"""The ``xcorr bench`` benchmark: our planned kernels against the overlap baseline and the peers.

For each problem of :data:`PROBLEMS` (the list of the warp-shuffle issue) the benchmark asks the
planner for two plans: the cost model's (what a user gets by default: nothing measured) and the
tuned one (every candidate measured on the problem, cuDNN's benchmark mode), then times with
:func:`xcorr_app._cuda.timing.time_gpu`

* **ours**: the cost model's plan (``run_plan``),
* **tuned**: the fully measured plan (timed apart only where it differs from ours); the ratio
  ours / tuned is the price of answering at once (target: at most 1.25),
* **overlap**: the overlap-wise baseline kernel (ours too, not a peer),
* **cupy_fft**: batched real FFTs in CuPy (:func:`cupy_fft_peer`),
* **torch**: PyTorch ``conv2d`` in fp32 through cuDNN (:func:`torch_peer`),

checks that every path gives the CuPy FFT peer's output, and reports the speed-up over the
fastest peer and the share of the FP32 FMA peak reached (``2 * macs / time / peak``).  The
one-to-one and small one-to-many rows also get the pipeline figures (a second table:
back-to-back plan calls, graph replay, the peers back-to-back; :mod:`._xcorr_plans`).

Every path computes the layout of :mod:`xcorr_app.correlate._shifts` for the forms of
:mod:`xcorr_app.correlate._forms`: ``out[k] = sum_n left[n + k] * right[n]``.

Run it as ``xcorr bench xcorr [--quick] [--explain] [--only TEXT] [--json PATH]`` (in Python:
:func:`main`).

Examples
--------
>>> from xcorr_app.correlate._forms import form_layout
>>> macs(form_layout("one_to_one", (2, 2), (2, 2)), None)  # 4 shifts of 1, 4 of 2, 1 of 4
16
>>> [p.name for p in QUICK][:2]
['one_to_one 32x32, full', 'one_to_many 1x256 at 32x32, full']
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..correlate import first_shift, form_layout, output_shape, useful_macs
from ..errors import InputError, XcorrError
from ._common import (cell, fmt_ms, free_gpu_memory, markdown_header, measure_paths,
                      torch_unavailable_reason, utc_now, versions_line)
from ._xcorr_plans import pipeline_figures, pipeline_table, pipelined

#: relative error (max |diff| / max |peer|) above which a path is a MISMATCH
TOLERANCE = 1e-3
#: the timed paths, in table order; the peers are the other libraries
PATHS = ("ours", "tuned", "overlap", "cupy_fft", "torch")
PEERS = ("cupy_fft", "torch")
#: the cost model's plan should stay within this factor of the tuned plan on every row
MODEL_TARGET = 1.25
#: candidates printed by ``explain`` (the others are counted)
EXPLAIN_TOP = 8


@dataclass(frozen=True)
class Problem:
    """One benchmark problem.

    Attributes
    ----------
    name : str
        Label of the table row.
    form : str
        One of :data:`xcorr_app.correlate._forms.FORMS`.
    n_left : int
        Number of left (reference) matrices: 1 for ``one_to_one`` and ``one_to_many``.
    m : int
        Right matrices per left (``one_to_many``, ``n_to_mn``) or in all (``n_to_m``).
    size : (int, int)
        ``(h, w)`` of every matrix, left and right.
    max_shift : int or None
        Bounded shift range ``-max_shift..max_shift``, or ``None`` for the full range.
    """

    name: str
    form: str
    n_left: int
    m: int
    size: tuple
    max_shift: int | None = None

    def shapes(self):
        """``(left_shape, right_shape)`` of the input arrays."""
        n, m, size = self.n_left, self.m, tuple(self.size)
        return {
            "one_to_one": (size, size),
            "one_to_many": (size, (m,) + size),
            "n_to_mn": ((n,) + size, (n, m) + size),
            "n_to_m": ((n,) + size, (m,) + size),
        }[self.form]

    def layout(self):
        """The :class:`~xcorr_app.correlate._forms.FormLayout` of the problem."""
        return form_layout(self.form, *self.shapes())


def problem(form, n_left, m, side, max_shift=None) -> Problem:
    """A square-image :class:`Problem` named like the README rows."""
    size = f"{side}x{side}"
    count = "" if form == "one_to_one" else f"{n_left}x{m} at "
    bound = "full" if max_shift is None else f"max_shift {max_shift}"
    return Problem(f"{form} {count}{size}, {bound}", form, n_left, m, (side, side), max_shift)


#: the problems of the warp-shuffle issue
PROBLEMS = (
    [problem("one_to_one", 1, 1, s) for s in (16, 32, 48, 64, 96, 128)]
    + [problem("one_to_many", 1, m, s) for m in (8, 256, 4000) for s in (16, 32, 64)]
    + [problem("n_to_m", n, m, 32) for n, m in ((8, 8), (16, 64))]
    + [problem("n_to_mn", 4, 64, 32)]
    + [problem("one_to_many", 1, 64, 1024, s) for s in (4, 8, 16)]
)

#: a handful of small problems for smoke runs (``--quick``): one per form, and one bounded
#: range on small frames (the bounded problems of :data:`PROBLEMS` are 1024x1024)
QUICK = [p for p in PROBLEMS if p.name in ("one_to_one 32x32, full",
                                           "one_to_many 1x256 at 32x32, full",
                                           "n_to_m 8x8 at 32x32, full",
                                           "n_to_mn 4x64 at 32x32, full")]
QUICK.append(problem("one_to_many", 1, 8, 256, 8))


def make_inputs(problem: Problem, seed: int = 0):
    """Random standard-normal float32 CuPy inputs ``(left, right)`` of ``problem``.

    Zero-mean data make the correlation surface noise-like, so a wrong shift or pairing shows
    as a large error in the check (a positive mean would hide it under the overlap area).
    """
    import cupy as cp

    rs = cp.random.RandomState(seed)
    left_shape, right_shape = problem.shapes()
    return (rs.standard_normal(left_shape, dtype=cp.float32),
            rs.standard_normal(right_shape, dtype=cp.float32))


def macs(layout, max_shift) -> int:
    """Exact number of multiply-adds of a problem (the definition, no FFT tricks).

    The work is separable: ``n_results * sum_ky rows(ky) * sum_kx cols(kx)`` (its one home is
    the planner's cost model, :func:`xcorr_app.correlate._cost_model.useful_macs`).

    Parameters
    ----------
    layout : FormLayout
        From :func:`xcorr_app.correlate._forms.form_layout`.
    max_shift : None, int or (int, int)
        The shift range, as everywhere (:mod:`xcorr_app.correlate._shifts`).
    """
    return useful_macs(layout, max_shift)


# ------------------------------------------------------------------------------------ peers

def cupy_fft_peer(left, right, form="one_to_one", max_shift=None):
    """The CuPy FFT peer as a callable: :func:`xcorr_app.correlate._fft.xcorr_fft` in float32.

    Batched real FFTs on alias-free fast sizes with the form's pairing by broadcasting (see
    there); CuPy caches the cuFFT plans, so the warm-up call pays for them.  Works on NumPy
    arrays too (the CPU tests use that).
    """
    from ..correlate import xcorr_fft

    return lambda: xcorr_fft(left, right, form, max_shift, dtype=np.float32)


def conv_pads(layout, max_shift):
    """Zero padding ``(top, bottom, left, right)`` of each left matrix for a ``conv2d`` peer.

    ``conv2d`` without padding computes ``out[i] = sum_u x[i + u] * w[u]``; with ``x`` the left
    padded by ``top`` rows, ``out[i]`` is the shift ``k = i - top``, so ``top = -first_ky``, and
    ``bottom`` makes the output exactly ``ho`` rows long.  A negative ``bottom`` (``right``)
    means cropping that many rows (columns) of the left: they are never read.
    """
    (lh, lw), (rh, rw) = layout.left_shape, layout.right_shape
    ho, wo = output_shape(layout.left_shape, layout.right_shape, max_shift)
    ky0, kx0 = first_shift(layout.left_shape, layout.right_shape, max_shift)
    top, left = -ky0, -kx0
    return top, ho - 1 + rh - lh - top, left, wo - 1 + rw - lw - left


def torch_peer(left, right, form="one_to_one", max_shift=None):
    """The PyTorch peer: ``torch.nn.functional.conv2d`` in fp32 (cuDNN, autotuned, no TF32).

    ``conv2d`` is a cross-correlation, so the right matrices are the filters and the padded
    left matrices the images (:func:`conv_pads`); the CuPy arrays are shared through DLPack.
    ``one_to_one``/``one_to_many``: image ``(1, 1)``, filters ``(M, 1)``; ``n_to_m``: images
    ``(N, 1)``, filters ``(M, 1)``; ``n_to_mn``: image ``(1, N)`` with ``groups=N`` and filters
    ``(N*M, 1)``.

    Returns
    -------
    callable or None
        ``fn()`` -> CuPy float32 array of shape ``batch_shape + output_shape``; ``None`` when
        PyTorch or its CUDA is missing.  Errors of cuDNN (e.g. out of memory) surface when
        ``fn`` runs.
    """
    if torch_unavailable_reason():
        return None
    import cupy as cp
    import torch
    import torch.nn.functional as F

    from ..correlate import as_float32

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    lay = form_layout(form, left.shape, right.shape)
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    shape = lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, max_shift)
    groups = lay.n_left if form == "n_to_mn" else 1
    images = (1, lay.n_left) if form == "n_to_mn" else (lay.n_left, 1)
    x = torch.from_dlpack(as_float32(left, cp)).reshape(images + (lh, lw))
    w = torch.from_dlpack(as_float32(right, cp)).reshape((lay.n_right, 1, rh, rw))
    top, bottom, pad_l, pad_r = conv_pads(lay, max_shift)
    x = x[..., :lh + min(bottom, 0), :lw + min(pad_r, 0)]  # crop what is never read
    bottom, pad_r = max(bottom, 0), max(pad_r, 0)
    symmetric = top == bottom and pad_l == pad_r

    def fn():
        if symmetric:
            out = F.conv2d(x, w, padding=(top, pad_l), groups=groups)
        else:
            out = F.conv2d(F.pad(x, (pad_l, pad_r, top, bottom)), w, groups=groups)
        return cp.from_dlpack(out.reshape(shape))

    return fn


def overlap_peer(left, right, form="one_to_one", max_shift=None):
    """The overlap-wise baseline kernel as a callable (writes one preallocated output)."""
    import cupy as cp

    from ..correlate import overlap_xcorr

    lay = form_layout(form, left.shape, right.shape)
    out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, max_shift),
                   dtype=cp.float32)
    return lambda: overlap_xcorr(left, right, form, max_shift, out=out)


def planned(plan, left, right, form="one_to_one", max_shift=None):
    """Our path: a plan through ``run_plan`` (preallocated output)."""
    import cupy as cp

    from ..correlate import run_plan

    lay = form_layout(form, left.shape, right.shape)
    out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, max_shift),
                   dtype=cp.float32)
    return lambda: run_plan(plan, left, right, form, max_shift, out=out)


# ------------------------------------------------------------------------------- measuring

def _status(row, check) -> str:
    if row["ms"]["ours"] is None:
        return "ERROR"
    errors = [e for e in row["rel_error"].values() if e is not None]
    errors += [e for e in row.get("pipeline", {}).get("rel_error", {}).values() if e is not None]
    if any(not e <= TOLERANCE for e in errors):  # NaN is a mismatch too
        return "MISMATCH"
    if not check or row["ms"]["cupy_fft"] is None:
        return "unchecked"
    return "ok"


def bench_problem(problem: Problem, explain=False, check=True, peak=None, seed=0) -> dict:
    """Decide (the cost model's plan and the fully measured one), check and time one problem;
    returns its row (see :func:`run`)."""
    from ..correlate import decide, heuristic

    left, right = make_inputs(problem, seed)
    form, bound = problem.form, problem.max_shift
    ranked = heuristic(problem.layout(), bound)
    model_plan = ranked[0][0]
    tuned = decide(left, right, form, bound, refresh=explain, tune="full")
    fft = cupy_fft_peer(left, right, form, bound)
    want = None
    if check:
        try:
            want = fft()
        except Exception:  # noqa: BLE001 - the FFT peer's own measurement reports it
            want = None
    same = tuned.plan == model_plan
    makers = {
        "ours": lambda: planned(model_plan, left, right, form, bound),
        "tuned": lambda: None if same else planned(tuned.plan, left, right, form, bound),
        "overlap": lambda: overlap_peer(left, right, form, bound),
        "cupy_fft": lambda: fft,
        "torch": lambda: torch_peer(left, right, form, bound),
    }
    row = {"problem": problem.name, "form": form, "left_shape": list(left.shape),
           "right_shape": list(right.shape), "max_shift": bound,
           "macs": macs(problem.layout(), bound), "plan": str(model_plan),
           "plan_source": "heuristic", "predicted_ms": float(ranked[0][1]),
           "tuned_plan": str(tuned.plan), "tuned_source": tuned.source,
           "reason": tuned.reason,
           "candidates": [[str(plan), float(t)] for plan, t in tuned.timings],
           "ms": {}, "rel_error": {}, "na": {}}
    wants = {path: None if path == "cupy_fft" else want for path in PATHS}
    missing = {"torch": torch_unavailable_reason() or "not available",
               "tuned": "the same plan as ours"}
    row["ms"], row["rel_error"], row["na"] = measure_paths({p: makers[p] for p in PATHS}, wants,
                                                           missing)
    if same:
        row["ms"]["tuned"], row["na"]["tuned"] = row["ms"]["ours"], ""
    if pipelined(problem):
        peers = {"cupy_fft": lambda: fft, "torch": makers["torch"]}
        row["pipeline"] = pipeline_figures(problem, model_plan, left, right, peers, want)
    return summarise(row, check, peak)


def summarise(row, check, peak) -> dict:
    """Add ``peer_ms``, ``ratio``, ``model_ratio`` (ours / tuned), ``peak_share`` and
    ``status`` to a measured row."""
    peers = [row["ms"][p] for p in PEERS if row["ms"][p] is not None]
    ours, tuned = row["ms"]["ours"], row["ms"].get("tuned")
    row["model_ratio"] = ours / tuned if ours and tuned else None
    row["peer_ms"] = min(peers) if peers else None
    row["ratio"] = row["peer_ms"] / ours if peers and ours else None
    row["peak_share"] = 2.0 * row["macs"] / (ours * 1e-3) / peak if ours and peak else None
    row["status"] = _status(row, check)
    return row


# ------------------------------------------------------------------------------- reporting

COLUMNS = ("problem", "plan (cost model)", "ours ms", "tuned plan", "tuned ms", "ours / tuned",
           "overlap ms", "CuPy FFT ms", "torch ms", "best peer / ours", "FP32 peak", "check",
           "notes")


def format_row(row) -> str:
    """One Markdown table line of a row of :func:`run`."""
    notes = [f"{p}: {row['na'][p]}" for p in PATHS if row["na"].get(p) and p != "tuned"]
    notes += [f"{p} error {e:.1e}" for p, e in row["rel_error"].items()
              if e is not None and not e <= TOLERANCE]
    ratio = "n/a" if row.get("ratio") is None else f"{row['ratio']:.2f}"
    share = "n/a" if row.get("peak_share") is None else f"{100 * row['peak_share']:.1f}%"
    tuned = row.get("tuned_plan")
    model_ratio = "n/a" if row.get("model_ratio") is None else f"{row['model_ratio']:.2f}"
    cells = [row["problem"], f"`{row['plan']}`", fmt_ms(row["ms"].get("ours")),
             "same" if tuned in (None, row["plan"]) else f"`{tuned}`",
             fmt_ms(row["ms"].get("tuned")), model_ratio]
    cells += [fmt_ms(row["ms"].get(p)) for p in PATHS[2:]]
    cells += [ratio, share, row["status"], "; ".join(notes)]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def table_header() -> str:
    """The two Markdown header lines of :func:`format_table`."""
    return markdown_header(COLUMNS)


def format_table(rows) -> str:
    """Markdown table of the rows of :func:`run` (header, separator, one line per row).

    ``ours`` is the cost model's plan (nothing measured), ``tuned`` the fully measured one;
    ``ours / tuned`` is the price of answering at once; ``best peer / ours`` > 1 means our plan
    is faster than the fastest of CuPy FFT and torch; ``FP32 peak`` is
    ``2 * macs / time / peak`` of our plan.
    """
    return "\n".join([table_header()] + [format_row(r) for r in rows])


def explain_lines(row) -> list:
    """The tuned decision's reason and the measured candidates (best first, ratio to the
    best)."""
    lines = [f"    {row.get('tuned_source', row['plan_source'])}: {row['reason']}"]
    cands = row["candidates"]
    best = cands[0][1] if cands else None
    for spec, ms in cands[:EXPLAIN_TOP]:
        ratio = f"{ms / best:.2f}x" if best else "n/a"
        lines.append(f"      {spec:<48s} {fmt_ms(ms):>8s} ms  {ratio}")
    if len(cands) > EXPLAIN_TOP:
        lines.append(f"      ... and {len(cands) - EXPLAIN_TOP} other candidates")
    return lines


def header_lines(device, peak) -> list:
    """Device, date and peak lines printed above the table."""
    tflops = "unknown" if peak is None else f"{peak / 1e12:.1f} TFLOPS"
    return [f"xcorr bench on {device}, {utc_now()}, FP32 FMA peak {tflops}",
            f"versions: {versions_line()}"]


def run(problems, explain=False, echo=print, check=True) -> list:
    """Benchmark ``problems`` and print a Markdown table as rows complete.

    Parameters
    ----------
    problems : list of Problem
    explain : bool
        Re-measure every plan (``planner.decide(..., refresh=True, tune="full")``) and print
        the reason and the candidates under each row.
    echo : callable
        Receives each printed line (``print`` by default).
    check : bool
        Compare every path once with the CuPy FFT peer (rows above :data:`TOLERANCE` read
        ``MISMATCH``).

    Returns
    -------
    list of dict
        One JSON-serialisable row per problem: ``problem``, ``form``, ``left_shape``,
        ``right_shape``, ``max_shift``, ``macs``, ``plan`` (the cost model's),
        ``plan_source``, ``predicted_ms``, ``tuned_plan``, ``tuned_source``, ``reason``,
        ``candidates`` (measured ``[spec, ms]``, best first), ``ms``/``rel_error``/``na``
        (dicts over :data:`PATHS`), ``peer_ms``, ``ratio`` (fastest peer / ours),
        ``model_ratio`` (ours / tuned), ``peak_share``, ``status``; and for the rows of
        :func:`~._xcorr_plans.pipelined`, ``pipeline`` (:func:`~._xcorr_plans.pipeline_figures`).
    """
    from .._cuda import device_name, fp32_fma_peak_flops

    try:
        peak = fp32_fma_peak_flops()
    except Exception:  # noqa: BLE001 - a missing device property: no peak column
        peak = None
    for line in header_lines(device_name(), peak) + [table_header()]:
        echo(line)
    rows = []
    for prob in problems:
        row = bench_problem(prob, explain=explain, check=check, peak=peak)
        rows.append(row)
        echo(format_row(row))
        if explain:
            for line in explain_lines(row):
                echo(line)
        free_gpu_memory()
    echo(model_summary(rows))
    for line in pipeline_table(rows):
        echo(line)
    return rows


def model_summary(rows) -> str:
    """One line: the worst ratio of the cost model's plan to the tuned plan over ``rows``."""
    ratios = [(r["model_ratio"], r["problem"]) for r in rows if r.get("model_ratio")]
    if not ratios:
        return "cost model vs tuned: no row has both times"
    worst, name = max(ratios)
    return (f"cost model vs tuned: worst ours / tuned {worst:.2f} ({name}); "
            f"{sum(q <= MODEL_TARGET for q, _ in ratios)} of {len(ratios)} rows within "
            f"{MODEL_TARGET:g}x")


def select(quick=False, only=None) -> list:
    """:data:`QUICK` or :data:`PROBLEMS`, optionally only names containing ``only``."""
    chosen = QUICK if quick else PROBLEMS
    return [p for p in chosen if only is None or only in p.name]


def main(*, quick=False, only=None, explain=False, check=True, json_path=None, force=False,
         echo=print) -> int:
    """What ``xcorr bench xcorr`` does: check the options, run, write the JSON.

    Returns
    -------
    int
        0, or 1 when a row is a ``MISMATCH`` or an ``ERROR``.

    Raises
    ------
    XcorrError
        For no usable GPU, no problem matching ``only``, or an existing ``json_path`` without
        ``force``.
    """
    from .. import backend
    from ..io import prepare_outputs, write_text

    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench xcorr needs a GPU: {backend.gpu_unavailable_reason()}")
    problems = select(quick, only)
    if not problems:
        raise InputError(f"no benchmark problem matches --only {only!r}")
    if json_path is not None:
        prepare_outputs([json_path], force)
    rows = run(problems, explain=explain, echo=echo, check=check)
    if json_path is not None:
        write_text(json_path, json.dumps(rows, indent=1))
    return 0 if all(r["status"] in ("ok", "unchecked") for r in rows) else 1
