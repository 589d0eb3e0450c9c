"""The pipeline figures of ``xcorr bench xcorr``: small problems timed as a pipeline runs them.

A single small correlation is mostly host time (checks, lookups, the driver's launch); a
pipeline that calls it thousands of times a second sees the GPU's pace instead, the figure
the thesis reports.  For the rows :func:`pipelined` selects (every ``one_to_one`` row and the
small ``one_to_many`` rows) the bench adds, side by side with today's figure (**one call**:
:func:`~xcorr_app._cuda.timing.time_gpu` of one ``run_plan`` call between its own events,
host time included):

* **back-to-back**: :data:`CALLS` calls of a :func:`~xcorr_app.correlation_plan` of the cost
  model's plan in one stream between two CUDA events, divided by :data:`CALLS`
  (:func:`back_to_back`, the thesis's measurement);
* **cross_correlate**: :data:`CALLS` calls of :func:`xcorr_app.cross_correlate` with the same
  plan as ``method`` (no plan made by the caller, the result allocated by each call: the
  convenience call in a loop) the same way, and its ratio to the plan's call;
* **graph replay**: :data:`CALLS` replays of the plan's CUDA graph
  (:meth:`CorrelationPlan.graph <xcorr_app.correlate.CorrelationPlan.graph>`) the same way;
* the peers (CuPy FFT with its cached cuFFT plans, torch) back-to-back the same way.

The same conventions as the rest of the bench: warm-up calls first (compilation, cuFFT plans,
cuDNN's autotuning out of the figure), rounds in turns, the median of the rounds
(:data:`PIPE_ROUNDS` of them: a round takes milliseconds here, and a virtual machine's host
jitters by more than the rows differ); each path's output is checked once against the CuPy FFT
peer's.

Examples
--------
>>> from xcorr_app.bench._xcorr import problem
>>> pipelined(problem("one_to_one", 1, 1, 48)), pipelined(problem("one_to_many", 1, 8, 32))
(True, True)
>>> pipelined(problem("one_to_many", 1, 256, 32))
False
"""

from __future__ import annotations

import statistics

from ._common import cell, fmt_ms, markdown_header, reason, relative_error

__all__ = ["CALLS", "PIPE_PATHS", "pipelined", "back_to_back", "pipeline_figures",
           "pipeline_table"]

#: calls (or replays) between the two events of a back-to-back measurement
CALLS = 200
#: warm-up calls before each measurement
WARMUP = 3
#: rounds of the pipeline figures (each path once a round; the median is reported)
PIPE_ROUNDS = 9
#: right matrices per left up to which a ``one_to_many`` row is "small"
SMALL_M = 8
#: the pipeline figures of a row: ours (a plan back-to-back, its graph replayed), the peers
PIPE_PATHS = ("plan", "cross_correlate", "graph", "cupy_fft", "torch")
#: the peers measured back-to-back too
PEERS_OF_PIPE = ("cupy_fft", "torch")


def pipelined(problem) -> bool:
    """Whether a bench row gets the pipeline figures: ``one_to_one``, and ``one_to_many``
    with at most :data:`SMALL_M` right matrices."""
    return problem.form == "one_to_one" or (problem.form == "one_to_many"
                                            and problem.m <= SMALL_M)


def back_to_back(fn, n: int = CALLS, warmup: int = WARMUP, lead=None) -> float:
    """Milliseconds per call of ``n`` calls of ``fn()`` queued back to back on the current
    stream between two CUDA events (nothing synchronized in between: the host's time is
    hidden while it stays below the GPU's). ``lead()``, if given, is queued after the
    warm-up's synchronize and before the first event (a probe's spin kernel: the host then
    starts ahead of the GPU)."""
    import cupy as cp

    stream = cp.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    if lead is not None:
        lead()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    for _ in range(n):
        fn()
    stop.record(stream)
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / n


