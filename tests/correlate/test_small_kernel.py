"""The few-pair kernel (``small``): its candidates, shared memory and cost (CPU); every tile x
form x warp count against the float64 definition, bounded and full, through the launcher,
``cross_correlate``, a plan call, ``plan.many`` and graph replay, outputs poisoned (GPU)."""

import numpy as np
import pytest

from xcorr_app import cross_correlate
from xcorr_app.correlate import (FORMS, Plan, correlation_plan, first_shift, form_layout,
                                 heuristic, output_shape)
from xcorr_app.correlate import _small as small  # the module under test
from xcorr_app.correlate._candidates import candidates, plan_fits
from xcorr_app.correlate._cost_model import _small_tiles, small_cycles
from xcorr_app.correlate._forms import FORM_IDS
from xcorr_app.errors import InputError

from conftest import poisoned, rel_error
from test_correlation_plan import definition, inputs
from test_gpu_warp_shuffle import check as shuffle_check
from test_gpu_warp_shuffle import counts_for

H100 = {"sm_count": 132, "clock_khz": 1980000, "memory_clock_khz": 2619000, "bus_width": 5120,
        "compute_capability": "90"}


def layout(form, side, m=1, rside=None):
    rside = rside or side
    ls, rs = (side, side), (rside, rside)
    return form_layout(form, ls, rs if form == "one_to_one" else (m,) + rs)


# ------------------------------------------------------------------ the planner's choice (CPU)

@pytest.mark.parametrize("form,side,m,want", [
    ("one_to_one", 16, 1, "warp_per_shift"), ("one_to_one", 32, 1, "warp_per_shift"),
    ("one_to_one", 48, 1, "small"), ("one_to_one", 64, 1, "small"),
    ("one_to_many", 16, 8, "small"), ("one_to_many", 32, 8, "mma"),
    ("one_to_many", 64, 8, "small")])
def test_model_picks_small_for_one_pair_or_a_few(form, side, m, want):
    """The xcorr bench's one-pair and 1x8 rows on an H100: the model fitted to the measured
    candidates (tools/planner_data_h100.json, 2026-11-23; the few-pair kernel's coefficients
    from its graph replays, cost_model.json's "adjusted") picks the few-pair kernel where it
    was fastest by the GPU's time (one pair of 48x48 and 64x64, 1x8 at 16x16 and 64x64),
    other kernels elsewhere (xcorr bench xcorr checks the picks against the tuned choice on
    the device)."""
    ranked = heuristic(layout(form, side, m), None, H100)
    assert ranked[0][0].method == want, ranked[:3]
    if want == "small":
        assert ranked[0][0].row_splits == 16


@pytest.mark.parametrize("form,left,right,bound", [
    ("one_to_many", (16, 16), (256, 16, 16), None),  # batches: the batch kernels
    ("one_to_many", (32, 32), (4000, 32, 32), None),
    ("n_to_m", (8, 32, 32), (8, 32, 32), None),
    ("n_to_mn", (4, 32, 32), (4, 64, 32, 32), None),
    ("one_to_one", (96, 96), (96, 96), None),  # its tile does not fit 48 KiB
    ("one_to_one", (128, 128), (128, 128), None),
    ("one_to_many", (1024, 1024), (16, 1024, 1024), 4),
])
def test_small_is_not_offered_where_it_loses(form, left, right, bound):
    lay = form_layout(form, left, right)
    plans = candidates(lay, bound, 132)
    assert not [p for p in plans if p.method == "small"]
    assert heuristic(lay, bound, H100)[0][0].method != "small"


def test_candidates_are_compiled_and_fit():
    for form, side, m, bound in [("one_to_one", 5, 1, None), ("one_to_one", 64, 1, 3),
                                 ("one_to_many", 31, 8, None), ("n_to_mn", 16, 1, None),
                                 ("one_to_one", 1, 1, None)]:
        lay = layout(form, side, m) if form != "n_to_mn" else \
            form_layout(form, (4, side, side), (4, 2, side, side))
        plans = [p for p in candidates(lay, bound, 132) if p.method == "small"]
        assert plans, (form, side)
        for p in plans:
            assert (FORM_IDS[form], p.tile_y) in small.SMALL.instantiations
            assert p.row_splits in small.WARPS
            assert small.shared_bytes(lay.right_shape, p.tile_y, p.row_splits) <= \
                small.MAX_SHARED
            assert plan_fits(p, lay)
    assert not plan_fits(Plan("small"), layout("one_to_many", 16, 9))  # past MAX_RESULTS
    # 9 results: not offered; 8: offered
    assert not [p for p in candidates(layout("one_to_many", 16, 9), None, 132)
                if p.method == "small"]


