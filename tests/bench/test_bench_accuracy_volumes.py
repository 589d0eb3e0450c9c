"""``xcorr bench accuracy --kinds volumes``: the 3-D stacks (not periodic, anisotropic, drift in
z, a camera's noise), their truth and floor, and the report's rows and target line."""

import numpy as np
import pytest

from xcorr_app.alignment import align_volumes
from xcorr_app.bench import _accuracy as bench
from xcorr_app.bench import _accuracy_volumes as vb
from xcorr_app.errors import InputError

pytest.importorskip("skimage")


@pytest.fixture(scope="module")
def quick():
    return vb.make_volume_stack(0, quick=True)


def test_same_seed_same_stack_and_each_case_its_own(quick):
    again = vb.make_volume_stack(0, quick=True)
    assert np.array_equal(quick.frames, again.frames) and np.array_equal(quick.truth, again.truth)
    other = vb.make_volume_stack(1, quick=True)
    assert not np.array_equal(quick.truth, other.truth)
    assert (quick.info["z_step"], other.info["z_step"]) == (2, 3)
    assert len(vb.volume_cases()) == 40 and vb.volume_cases(seeds=[3])[0] == (
        "camera", (32, 128, 128), 3)


def test_the_stack_is_a_cameras_reading_of_a_drift_in_z(quick):
    n, shape = vb.VOLUME_SPEC["quick"]
    assert quick.frames.shape == (n, *shape) and quick.frames.dtype == np.float32
    assert quick.truth.shape == (n, 3) and quick.truth[0].tolist() == [0.0, 0.0, 0.0]
    assert np.abs(quick.truth[:, 0]).max() >= 0.8  # (a focus drift of planes)
    assert abs(float(np.mean(quick.frames - quick.clean))) < 0.2  # (offset and mean in clean)
    assert quick.frames.min() > 90  # (the camera's offset of 100)


def test_the_noise_free_volumes_align_to_the_truth_and_the_oracle_is_the_floor(quick):
    clean = align_volumes(quick.clean.astype(np.float32), device="cpu").shifts
    assert np.abs(clean - quick.truth).max() <= 0.08  # (12 planes: the fit's own bias)
    assert np.abs(clean + quick.truth).max() >= 1.0  # (the opposite sign is far off)
    oracle = vb.volume_errors(vb.volume_oracle(quick), quick.truth)[0]
    crb = vb.volume_bound(quick)
    assert 0.5 * crb <= oracle <= 2.0 * crb


def test_the_report_has_the_kind_the_before_row_and_the_target(quick):
    rows = bench.measure("volumes", 0, quick=True)
    assert [r["method"] for r in rows] == list(vb.VOLUME_METHODS)
    by = {r["method"]: r for r in rows}
    assert by[bench.DEFAULT]["rms"] < 0.5 * by[vb.CIRCULAR]["rms"]
    assert by[bench.DEFAULT]["rms"] < min(by[m]["rms"] for m in bench.SKIMAGE)
    lines = bench.report_lines(rows)
    assert any(line.startswith("| volumes | 1 |") for line in lines)
    assert any(line.startswith(f"| {vb.CIRCULAR} |") for line in lines)
    assert any("| 12x40x48 |" in line for line in lines)
    assert any(line.startswith("- volumes: default median <= 0.05 voxel") for line in lines)


def test_volumes_only_when_named():
    assert "volumes" not in bench.ALL_KINDS and "volumes" in bench.BENCH_KINDS
    with pytest.raises(InputError, match="volumes"):
        bench.main(quick=True, kinds=["volume"], echo=lambda s: None)
