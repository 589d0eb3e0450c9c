"""xcorr_app.streaming on the CPU: the one chunk loop (map_chunks over a file, an array and a
multi-channel file), its chunk arithmetic, and the memory budget's argument errors."""

import time

import numpy as np
import pytest
import tifffile

from interrupts import each_line
from xcorr_app.errors import InputError
from xcorr_app.io import ArraySource, ChannelStack, open_stack
from xcorr_app.streaming import (ChunkPrefetcher, chunk_bounds, frame_ranges, map_chunks,
                                 parse_memory, piece_bounds)


@pytest.mark.parametrize("n, step", [(10, 4), (8, 4), (3, 5), (1, 1)])
def test_chunk_bounds_cover_the_frames_once(n, step):
    bounds = chunk_bounds(0, n, step)
    assert [a for a, _ in bounds] == list(range(0, n, step))
    assert bounds[-1][1] == n and all(0 < b - a <= step for a, b in bounds)
    assert [b for _, b in bounds[:-1]] == [a for a, _ in bounds[1:]]


def test_frame_ranges_split_evenly():
    assert frame_ranges(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert frame_ranges(2, 4) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("source", ["file", "array"])
def test_map_chunks_yields_every_chunk_in_order(tmp_path, rng, source):
    stack = rng.integers(0, 1000, (11, 6, 7)).astype(np.uint16)
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, stack)
    open_src = (lambda: open_stack(path)) if source == "file" else (lambda: ArraySource(stack))
    out = list(map_chunks(open_src, 4, lambda a, f: f.astype(np.float32) + a))
    assert [a for a, _ in out] == [0, 4, 8]
    got = np.concatenate([r for _, r in out])
    want = stack.astype(np.float32) + np.repeat([0, 4, 8], [4, 4, 3])[:, None, None]
    np.testing.assert_array_equal(got, want)


def test_map_chunks_results_do_not_alias_the_read_buffer(tmp_path, rng):
    """A function that hands its frames back still gives every chunk (the reader's ring of
    buffers is reused for later chunks)."""
    stack = rng.integers(0, 255, (9, 5, 6)).astype(np.uint8)
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, stack)
    out = list(map_chunks(lambda: open_stack(path), 2, lambda a, f: f))
    np.testing.assert_array_equal(np.concatenate([r for _, r in out]), stack)


def test_map_chunks_reads_every_channel_of_a_channel_stack(tmp_path, rng):
    stack = rng.integers(0, 255, (5, 3, 6, 8)).astype(np.uint8)
    path = tmp_path / "c.tif"
    tifffile.imwrite(path, stack, imagej=True, metadata={"axes": "TCYX"})
    out = list(map_chunks(lambda: ChannelStack(path), 2, lambda a, f: f.sum(axis=1)))
    np.testing.assert_array_equal(np.concatenate([r for _, r in out]),
                                  stack.sum(axis=1, dtype=np.uint64))


def test_map_chunks_hands_errors_to_the_consumer():
    def fn(a, f):
        if a == 4:
            raise RuntimeError("chunk 4")
        return f

    with pytest.raises(RuntimeError, match="chunk 4"):
        list(map_chunks(lambda: ArraySource(np.zeros((9, 2, 2))), 4, fn))


@pytest.mark.parametrize("spec", ["lots", "-1", "0"])
def test_bad_memory_sizes_are_value_errors(spec):
    with pytest.raises(ValueError):
        parse_memory(spec)
    with pytest.raises(InputError):
        parse_memory(spec)


