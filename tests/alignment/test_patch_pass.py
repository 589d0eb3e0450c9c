"""The patch pass's bookkeeping (alignment/_patch_pass.py) on the CPU: the rows kept on the
device (``KeptRows``, here over NumPy standing in for CuPy) and the field made from the rows."""
import types

import numpy as np

from xcorr_app.alignment import _patch_pass
from xcorr_app.alignment._patch_pass import KeptRows, field_from_rows
from xcorr_app.alignment._patches import PatchGrid


def fake_device():
    """NumPy as KeptRows uses CuPy: ``empty``, ``float64`` and ``cuda.Device().synchronize()``
    (counted)."""
    waits = []
    device = types.SimpleNamespace(synchronize=lambda: waits.append(1))
    xp = types.SimpleNamespace(empty=np.empty, float64=np.float64,
                               cuda=types.SimpleNamespace(Device=lambda: device))
    return xp, waits


def chunk_rows(first, n, p):
    return np.arange(first, first + n, dtype=np.float64)[:, None, None] + np.zeros((n, p, 5))


def test_kept_rows_fetch_once_full_out_of_order_and_at_the_end(monkeypatch):
    p = 3
    monkeypatch.setattr(_patch_pass, "KEPT_MAX_BYTES", 40 * p * 4)  # room for 4 frames
    xp, waits = fake_device()
    table = np.full((14, p, 5), np.nan)
    kept = KeptRows(xp, table)
    for first, n, waited in [(0, 3, 0), (3, 1, 0), (4, 3, 1), (7, 1, 1), (10, 2, 2),
                             (12, 2, 2)]:
        kept.slot(first, n)[...] = chunk_rows(first, n, p)  # (the chunk's kernel)
        assert len(waits) == waited  # full (4 + 3 > 4), then 10 does not follow 8
    assert np.isnan(table[10:]).all()  # (still on the device)
    kept.fetch()
    kept.fetch()  # (nothing left: no wait)
    assert len(waits) == 3
    want = np.concatenate([chunk_rows(0, 8, p), np.full((2, p, 5), np.nan),
                           chunk_rows(10, 4, p)])
    np.testing.assert_array_equal(table, want)


def test_kept_rows_grow_for_a_chunk_larger_than_the_bound(monkeypatch):
    p = 2
    monkeypatch.setattr(_patch_pass, "KEPT_MAX_BYTES", 1)  # room for one frame
    xp, waits = fake_device()
    table = np.zeros((9, p, 5))
    kept = KeptRows(xp, table)
    for first, n in [(0, 4), (4, 5)]:
        kept.slot(first, n)[...] = chunk_rows(first, n, p)
    kept.fetch()
    assert len(waits) == 2
    np.testing.assert_array_equal(table, chunk_rows(0, 9, p))


def test_field_from_rows_adds_the_rigid_shifts_into_the_rows():
    rng = np.random.default_rng(2)
    n, grid = 7, PatchGrid.make((2, 3), None, 3, (60, 70), (0, 60, 0, 70))
    table = rng.normal(size=(n, 6, 5))
    table[..., 4] = rng.random((n, 6)) < 0.3
    rigid = rng.normal(size=(n, 2))
    want = (rigid[:, None, :] + table[..., :2]).reshape(n, 2, 3, 2)
    conf, low = table[..., 3].reshape(n, 2, 3).copy(), table[..., 4].reshape(n, 2, 3) == 1
    setup = types.SimpleNamespace(grid=grid, template=np.zeros((60, 70), np.float32))
    f = field_from_rows(table, rigid, setup)
    np.testing.assert_array_equal(f.field, want)
    np.testing.assert_array_equal(f.confidence, conf)
    np.testing.assert_array_equal(f.low, low)
    assert np.shares_memory(f.field, table)  # (no new array for the field)
