"""``xcorr tune``, run in a subprocess through the ``xcorr`` group (registered there by the
group's owner; here added for the test where it is not yet), and XCORR_TUNE's errors."""

import os
import subprocess
import sys

import pytest

from cli_helpers import ROOT, assert_clean_error

RUN_TUNE = ("import sys; from xcorr_app.cli._main import cli; "
            "from xcorr_app.cli._tune import tune_cmd; "
            "'tune' in cli.commands or cli.add_command(tune_cmd); "
            "sys.argv[0] = 'xcorr'; cli(prog_name='xcorr')")


def xcorr_tune(*args, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    env.pop("XCORR_DEBUG", None)
    return subprocess.run([sys.executable, "-c", RUN_TUNE, "tune", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_tune_help_names_the_options():
    res = xcorr_tune("--help")
    assert res.returncode == 0, res.stderr
    for word in ("--frames", "--size", "--max-shift", "--form", "--bench", "--again", "2 s"):
        assert word in res.stdout


@pytest.mark.parametrize("args,words", [
    (["--bench", "--frames", "8"], ["--bench takes the problems of xcorr bench xcorr"]),
    (["--size", "12x"], ["--size takes H or HxW"]),
    (["--max-shift", "-3"], ["--max-shift takes N or SY,SX"]),
    (["--frames", "0"], ["--frames"]),
    (["--form", "many"], ["--form"]),
    (["--size", "64"], ["xcorr tune needs a GPU"]),  # no GPU visible in the subprocess
])
def test_tune_errors_are_one_line(args, words):
    res = xcorr_tune(*args)
    assert res.returncode == 2
    assert_clean_error(res, *words)


def test_bad_xcorr_tune_value_is_one_line():
    # the planner reads XCORR_TUNE on the GPU path only: here, through its parser
    code = ("from xcorr_app.cli._main import user_errors\n"
            "from xcorr_app._config import tune_requested\n"
            "with user_errors():\n    tune_requested()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XCORR_TUNE": "maybe"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 2
    assert_clean_error(res, "XCORR_TUNE must be 0 or 1", "'maybe'")


def test_tune_problems_from_the_options():
    from xcorr_app.cli._tune import tune_problems

    probs = tune_problems((16, 64), ((512, 384),), (4, None), "n_to_mn")
    assert len(probs) == 4
    p = probs[0]
    assert p.shapes() == ((16, 512, 384), (16, 1, 512, 384)) and p.max_shift == 4
    assert probs[1].max_shift is None and probs[2].shapes()[0] == (64, 512, 384)


@pytest.mark.gpu
def test_tune_runs_and_caches(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0"),
           "XCORR_CACHE_DIR": str(tmp_path)}
    res = xcorr_tune("--frames", "20", "--size", "96x80", "--max-shift", "4", env=env)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0].startswith("one_to_many 1x20 at 96x80, max_shift 4: ")
    assert "cost model" in lines[0] and str(tmp_path) in lines[-1]
    assert (tmp_path / "tuning.json").exists() or "heuristic" in lines[0]
