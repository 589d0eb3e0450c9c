"""The ``xcorr bench`` benchmark: our planned kernels against the overlap baseline and the peers.

For each problem of :data:`PROBLEMS` (the list of the warp-shuffle issue) the benchmark asks the
planner for a plan, then times with :func:`xcorr_app._cuda.timing.time_gpu`

* **ours**: the planner's plan (``planner.run_plan``),
* **overlap**: the overlap-wise baseline kernel (ours too, not a peer),
* **cupy_fft**: batched real FFTs in CuPy (:func:`cupy_fft_peer`),
* **torch**: PyTorch ``conv2d`` in fp32 through cuDNN (:func:`torch_peer`),

checks that every path gives the CuPy FFT peer's output, and reports the speed-up over the
fastest peer and the share of the FP32 FMA peak reached (``2 * macs / time / peak``).

Every path computes the layout of :mod:`xcorr_app.correlate._shifts` for the forms of
:mod:`xcorr_app.correlate._forms`: ``out[k] = sum_n left[n + k] * right[n]``.

Run it as ``python -m xcorr_app.bench._xcorr [--quick] [--explain] [--json PATH]``.

Examples
--------
>>> from xcorr_app.correlate._forms import form_layout
>>> macs(form_layout("one_to_one", (2, 2), (2, 2)), None)  # 4 shifts of 1, 4 of 2, 1 of 4
16
>>> [p.name for p in QUICK][:2]
['one_to_one 32x32, full', 'one_to_many 1x256 at 32x32, full']
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from dataclasses import dataclass

import numpy as np

from ..correlate._forms import form_layout
from ..correlate import _shifts as shifts
from ..correlate._shifts import first_shift, output_shape

#: relative error (max |diff| / max |peer|) above which a path is a MISMATCH
TOLERANCE = 1e-3
#: the timed paths, in table order; the peers are the other libraries
PATHS = ("ours", "overlap", "cupy_fft", "torch")
PEERS = ("cupy_fft", "torch")
#: arguments of :func:`xcorr_app._cuda.timing.time_gpu`, per round
TIMING = {"warmup": 3, "repeat": 15, "min_total_ms": 20.0}
#: rounds of timing: the paths take turns, and each path's time is the median of its rounds
ROUNDS = 3
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

    The work is separable: ``n_results * sum_ky rows(ky) * sum_kx cols(kx)``.

    Parameters
    ----------
    layout : FormLayout
        From :func:`xcorr_app.correlate._forms.form_layout`.
    max_shift : None, int or (int, int)
        The shift range, as everywhere (:mod:`xcorr_app.correlate._shifts`).
    """
    (lh, lw), (rh, rw) = layout.left_shape, layout.right_shape
    ho, wo = output_shape(layout.left_shape, layout.right_shape, max_shift)
    ky0, kx0 = first_shift(layout.left_shape, layout.right_shape, max_shift)
    rows = int(shifts.axis_overlaps(lh, rh, ky0, ho).sum())
    cols = int(shifts.axis_overlaps(lw, rw, kx0, wo).sum())
    return layout.n_results * rows * cols


# ------------------------------------------------------------------------------------ peers

def cupy_fft_peer(left, right, form="one_to_one", max_shift=None):
    """The CuPy FFT peer as a callable: :func:`xcorr_app.correlate._reference.xcorr_fft` in float32.

    Batched real FFTs on alias-free fast sizes with the form's pairing by broadcasting (see
    there); CuPy caches the cuFFT plans, so the warm-up call pays for them.  Works on NumPy
    arrays too (the CPU tests use that).
    """
    from ..correlate._reference import xcorr_fft

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


def torch_unavailable_reason() -> str:
    """Empty when PyTorch with CUDA can run the torch peer, else why not."""
    try:
        import torch
    except Exception as exc:
        return f"torch not importable ({type(exc).__name__})"
    if not torch.cuda.is_available():
        return "torch has no CUDA"
    return ""


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

    from ..correlate._overlap import as_float32

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

    from ..correlate._overlap import overlap_xcorr

    lay = form_layout(form, left.shape, right.shape)
    out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, max_shift),
                   dtype=cp.float32)
    return lambda: overlap_xcorr(left, right, form, max_shift, out=out)


def planned(decision, left, right, form="one_to_one", max_shift=None):
    """Our path: the decision's plan through ``planner.run_plan`` (preallocated output)."""
    import cupy as cp

    from ..correlate import _planner as planner

    lay = form_layout(form, left.shape, right.shape)
    out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, max_shift),
                   dtype=cp.float32)
    return lambda: planner.run_plan(decision.plan, left, right, form, max_shift, out=out)


# ------------------------------------------------------------------------------- measuring

def relative_error(got, want) -> float:
    """``max |got - want| / max |want|`` on the device (inf for a shape mismatch, NaN stays)."""
    import cupy as cp

    if tuple(got.shape) != tuple(want.shape):
        return float("inf")
    scale = max(float(cp.abs(want).max()), 1e-30)
    return float(cp.abs(got.astype(cp.float64) - want).max()) / scale


