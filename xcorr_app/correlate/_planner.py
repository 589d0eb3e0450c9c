"""The planner: which kernel (or FFT) computes a cross-correlation problem fastest on this GPU.

Like cuDNN's heuristic mode, by default the planner answers at once: its cost model
(:mod:`xcorr_app.correlate._cost_model`, coefficients fitted per GPU architecture and shipped
in the package) predicts the time of every candidate plan (:mod:`._candidates`) without
running anything, and only the chosen plan's kernel is compiled (on its first run).

Measured tuning is opt-in (:mod:`._measure`): ``decide(..., tune=True)``, ``XCORR_TUNE=1`` or
``xcorr tune`` measure the candidates in the model's order on a subsample of the batch, for at
most :data:`~xcorr_app.correlate._measure.TUNE_BUDGET_S` seconds a problem;
``decide(..., tune="full")`` (``XCORR_PLANNER=measure``; ``xcorr bench xcorr``'s tuned column)
measures every candidate on the caller's arrays, as cuDNN's benchmark mode does.  Measured
decisions are kept in the one autotuner's cache (:mod:`xcorr_app._cuda.tuning`:
``tuning.json`` in ``$XCORR_CACHE_DIR``), keyed by the device's fingerprint (GPU, compute
capability, a hash of the package version and kernel sources) and the problem, and a later
call without tuning uses them.

**Decisions are reused across batch sizes.** The key of a decision is the form, the frame
shapes and the search range; the counts of matrices only pick a bucket (the power of two at
or below each count).  A call whose bucket has no decision yet takes one made for another
bucket of the same key when that plan can run (:func:`~._candidates.plan_fits`) and the model
predicts it within :data:`REUSE_SLACK` of its own best for this batch: a new chunk size or
the last partial chunk of a run neither plans nor compiles again.

``XCORR_PLANNER=rules`` uses a fixed rule (for debugging; not cached).

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> ref, frames = cp.random.rand(64, 64), cp.random.rand(100, 64, 64)  # doctest: +SKIP
>>> d = decide(ref, frames, "one_to_many", max_shift=8)  # doctest: +SKIP
>>> print(d.plan, d.source, d.reason)  # doctest: +SKIP
>>> count_bucket(37), count_bucket(64)
(32, 64)
"""

from __future__ import annotations

import datetime
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .._config import CACHE_DIR, PLANNER, TUNE, planner_mode, tune_requested
from .._cuda import cache_file, device_fingerprint, device_name, recall, remember
from ..errors import InputError
from ._candidates import (candidates, distribution_candidates, mma_candidates,
                          pair_tiled_candidates, plan_fits, rule_plan, tiled_candidates)
from ._cost_model import device_attributes, model_info, rank
from ._forms import form_layout
from ._measure import TUNE_BUDGET_S, measure_all, tune_bounded
from ._plans import Plan, run_plan
from ._shifts import normalize_max_shift

__all__ = ["Decision", "decide", "candidates", "distribution_candidates", "tiled_candidates",
           "pair_tiled_candidates", "mma_candidates", "rule_plan", "heuristic",
           "run_plan", "cache_path", "problem_key", "count_bucket", "measure_all", "explain",
           "set_on_measure", "forget"]

#: the environment variables the planner reads (named in :mod:`xcorr_app._config`)
CACHE_ENV, MODE_ENV, TUNE_ENV = CACHE_DIR, PLANNER, TUNE
#: the planner's part of the autotuner's cache (:mod:`xcorr_app._cuda.tuning`)
NAMESPACE = "xcorr_plans_v2"
#: warp-shuffle variants (the model's best) whose work distributions are ranked too
REFINE_TOP = 3
#: a decision of another batch size is reused while the model predicts it within this factor
#: of its best for this batch
REUSE_SLACK = 1.15
#: decision sources, best first: what a lookup prefers
SOURCES = ("measured", "tuned", "heuristic")

#: called with one line of text before a (slow, first-time) measurement; the CLI prints it
#: (set it with :func:`set_on_measure`)
on_measure = None


def set_on_measure(callback) -> None:
    """Call ``callback(line)`` with a line of text before each first-time measurement (the
    command line prints it as a note); ``None`` for silence."""
    global on_measure
    on_measure = callback


