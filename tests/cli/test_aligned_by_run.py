"""``xcorr align``'s aligned.tif written by the run itself (``align(out=)``: during the last
patch pass, or applied from the stack kept on the GPU) where its options are the defaults: the
frames of the run's field and shifts applied afterwards, through a real subprocess."""

import json

import numpy as np
import pytest
import tifffile

from xcorr_app.alignment import apply_shifts
from xcorr_app.alignment.piecewise import apply_field
from xcorr_app.bench._align_data import nonrigid_stack

from cli_helpers import digest, xcorr
from synthetic import write_stack


@pytest.fixture(scope="module")
def stack_file(tmp_path_factory):
    frames = nonrigid_stack(np.random.default_rng(11), 6, (96, 104), 10.0, 3.0, 400.0,
                            "camera")[0]
    return write_stack(tmp_path_factory.mktemp("s") / "s.tif", frames)


def _applied(chunks):
    return np.concatenate([c for _, c in chunks])


def _applied_by_the_run(stack_file, out, device, patches):
    """The float32 frames of the result in ``out`` (its field, or its shifts) applied."""
    if patches:
        z = np.load(out / "motion_field.npz")
        return _applied(apply_field(stack_file, z["field"], z["centres"], device=device))
    doc = json.loads((out / "shifts.json").read_text())
    shifts = np.array([[f["dy"], f["dx"]] for f in doc["frames"]], np.float64)
    return _applied(apply_shifts(stack_file, shifts, device=device))


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("patches", [None, "2x2"])
def test_aligned_tif_of_the_run_is_the_applied_result(stack_file, tmp_path, device, patches):
    before = digest(stack_file)
    out = tmp_path / "o"
    args = ["align", stack_file, "--max-shift", "14", "--device", device, "--out", out,
            "--no-verify", "--chunk-frames", "4"] + (["--patches", patches] if patches else [])
    res = xcorr(*args)
    assert res.returncode == 0, res.stderr
    aligned = tifffile.imread(out / "aligned.tif")
    want = _applied_by_the_run(stack_file, out, device, patches)
    assert aligned.shape == want.shape == (6, 96, 104) and aligned.dtype == np.float32
    np.testing.assert_array_equal(aligned, want)
    assert digest(stack_file) == before


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("patches", [None, "2x2"])
def test_keep_dtype_is_the_applied_result_rounded(stack_file, tmp_path, device, patches):
    """``--keep-dtype`` (rounded on the GPU, in the warp's kernel or after the field's, where
    the run writes the stack): the run's own result applied in float32, rounded."""
    from xcorr_app.io import as_dtype

    out = tmp_path / "o"
    res = xcorr("align", stack_file, "--max-shift", "14", "--device", device, "--out", out,
                "--no-verify", "--chunk-frames", "4", "--quiet", "--keep-dtype",
                *(["--patches", patches] if patches else []))
    assert res.returncode == 0, res.stderr
    kept = tifffile.imread(out / "aligned.tif")
    want = _applied_by_the_run(stack_file, out, device, patches)
    assert kept.dtype == tifffile.imread(stack_file).dtype == np.uint16
    np.testing.assert_array_equal(kept, as_dtype(want, np.uint16))


def test_a_failure_after_the_run_leaves_no_output(stack_file, tmp_path, monkeypatch):
    """An error while the aligned stack's writer is still open (here the drift plot, drawn
    while it writes) aborts the writer and the run: no output, no temporary file, no folder;
    the input as it was."""
    from click.testing import CliRunner

    from xcorr_app.alignment.outputs import _plots
    from xcorr_app.cli._main import cli

    def broken_plot(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_plots, "plot_drift", broken_plot)
    before = digest(stack_file)
    out = tmp_path / "o"
    res = CliRunner().invoke(cli, ["align", str(stack_file), "--device", "cpu", "--max-shift",
                                   "14", "--out", str(out), "--quiet"])
    assert res.exit_code != 0
    assert not out.exists() or not list(out.iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name not in ("o",)]
    assert digest(stack_file) == before
