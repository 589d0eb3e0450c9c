"""``xcorr bench align --floor``: the rows and their shares (GPU; without one:
``test_bench_align.py``)."""

import numpy as np
import pytest


@pytest.mark.gpu
def test_rows_and_shares_on_a_small_stack():
    from xcorr_app.bench._align_floor import floor_rows

    rows = floor_rows(frames=(16,), sides=(128,), repeat=1, echo=lambda line: None)
    names = [r["row"] for r in rows]
    assert names[0].startswith("pinned copy") and names[1].startswith("batched FFT")
    assert all(r["seconds"] > 0 and np.isfinite(r["fps"]) for r in rows)
    assert all(r["share"] is None for r in rows[:2])
    assert all(0 < r["share"] for r in rows[2:])