_MEMORY: dict = {}  # fast key -> Decision
_BUCKETS: dict = {}  # key text -> {bucket text: Decision}
_DEVICES: dict = {}  # device id -> device_attributes()
_LOCK = threading.Lock()


@dataclass
class Decision:
    """What the planner chose for a problem and why."""

    plan: Plan
    timings: list = field(default_factory=list)  # [(Plan, ms)], fastest first
    source: str = "heuristic"  # "heuristic", "tuned", "measured", "cache" or "rules"
    reason: str = ""
    key: str = ""
    #: charged the first plans of a cold FFT size (:mod:`._fft_plans`): not kept, so that the
    #: same problem is decided again once the size is warm
    cold: bool = False


def forget() -> None:
    """Drop the decisions kept in memory (the disk cache stays)."""
    with _LOCK:
        _MEMORY.clear()
        _BUCKETS.clear()


# ------------------------------------------------------------------------ keys

def cache_path() -> Path:
    """The file where decisions are kept: the one autotuner's cache
    (:func:`xcorr_app._cuda.tuning.cache_file`)."""
    return cache_file()


def count_bucket(n: int) -> int:
    """The power of two at or below ``n`` (at least 1): counts in one bucket share decisions."""
    return 1 << max(0, int(n).bit_length() - 1)


def problem_key(lay, max_shift) -> list:
    """The autotuner key of a problem on the current device (its fingerprint: GPU, compute
    capability, kernel code), in the :data:`NAMESPACE` of the tuning cache: form, frame shapes
    and search range, no counts (those pick a bucket: :func:`bucket_of`)."""
    bound = normalize_max_shift(max_shift)
    bound = None if bound is None else list(bound)
    return [*device_fingerprint(), lay.form, list(lay.left_shape),
            list(lay.right_shape), bound]


def bucket_of(lay) -> str:
    """``"<left bucket>x<right bucket>"`` of a problem's counts (:func:`count_bucket`)."""
    return f"{count_bucket(lay.n_left)}x{count_bucket(max(1, lay.m))}"


def _device_id() -> int:
    import cupy as cp

    return cp.cuda.Device().id


def _device() -> dict:
    dev_id = _device_id()
    if dev_id not in _DEVICES:
        _DEVICES[dev_id] = device_attributes()
    return _DEVICES[dev_id]


# ------------------------------------------------------------------------ the model

def heuristic(lay, max_shift, dev=None) -> list:
    """Every candidate with its predicted ms, fastest first: the first stage, then the work
    distributions of the model's :data:`REFINE_TOP` best warp-shuffle variants."""
    dev = dev or _device()
    first = rank(candidates(lay, max_shift, dev["sm_count"]), lay, max_shift, dev)
    more = []
    for p in [p for p, _ in first if p.method == "warp_shuffle"][:REFINE_TOP]:
        more += distribution_candidates(p, lay, max_shift, dev["sm_count"])
    return rank([p for p, _ in first] + more, lay, max_shift, dev)


def _heuristic_decision(lay, max_shift, key_text, calls=None) -> Decision:
    dev = _device()
    ranked = heuristic(lay, max_shift, dev)
    ranked, cold = _charge_cold_fft(ranked, lay, max_shift, calls)
    best_plan, best = ranked[0]
    text = f"{model_info(dev['compute_capability'])}: {best_plan} predicted {best:.3g} ms"
    if len(ranked) > 1:
        text += f"; next {ranked[1][0]} {ranked[1][1]:.3g} ms (of {len(ranked)} candidates)"
    if cold:
        text += (f"; the FFT's size {cold} is cold on this machine: its first plans charged "
                 f"over {calls} calls")
    return Decision(best_plan, ranked, "heuristic", text, key_text, cold=bool(cold))


