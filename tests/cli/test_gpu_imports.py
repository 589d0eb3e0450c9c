"""A GPU run of ``xcorr align`` with its defaults (the quality report, aligned.tif, the plots),
the mean reference or Lucas-Kanade (auto on noisy stacks) hands no CuPy array to a NumPy
ufunc: CuPy would import cupyx and SciPy for it, 0.35 s of a one-shot run
(tests/fresh_process.py)."""

import pytest

from fresh_process import first_cupyx_import
from sample_paths import stack_path

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("extra", [[], ["--reference", "mean"], ["--lucas-kanade", "on"]])
def test_a_default_gpu_align_imports_no_cupyx(tmp_path, extra):
    argv = ["align", str(stack_path("cell")), "--out", str(tmp_path / "out"), "--device", "gpu",
            "-q", *extra]
    stack = first_cupyx_import(
        "import sys\n"
        "from xcorr_app.cli._main import cli\n"
        f"try:\n    cli(prog_name='xcorr', args={argv!r})\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n")
    assert stack == "", stack
    assert (tmp_path / "out" / "aligned.tif").exists()