@pytest.mark.parametrize("pinned", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_prefetcher_ring_gives_every_chunk(tmp_path, rng, pinned):
    """The read-ahead ring: the first chunk in ordinary memory, the later buffers page-locked
    by a thread (GPU); every chunk's frames as the file holds them, each buffer reused."""
    from xcorr_app.streaming import ChunkPrefetcher

    stack = rng.integers(0, 60000, (23, 9, 14), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    seen = []
    with open_stack(tmp_path / "s.tif") as src, \
            ChunkPrefetcher(src, chunk_frames=3, depth=2, pinned=pinned) as chunks:
        for start, frames, slot in chunks:
            np.testing.assert_array_equal(frames, stack[start:start + len(frames)])
            seen.append((start, slot))
            chunks.release(slot)
    assert [s for s, _ in seen] == list(range(0, 23, 3))
    assert {k for _, k in seen} == {0, 1, 2}


def test_prefetcher_reads_on_while_page_locking_is_slow(tmp_path, rng, monkeypatch):
    """Page-locking (a stand-in that waits until told) does not hold the reads up: the slots
    read into ordinary memory meanwhile, then into their page-locked buffers once made; the
    page-locking not begun by the end is cancelled."""
    import threading

    from xcorr_app.streaming import _prefetch

    release, made = threading.Event(), []

    def slow_pin(shape, dtype, pinned):
        assert pinned and release.wait(10)
        made.append(np.empty(shape, dtype))
        return made[-1]

    monkeypatch.setattr(_prefetch, "host_buffer", slow_pin)
    stack = rng.integers(0, 60000, (40, 9, 14), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    into = []
    with open_stack(tmp_path / "s.tif") as src, \
            ChunkPrefetcher(src, chunk_frames=2, depth=2, pinned=True) as chunks:
        for start, frames, slot in chunks:
            np.testing.assert_array_equal(frames, stack[start:start + len(frames)])
            into.append(any(np.shares_memory(frames, m) for m in made))
            chunks.release(slot)
            if start == 8:  # (five chunks read without a page-locked buffer)
                release.set()
                while not all(f.done() for f in tuple(chunks._pins.values())):
                    time.sleep(0.01)
    assert not any(into[:5]) and all(into[-5:]) and len(made) == 3


def test_page_locking_not_begun_is_cancelled_at_close(monkeypatch):
    """A prefetcher closed while its page-locker is still on the first buffer: the others are
    never made."""
    import threading

    from xcorr_app.streaming import _prefetch

    release, made = threading.Event(), []

    def slow_pin(shape, dtype, pinned):
        assert release.wait(10)
        made.append(shape)
        return np.empty(shape, dtype)

    monkeypatch.setattr(_prefetch, "host_buffer", slow_pin)
    with ChunkPrefetcher(ArraySource(np.zeros((12, 4, 5), np.uint16)), chunk_frames=2,
                         depth=2, pinned=True) as chunks:
        for _, _, slot in chunks:
            chunks.release(slot)
            break
    release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("xcorr-pin"):
            thread.join(10)
    assert len(made) == 1 and chunks._pins == {}


@pytest.mark.parametrize("n, chunk, piece", [(23, 5, 2), (23, 5, 5), (23, 5, 9), (7, 3, 2),
                                             (1, 4, 1), (12, 4, 3)])
@pytest.mark.parametrize("first", [None, 1, 2, 7])
def test_piece_bounds_tile_the_chunks(n, chunk, piece, first):
    pieces = piece_bounds(n, chunk, piece, first)
    assert [a for a, _ in pieces] == [0] + [b for _, b in pieces[:-1]] and pieces[-1][1] == n
    assert all(0 < b - a <= min(piece, chunk) for a, b in pieces)
    if first is not None:  # the first piece no longer than asked; the other chunks as before
        assert pieces[0][1] == min(first, piece, chunk, n)
        later = [p for p in pieces if p[0] >= chunk]
        assert later == [p for p in piece_bounds(n, chunk, piece) if p[0] >= chunk]
    for a, b in chunk_bounds(0, n, chunk):  # no piece straddles two chunks
        assert all(q <= a or p >= b or (a <= p and q <= b) for p, q in pieces)


def test_prefetcher_reads_the_bounds_given(tmp_path, rng):
    stack = rng.integers(0, 60000, (23, 9, 14), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    bounds = piece_bounds(23, 5, 2)
    got = []
    with open_stack(tmp_path / "s.tif") as src, \
            ChunkPrefetcher(src, chunk_frames=2, depth=2, bounds=bounds) as chunks:
        for start, frames, slot in chunks:
            np.testing.assert_array_equal(frames, stack[start:start + len(frames)])
            got.append((start, start + len(frames)))
            chunks.release(slot)
    assert got == bounds
    with open_stack(tmp_path / "s.tif") as src:
        with pytest.raises(ValueError, match="1 to 2 frames"):
            ChunkPrefetcher(src, chunk_frames=2, bounds=[(0, 3)])


def test_ctrl_c_at_any_line_of_the_consumer_leaves_a_reader_close_stops():
    """Ctrl-C may land at any line of Python that the consumer's loop, release() or close()
    runs, the standard library's included (a queue.Queue's put, waking the reader that waits
    for a buffer, could lose that wake-up and close's: the interrupted run hung in close).
    The chunks before it are the stack's, and close() stops the reader."""
    stack = np.arange(8 * 2 * 3, dtype=np.uint16).reshape(8, 2, 3)

    def trial(interrupting):
        chunks = ChunkPrefetcher(ArraySource(stack), chunk_frames=1, depth=1).start()
        seen = []
        try:
            items = iter(chunks)
            start, frames, slot = next(items)
            seen.append((start, frames.copy()))
            deadline = time.monotonic() + 5
            while chunks._ready.qsize() < 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.01)  # both buffers full: the reader waits for one
            with interrupting:
                chunks.release(slot)
                for start, frames, slot in items:
                    seen.append((start, frames.copy()))
                    chunks.release(slot)
                chunks.close()
        except KeyboardInterrupt:
            assert interrupting.where is not None
        finally:
            chunks.close()
        assert not chunks._thread.is_alive()
        assert [s for s, _ in seen] == list(range(len(seen)))
        for start, frames in seen:
            np.testing.assert_array_equal(frames, stack[start:start + 1])
        if interrupting.where is None:
            assert len(seen) == 8

    assert each_line(trial) > 10


@pytest.mark.gpu
@pytest.mark.parametrize("piece_frames, chunk", [(2, 5), (1, 3), (4, 4), (3, 23)])
def test_device_chunks_assemble_each_chunk_from_its_pieces(tmp_path, rng, monkeypatch,
                                                          piece_frames, chunk):
    """On the GPU a chunk is read and copied in pieces (``PIECE_BYTES``): every chunk as the
    file holds it, in order, on poisoned device memory."""
    import cupy as cp

    from xcorr_app.streaming import DeviceChunks
    from xcorr_app.streaming import _chunks as chunks_module

    stack = rng.integers(0, 60000, (23, 9, 14), dtype=np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    monkeypatch.setattr(chunks_module, "PIECE_BYTES", piece_frames * stack[0].nbytes)
    poison = cp.full(stack.size * 4, 0xDEAD, cp.uint16)  # freed into the pool the chunks use
    del poison
    got = []
    with open_stack(tmp_path / "s.tif") as src, DeviceChunks(src, chunk, cp) as chunks:
        for start, frames in chunks:
            assert isinstance(frames, cp.ndarray) and frames.dtype == np.uint16
            np.testing.assert_array_equal(frames.get(), stack[start:start + len(frames)])
            got.append((start, start + len(frames)))
    assert got == chunk_bounds(0, 23, chunk)


def test_map_chunks_writes_into_out_and_yields_its_views(rng):
    stack = rng.integers(0, 1000, (11, 6, 7)).astype(np.uint16)
    out = np.full((11, 6, 7), np.nan, np.float64)  # float32 results cast (same kind)
    got = list(map_chunks(lambda: ArraySource(stack), 4, lambda a, f: f.astype(np.float32) + a,
                          out=out))
    assert [a for a, _ in got] == [0, 4, 8]
    assert all(np.shares_memory(v, out) and v.shape[0] == min(4, 11 - a) for a, v in got)
    want = stack.astype(np.float64) + np.repeat([0, 4, 8], [4, 4, 3])[:, None, None]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("out, words", [
    (np.zeros((11, 6, 7), np.float32)[:, :, ::-1], "C-contiguous"),
    ([[0.0]], "C-contiguous"),
    (np.zeros((10, 6, 7), np.float32), "no room"),
    (np.zeros((11, 6, 7), np.int16), "no room")])  # float results into ints: refused
def test_map_chunks_refuses_an_out_it_cannot_fill(rng, out, words):
    stack = rng.random((11, 6, 7)).astype(np.float32)
    with pytest.raises(InputError, match=words):
        list(map_chunks(lambda: ArraySource(stack), 4, lambda a, f: f + 1, out=out))


@pytest.mark.gpu
@pytest.mark.parametrize("gpus", [None, "0"])
def test_map_chunks_writes_gpu_results_into_out(rng, gpus):
    """From the device straight into out (a strided result made contiguous first), on the
    current GPU and through the GPUs' threads: the numbers of the copying path."""
    import cupy as cp

    stack = rng.random((9, 5, 6)).astype(np.float32)

    def fn(a, f):
        return (cp.asarray(f) * 2 + a)[:, 1:, ::2]  # a strided device result

    want = np.concatenate([r for _, r in map_chunks(lambda: ArraySource(stack), 4, fn,
                                                    xp=cp if gpus is None else np,
                                                    gpus=gpus)])
    out = np.full(want.shape, np.nan, np.float32)
    got = list(map_chunks(lambda: ArraySource(stack), 4, fn, xp=cp if gpus is None else np,
                          gpus=gpus, out=out))
    assert all(np.shares_memory(v, out) for _, v in got)
    np.testing.assert_array_equal(out, want)


def _fault_threads():
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("xcorr-fault")
            and t.is_alive()]  # (a Ctrl-C inside Thread.start leaves one never started)


@pytest.mark.parametrize("stop", ["all", "early", "error"])
def test_out_pages_faulted_ahead_and_the_threads_gone(monkeypatch, stop):
    """map_chunks(out=) faults in the pages of the next chunks' rows on threads: the rows
    written are the results (the zero bytes of the faulting overwritten), every chunk waited
    for before its rows are written, and the threads are gone however the loop ends."""
    from xcorr_app.streaming import _chunks

    waited = []
    wait = _chunks.FaultAhead.wait
    monkeypatch.setattr(_chunks.FaultAhead, "wait",
                        lambda self, k: (waited.append(k), wait(self, k))[1])
    stack = np.arange(9 * 64 * 96, dtype=np.float32).reshape(9, 64, 96) + 1
    out = np.full(stack.shape, -7.0, np.float32)

    def fn(a, f):
        if stop == "error" and a == 4:
            raise RuntimeError("a chunk failed")
        return f * 2

    it = map_chunks(lambda: ArraySource(stack), 2, fn, out=out)
    if stop == "all":
        got = list(it)
        np.testing.assert_array_equal(out, stack * 2)
        assert [a for a, _ in got] == [0, 2, 4, 6, 8] and waited == [0, 1, 2, 3, 4]
    elif stop == "early":
        next(it)
        it.close()
        np.testing.assert_array_equal(out[:2], stack[:2] * 2)
    else:
        with pytest.raises(RuntimeError, match="a chunk failed"):
            list(it)
        np.testing.assert_array_equal(out[:4], stack[:4] * 2)
    assert _fault_threads() == []


@pytest.mark.gpu
@pytest.mark.parametrize("stop", ["all", "early", "error", "host result"])
def test_gpu_out_written_by_the_download_thread_one_chunk_behind(rng, stop):
    """On the GPU map_chunks(out=) copies each chunk's result into out on a thread while the
    next chunk runs, and yields it once written: every yielded view holds its result when
    yielded (checked then, before the loop goes on), results cast to out's type, a chunk
    whose result is on the host goes the plain way, and the thread is gone however the loop
    ends."""
    import threading

    import cupy as cp

    stack = rng.random((23, 37, 41)).astype(np.float32)  # 6 chunks of 4, the last of 3
    out = np.full(stack.shape, np.nan, np.float64)

    def fn(a, f):
        if stop == "error" and a == 12:
            raise RuntimeError("a chunk failed")
        r = cp.asarray(f) * 3 + a
        return r.get() if stop == "host result" and a == 8 else r

    def want(a, b):
        return stack[a:b].astype(np.float64) * 3 + a

    it = map_chunks(lambda: ArraySource(stack), 4, fn, xp=cp, out=out)
    seen = []
    if stop == "error":
        with pytest.raises(RuntimeError, match="a chunk failed"):
            for a, v in it:
                seen.append(a)
                np.testing.assert_allclose(v, want(a, a + len(v)), rtol=1e-6)
        assert seen == [0, 4]  # (chunk 8's copy waits behind the failure: not yielded)
    else:
        for a, v in it:
            assert np.shares_memory(v, out)
            np.testing.assert_allclose(v, want(a, a + len(v)), rtol=1e-6)
            seen.append(a)
            if stop == "early" and a == 8:
                it.close()
                break
        assert seen == ([0, 4, 8] if stop == "early" else [0, 4, 8, 12, 16, 20])
    assert not [t for t in threading.enumerate() if t.name.startswith("xcorr-down")]


# (the interrupt, raised by a trace function, also lands in weakref callbacks of the threading
# module, whose exceptions Python reports and ignores)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_map_chunks_into_out_ends_when_interrupted_at_any_line():
    """Ctrl-C at every line of a map_chunks(out=) loop once its threads run (the pages of out
    faulted in on threads ahead, FaultAhead; a Ctrl-C inside CPython's Thread.start is not
    tried: it can leave the threading module's own state half changed): every trial ends, its
    threads with it, and the rows written before the interrupt hold their results."""
    stack = np.arange(7 * 64 * 96, dtype=np.float32).reshape(7, 64, 96)

    def trial(interrupting):
        out = np.full(stack.shape, -1.0, np.float32)
        it = map_chunks(lambda: ArraySource(stack), 2, lambda a, f: f * 2, out=out)
        done = [(lambda a, v: (a, len(v)))(*next(it))]  # (the threads started)
        try:
            with interrupting:
                for start, view in it:
                    done.append((start, len(view)))
        except KeyboardInterrupt:
            assert interrupting.where is not None
        finally:
            it.close()
        for start, n in done:
            np.testing.assert_array_equal(out[start:start + n], stack[start:start + n] * 2)
        del it  # (a Ctrl-C inside the loop's clean-up itself: its threads stop once let go)
        deadline = time.monotonic() + 5
        while _fault_threads() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert _fault_threads() == []
        if interrupting.where is None:
            assert [a for a, _ in done] == [0, 2, 4, 6]

    assert each_line(trial) > 10


@pytest.mark.gpu
@pytest.mark.parametrize("stage", [4096, 4000, 10**9])
def test_gpu_out_through_pinned_pieces(rng, monkeypatch, stage):
    """The download thread's copy through two page-locked pieces (``STAGE_BYTES`` small here:
    many pieces, a last short one, pieces that cut frames and values' bytes) gives the bytes
    of the plain copy; the staging threads are gone afterwards."""
    import threading

    import cupy as cp

    from xcorr_app.streaming import _into_out

    monkeypatch.setattr(_into_out, "STAGE_BYTES", stage)
    stack = rng.random((13, 29, 31)).astype(np.float32)
    out = np.full(stack.shape, np.nan, np.float32)
    got = list(map_chunks(lambda: ArraySource(stack), 5, lambda a, f: cp.asarray(f) * 2 - a,
                          xp=cp, out=out))
    assert [a for a, _ in got] == [0, 5, 10]
    want = np.concatenate([stack[a:a + 5] * 2 - a for a in (0, 5, 10)])
    np.testing.assert_array_equal(out, want)
    assert not [t for t in threading.enumerate() if t.name.startswith("xcorr-stage")
                and t.is_alive()]


def _fake_cupy(monkeypatch):
    """map_chunks(gpus=...)'s loop on the CPU: a stand-in for CuPy's device context and
    asarray (the GPUs' threads then compute NumPy chunks)."""
    import sys
    import types

    class Device:
        def __init__(self, i):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=Device), asarray=np.asarray))