def _charge_cold_fft(ranked, lay, max_shift, calls):
    """``ranked`` with the ``fft`` plan charged :data:`~._fft_plans.COLD_FFT_MS` per cold
    transform pair spread over ``calls`` (a run's calls of this problem; ``None``: not charged)
    where its size was never planned on this machine (once per process and size,
    :func:`~._fft_plans.charge_once`), with the cold size (else ``None``).  When a direct
    kernel wins so, the size's plans are built for the next run
    (:func:`~._fft_plans.build_later`)."""
    if not calls or not any(p.method == "fft" for p, _ in ranked[:1]):
        return ranked, None
    from ._fft import fft_geometry
    from ._fft_plans import (COLD_FFT_MS, build_later, charge_once, is_warm, mark_warm,
                             rfft2_specs)

    size = fft_geometry(lay.left_shape, lay.right_shape, max_shift).size
    specs = rfft2_specs(size)
    cold = [s for s in specs if not is_warm(*s)]
    if not cold or not charge_once(size):
        return ranked, None
    extra = COLD_FFT_MS * len(cold) / len(specs) / max(1, int(calls))
    charged = sorted([(p, t + extra if p.method == "fft" else t) for p, t in ranked],
                     key=lambda pt: pt[1])
    if charged[0][0].method == "fft":  # planned by this run (a long one): warm after it
        for spec in specs:
            mark_warm(*spec)
    else:
        build_later(specs)
    return charged, size


# ------------------------------------------------------------------------ the cache

def _decision_from(entry, key_text) -> Decision:
    return Decision(Plan.parse(entry["plan"]),
                    [(Plan.parse(p), t) for p, t in entry.get("timings", [])],
                    entry.get("source", "measured"),
                    f"cached decision of {entry.get('date', '?')}: {entry.get('reason', '')}",
                    key_text)


def _stored(key, key_text) -> dict:
    """``{bucket: Decision}`` of a key: in memory, with what the disk has added."""
    known = _BUCKETS.setdefault(key_text, {})
    entry = recall(NAMESPACE, key) or {}
    for bucket, item in entry.get("buckets", {}).items():
        if bucket not in known or SOURCES.index(known[bucket].source) > \
                SOURCES.index(item.get("source", "measured")):
            d = _decision_from(item, key_text)
            d.source = item.get("source", "measured")
            known[bucket] = d
    return known


