"""The patch pass's rows (alignment/piecewise/_patch_rows.py) on the CPU: the rows kept on the device
(``KeptRows``, here over NumPy standing in for CuPy) and the field made from the rows."""
import ctypes
import types

import numpy as np

from xcorr_app.alignment.piecewise import _patch_rows
from xcorr_app.alignment.piecewise._patch_rows import KeptRows, field_from_rows
from xcorr_app.alignment.piecewise._patches import PatchGrid


class HostRows(np.ndarray):
    """NumPy rows that pose as device rows for the copy to the host (``.data.ptr``)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def fake_device(copies=None, monkeypatch=None):
    """NumPy as KeptRows uses CuPy: ``empty``, ``float64``, ``cuda.Device().synchronize()``
    (counted) and, with ``monkeypatch``, the queued copy to the host
    (``streaming.copy_to_host_async``: done at once, its sizes recorded in ``copies``)."""
    waits = []
    device = types.SimpleNamespace(synchronize=lambda: waits.append(1))

    def copy(dst, src, stream=None):
        assert stream is None  # (the current stream)
        copies.append(dst.nbytes)
        ctypes.memmove(dst.ctypes.data, src.data.ptr, dst.nbytes)

    if monkeypatch is not None:
        monkeypatch.setattr(_patch_rows, "copy_to_host_async", copy)
    cuda = types.SimpleNamespace(Device=lambda: device)
    xp = types.SimpleNamespace(empty=lambda *a: np.empty(*a).view(HostRows),
                               float64=np.float64, cuda=cuda)
    return xp, waits


def chunk_rows(first, n, p):
    return np.arange(first, first + n, dtype=np.float64)[:, None, None] + np.zeros((n, p, 5))


def test_kept_rows_fetch_once_full_out_of_order_and_at_the_end(monkeypatch):
    p = 3
    monkeypatch.setattr(_patch_rows, "KEPT_MAX_BYTES", 40 * p * 4)  # room for 4 frames
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
    monkeypatch.setattr(_patch_rows, "KEPT_MAX_BYTES", 1)  # room for one frame
    xp, waits = fake_device()
    table = np.zeros((9, p, 5))
    kept = KeptRows(xp, table)
    for first, n in [(0, 4), (4, 5)]:
        kept.slot(first, n)[...] = chunk_rows(first, n, p)
    kept.fetch()
    assert len(waits) == 2
    np.testing.assert_array_equal(table, chunk_rows(0, 9, p))


def test_kept_rows_into_a_pinned_table_are_copied_as_each_chunk_is_written(monkeypatch):
    """With a page-locked table each chunk's rows go there on its stream once written
    (``sent``); a fetch then only waits, and copies what was not sent (a chunk out of order)."""
    p = 3
    monkeypatch.setattr(_patch_rows, "KEPT_MAX_BYTES", 40 * p * 4)  # room for 4 frames
    copies = []
    xp, waits = fake_device(copies, monkeypatch)
    table = np.full((12, p, 5), np.nan)
    kept = KeptRows(xp, table, pinned=True)
    for first, n in [(0, 3), (3, 1), (4, 3), (7, 1)]:  # (4 + 3 > 4: one wait)
        kept.slot(first, n)[...] = chunk_rows(first, n, p)
        kept.sent(first, n)
        np.testing.assert_array_equal(table[first:first + n], chunk_rows(first, n, p))
    assert copies == [3 * p * 40, p * 40, 3 * p * 40, p * 40] and len(waits) == 1
    # out of order (9 does not follow 8: a wait), written and never sent: the fetch copies it
    kept.slot(9, 2)[...] = chunk_rows(9, 2, p)
    kept.fetch()
    assert len(waits) == 3 and len(copies) == 4
    np.testing.assert_array_equal(table[:8], chunk_rows(0, 8, p))
    np.testing.assert_array_equal(table[9:11], chunk_rows(9, 2, p))
    assert np.isnan(table[8]).all() and np.isnan(table[11]).all()
    kept.sent(9, 2)  # (fetched already: nothing to copy)
    assert len(copies) == 4


def test_kept_rows_for_a_range_are_pinned_up_to_the_bound(monkeypatch):
    calls = []

    def buffer(shape, dtype, pinned):
        calls.append(pinned)
        return np.empty(shape, dtype)

    monkeypatch.setattr(_patch_rows, "host_buffer", buffer)
    xp, _ = fake_device()
    kept = KeptRows.for_range(xp, (10, 4, 5))
    assert kept.pinned and calls == [True, True]  # (the rows and their low flags)
    assert kept.low.shape == (10, 4) and kept.low.dtype == np.bool_
    monkeypatch.setattr(_patch_rows, "KEPT_MAX_BYTES", 8 * 10 * 4 * 5 - 1)
    kept = KeptRows.for_range(xp, (10, 4, 5))
    assert not kept.pinned and calls == [True, True] and kept.table.shape == (10, 4, 5)
    assert kept.low is None and kept.low_flags() is None


def test_kept_rows_copy_the_low_flags_apart_only_when_every_chunk_sent_them(monkeypatch):
    """``sent(first, n, low)`` copies the chunk's (n, P) bool flags beside its rows; the flags
    are the pass's (``low_flags``) only once every frame's came so."""
    p = 3
    copies = []
    xp, _ = fake_device(copies, monkeypatch)
    for missing in (False, True):
        table = np.full((6, p, 5), np.nan)
        kept = KeptRows(xp, table, pinned=True, low=np.zeros((6, p), bool))
        for first, n in [(0, 4), (4, 2)]:
            rows = chunk_rows(first, n, p)
            flags = (np.arange(n * p).reshape(n, p) % 2 == 1).view(HostRows)
            rows[..., 4] = flags
            kept.slot(first, n)[...] = rows
            kept.sent(first, n, None if missing and first else flags)
            if first == 0:
                assert kept.low_flags() is None  # (not every frame's yet)
        kept.fetch()
        if missing:  # the last chunk came without its flags: read them from the rows
            assert kept.low_flags() is None
        else:
            np.testing.assert_array_equal(kept.low_flags(), table[..., 4] == 1)
            assert kept.low_flags().any() and not kept.low_flags().all()


def test_field_from_rows_views_the_rows():
    rng = np.random.default_rng(2)
    n, grid = 7, PatchGrid.make((2, 3), None, 3, (60, 70), (0, 60, 0, 70))
    table = rng.normal(size=(n, 6, 5))
    table[..., 4] = rng.random((n, 6)) < 0.3
    want = table[..., :2].reshape(n, 2, 3, 2).copy()
    conf, low = table[..., 3].reshape(n, 2, 3).copy(), table[..., 4].reshape(n, 2, 3) == 1
    template = np.zeros((60, 70), np.float32)
    setup = types.SimpleNamespace(grid=grid, template_on_host=lambda: template)
    f = field_from_rows(table, setup)
    np.testing.assert_array_equal(f.field, want)
    np.testing.assert_array_equal(f.confidence, conf)
    np.testing.assert_array_equal(f.low, low)
    assert f.template is template
    assert np.shares_memory(f.field, table)  # (no new array for the field)


def test_field_from_rows_takes_low_flags_kept_apart():
    """Flags given (KeptRows' bools) are the field's, not the rows' column read again."""
    n, grid = 4, PatchGrid.make((2, 2), None, 3, (50, 50), (0, 50, 0, 50))
    table = np.zeros((n, 4, 5))
    given = np.eye(4, dtype=bool)  # (the rows' column says no patch is low)
    setup = types.SimpleNamespace(grid=grid, template_on_host=lambda: None)
    np.testing.assert_array_equal(field_from_rows(table, setup, given).low,
                                  given.reshape(n, 2, 2))
    assert not field_from_rows(table, setup).low.any()
