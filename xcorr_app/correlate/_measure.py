"""The planner's measurements: timing candidate plans with CUDA events.

Two ways, both opt-in (the planner's default is its cost model, :mod:`._cost_model`):

* :func:`measure_all`, the full measurement (cuDNN's benchmark mode; ``xcorr bench xcorr``'s
  tuned column, ``XCORR_PLANNER=measure``): every candidate of both stages on the caller's
  arrays, the four fastest timed again in turns;
* :func:`tune_bounded` (``XCORR_TUNE=1``, ``decide(..., tune=True)``, ``xcorr tune``): the
  candidates in the cost model's order, on a subsample of the batch (:func:`subsample`), until
  a time budget (:data:`TUNE_BUDGET_S`, compiles included) is spent; the best measured is kept,
  or the model's choice where nothing could be measured.

Examples
--------
>>> import numpy as np
>>> left, right = np.zeros((512, 512)), np.zeros((100, 512, 512))
>>> [a.shape for a in subsample(left, right, "one_to_many", 16, max_bytes=1 << 20)]
[(512, 512), (16, 512, 512)]
"""

from __future__ import annotations

import statistics
import time

from ._candidates import candidates, distribution_candidates, sm_count_of_device
from ._forms import form_layout
from ._plans import run_plan
from ._shifts import output_shape

__all__ = ["measure_all", "tune_bounded", "subsample", "time_candidates", "TUNE_BUDGET_S",
           "TUNE_MAX_MATRICES", "TUNE_MAX_BYTES", "REFINE_TOP", "EARLY_REJECT"]

#: warp-shuffle variants refined with work distribution in the second stage
REFINE_TOP = 3
#: a candidate whose first run is this much slower than the best so far is not repeated
EARLY_REJECT = 3.0
#: the fastest candidates timed again, in turns, before the choice (see :func:`_confirm`)
CONFIRM_TOP = 4
CONFIRM_ROUNDS = 3
#: wall-clock seconds a bounded tuning may spend on one problem (compiles included)
TUNE_BUDGET_S = 2.0
#: the bounded tuning's subsample: at least this many right matrices (as many as the batch
#: has) ...
TUNE_MAX_MATRICES = 16
#: ... and more only while the right matrices stay under this many bytes
TUNE_MAX_BYTES = 64 << 20
#: candidates the model predicts this much slower than its best are not measured
TUNE_SLACK = 3.0


def _runner(plan, left, right, form, max_shift, out):
    """``plan`` on these inputs as a callable for :func:`xcorr_app._cuda.timing.time_gpu`."""
    return lambda: run_plan(plan, left, right, form, max_shift, out=out)


def _output(left, right, form, max_shift):
    import cupy as cp

    lay = form_layout(form, left.shape, right.shape)
    return lay, cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape,
                                                        max_shift), dtype=cp.float32)


def _time_plan(plan, left, right, form, max_shift, out, best_ms):
    from .._cuda import time_gpu

    run = _runner(plan, left, right, form, max_shift, out)
    first = time_gpu(run, warmup=1, repeat=1)  # compiles on the warm-up run
    if best_ms is not None and first > EARLY_REJECT * best_ms:
        return first
    return time_gpu(run, warmup=1, repeat=5)


def _measure(plans, left, right, form, max_shift, out, timings, errors):
    best = min((t for _, t in timings), default=None)
    for plan in plans:
        try:
            ms = _time_plan(plan, left, right, form, max_shift, out, best)
        except Exception as exc:  # noqa: BLE001 - a candidate that cannot run is skipped
            errors.append(f"{plan}: {type(exc).__name__}: {exc}")
            continue
        timings.append((plan, ms))
        best = ms if best is None else min(best, ms)


def measure_all(left, right, form, max_shift):
    """Measure every candidate of both stages; returns ``(timings fastest first, errors)``."""
    lay, out = _output(left, right, form, max_shift)
    timings, errors = [], []
    _measure(candidates(lay, max_shift), left, right, form, max_shift, out, timings, errors)
    shuffles = sorted((t, i, p) for i, (p, t) in enumerate(timings)
                      if p.method == "warp_shuffle")[:REFINE_TOP]
    more = []
    for _, _, p in shuffles:
        more += distribution_candidates(p, lay, max_shift, sm_count_of_device())
    _measure(more, left, right, form, max_shift, out, timings, errors)
    timings.sort(key=lambda pt: pt[1])
    _confirm(timings, left, right, form, max_shift, out)
    return timings, errors