@pytest.mark.parametrize("depth", [1, 3])
def test_chunks_shared_out_over_gpus_come_in_order(monkeypatch, depth):
    from xcorr_app.streaming._chunks import _on_gpus

    _fake_cupy(monkeypatch)
    stack = np.arange(11 * 2 * 3, dtype=np.float32).reshape(11, 2, 3)
    got = list(_on_gpus(lambda: ArraySource(stack), [0, 1, 2], 2, lambda a, f: f * 2 + a,
                        depth))
    assert [a for a, _ in got] == [0, 2, 4, 6, 8, 10]
    np.testing.assert_array_equal(np.concatenate([r for _, r in got]),
                                  stack * 2 + np.repeat([0, 2, 4, 6, 8, 10], [2] * 5 + [1])
                                  [:, None, None])
    with pytest.raises(ZeroDivisionError):
        list(_on_gpus(lambda: ArraySource(stack), [0, 1], 2,
                      lambda a, f: f / 0 if a == 6 and not np.ndim(1 / 0) else f, depth))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # (raised in
def test_ctrl_c_anywhere_in_the_gpus_loop_leaves_no_thread(monkeypatch):  # a GC callback)
    """A Ctrl-C at every line of map_chunks(gpus=...)'s consumer loop and its clean-up, once
    the GPUs' threads run: the loop ends (no thread left waiting) and the interrupt reaches
    the caller.  (The threads' start is left out: an exception raised inside CPython's own
    ``Thread.start`` at the wrong line keeps ``threading``'s global limbo lock, and every
    later thread start of the process waits for it; a trace hook raises there, as this
    harness does.)"""
    import threading

    from xcorr_app.streaming._chunks import _on_gpus

    _fake_cupy(monkeypatch)
    stack = np.arange(8 * 2 * 2, dtype=np.float32).reshape(8, 2, 2)

    def trial(interrupting):
        gen = _on_gpus(lambda: ArraySource(stack), [0, 1], 2, lambda a, f: f + 1, 1)
        seen = [next(gen)[0]]  # (the threads started)
        try:
            with interrupting:
                for a, _ in gen:
                    seen.append(a)
        except KeyboardInterrupt:
            pass
        gen.close()  # (interrupted in this loop's own line: the generator's clean-up now)
        assert not [t for t in threading.enumerate() if t.name.startswith("xcorr-gpu")
                    and t.is_alive()]
        if interrupting.where is None:
            assert seen == [0, 2, 4, 6]

    assert each_line(trial) > 10
