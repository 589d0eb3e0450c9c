"""The CPU's threads: slices of a chunk, XCORR_THREADS, and the allocator setting."""

import pytest

from xcorr_app.errors import InputError
from xcorr_app.streaming import cpu_threads, frame_slices, keep_freed_memory


@pytest.mark.parametrize("n,parts", [(1, 1), (1, 4), (7, 2), (10, 3), (64, 16), (5, 5), (3, 8)])
def test_frame_slices_cover_every_frame_once(n, parts):
    slices = frame_slices(n, parts)
    assert len(slices) == min(n, parts)
    assert [a for a, _ in slices] == [0] + [b for _, b in slices[:-1]]
    assert slices[-1][1] == n
    sizes = [b - a for a, b in slices]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_xcorr_threads(monkeypatch):
    monkeypatch.setenv("XCORR_THREADS", "3")
    assert cpu_threads() == 3
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("XCORR_THREADS", bad)
        with pytest.raises(InputError, match="XCORR_THREADS"):
            cpu_threads()
    monkeypatch.delenv("XCORR_THREADS")
    assert cpu_threads() >= 1


def test_keep_freed_memory_is_idempotent():
    first = keep_freed_memory()
    assert keep_freed_memory() is True and isinstance(first, bool)


def test_one_blas_thread_survives_a_memory_map_whose_name_is_not_utf8(monkeypatch):
    """threadpoolctl reads /proc/self/maps as UTF-8: with a memory-mapped input named in Latin-1
    bytes it raised UnicodeDecodeError, and the run stopped as an internal error (seen on a
    machine whose libraries list the map; it depends on threadpoolctl's version)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from xcorr_app.streaming import one_blas_thread

    def maps_not_utf8(*args, **kwargs):
        raise UnicodeDecodeError("utf-8", b"caf\xe9", 3, 4, "invalid continuation byte")

    monkeypatch.setattr(threadpoolctl, "threadpool_limits", maps_not_utf8)
    with one_blas_thread():
        pass