def pipeline_figures(problem, plan, left, right, peers, want=None, rounds=None) -> dict:
    """The pipeline figures of one row: ``{"ms": {path: ms}, "rel_error": {...}, "na":
    {...}}`` over :data:`PIPE_PATHS`.

    ``plan`` is the cost model's :class:`~xcorr_app.correlate._plans.Plan` (the row's
    "ours"), ``peers`` maps ``"cupy_fft"`` and ``"torch"`` to makers of their callables
    (a maker returns None for a missing peer),
    ``want`` is the CuPy FFT peer's output (checks each path once).
    """
    import cupy as cp

    from ..correlate import correlation_plan, cross_correlate

    ms = {p: None for p in PIPE_PATHS}
    errs, nas, fns = dict(ms), {p: "" for p in PIPE_PATHS}, {}
    left_shape, right_shape = problem.shapes()
    try:
        cplan = correlation_plan(left_shape, right_shape, problem.form, problem.max_shift,
                                 device="gpu", method=plan)
        out = cp.empty(cplan.out_shape, cp.float32)
        fns["plan"] = lambda: cplan(left, right, out)
        fns["cross_correlate"] = lambda: cross_correlate(left, right, problem.form,
                                                         problem.max_shift, method=plan)
        graph = cplan.graph(left, right, cp.empty(cplan.out_shape, cp.float32))
        fns["graph"] = graph.replay
    except Exception as exc:  # noqa: BLE001 - a table entry, not fatal
        for path in ("plan", "cross_correlate", "graph"):
            if path not in fns:
                nas[path] = reason(exc)
    for path in PEERS_OF_PIPE:
        try:
            fn = peers[path]()
        except Exception as exc:  # noqa: BLE001
            nas[path] = reason(exc)
            continue
        if fn is None:
            nas[path] = "not available"
        else:
            fns[path] = fn
    for path, fn in list(fns.items()):
        try:
            got = fn()
            cp.cuda.get_current_stream().synchronize()
            errs[path] = None if want is None or path == "cupy_fft" else relative_error(got,
                                                                                       want)
        except Exception as exc:  # noqa: BLE001
            nas[path] = reason(exc)
            del fns[path]
    samples = {path: [] for path in fns}
    for _ in range(PIPE_ROUNDS if rounds is None else rounds):
        for path, fn in fns.items():
            samples[path].append(back_to_back(fn))
    for path, times in samples.items():
        ms[path] = statistics.median(times)
    return {"ms": ms, "rel_error": errs, "na": nas}

COLUMNS = ("problem", "plan (cost model)", "one call ms", "back-to-back ms",
           "cross_correlate back-to-back ms", "cross_correlate / plan", "graph replay ms",
           "CuPy FFT back-to-back ms", "torch back-to-back ms", "best peer / back-to-back",
           "notes")


def pipeline_row(row) -> str:
    """One Markdown line of a row's pipeline figures (``row["pipeline"]``)."""
    pipe = row["pipeline"]
    ms = pipe["ms"]
    peers = [ms[p] for p in PEERS_OF_PIPE if ms.get(p)]
    ratio = f"{min(peers) / ms['plan']:.2f}" if peers and ms.get("plan") else "n/a"
    conv = f"{ms['cross_correlate'] / ms['plan']:.2f}" \
        if ms.get("cross_correlate") and ms.get("plan") else "n/a"
    notes = [f"{p}: {pipe['na'][p]}" for p in PIPE_PATHS if pipe["na"].get(p)]
    notes += [f"{p} error {e:.1e}" for p, e in pipe["rel_error"].items()
              if e is not None and not e <= 1e-3]
    cells = [row["problem"], f"`{row['plan']}`", fmt_ms(row["ms"].get("ours")),
             fmt_ms(ms.get("plan")), fmt_ms(ms.get("cross_correlate")), conv,
             fmt_ms(ms.get("graph")), fmt_ms(ms.get("cupy_fft")),
             fmt_ms(ms.get("torch")), ratio, "; ".join(notes)]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def pipeline_table(rows) -> list:
    """The lines of the pipeline table (a title, the header, one line per row that has the
    figures); empty when no row has them."""
    rows = [r for r in rows if r.get("pipeline")]
    if not rows:
        return []
    return ([f"pipelines: {CALLS} calls back to back in one stream (CUDA events) / {CALLS}, "
             f"and {CALLS} graph replays / {CALLS}; one call: today's figure, host time "
             "included"]
            + markdown_header(COLUMNS).splitlines() + [pipeline_row(r) for r in rows])
