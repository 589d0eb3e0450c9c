"""The planner's candidate plans for a problem: every compiled kernel variant that fits it.

The planner (:mod:`xcorr_app.correlate._planner`) ranks these by its cost model, or measures
them (:mod:`xcorr_app.correlate._measure`); the lists are the same either way.  First stage:
the FFT, the overlap baseline, warp-per-shift (small matrices), the register-tiled kernels
(column strip; lane per pair for many right matrices), the tensor-core kernel, the few-pair
kernel (at most 8 results) and every warp-shuffle variant that fits; then, for the best
warp-shuffle variants, their work distributions (:func:`distribution_candidates`).

Examples
--------
>>> from xcorr_app.correlate._forms import form_layout
>>> lay = form_layout("one_to_many", (32, 32), (64, 32, 32))
>>> plans = candidates(lay, None, sm_count=132)
>>> str(plans[0]), any(p.method == "mma" for p in plans)
('fft', True)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ._plans import Plan
from ._shifts import first_shift, output_shape

__all__ = ["candidates", "tiled_candidates", "pair_tiled_candidates", "mma_candidates",
           "small_plans", "distribution_candidates", "rule_plan", "plan_fits", "sm_count_of_device",
           "TARGET_WARPS_PER_SM"]

#: warps per SM the distribution sizes aim for (4 blocks of 4 warps each, x 4 for latency)
TARGET_WARPS_PER_SM = 64


def sm_count_of_device() -> int:
    """The current CUDA device's SM count (CuPy)."""
    import cupy as cp

    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


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
    plans += tiled_candidates(lay, max_shift, sm_count or sm_count_of_device())
    plans += pair_tiled_candidates(lay, max_shift, sm_count or sm_count_of_device())
    plans += mma_candidates(lay, max_shift, sm_count=sm_count)
    plans += small_plans(lay, max_shift)
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
    warp_slots = (sm_count or sm_count_of_device()) * WARPS  # one wave of 16-warp blocks
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


def small_plans(lay, max_shift) -> list:
    """Few-pair plans (:func:`xcorr_app.correlate._small.small_candidates`: at most
    :data:`~xcorr_app.correlate._small.MAX_RESULTS` results, small right matrices)."""
    from ._small import small_candidates

    return [Plan("small", tile_y=ty, row_splits=w) for ty, w in small_candidates(lay, max_shift)]


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


def plan_fits(plan: Plan, lay) -> bool:
    """Whether ``plan`` can run on a problem of this layout: what a decision made for another
    batch size must satisfy before it is reused (counts of left and right matrices; the
    frame shapes and bound are the same by the decision's key)."""
    m = max(1, lay.m)
    if plan.method == "small":  # runs any count, but loses to the batch kernels beyond a few
        from ._small import MAX_RESULTS

        return lay.n_results <= MAX_RESULTS
    if plan.method in ("mma", "pair_tiled"):
        return lay.form != "one_to_one" and lay.m >= 8
    if plan.method in ("warp_shuffle", "tiled"):
        return plan.rights <= m and plan.lefts <= lay.n_left
    return True