def _reason(exc: BaseException) -> str:
    """One line saying why a path failed."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def measure_paths(makers, wants, missing, rounds=None):
    """Build each path with its maker, check it once, then time all of them in turns.

    Parameters
    ----------
    makers : dict
        Path name -> ``make()`` returning the path's callable (or None when it is missing).
    wants, missing : dict
        Path name -> the reference output to check against (or None), and the note for a
        missing path.
    rounds : int, optional
        Rounds of timing (default :data:`ROUNDS`): each round times every path once with
        :data:`TIMING`, and a path's time is the median of its rounds.  Taking turns keeps a
        drift of the machine (other tenants, clocks) from favouring the path timed first.

    Returns
    -------
    (ms, rel_error, na) : dict, dict, dict
        Per path: ``ms`` is None when the path is missing (``na`` is its ``missing`` note) or
        failed (``na`` says why); ``rel_error`` is None without a reference.  Exceptions do
        not propagate: a failing peer is a table entry.
    """
    from .._cuda.timing import time_gpu

    fns, ms, errs, nas = {}, {}, {}, {}
    for path, make in makers.items():
        ms[path], errs[path], nas[path] = None, None, ""
        try:
            fn = make()
            if fn is None:
                nas[path] = missing.get(path, "not available")
                continue
            want = wants.get(path)
            errs[path] = None if want is None else relative_error(fn(), want)
            fns[path] = fn
        except Exception as exc:  # noqa: BLE001 - e.g. cuDNN out of memory: reported, not fatal
            nas[path] = _reason(exc)
    samples = {path: [] for path in fns}
    for _ in range(ROUNDS if rounds is None else rounds):
        for path, fn in fns.items():
            if path not in samples:
                continue
            try:
                samples[path].append(time_gpu(fn, **TIMING))
            except Exception as exc:  # noqa: BLE001
                nas[path] = _reason(exc)
                del samples[path]
    for path, times in samples.items():
        ms[path] = statistics.median(times)
    return ms, errs, nas


def _free_gpu_memory():
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _status(row, check) -> str:
    if row["ms"]["ours"] is None:
        return "ERROR"
    errors = [e for e in row["rel_error"].values() if e is not None]
    if any(not e <= TOLERANCE for e in errors):  # NaN is a mismatch too
        return "MISMATCH"
    if not check or row["ms"]["cupy_fft"] is None:
        return "unchecked"
    return "ok"


def bench_problem(problem: Problem, explain=False, check=True, peak=None, seed=0) -> dict:
    """Decide, check and time one problem; returns its row (see :func:`run`)."""
    from ..correlate import _planner as planner

    left, right = make_inputs(problem, seed)
    form, bound = problem.form, problem.max_shift
    decision = planner.decide(left, right, form, bound, refresh=explain)
    fft = cupy_fft_peer(left, right, form, bound)
    want = None
    if check:
        try:
            want = fft()
        except Exception:  # noqa: BLE001 - the FFT peer's own measurement reports it
            want = None
    makers = {
        "ours": lambda: planned(decision, left, right, form, bound),
        "overlap": lambda: overlap_peer(left, right, form, bound),
        "cupy_fft": lambda: fft,
        "torch": lambda: torch_peer(left, right, form, bound),
    }
    row = {"problem": problem.name, "form": form, "left_shape": list(left.shape),
           "right_shape": list(right.shape), "max_shift": bound,
           "macs": macs(problem.layout(), bound), "plan": str(decision.plan),
           "plan_source": decision.source, "reason": decision.reason,
           "candidates": [[str(plan), float(t)] for plan, t in decision.timings],
           "ms": {}, "rel_error": {}, "na": {}}
    wants = {path: None if path == "cupy_fft" else want for path in PATHS}
    missing = {"torch": torch_unavailable_reason() or "not available"}
    row["ms"], row["rel_error"], row["na"] = measure_paths({p: makers[p] for p in PATHS}, wants,
                                                           missing)
    return summarise(row, check, peak)


def summarise(row, check, peak) -> dict:
    """Add ``peer_ms``, ``ratio``, ``peak_share`` and ``status`` to a measured row."""
    peers = [row["ms"][p] for p in PEERS if row["ms"][p] is not None]
    ours = row["ms"]["ours"]
    row["peer_ms"] = min(peers) if peers else None
    row["ratio"] = row["peer_ms"] / ours if peers and ours else None
    row["peak_share"] = 2.0 * row["macs"] / (ours * 1e-3) / peak if ours and peak else None
    row["status"] = _status(row, check)
    return row


# ------------------------------------------------------------------------------- reporting

COLUMNS = ("problem", "plan", "ours ms", "overlap ms", "CuPy FFT ms", "torch ms",
           "best peer / ours", "FP32 peak", "check", "notes")


def _fmt_ms(ms) -> str:
    if ms is None:
        return "n/a"
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.3g}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def format_row(row) -> str:
    """One Markdown table line of a row of :func:`run`."""
    notes = [f"{p}: {row['na'][p]}" for p in PATHS if row["na"].get(p)]
    notes += [f"{p} error {e:.1e}" for p, e in row["rel_error"].items()
              if e is not None and not e <= TOLERANCE]
    ratio = "n/a" if row.get("ratio") is None else f"{row['ratio']:.2f}"
    share = "n/a" if row.get("peak_share") is None else f"{100 * row['peak_share']:.1f}%"
    cells = [row["problem"], f"`{row['plan']}`"] + [_fmt_ms(row["ms"].get(p)) for p in PATHS]
    cells += [ratio, share, row["status"], "; ".join(notes)]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def table_header() -> str:
    """The two Markdown header lines of :func:`format_table`."""
    return "| " + " | ".join(COLUMNS) + " |\n|" + " --- |" * len(COLUMNS)


def format_table(rows) -> str:
    """Markdown table of the rows of :func:`run` (header, separator, one line per row).

    ``best peer / ours`` > 1 means our plan is faster than the fastest of CuPy FFT and torch;
    ``FP32 peak`` is ``2 * macs / time / peak`` of our plan.
    """
    return "\n".join([table_header()] + [format_row(r) for r in rows])


def explain_lines(row) -> list:
    """The decision's reason and the measured candidates (best first, ratio to the best)."""
    lines = [f"    {row['plan_source']}: {row['reason']}"]
    cands = row["candidates"]
    best = cands[0][1] if cands else None
    for spec, ms in cands[:EXPLAIN_TOP]:
        ratio = f"{ms / best:.2f}x" if best else "n/a"
        lines.append(f"      {spec:<48s} {_fmt_ms(ms):>8s} ms  {ratio}")
    if len(cands) > EXPLAIN_TOP:
        lines.append(f"      ... and {len(cands) - EXPLAIN_TOP} other candidates")
    return lines


