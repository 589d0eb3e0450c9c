"""``xcorr bench align --floor``: the rows and their shares (GPU), one line without a GPU."""

import numpy as np
import pytest

from cli_helpers import xcorr
from xcorr_app import backend


@pytest.mark.skipif(backend.gpu_available(), reason="the message of a machine without a GPU")
def test_without_a_gpu_one_line():
    res = xcorr("bench", "align", "--floor")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "needs a GPU" in res.stderr.strip().splitlines()[-1]


@pytest.mark.gpu
def test_rows_and_shares_on_a_small_stack():
    from xcorr_app.bench._align_floor import floor_rows

    rows = floor_rows(frames=(16,), sides=(128,), repeat=1, echo=lambda line: None)
    names = [r["row"] for r in rows]
    assert names[0].startswith("pinned copy") and names[1].startswith("batched FFT")
    assert all(r["seconds"] > 0 and np.isfinite(r["fps"]) for r in rows)
    assert all(r["share"] is None for r in rows[:2])
    assert all(0 < r["share"] for r in rows[2:])
