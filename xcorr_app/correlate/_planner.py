"""The planner: which kernel (or FFT) computes a cross-correlation problem fastest on this GPU.

Like cuDNN's benchmark mode, the first time a problem (form, sizes, counts, ``max_shift``) is
seen on a device, the planner measures the candidate plans on the caller's own arrays with CUDA
events and keeps the fastest; the decision is kept in memory and in the one autotuner's cache
(:mod:`xcorr_app._cuda.tuning`: ``tuning.json`` in ``$XCORR_CACHE_DIR``, default the user cache
directory), keyed by the device's fingerprint (GPU, compute capability, a hash of the package
version and kernel sources) and the problem, so later runs and processes reuse it.

Candidates are measured in two stages: first the FFT, the overlap-wise baseline, the
warp-per-shift kernels (small matrices), the register-tiled kernels (column strip; lane per
pair, for many right matrices) and the tensor-core kernel (many right matrices) with every
compiled tile that fits, and every compiled warp-shuffle variant that fits the
problem without work distribution; then, for the three fastest warp-shuffle variants, the
rectangle and triangle distributions with two task sizes chosen to fill the GPU.  The plan
chosen is the fastest measured, so it is never slower than any measured path beyond timing noise.

``XCORR_PLANNER=rules`` skips measuring and uses a fixed rule (for debugging; not cached).

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> ref, frames = cp.random.rand(64, 64), cp.random.rand(100, 64, 64)  # doctest: +SKIP
>>> d = decide(ref, frames, "one_to_many", max_shift=8)  # doctest: +SKIP
>>> print(d.plan, d.reason)  # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import json
import statistics
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .._config import CACHE_DIR, PLANNER
from .._config import get as config_value
from .._cuda import tuning
from .._cuda.timing import device_name, time_gpu
from ._forms import form_layout
from ._plans import Plan, run_plan
from ._shifts import first_shift, normalize_max_shift, output_shape

__all__ = ["Decision", "decide", "candidates", "distribution_candidates", "tiled_candidates",
           "pair_tiled_candidates", "mma_candidates",
           "rule_plan",
           "run_plan", "cache_path", "problem_key", "measure_all", "explain"]

#: the environment variables the planner reads (named in :mod:`xcorr_app._config`)
CACHE_ENV, MODE_ENV = CACHE_DIR, PLANNER
#: the planner's part of the autotuner's cache (:mod:`xcorr_app._cuda.tuning`)
NAMESPACE = "xcorr_plans"
#: warp-shuffle variants refined with work distribution in the second stage
REFINE_TOP = 3
#: a candidate whose first run is this much slower than the best so far is not repeated
EARLY_REJECT = 3.0
#: the fastest candidates timed again, in turns, before the choice (see :func:`_confirm`)
CONFIRM_TOP = 4
CONFIRM_ROUNDS = 3
#: warps per SM the distribution sizes aim for (4 blocks of 4 warps each, x 4 for latency)
TARGET_WARPS_PER_SM = 64

#: called with one line of text before a (slow, first-time) measurement; the CLI prints it
#: (set it with :func:`set_on_measure`)
on_measure = None


def set_on_measure(callback) -> None:
    """Call ``callback(line)`` with a line of text before each first-time measurement (the
    command line prints it as a note); ``None`` for silence."""
    global on_measure
    on_measure = callback

_MEMORY: dict = {}
_LOCK = threading.Lock()


@dataclass
class Decision:
    """What the planner chose for a problem and why."""

    plan: Plan
    timings: list = field(default_factory=list)  # [(Plan, ms)], fastest first
    source: str = "measured"  # "measured", "cache" or "rules"
    reason: str = ""
    key: str = ""


# ------------------------------------------------------------------------ candidates

def _fits(variant, lay, ho) -> bool:
    lefts, rights, shifts, left_rows = variant
    if lefts > lay.n_left or rights > max(1, lay.m) or shifts > max(1, ho):
        return False
    if left_rows > 1 and min(lay.left_shape[0], lay.right_shape[0]) < 64:
        return False  # grouped overlap pays off on larger matrices only
    return True


def candidates(lay, max_shift, sm_count=None) -> list:
    """First-stage plans for a problem (GPU; ``sm_count`` defaults to the current device's)."""
    from ._warp_shuffle import MAX_STAGED_BYTES, VARIANTS, staged_bytes

    ho, _ = output_shape(lay.left_shape, lay.right_shape, max_shift)
    plans = [Plan("fft"), Plan("overlap")]
    if lay.right_shape[0] * lay.right_shape[1] <= 64 * 64:
        plans.append(Plan("warp_per_shift"))
        if staged_bytes(lay.right_shape) <= MAX_STAGED_BYTES:
            plans.append(Plan("warp_per_shift", shared=1))
    plans += tiled_candidates(lay, max_shift, sm_count or _sm_count())
    plans += pair_tiled_candidates(lay, max_shift, sm_count or _sm_count())
    plans += mma_candidates(lay, max_shift, sm_count=sm_count)
    for v in VARIANTS[lay.form]:
        if _fits(v, lay, ho):
            lefts, rights, shifts, left_rows = v
            plans.append(Plan("warp_shuffle", lefts=lefts, rights=rights, shifts=shifts,
                              left_rows=left_rows))
    return plans


def tiled_candidates(lay, max_shift, sm_count: int) -> list:
    """Register-tiled plans, each with a row chunk that gives the GPU about
    :data:`TARGET_WARPS_PER_SM` warps per SM."""
    from ._tiled import TILES

    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    rh, rw = lay.right_shape
    plans = []
    for ty, tx, rights in TILES[lay.form]:
        if rights > max(1, lay.m) or ty > 2 * ho or tx > 2 * wo:
            continue
        warps = -(-ho // ty) * -(-wo // tx) * -(-rw // 32) * lay.n_left * -(-lay.m // rights)
        chunks = max(1, -(-TARGET_WARPS_PER_SM * sm_count // warps))
        rows = max(8, -(-rh // chunks))
        plans.append(Plan("tiled", tile_y=ty, tile_x=tx, rights=rights,
                          rows_per_chunk=0 if rows >= rh else rows))
    return plans


def pair_tiled_candidates(lay, max_shift, sm_count: int) -> list:
    """Lane-per-pair plans (forms with at least 8 right matrices per left, a left that fits
    shared memory), each with a row chunk that gives the GPU about
    :data:`TARGET_WARPS_PER_SM` warps per SM."""
    from ._tiled import PAIR_FORMS, PAIR_MAX_SHARED, PAIR_TILES, pair_shared_bytes

    if lay.form not in PAIR_FORMS or lay.m < 8:
        return []
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    rh = lay.right_shape[0]
    plans = []
    for ty, tx in PAIR_TILES:
        if ty > 2 * ho or tx > 2 * wo or \
                pair_shared_bytes(lay.left_shape, ty, tx) > PAIR_MAX_SHARED:
            continue
        warps = -(-ho // ty) * -(-wo // tx) * -(-lay.m // 32) * lay.n_left
        chunks = max(1, -(-TARGET_WARPS_PER_SM * sm_count // warps))
        rows = max(4, -(-rh // chunks))
        plans.append(Plan("pair_tiled", tile_y=ty, tile_x=tx))
        if rows < rh:  # and split into row chunks (atomic adds) to fill the GPU
            plans.append(Plan("pair_tiled", tile_y=ty, tile_x=tx, rows_per_chunk=rows))
    return plans


def mma_candidates(lay, max_shift, limit=None, sm_count=None) -> list:
    """Tensor-core (3xTF32) plans: forms with at least 8 right matrices per left, every
    compiled tile whose block fits ``limit`` bytes of shared memory (default: this GPU's, an
    H100's without one); where the problem has fewer tiles than a wave of warps (``sm_count``
    SMs of 16 warps), also with each tile's rows split over 2, 4 and 8 warps."""
    from ._mma import MATRICES, MMA_FORMS, MMA_TILES, ROW_SPLITS, WARPS, unsupported

    if lay.form not in MMA_FORMS or lay.m < 8:
        return []
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    warp_slots = (sm_count or _sm_count()) * WARPS  # one wave of 16-warp blocks
    plans = []
    for ty, tx in MMA_TILES:
        if ty > 2 * ho or tx > 2 * wo:
            continue
        tasks = -(-ho // ty) * -(-wo // tx) * -(-lay.m // MATRICES) * lay.n_left
        few = tasks < warp_slots
        for ks in ROW_SPLITS if few else (1,):
            if ks <= lay.right_shape[0] and unsupported(lay.form, lay.left_shape,
                                                       lay.right_shape, ty, tx, limit,
                                                       ks) is None:
                plans.append(Plan("mma", tile_y=ty, tile_x=tx, row_splits=ks))
    return plans


def distribution_candidates(plan: Plan, lay, max_shift, sm_count: int) -> list:
    """Rectangle and triangle versions of a warp-shuffle plan, with task sizes that give the
    GPU about :data:`TARGET_WARPS_PER_SM` warps per SM (and a quarter of that size), and block
    versions with 2, 4 and 8 warps per block (as far as the longest domain has rows for them).
    """
    from ._work_distribution import MAX_BLOCK_WARPS, schedule

    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, _ = first_shift(lay.left_shape, lay.right_shape, max_shift)
    none = schedule("none", lay.left_shape[0], lay.right_shape[0], ky0, ho, plan.shifts)
    lengths = none.domain_length[none.domain_length > 0]
    if not len(lengths):
        return []
    pair_groups = -(-lay.n_left // plan.lefts) * -(-lay.m // plan.rights)
    warps = none.n_groups * -(-wo // 32) * pair_groups
    target = TARGET_WARPS_PER_SM * sm_count
    rows = float(lengths.mean()) * warps / target
    big = 1 << max(0, int(np.ceil(np.log2(max(rows, 1.0)))))
    sizes = sorted({max(1, min(big, int(lengths.max()))), max(1, big // 4)})
    slabs = -(-int(lengths.max()) // plan.left_rows)  # a block's warps sum whole slabs of rows
    block_sizes = sorted({plan.left_rows * -(-slabs // w) for w in (2, 4, MAX_BLOCK_WARPS)
                          if w <= slabs})
    return [replace(plan, distribution=d, rows_per_worker=s)
            for d in ("rectangle", "triangle") for s in sizes
            if s < lengths.max()] + [  # one task per group is "none" with atomics
        replace(plan, distribution="block", rows_per_worker=s) for s in block_sizes]


def rule_plan(lay, max_shift) -> Plan:
    """A fixed choice without measuring (``XCORR_PLANNER=rules``)."""
    if max_shift is None and lay.right_shape[0] * lay.right_shape[1] > 96 * 96:
        return Plan("fft")
    rights = 4 if lay.m >= 4 else 1
    return Plan("warp_shuffle", rights=rights)


# ------------------------------------------------------------------------ measuring

def _runner(plan, left, right, form, max_shift, out):
    """``plan`` on these inputs as a callable for :func:`xcorr_app._cuda.timing.time_gpu`."""
    return lambda: run_plan(plan, left, right, form, max_shift, out=out)


def _time_plan(plan, left, right, form, max_shift, out, best_ms):
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


def _sm_count() -> int:
    import cupy as cp

    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


def measure_all(left, right, form, max_shift):
    """Measure every candidate of both stages; returns ``(timings fastest first, errors)``."""
    import cupy as cp

    lay = form_layout(form, left.shape, right.shape)
    out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, max_shift),
                   dtype=cp.float32)
    timings, errors = [], []
    _measure(candidates(lay, max_shift), left, right, form, max_shift, out, timings, errors)
    shuffles = sorted((t, i, p) for i, (p, t) in enumerate(timings)
                      if p.method == "warp_shuffle")[:REFINE_TOP]
    more = []
    for _, _, p in shuffles:
        more += distribution_candidates(p, lay, max_shift, _sm_count())
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
    top = timings[:CONFIRM_TOP]
    samples = [[t] for _, t in top]
    for _ in range(CONFIRM_ROUNDS):
        for k, (plan, _) in enumerate(top):
            samples[k].append(time_gpu(_runner(plan, left, right, form, max_shift, out),
                                       warmup=1, repeat=5))
    timings[:len(top)] = [(plan, statistics.median(ts)) for (plan, _), ts in zip(top, samples)]
    timings.sort(key=lambda pt: pt[1])


# ------------------------------------------------------------------------ cache

def cache_path() -> Path:
    """The file where decisions are kept: the one autotuner's cache
    (:func:`xcorr_app._cuda.tuning.cache_file`)."""
    return tuning.cache_file()


def problem_key(lay, max_shift) -> list:
    """The autotuner key of a problem on the current device (its fingerprint: GPU, compute
    capability, kernel code), in the :data:`NAMESPACE` of the tuning cache."""
    bound = normalize_max_shift(max_shift)
    bound = None if bound is None else list(bound)
    return [*tuning.device_fingerprint(), lay.form, list(lay.left_shape),
            list(lay.right_shape), lay.n_left, lay.m, bound]


def _decision_from(entry, key_text) -> Decision:
    return Decision(Plan.parse(entry["plan"]),
                    [(Plan.parse(p), t) for p, t in entry.get("timings", [])], "cache",
                    f"cached decision of {entry.get('date', '?')}: {entry.get('reason', '')}",
                    key_text)


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


def decide(left, right, form="one_to_one", max_shift=None, refresh=False) -> Decision:
    """The plan for correlating these CuPy arrays (measured once per device and problem).

    Parameters
    ----------
    left, right : cupy.ndarray
        The problem's inputs; used as they are for the measurement.
    form, max_shift
        As :func:`xcorr_app.cross_correlate`.
    refresh : bool
        Measure again even when a decision is cached.
    """
    lay = form_layout(form, left.shape, right.shape)
    if config_value(PLANNER, "measure") == "rules":
        return Decision(rule_plan(lay, max_shift), source="rules",
                        reason=f"{PLANNER}=rules: fixed rule, nothing measured")
    import cupy as cp

    # the fast path: a small problem's whole run is a few microseconds of host time, so a
    # decision seen before is found by the call's own arguments, before any key is built
    fast = (form, left.shape, right.shape, normalize_max_shift(max_shift), cp.cuda.Device().id)
    if not refresh and fast in _MEMORY:
        return _MEMORY[fast]
    key = problem_key(lay, max_shift)
    key_text = json.dumps(key)
    with _LOCK:
        if not refresh:
            hit = _MEMORY.get(key_text)
            if hit is None:
                entry = tuning.recall(NAMESPACE, key)
                if entry is not None:
                    hit = _MEMORY[key_text] = _decision_from(entry, key_text)
            if hit is not None:
                _MEMORY[fast] = hit
                return hit
        if on_measure is not None:
            on_measure(f"planning: measuring kernel variants for {form} {lay.left_shape} x "
                       f"{lay.right_shape} (once per device and problem; cached in "
                       f"{cache_path().parent})")
        timings, errors = measure_all(left, right, form, max_shift)
        if not timings:
            raise RuntimeError("no candidate plan could run: " + "; ".join(errors[:3]))
        reason = explain(timings, errors)
        d = _MEMORY[key_text] = _MEMORY[fast] = Decision(timings[0][0], timings, "measured",
                                                         reason, key_text)
        tuning.remember(NAMESPACE, key, {
            "plan": str(d.plan), "timings": [[str(p), t] for p, t in timings],
            "reason": reason,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
        return d
