"""The planner's cost model: features, ranking, the shipped coefficients (CPU only)."""

import json

import numpy as np
import pytest

from xcorr_app.correlate import _cost_model as model  # the module under test
from xcorr_app.correlate import Plan, form_layout
from xcorr_app.correlate._candidates import candidates

H100 = {"sm_count": 132, "clock_khz": 1980000, "memory_clock_khz": 2619000, "bus_width": 5120,
        "compute_capability": "90"}


def lay_of(form, left, right):
    return form_layout(form, left, right)


def test_rank_orders_by_the_model_on_synthetic_coefficients():
    lay = lay_of("one_to_many", (64, 64), (32, 64, 64))
    # a model where only the launch term counts, per family: the cheapest family wins
    coefs = {f: [1.0 + k] + [0.0] * (len(model.FEATURES) - 1)
             for k, f in enumerate(model.FAMILIES)}
    coefs["mma"][0] = 0.5
    plans = [Plan("fft"), Plan("overlap"), Plan("mma", tile_y=2, tile_x=8)]
    ranked = model.rank(plans, lay, None, H100, coefs)
    assert [p.method for p, _ in ranked] == ["mma", "fft", "overlap"]
    assert [t for _, t in ranked] == [0.5, 1.0, 2.0]
    # only the work term: padding of a tile that does not divide the output costs
    work = {f: [0.0, 0.0, 1.0] + [0.0] * (len(model.FEATURES) - 3) for f in model.FAMILIES}
    ranked = model.rank([Plan("tiled", tile_y=8, tile_x=2), Plan("tiled", tile_y=3, tile_x=3)],
                        lay_of("one_to_many", (64, 64), (8, 64, 64)), 4, H100, work)
    assert str(ranked[0][0]) == "tiled:tile_y=3,tile_x=3"  # 9 shifts: 3x3 fits exactly


def test_features_grow_with_the_problem():
    small = lay_of("one_to_many", (256, 256), (16, 256, 256))
    large = lay_of("one_to_many", (256, 256), (64, 256, 256))
    for plan in (Plan("fft"), Plan("tiled", tile_y=3, tile_x=3), Plan("overlap"),
                 Plan("warp_shuffle", shifts=4, distribution="triangle", rows_per_worker=4)):
        fam, a = model.features(plan, small, 8, H100)
        _, b = model.features(plan, large, 8, H100)
        assert fam == plan.method and len(a) == len(model.FEATURES)
        assert a[0] == b[0] == 1.0 and np.all(b >= a) and b[2] > a[2]
        # a GPU with twice the SMs: half the work term
        _, c = model.features(plan, large, 8, {**H100, "sm_count": 264})
        assert c[2] == pytest.approx(b[2] / 2)


@pytest.mark.parametrize("form,left,right,bound,want", [
    ("one_to_many", (1024, 1024), (64, 1024, 1024), 16, {"fft"}),
    ("one_to_many", (1024, 1024), (64, 1024, 1024), 4, {"tiled"}),
    ("one_to_many", (32, 32), (4000, 32, 32), None, {"mma"}),
    # one pair: the few-pair kernel was fastest, warp_per_shift 1.04x (2026-11-23 data)
    ("one_to_one", (32, 32), (32, 32), None, {"small", "warp_per_shift"}),
    ("one_to_one", (64, 64), (64, 64), None, {"small"}),
    ("one_to_many", (64, 64), (4000, 64, 64), None, {"fft"}),
])
def test_shipped_model_picks_the_measured_winners(form, left, right, bound, want):
    # the H100's measured winners (tools/planner_data_h100.json) on problems of every kind
    lay = lay_of(form, left, right)
    ranked = model.rank(candidates(lay, bound, 132), lay, bound, H100)
    assert ranked[0][0].method in want, ranked[:3]
    assert ranked[0][1] <= ranked[-1][1]


def test_shipped_data_and_generic_fallback():
    data = json.loads(model.data_path().read_text())
    assert data["features"] == list(model.FEATURES)
    assert data[model.GENERIC] in data["architectures"]
    for coefs in data["architectures"]["90"]["coefficients"].values():
        assert len(coefs) == len(model.FEATURES) and min(coefs) >= 0
    assert model.coefficients("90") == model.coefficients("12.0")  # an unknown GPU: generic
    assert "sm_90" in model.model_info("90") and "generic" in model.model_info("75")


def test_useful_macs_counts_the_definition():
    lay = lay_of("one_to_one", (3, 2), (2, 2))
    # every overlap of a 3x2 and a 2x2 matrix, summed by brute force
    total = sum(max(0, min(3, ky + 2) - max(0, ky)) * max(0, min(2, kx + 2) - max(0, kx))
                for ky in range(-1, 3) for kx in range(-1, 2))
    assert model.useful_macs(lay, None) == total
