"""align --gpus all / --workers N on a stack too small to pay for more GPUs: one GPU, said."""

import pytest

from xcorr_app.cli._options import one_gpu_instead
from xcorr_app.streaming import SCALE_OUT_MIN_BYTES

from cli_helpers import xcorr


def test_small_stacks_run_on_one_gpu_with_a_note():
    note = one_gpu_instead("all", None, 4 * 2**30)
    assert note.startswith("note: --gpus all: measuring on one GPU") and "4.0 GiB" in note
    assert "--gpus 0,1" in note
    note = one_gpu_instead(None, 2, 4 * 2**30)
    assert note.startswith("note: --workers 2:") and "--scheduler" in note


def test_large_stacks_lists_and_no_request_keep_their_way():
    assert one_gpu_instead("all", None, SCALE_OUT_MIN_BYTES) is None
    assert one_gpu_instead("0,1", None, 2**30) is None  # a list is honoured
    assert one_gpu_instead(None, None, 2**30) is None
    assert one_gpu_instead("all", None, None) is None  # filter: no rule


def test_cli_gpus_all_on_the_cpu_is_still_refused(tmp_path):
    r = xcorr("align", "sample_data/cell_drift.tif", "--gpus", "all", "--device", "cpu",
              "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "--gpus shares the frames out over GPUs; drop --device cpu" \
        in r.stderr


@pytest.mark.gpu
def test_cli_gpus_all_on_a_small_stack_runs_on_one_gpu(tmp_path):
    r = xcorr("align", "sample_data/cell_drift.tif", "--gpus", "all", "--no-aligned",
              "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert "note: --gpus all: measuring on one GPU in this process" in r.stderr
    assert " on gpu " in r.stdout  # not moved to the CPU by the small-job rule