def header_lines(device, peak) -> list:
    """Device, date and peak lines printed above the table."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tflops = "unknown" if peak is None else f"{peak / 1e12:.1f} TFLOPS"
    return [f"xcorr bench on {device}, {date}, FP32 FMA peak {tflops}",
            f"versions: {_versions()}"]


def _versions() -> str:
    from .._version import __version__

    parts = [f"xcorr {__version__}"]
    for name in ("cupy", "torch"):
        mod = sys.modules.get(name)
        if mod is None:
            try:
                mod = __import__(name)
            except Exception:  # noqa: BLE001
                parts.append(f"{name} missing")
                continue
        parts.append(f"{name} {mod.__version__}")
    return ", ".join(parts)


def run(problems, explain=False, echo=print, check=True) -> list:
    """Benchmark ``problems`` and print a Markdown table as rows complete.

    Parameters
    ----------
    problems : list of Problem
    explain : bool
        Re-measure every plan (``planner.decide(..., refresh=True)``) and print the reason and
        the candidates under each row.
    echo : callable
        Receives each printed line (``print`` by default).
    check : bool
        Compare every path once with the CuPy FFT peer (rows above :data:`TOLERANCE` read
        ``MISMATCH``).

    Returns
    -------
    list of dict
        One JSON-serialisable row per problem: ``problem``, ``form``, ``left_shape``,
        ``right_shape``, ``max_shift``, ``macs``, ``plan``, ``plan_source``, ``reason``,
        ``candidates`` (``[spec, ms]``, best first), ``ms``/``rel_error``/``na`` (dicts over
        :data:`PATHS`), ``peer_ms``, ``ratio`` (fastest peer / ours), ``peak_share``, ``status``.
    """
    from .._cuda.timing import device_name, fp32_fma_peak_flops

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
        _free_gpu_memory()
    return rows


def select(quick=False, only=None) -> list:
    """:data:`QUICK` or :data:`PROBLEMS`, optionally only names containing ``only``."""
    chosen = QUICK if quick else PROBLEMS
    return [p for p in chosen if only is None or only in p.name]


def main(argv=None) -> int:
    """Command line: ``python -m xcorr_app.bench._xcorr``; exit 1 on any MISMATCH or ERROR."""
    parser = argparse.ArgumentParser(prog="xcorr-bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a handful of small problems")
    parser.add_argument("--explain", action="store_true", help="re-plan and list candidates")
    parser.add_argument("--no-check", action="store_true", help="skip the output check")
    parser.add_argument("--only", help="only problems whose name contains this text")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    from ..backend import gpu_available, gpu_unavailable_reason

    if not gpu_available():
        print(f"error: the benchmark needs a GPU: {gpu_unavailable_reason()}", file=sys.stderr)
        return 2
    rows = run(select(args.quick, args.only), explain=args.explain, check=not args.no_check)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return 0 if all(r["status"] in ("ok", "unchecked") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
