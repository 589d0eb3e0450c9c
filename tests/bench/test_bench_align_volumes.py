"""``xcorr bench align --volumes``: the stack, the ratios and their verdicts, the refusals
(CPU); the whole quick bench on the GPU."""

import numpy as np
import pytest

from cli_helpers import xcorr
from xcorr_app.bench import _align_volumes as bench
from xcorr_app.bench import _align_volumes_patches as patches_bench


def test_layered_volume_has_each_image_at_its_own_depth():
    pytest.importorskip("skimage")
    vol = bench.layered_volume((16, 40, 36))
    assert vol.shape == (16, 40, 36) and vol.dtype == np.float32 and vol.min() >= 0
    # four layers: the planes at the layers' centres differ from one another
    planes = [vol[int((k + 0.5) * 16 / 4)].ravel() for k in range(4)]
    assert max(np.corrcoef(planes)[np.triu_indices(4, 1)]) < 0.9


def _rows(ours_np, loop_np, ours_cp, loop_cp, sk, one=None):
    rows = [{"row": "xcorr align_volumes from NumPy", "vps": ours_np},
            {"row": "per-volume CuPy FFT loop from NumPy", "vps": loop_np},
            {"row": "xcorr align_volumes from CuPy", "vps": ours_cp},
            {"row": "per-volume CuPy FFT loop from CuPy", "vps": loop_cp},
            {"row": "scikit-image phase_cross_correlation (CPU), 4 volumes", "vps": sk}]
    for state, (a, b) in (one or {}).items():
        rows += [{"row": f"xcorr align --volumes, one-shot, {state}", "seconds": a, "vps": 64 / a},
                 {"row": f"per-volume CuPy FFT loop script, one-shot, {state}", "seconds": b}]
    return rows


def test_ratio_lines_name_each_target_and_verdict():
    lines = bench.ratio_lines(_rows(100.0, 40.0, 300.0, 50.0, 2.0, {"warm": (4.0, 6.0)}))
    assert lines[0] == "- in process from NumPy: 50.0x scikit-image (target 20x: met)"
    assert lines[1] == "- in process from NumPy: 2.5x the CuPy loop (target 3x: not met)"
    assert lines[3] == "- in process from CuPy: 6.0x the CuPy loop (target 3x: met)"
    assert lines[4].startswith("- one-shot, warm: 1.50x the CuPy loop's script (target 3x: "
                               "not met); 8.0x scikit-image")


@pytest.mark.parametrize("args, words", [
    (["--volumes", "--size", "64"], "--volumes takes --quick"),
    (["--volumes", "--patches", "2x2"], "--volumes --patches takes GZxGYxGX"),
    (["--volumes", "--patches", "2x2x2", "--workdir", "w"], "--volumes --patches takes"),
    (["--patches", "2x2x2"], "--patches GZxGYxGX is for --volumes"),
])
def test_refuses_other_options_in_one_line(args, words):
    res = xcorr("bench", "align", *args)
    assert res.returncode == 2 and words in res.stderr
    assert "Traceback" not in res.stderr


def test_piecewise_truth_is_the_inverse_of_the_moves():
    """The field the 3-D patches bench scores against: moving the truth's point back by the
    deformation lands on the reference's point (``p + a + B p = q`` at ``p = q - s``)."""
    moves = patches_bench.moves_of(4, (16, 32, 40), seed=2)
    q = np.array([[[3.0, 7.5, 30.0]], [[12.0, 20.0, 5.0]]])  # (2, 1, 3)
    s = patches_bench.field_truth(moves, q)
    assert s.shape == (4, 2, 1, 3) and np.all(s[0] == 0)
    for (a, b), st in zip(moves, s):
        p = q - st
        np.testing.assert_allclose(p + a + p @ b.T, q, atol=1e-12)
    assert np.abs(s[3] - s[3].mean(axis=0)).max() > 0.3  # (the shear: not one shift)


@pytest.mark.gpu
def test_the_quick_piecewise_bench_on_the_gpu(tmp_path):
    lines = []
    assert patches_bench.main(quick=True, patches=(2, 2, 2), repeat=1, echo=lines.append,
                              peers={}, json_path=tmp_path / "p.json") == 0
    rows = {r["row"]: r for r in __import__("json").loads((tmp_path / "p.json").read_text())
            ["rows"]}
    ours = rows["xcorr align_volumes patches 2x2x2 from CuPy"]
    rigid = rows["xcorr align_volumes rigid from CuPy"]
    # (the quick stack's few small volumes: about 0.29 voxel on an H200; the rigid row, 0.31
    # since the linear 3-D search, is no yardstick here: the CPU tests compare them on a
    # stack made for it)
    assert ours["rms"] < 0.35 and np.isfinite(rigid["rms"]), rows
    assert any("warpfield: not compared" in line for line in lines)


@pytest.mark.gpu
def test_the_quick_bench_on_the_gpu(tmp_path):
    lines = []
    assert bench.main(quick=True, repeat=1, workdir=tmp_path, echo=lines.append,
                      json_path=tmp_path / "v.json") == 0
    text = "\n".join(lines)
    for row in ("xcorr align_volumes from NumPy", "per-volume CuPy FFT loop from CuPy",
                "xcorr align --volumes, one-shot, cold",
                "per-volume CuPy FFT loop script, one-shot, warm"):
        assert f"| {row}" in text
    rows = __import__("json").loads((tmp_path / "v.json").read_text())["rows"]
    ours = [r for r in rows if r["row"].startswith("xcorr")]
    assert len(ours) == 4 and all(r["rms"] < 0.15 for r in ours), ours
    assert "target 20x" in text and "target 3x" in text


@pytest.mark.parametrize("other", ["--floor", "--formats", "--keep"])
def test_volumes_refuses_the_other_benches_and_keep(other):
    res = xcorr("bench", "align", "--volumes", other)
    assert res.returncode == 2 and "--volumes takes --quick" in res.stderr
