"""BackgroundWrites: chunks written in order by one thread; errors and interruptions."""

import threading
import time

import pytest

from interrupts import each_line
from xcorr_app.io import BackgroundWrites


class Sink:
    def __init__(self, fail_at=None, gate=None):
        self.chunks, self.threads = [], set()
        self.fail_at, self.gate = fail_at, gate

    def write(self, chunk):
        if self.gate is not None:
            self.gate.wait(5)
        self.threads.add(threading.current_thread().name)
        if chunk == self.fail_at:
            raise OSError(28, "No space left on device")
        self.chunks.append(chunk)


def test_every_chunk_in_order_by_one_other_thread():
    sink = Sink()
    with BackgroundWrites(sink, depth=2) as bg:
        for k in range(50):
            bg.write(k)
    assert sink.chunks == list(range(50))
    assert sink.threads == {"xcorr-writer"}


def test_an_error_of_the_thread_is_raised_in_the_caller_and_later_chunks_dropped():
    sink = Sink(fail_at=3)
    with pytest.raises(OSError, match="No space"):
        with BackgroundWrites(sink) as bg:
            for k in range(50):
                bg.write(k)
    assert sink.chunks == [0, 1, 2]


def test_an_error_raised_by_close_when_the_last_chunk_fails():
    sink = Sink(fail_at=2)
    bg = BackgroundWrites(sink)
    for k in range(3):
        bg.write(k)
    with pytest.raises(OSError):
        bg.close()
    with pytest.raises(RuntimeError, match="after close"):
        bg.write(4)


def test_an_exception_in_the_block_drops_the_waiting_chunks():
    gate = threading.Event()
    sink = Sink(gate=gate)
    with pytest.raises(KeyboardInterrupt):
        with BackgroundWrites(sink, depth=3) as bg:
            stop = bg._stop

            def open_gate_then_stop():  # the thread blocks on chunk 0 until the block has failed
                gate.set()
                stop()

            bg._stop = open_gate_then_stop
            for k in range(4):  # chunk 0 in the thread (at the gate), three waiting
                bg.write(k)
            raise KeyboardInterrupt
    assert sink.chunks == [0]  # the one in progress finishes; the waiting ones are dropped


def test_ctrl_c_at_any_line_of_writing_or_closing_stops_cleanly():
    """Ctrl-C may land at any line of Python that write() or close() runs, the standard
    library's included (a queue.Queue's put, waking the idle writer, could lose that wake-up
    and the stop's: the interrupted run hung in its clean-up).  Every chunk before it is
    written in order, the thread stops, the block's exit returns."""
    def trial(interrupting):
        sink = Sink()
        try:
            with BackgroundWrites(sink) as bg:
                bg.write(0)
                deadline = time.monotonic() + 5
                while sink.chunks != [0] and time.monotonic() < deadline:
                    time.sleep(0.001)
                time.sleep(0.01)  # the writer waits for the next chunk
                with interrupting:
                    for k in (1, 2, 3):
                        bg.write(k)
                    bg.close()
        except KeyboardInterrupt:
            assert interrupting.where is not None
        assert not bg._thread.is_alive()
        assert sink.chunks == [0, 1, 2, 3][:len(sink.chunks)]
        if interrupting.where is None:
            assert sink.chunks == [0, 1, 2, 3]

    assert each_line(trial) > 10


@pytest.mark.gpu
def test_cupy_chunks_are_copied_and_written_in_pieces_by_the_thread(monkeypatch):
    """A CuPy chunk reaches the writer as NumPy pieces of PIECE_BYTES (3 frames here: 7 frames
    as 3 + 3 + 1), in order, bit for bit; chunks of another type, a larger one and a strided view
    pass through the same page-locked bytes; an empty chunk is written empty, a frame as a chunk of
    one."""
    import cupy as cp
    import numpy as np

    from xcorr_app.io import _background

    monkeypatch.setattr(_background, "PIECE_BYTES", 3 * 33 * 45 * 4)
    rng = np.random.default_rng(3)
    chunks = [rng.random((7, 33, 45), np.float32),
              rng.integers(0, 65535, (5, 33, 45), dtype=np.uint16),
              rng.random((11, 33, 45), np.float32),
              rng.random((4, 33, 90), np.float32)[:, :, ::2], np.zeros((0, 33, 45), np.float32),
              rng.random((33, 45), np.float32)]

    class Pieces:
        def __init__(self):
            self.got = []

        def write(self, chunk):
            assert isinstance(chunk, np.ndarray)
            self.got.append(chunk.copy())

    sink = Pieces()
    with BackgroundWrites(sink) as bg:
        for c in chunks:
            # (complete on the device, as write's callers hand them: the upload of a pageable
            # array may still run when asarray returns, and the thread copies on a non-blocking
            # stream of its own; under load it read the pool block's old bytes)
            chunk = cp.asarray(c)
            cp.cuda.get_current_stream().synchronize()
            bg.write(chunk)
    assert [len(c) for c in sink.got] == [3, 3, 1, 5, 3, 3, 3, 2, 3, 1, 0, 1]
    assert [c.dtype for c in sink.got[3:5]] == [np.uint16, np.float32]
    np.testing.assert_array_equal(np.concatenate(sink.got[:3]), chunks[0])
    np.testing.assert_array_equal(sink.got[3], chunks[1])
    np.testing.assert_array_equal(np.concatenate(sink.got[4:8]), chunks[2])
    np.testing.assert_array_equal(np.concatenate(sink.got[8:10]), chunks[3])
    assert sink.got[10].shape == (0, 33, 45)
    np.testing.assert_array_equal(sink.got[11], chunks[5][None])  # (a frame: a chunk of one)


@pytest.mark.gpu
def test_a_stop_ends_a_cupy_chunk_after_the_piece_in_progress(monkeypatch):
    import cupy as cp

    from xcorr_app.io import _background

    monkeypatch.setattr(_background, "PIECE_BYTES", 4 * 8 * 4 * 4)  # 4 frames a piece
    started, gate = threading.Event(), threading.Event()

    class Slow:
        def __init__(self):
            self.got = []

        def write(self, chunk):
            started.set()
            gate.wait(5)
            self.got.append(len(chunk))

    sink = Slow()
    with pytest.raises(RuntimeError, match="stop"):
        with BackgroundWrites(sink) as bg:
            bg.write(cp.zeros((12, 8, 4), cp.float32))
            assert started.wait(5)
            stop = bg._stop

            def stopping():  # (the piece in progress ends once the stop is under way)
                gate.set()
                stop()
            bg._stop = stopping
            raise RuntimeError("stop")
    assert sink.got == [4]
