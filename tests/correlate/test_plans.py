"""Plans and the planner's candidate lists (CPU), the planner itself on the GPU."""

import json

import numpy as np
import pytest

from xcorr_app import cross_correlate
from xcorr_app.correlate import _direct as reference  # the module under test's peer
from xcorr_app.errors import XcorrError
from xcorr_app.correlate import FORMS, Plan, first_shift, form_layout, output_shape
from xcorr_app.correlate._forms import FORM_IDS
from xcorr_app.correlate._mma import MMA, ROW_SPLITS, buffers_for
from xcorr_app._cuda.device import H100_LIMITS
from xcorr_app.correlate._tiled import PAIR_MAX_SHARED, PAIR_TILED, TILED, pair_shared_bytes
from xcorr_app.correlate._warp_shuffle import VARIANTS, WARP_SHUFFLE
from xcorr_app._cuda import tuning
from xcorr_app.correlate import _planner as planner  # the module under test
from xcorr_app.correlate._work_distribution import MAX_BLOCK_WARPS, schedule

from conftest import rel_error


@pytest.mark.parametrize("spec", ["fft", "direct", "overlap", "warp_per_shift:shared=1",
                                  "tiled:tile_y=8,rights=2,rows_per_chunk=64",
                                  "pair_tiled:tile_y=8,tile_x=8,rows_per_chunk=5",
                                  "pair_tiled:tile_x=8",
                                  "mma:tile_y=2,tile_x=16",
                                  "mma:tile_y=2,tile_x=8,row_splits=4",
                                  "warp_shuffle:rights=4,shifts=2",
                                  "warp_shuffle:lefts=2,distribution=triangle,rows_per_worker=3",
                                  "warp_shuffle:rights=2,distribution=block,rows_per_worker=4"])
def test_plan_string_round_trip(spec):
    assert str(Plan.parse(spec)) == spec
    assert Plan.parse(Plan.parse(spec)) == Plan.parse(spec)


@pytest.mark.parametrize("spec,msg", [("fastest", "unknown method"),
                                      ("warp_shuffle:rights", "bad parameter"),
                                      ("warp_shuffle:colour=2", "bad parameter"),
                                      ("fft:rights=2", "fft takes no parameters"),
                                      ("warp_shuffle:rights=four", "must be an integer"),
                                      ("warp_shuffle:distribution=square", "unknown distribution")])
def test_bad_plan_specs(spec, msg):
    with pytest.raises(XcorrError, match=msg):
        Plan.parse(spec)


def test_distribution_gets_a_task_size():
    assert Plan.parse("warp_shuffle:distribution=rectangle").rows_per_worker > 0


def test_gpu_methods_refused_on_cpu():
    a = np.ones((4, 4))
    with pytest.raises(XcorrError, match="GPU kernel"):
        cross_correlate(a, a, method="warp_shuffle", device="cpu")


@pytest.mark.parametrize("method", ["direct", "fft", "auto"])
def test_cpu_methods_equal_reference(rng, method):
    a, b = rng.random((3, 12, 9)), rng.random((4, 12, 9))
    for bound in (None, 3):
        got = cross_correlate(a, b, "n_to_m", bound, method=method, device="cpu")
        assert rel_error(got, reference.xcorr(a, b, "n_to_m", bound)) <= 1e-5


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shapes,bound", [(((16, 16), (16, 16)), None),
                                          (((128, 128), (128, 128)), None),
                                          (((1024, 1024), (1024, 1024)), 8),
                                          (((5, 3), (9, 40)), 2)])