def test_plan_string_and_bad_parameters():
    p = Plan.parse("small:tile_y=8,row_splits=16")
    assert (p.method, p.tile_y, p.row_splits, str(p)) == ("small", 8, 16,
                                                          "small:tile_y=8,row_splits=16")
    for params, msg in [({"tile_y": 3, "row_splits": 4}, "tile_y"),
                        ({"tile_y": 4, "row_splits": 17}, "row_splits"),
                        ({"tile_y": 4, "row_splits": 0}, "row_splits")]:
        with pytest.raises(InputError, match=msg):
            small.configure_small("one_to_one", (8, 8), (8, 8), None, params)
    with pytest.raises(InputError, match="KiB of shared memory per block"):  # an H100's 227
        small.configure_small("one_to_one", (300, 300), (300, 300), None,
                              {"tile_y": 4, "row_splits": 8})


@pytest.mark.parametrize("lshape,rshape,bound", [((64, 64), (64, 64), None),
                                                 ((13, 70), (9, 33), None),
                                                 ((40, 9), (17, 5), (3, 2)),
                                                 ((5, 3), (31, 2), 70)])
@pytest.mark.parametrize("ty", small.TILES)
def test_shared_bytes_hold_every_block(lshape, rshape, bound, ty):
    """What each block stages (``kernels/correlate/small_xcorr.cu``: right rows x column quads, the
    left window ``tile_y - 1`` rows and 31 columns larger), brute force over the shifts, never
    exceeds what the launcher gives it; and the cost model's per-tile counts are the same."""
    (lh, lw), (rh, rw) = lshape, rshape
    lay = form_layout("one_to_one", lshape, rshape)
    ho, wo = output_shape(lshape, rshape, bound)
    ky0, kx0 = first_shift(lshape, rshape, bound)
    rows, quads = _small_tiles(lay, bound, ty)
    assert len(rows) == -(-ho // ty) and len(quads) == -(-wo // 32)
    for by in range(len(rows)):
        # right rows that meet the left at one of the tile's y-shifts, counted one by one
        ys = {y for ky in range(ky0 + by * ty, ky0 + by * ty + ty) for y in range(rh)
              if 0 <= y + ky < lh}
        if ys:
            assert rows[by] >= max(ys) - min(ys) + 1
        for bx in range(len(quads)):
            xs = {x for kx in range(kx0 + 32 * bx, kx0 + 32 * bx + 32) for x in range(rw)
                  if 0 <= x + kx < lw}
            if xs and quads[bx]:
                assert 4 * quads[bx] >= max(xs) - min(xs) + 1
            staged = rows[by] * 4 * quads[bx] + (rows[by] + ty - 1) * (4 * quads[bx] + 31) \
                if rows[by] and quads[bx] else 0
            for warps in (1, 16):
                assert 4 * max(staged, warps * ty * 32) <= small.shared_bytes(rshape, ty, warps)


def test_cost_grows_with_the_problem_and_shrinks_with_the_sms():
    p = Plan("small", tile_y=4, row_splits=8)
    a = small_cycles(p, layout("one_to_one", 32), None, 132)
    b = small_cycles(p, layout("one_to_one", 64), None, 132)
    c = small_cycles(p, layout("one_to_many", 64, 8), None, 132)
    assert b[0] > a[0] and b[1] > a[1] and c[0] == 8 * b[0] and c[1] > b[1]
    assert small_cycles(p, layout("one_to_many", 64, 8), None, 264)[1] <= c[1]
    bounded = small_cycles(p, layout("one_to_one", 64), 2, 132)
    assert bounded[0] < b[0] / 10 and bounded[1] <= b[1]  # the central tile is the same


# ------------------------------------------------------------------ the kernel (GPU)

#: odd, non-square, smaller than a warp, wider than a block's 32 x-shifts
SIZES = [(1, 1), (5, 3), (16, 16), (31, 33), (45, 70), (64, 64)]
GPU_WARPS = (1, 3, 4, 16)
KERNEL_CASES = [(f, ty) for f in FORMS for ty in small.TILES]


def check(form, lshape, count, max_shift, rshape=None, **params):
    shuffle_check(form, lshape, count, max_shift, rshape, kernel=small.small_xcorr, **params)


@pytest.mark.gpu
@pytest.mark.parametrize("form,ty", KERNEL_CASES, ids=[f"{f}-ty{t}" for f, t in KERNEL_CASES])
def test_kernel_full_and_bounded(form, ty):
    for warps in GPU_WARPS:
        params = dict(tile_y=ty, row_splits=warps)
        for lshape in SIZES:
            for count in counts_for(form)[:2]:
                check(form, lshape, count, None, **params)
        for max_shift in (0, 3, (2, 40), 70):
            for lshape in [(5, 3), (31, 33), (45, 70)]:
                check(form, lshape, 3, max_shift, **params)
        for lshape, rshape in [((31, 33), (7, 13)), ((7, 13), (40, 70)), ((1, 1), (5, 3)),
                               ((20, 9), (9, 20)), ((50, 47), (3, 36))]:
            check(form, lshape, 3, None, rshape, **params)
            check(form, lshape, 3, 4, rshape, **params)


#: one_to_one and one_to_many problems: odd, non-square, left and right of other sizes
PLAN_CASES = [("one_to_one", (13, 11), (9, 7)), ("one_to_one", (45, 70), (37, 41)),
              ("one_to_many", (12, 17), (5, 10, 13)), ("one_to_many", (40, 33), (8, 40, 33))]
SPECS = ["small", "small:tile_y=1,row_splits=4", "small:tile_y=8,row_splits=16",
         "small:tile_y=2,row_splits=3"]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("form,lshape,rshape", PLAN_CASES)
@pytest.mark.parametrize("bound", [None, 3, (4, 1)])
def test_plan_call_many_graph_and_cross_correlate(rng, spec, form, lshape, rshape, bound):
    import cupy as cp

    a, b = inputs(rng, lshape, rshape, cp)
    want = definition(a.get(), b.get(), form, bound)
    plan = correlation_plan(lshape, rshape, form, bound, device="gpu", method=spec)
    assert plan.fast and plan.method.method == "small"
    assert not plan._zero  # no atomics: no memset before the launch
    out = poisoned(cp, plan.out_shape)
    assert plan(a, b, out) is out
    via_api = cross_correlate(a, b, form, bound, method=spec, device="gpu")
    for result in (out, via_api):
        assert rel_error(result.get(), want) <= 1e-5, plan
    # a caller's stream
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        out2 = poisoned(cp, plan.out_shape)
    plan(a, b, out2, stream=stream)
    stream.synchronize()
    assert rel_error(out2.get(), want) <= 1e-5
    # many: one n_to_mn launch of the same kernel
    n = 3
    la, rb = inputs(rng, (n,) + lshape, (n,) + rshape, cp)
    outs = poisoned(cp, (n,) + plan.out_shape)
    assert plan.many(la, rb, outs) is outs
    assert plan._many[n].method.method == "small"
    ref = np.stack([definition(la[i].get(), rb[i].get(), form, bound) for i in range(n)])
    assert rel_error(outs.get(), ref) <= 1e-5
    # graph replay on new data in the bound buffers
    left, right = inputs(rng, lshape, rshape, cp)
    gout = poisoned(cp, plan.out_shape)
    g = plan.graph(left, right, gout)
    for _ in range(2):
        with stream:
            a2, b2 = inputs(rng, lshape, rshape, cp)
            left[...] = a2
            right[...] = b2
            gout.fill(cp.nan)
            g.replay(stream)
        stream.synchronize()
        assert rel_error(gout.get(), definition(a2.get(), b2.get(), form, bound)) <= 1e-5


@pytest.mark.gpu
def test_auto_picks_small_for_one_small_pair(rng):
    import cupy as cp

    from xcorr_app.correlate import _planner as planner

    a, b = inputs(rng, (48, 48), (48, 48), cp)
    planner.forget()
    plan = correlation_plan((48, 48), (48, 48), device="gpu")
    assert plan.method.method == "small", plan
    got = cross_correlate(a, b, device="gpu")
    assert rel_error(got.get(), definition(a.get(), b.get(), "one_to_one", None)) <= 1e-5
    # many: the same kernel for a few pairs, the planner's batch kernel for many
    for n, small_kernel in ((3, True), (64, False)):
        la, rb = inputs(rng, (n, 48, 48), (n, 48, 48), cp)
        got = plan.many(la, rb, poisoned(cp, (n,) + plan.out_shape))
        assert (plan._many[n].method.method == "small") == small_kernel, plan._many[n]
        want = np.stack([definition(la[i].get(), rb[i].get(), "one_to_one", None)
                         for i in range(n)])
        assert rel_error(got.get(), want) <= 1e-5
    # a plan made for the kernel by name keeps it for any batch
    named = correlation_plan((48, 48), (48, 48), device="gpu", method="small")
    named.many(*inputs(rng, (64, 48, 48), (64, 48, 48), cp))
    assert named._many[64].method.method == "small"