def _confirm(timings, left, right, form, max_shift, out):
    """Time the :data:`CONFIRM_TOP` fastest again in :data:`CONFIRM_ROUNDS` rounds, in turns,
    and rank them by the median of all their measurements (sorts ``timings`` in place).

    The first pass times each candidate once, minutes apart at worst; on a busy host a small
    problem's time (mostly the host's) drifts by more than the candidates differ.
    """
    from .._cuda import time_gpu

    top = timings[:CONFIRM_TOP]
    samples = [[t] for _, t in top]
    for _ in range(CONFIRM_ROUNDS):
        for k, (plan, _) in enumerate(top):
            samples[k].append(time_gpu(_runner(plan, left, right, form, max_shift, out),
                                       warmup=1, repeat=5))
    timings[:len(top)] = [(plan, statistics.median(ts)) for (plan, _), ts in zip(top, samples)]
    timings.sort(key=lambda pt: pt[1])


def subsample(left, right, form, max_matrices=TUNE_MAX_MATRICES, max_bytes=TUNE_MAX_BYTES):
    """The bounded tuning's inputs: the batch cut to ``max_matrices`` right matrices, or more
    while they stay under ``max_bytes`` (never more than the batch has); left matrices
    (``n_to_m``, ``n_to_mn``) cut in proportion."""
    lay = form_layout(form, left.shape, right.shape)
    frame = 4 * lay.right_shape[0] * lay.right_shape[1]
    keep = max(max_matrices, max_bytes // max(1, frame))
    if form == "one_to_one" or lay.n_right <= keep:
        return left, right
    if form == "one_to_many":
        return left, right[:keep]
    if form == "n_to_m":
        return left[:max(1, min(lay.n_left, keep // 4))], right[:keep]
    # n_to_mn: whole groups of m right matrices while they fit, else part of one group
    groups = keep // max(1, lay.m)
    if groups >= 1:
        return left[:groups], right[:groups]
    return left[:1], right[:1, :keep]


def time_candidates(ranked, run_of, budget_s=TUNE_BUDGET_S, clock=time.perf_counter,
                    timer=None):
    """Time ``ranked`` plans (the model's order) until ``budget_s`` seconds of ``clock`` are
    spent; returns ``(timings fastest first, errors, skipped)``.

    ``run_of(plan)`` gives the callable to time; ``timer(fn, warmup, repeat)`` times it in ms
    (default :func:`xcorr_app._cuda.timing.time_gpu`). A plan is only started while budget is
    left (its first run compiles it: that is most of a fresh machine's cost); one whose first
    run is :data:`EARLY_REJECT` times the best so far is not repeated.
    """
    if timer is None:
        from .._cuda import time_gpu as timer
    start = clock()
    timings, errors, skipped = [], [], []
    best = None
    for plan in ranked:
        if clock() - start >= budget_s:
            skipped.append(plan)
            continue
        try:
            run = run_of(plan)
            ms = timer(run, warmup=1, repeat=1)
            if (best is None or ms <= EARLY_REJECT * best) and clock() - start < budget_s:
                ms = min(ms, timer(run, warmup=0, repeat=3))
        except Exception as exc:  # noqa: BLE001 - a candidate that cannot run is skipped
            errors.append(f"{plan}: {type(exc).__name__}: {exc}")
            continue
        timings.append((plan, ms))
        best = ms if best is None else min(best, ms)
    timings.sort(key=lambda pt: pt[1])
    return timings, errors, skipped


def tune_bounded(left, right, form, max_shift, ranked, budget_s=TUNE_BUDGET_S):
    """Measure the model-ranked candidates ``[(plan, predicted ms)]`` of the whole problem on
    a :func:`subsample` of it, within ``budget_s`` seconds; returns ``(timings fastest first,
    errors, skipped plans, subsample's right shape)``."""
    left_s, right_s = subsample(left, right, form)
    _, out = _output(left_s, right_s, form, max_shift)
    best_predicted = ranked[0][1] if ranked else 0.0
    plans = [p for p, t in ranked if t <= TUNE_SLACK * best_predicted]
    timings, errors, skipped = time_candidates(
        plans, lambda p: _runner(p, left_s, right_s, form, max_shift, out), budget_s)
    return timings, errors, skipped, tuple(right_s.shape)
