"""``xcorr bench align --floor``: the rows and their shares (GPU; without one:
``test_bench_align.py``)."""

import numpy as np
import pytest


@pytest.mark.gpu
def test_rows_and_shares_on_a_small_stack():
    from xcorr_app.bench._align_floor import floor_rows

    rows = floor_rows(frames=(16,), sides=(128,), repeat=1, echo=lambda line: None)
    names = [r["row"] for r in rows]
    assert names[0] == "pinned copy"
    assert names[1].startswith("FFT correlation padded to 192x192")  # (1.5 x 128)
    assert names[2].startswith("FFT correlation unpadded")
    assert all(r["seconds"] > 0 and np.isfinite(r["fps"]) for r in rows)
    assert all(r["share"] is None for r in rows[:3])
    assert all(0 < r["share"] for r in rows[3:]) and len(rows) == 7
    floor = {r["row"]: r["seconds"] for r in rows[:3]}
    copy, padded, plain = floor.values()
    by_name = {r["row"]: r for r in rows}
    # (each row's share of the floor its definition gives)
    want = {"align from NumPy": max(copy, padded), "align from CuPy": padded,
            "align max_shift=16 from NumPy": max(copy, plain),
            "align max_shift=16 from CuPy": plain}
    for name, seconds in want.items():
        assert by_name[name]["share"] == pytest.approx(seconds / by_name[name]["seconds"])