@pytest.mark.parametrize("count", [1, 5, 64])
def test_candidates_are_compiled_variants(form, shapes, bound, count):
    """Every plan the planner can measure is a registered (compile-checked) instantiation."""
    ls, rs = shapes
    lshape = ls if form in ("one_to_one", "one_to_many") else (count,) + ls
    rshape = {"one_to_one": rs, "one_to_many": (count,) + rs, "n_to_mn": (count, count) + rs,
              "n_to_m": (count,) + rs}[form]
    lay = form_layout(form, lshape, rshape)
    plans = planner.candidates(lay, bound, sm_count=132)  # without a GPU: an H100's limits
    assert Plan("fft") in plans and Plan("overlap") in plans
    shuffles = [p for p in plans if p.method == "warp_shuffle"]
    assert shuffles, "at least one warp-shuffle variant fits every problem"
    for p in shuffles:
        key = (FORM_IDS[form], p.lefts, p.rights, p.shifts, p.left_rows)
        assert key in WARP_SHUFFLE.instantiations
        assert p.rights <= max(1, lay.m) and p.lefts <= lay.n_left
        for q in planner.distribution_candidates(p, lay, bound, sm_count=132):
            assert q.distribution in ("rectangle", "triangle", "block") and q.rows_per_worker >= 1
            if q.distribution == "block":  # 2 to 8 warps, each with whole slabs of left rows
                sched = schedule("block", lay.left_shape[0], lay.right_shape[0],
                                 first_shift(lay.left_shape, lay.right_shape, bound)[0],
                                 output_shape(lay.left_shape, lay.right_shape, bound)[0],
                                 q.shifts, q.rows_per_worker)
                assert 2 <= sched.max_tasks <= MAX_BLOCK_WARPS
                assert q.rows_per_worker % q.left_rows == 0
            assert (q.lefts, q.rights, q.shifts, q.left_rows) == (p.lefts, p.rights, p.shifts,
                                                                   p.left_rows)
    for p in plans:
        if p.method == "tiled":
            assert (FORM_IDS[form], p.tile_y, p.tile_x, p.rights) in TILED.instantiations
            assert p.rights <= max(1, lay.m) and 0 <= p.rows_per_chunk < lay.right_shape[0]
    assert any(p.method == "tiled" for p in plans)
    pairs = [p for p in plans if p.method == "pair_tiled"]
    for p in pairs:
        assert (FORM_IDS[form], p.tile_y, p.tile_x) in PAIR_TILED.instantiations
        assert pair_shared_bytes(lay.left_shape, p.tile_y, p.tile_x) <= PAIR_MAX_SHARED
        assert 0 <= p.rows_per_chunk < lay.right_shape[0]
    # many right matrices per left and a left that fits shared memory: offered
    fits = pair_shared_bytes(lay.left_shape, 4, 4) <= PAIR_MAX_SHARED
    assert bool(pairs) == (form != "one_to_one" and lay.m >= 8 and fits)
    assert all(v in VARIANTS[form] for v in
               [(p.lefts, p.rights, p.shifts, p.left_rows) for p in shuffles])
    mmas = [p for p in plans if p.method == "mma"]
    for p in mmas:
        assert (FORM_IDS[form], p.tile_y, p.tile_x // 8) in MMA.instantiations
        assert buffers_for(lay.left_shape, lay.right_shape, p.tile_y, p.tile_x,
                           H100_LIMITS.shared_per_block, p.row_splits)
        assert p.row_splits in ROW_SPLITS and p.row_splits <= lay.right_shape[0]
    # rows split over warps only where a wave of warps has more room than the tiles
    few = {(p.tile_y, p.tile_x) for p in mmas if p.row_splits > 1}
    for ty, tx in few:
        ho, wo = output_shape(lay.left_shape, lay.right_shape, bound)
        assert -(-ho // ty) * -(-wo // tx) * -(-lay.m // 16) * lay.n_left < 132 * 16
    # many right matrices per left, and they fit: offered (16x16 and 5x3 x 9x40 do, 128x128 not)
    small = lay.right_shape[0] * lay.right_shape[1] <= 400
    assert bool(mmas) == (form != "one_to_one" and lay.m >= 8 and small)


def test_rules_mode(monkeypatch):
    monkeypatch.setenv(planner.MODE_ENV, "rules")
    d = planner.decide(np.zeros((32, 32)), np.zeros((8, 32, 32)), "one_to_many", 4)
    assert d.source == "rules" and d.plan.method == "warp_shuffle"


# --------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_planner_picks_fastest_and_caches(tmp_path, monkeypatch):
    import cupy as cp

    monkeypatch.setenv(planner.CACHE_ENV, str(tmp_path))
    planner.forget()
    rng = np.random.default_rng(144)
    left = cp.asarray(rng.standard_normal((32, 32)), cp.float32)
    right = cp.asarray(rng.standard_normal((40, 32, 32)), cp.float32)
    d = planner.decide(left, right, "one_to_many", None, tune="full")
    assert d.source == "measured" and d.timings[0][0] == d.plan
    assert d.timings[0][1] == min(t for _, t in d.timings)
    assert {p.method for p, _ in d.timings} >= {"fft", "overlap", "warp_shuffle"}
    assert any(p.distribution == "triangle" for p, _ in d.timings)
    assert any(p.distribution == "block" for p, _ in d.timings)
    assert "fastest" in d.reason
    assert planner.cache_path() == tmp_path / "tuning.json"
    stored = json.loads((tmp_path / "tuning.json").read_text())
    entry = stored["entries"][json.dumps([planner.NAMESPACE, json.loads(d.key)])]
    assert entry["buckets"]["1x32"]["plan"] == str(d.plan)
    planner.forget()
    tuning.forget_memory()  # read back from the disk, and used without tuning
    again = planner.decide(left, right, "one_to_many", None)
    assert again.source == "measured" and again.plan == d.plan
    assert "cached decision" in again.reason
    got = cross_correlate(left, right, "one_to_many", method="auto")
    want = reference.xcorr(left.get(), right.get(), "one_to_many")
    assert rel_error(got.get(), want) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["warp_shuffle:rights=2,shifts=2",
                                  "warp_shuffle:shifts=4,left_rows=2,distribution=triangle,"
                                  "rows_per_worker=5",
                                  "warp_per_shift:shared=1", "overlap", "fft",
                                  "tiled:tile_y=3,tile_x=3,rights=2,rows_per_chunk=5",
                                  "pair_tiled:tile_y=8,tile_x=4,rows_per_chunk=5",
                                  "mma:tile_y=2,tile_x=16"])
def test_cross_correlate_runs_named_plans(rng, spec):
    a, b = rng.random((21, 19)), rng.random((5, 21, 19))
    want = reference.xcorr(a, b, "one_to_many", 6)
    got = cross_correlate(a, b, "one_to_many", 6, method=spec, device="gpu")
    assert isinstance(got, np.ndarray) and rel_error(got, want) <= 1e-5
