"""The GPU's FFTs in turn across streams (``correlate/_fft.py: fft_in_turn``), with a stand-in
for CuPy's streams and events on the CPU; and ``conj_product``'s scale on NumPy."""

import sys
import threading
import types

import numpy as np
import pytest

from xcorr_app.correlate import _fft


class _Event:
    def __init__(self, stream, n):
        self.stream, self.n = stream, n


class _Stream:
    def __init__(self, ptr, log):
        self.ptr, self.log, self.records, self.capturing = ptr, log, 0, False

    def is_capturing(self):
        return self.capturing

    def record(self):
        self.records += 1
        return _Event(self.ptr, self.records)

    def wait_event(self, event):
        self.log.append(("wait", self.ptr, event.stream, event.n))


@pytest.fixture
def fake_cupy(monkeypatch):
    log, current = [], {}
    streams = {p: _Stream(p, log) for p in (0, 11, 22)}

    def transform(name):
        def run(a, **kw):
            log.append((name, current["s"].ptr))
            return a

        return run

    fft = types.SimpleNamespace(**{n: transform(n) for n in ("rfft2", "irfft2", "fft2")},
                                fftfreq=lambda n: np.arange(n))
    cuda = types.SimpleNamespace(get_current_stream=lambda: current["s"],
                                 Device=lambda: types.SimpleNamespace(id=0))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(fft=fft, cuda=cuda))
    monkeypatch.setattr(_fft, "_LAST_FFT", threading.local())

    def on(ptr, capturing=False):
        current["s"] = streams[ptr]
        streams[ptr].capturing = capturing

    return log, on


def test_a_transform_on_another_stream_waits_for_the_last(fake_cupy):
    log, on = fake_cupy
    fft = _fft.fft_of(types.SimpleNamespace())  # (any module but NumPy: the GPU's)
    on(11)
    fft.rfft2(1)
    fft.irfft2(2)  # same stream: in order already
    on(22)
    fft.rfft2(3)  # waits for stream 11's last transform
    on(11)
    fft.fft2(4)  # waits for stream 22's
    assert fft.fftfreq(3).tolist() == [0, 1, 2]  # not a transform: passes through
    assert log == [("rfft2", 11), ("irfft2", 11), ("wait", 22, 11, 2), ("rfft2", 22),
                   ("wait", 11, 22, 1), ("fft2", 11)]


def test_a_graph_capture_neither_waits_nor_is_waited_for(fake_cupy):
    """Inside a capture an outside event may not be waited on (cudaErrorInvalidValue on the
    device before the fix), and an event recorded in it is no event to wait on afterwards."""
    log, on = fake_cupy
    fft = _fft.fft_of(types.SimpleNamespace())
    on(11)
    fft.rfft2(1)
    on(22, capturing=True)
    fft.rfft2(2)  # captured: no wait, nothing recorded
    on(22)
    fft.rfft2(3)  # after the capture: waits for stream 11's transform, not the captured one
    assert log == [("rfft2", 11), ("rfft2", 22), ("wait", 22, 11, 1), ("rfft2", 22)]


def test_each_thread_orders_its_own_transforms(fake_cupy):
    """CuPy's plan cache is per thread: another thread's transforms are not waited for."""
    log, on = fake_cupy
    fft = _fft.fft_of(types.SimpleNamespace())
    on(11)
    fft.rfft2(1)
    t = threading.Thread(target=lambda: fft.rfft2(2))
    on(22)
    t.start()
    t.join()
    assert log == [("rfft2", 11), ("rfft2", 22)]


def test_conj_product_scales_on_numpy():
    rng = np.random.default_rng(4)
    left = rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))
    right = rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))
    want = 0.25 * left * np.conj(right)
    got = _fft.conj_product(left, right, scale=0.25)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    r = right.copy()
    _fft.conj_product(left, r, out=r, scale=0.25)
    np.testing.assert_allclose(r, want, rtol=1e-14)