def _store(key, key_text, bucket, d: Decision) -> None:
    _BUCKETS.setdefault(key_text, {})[bucket] = d
    if d.source == "heuristic":
        return  # answered at once next time too: only measurements go to the disk
    entry = dict(recall(NAMESPACE, key) or {})
    buckets = dict(entry.get("buckets", {}))
    buckets[bucket] = {
        "plan": str(d.plan), "timings": [[str(p), t] for p, t in d.timings],
        "reason": d.reason, "source": d.source,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    remember(NAMESPACE, key, {"buckets": buckets})


def _reuse(known, bucket, lay, max_shift, want):
    """A stored decision for this problem: this bucket's, else another bucket's that fits and
    that the model does not mind (:data:`REUSE_SLACK`); ``want``: the sources acceptable."""
    mine = known.get(bucket)
    if mine is not None and mine.source in want:
        return mine
    others = [d for b, d in known.items() if b != bucket and d.source in want
              and plan_fits(d.plan, lay)]
    if not others:
        return None
    others.sort(key=lambda d: SOURCES.index(d.source))
    dev = _device()
    ranked = heuristic(lay, max_shift, dev)
    best = ranked[0][1]
    predicted = dict((str(p), t) for p, t in ranked)
    for d in others:
        t = predicted.get(str(d.plan))
        if t is None:
            t = rank([d.plan], lay, max_shift, dev)[0][1]
        if t <= REUSE_SLACK * best:
            return d
    return None


# ------------------------------------------------------------------------ deciding

def explain(timings, errors, n_extra="") -> str:
    """One line on what was measured: the fastest plan and the best of every other kind."""
    best_plan, best = timings[0]
    text = (f"measured {len(timings)} candidates on {device_name()}: fastest {best_plan} "
            f"{best:.4g} ms")
    others = {}
    for p, t in timings[1:]:
        kind = p.method if p.method != "warp_shuffle" else "other warp_shuffle"
        others.setdefault(kind, (p, t))
    for kind, (p, t) in others.items():
        text += f"; {kind} {t:.4g} ms ({t / best:.2f}x)"
    if errors:
        text += f"; {len(errors)} could not run ({errors[0]})"
    return text + n_extra


def _tune_mode(tune):
    """``False``, ``True`` (bounded) or ``"full"`` from the argument and the environment."""
    if tune is None:
        if planner_mode() == "measure":
            return "full"
        return tune_requested()
    if tune not in (False, True, "full"):
        raise InputError(f"tune must be False, True or 'full', got {tune!r}")
    return tune


def _measured_decision(left, right, form, max_shift, lay, key_text, mode) -> Decision:
    if on_measure is not None:
        what = "every kernel variant" if mode == "full" else \
            f"the likeliest kernel variants for up to {TUNE_BUDGET_S:g} s"
        on_measure(f"planning: measuring {what} for {form} {lay.left_shape} x "
                   f"{lay.right_shape} (once per device and problem; cached in "
                   f"{cache_path().parent})")
    if mode == "full":
        timings, errors = measure_all(left, right, form, max_shift)
        if not timings:
            raise RuntimeError("no candidate plan could run: " + "; ".join(errors[:3]))
        return Decision(timings[0][0], timings, "measured", explain(timings, errors),
                        key_text)
    ranked = heuristic(lay, max_shift)
    timings, errors, skipped, shape = tune_bounded(left, right, form, max_shift, ranked)
    if not timings:  # nothing ran within the budget: the model's choice
        d = _heuristic_decision(lay, max_shift, key_text)
        d.reason += f"; tuning measured nothing ({'; '.join(errors[:1]) or 'no time'})"
        return d
    note = f" (on a subsample {shape}; {len(skipped)} candidates left for lack of time)"
    return Decision(timings[0][0], timings, "tuned", explain(timings, errors, note), key_text)


def decide(left, right, form="one_to_one", max_shift=None, refresh=False,
           tune=None, calls=None) -> Decision:
    """The plan for correlating these CuPy arrays.

    Parameters
    ----------
    left, right : cupy.ndarray
        The problem's inputs (read only when measuring).
    form, max_shift
        As :func:`xcorr_app.cross_correlate`.
    refresh : bool
        Decide again even when a decision is kept (and, when measuring, measure again).
    tune : {None, False, True, "full"}
        ``False``: the cost model (or a measured decision kept from before); ``True``: measure
        the likeliest candidates within a time budget, on a subsample; ``"full"``: measure
        every candidate on these arrays. ``None`` (default): ``True`` where ``XCORR_TUNE=1``,
        ``"full"`` where ``XCORR_PLANNER=measure``, else ``False``.
    calls : int, optional
        How many times the caller will run this problem (a run's chunks).  With it, the cost
        model charges an FFT size never planned on this machine the first plans' time
        (:mod:`._fft_plans`) spread over the calls: a short first run takes a direct kernel.

    Returns
    -------
    Decision
        ``source`` says how it was made: ``"heuristic"`` (the cost model), ``"tuned"``
        (bounded measurement), ``"measured"`` (full) or ``"rules"``.
    """
    lay = form_layout(form, left.shape, right.shape)
    if planner_mode() == "rules":
        return Decision(rule_plan(lay, max_shift), source="rules",
                        reason=f"{PLANNER}=rules: fixed rule, nothing measured")
    mode = _tune_mode(tune)
    # the fast path: a small problem's whole run is a few microseconds of host time, so a
    # decision seen before is found by the call's own arguments, before any key is built
    fast = (form, left.shape, right.shape, normalize_max_shift(max_shift), _device_id(), mode)
    if not refresh and fast in _MEMORY:
        return _MEMORY[fast]
    key = problem_key(lay, max_shift)
    key_text = json.dumps(key)
    bucket = bucket_of(lay)
    with _LOCK:
        known = _stored(key, key_text)
        want = {"full": ("measured",), True: ("measured", "tuned")}.get(mode, SOURCES)
        d = None if refresh else _reuse(known, bucket, lay, max_shift, want)
        if d is None:
            if mode:
                d = _measured_decision(left, right, form, max_shift, lay, key_text, mode)
            else:
                d = _heuristic_decision(lay, max_shift, key_text, calls)
            if d.cold:  # decided again once the FFT's size is warm
                return d
            _store(key, key_text, bucket, d)
        else:
            known[bucket] = d  # reused: this bucket answers at once from now on
        _MEMORY[fast] = d
        return d
