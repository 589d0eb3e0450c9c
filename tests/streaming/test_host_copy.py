"""streaming.HostCopy on the CPU: a copy dropped before its result is waited for (its
page-locked buffer goes back to CuPy's pool, which does not wait for copies into it); on the
GPU, arrays of every layout come back as they were (a transpose copied as it lies);
host_copies leaves NumPy arrays as they are."""
import gc
import sys

import numpy as np
import pytest

from xcorr_app.streaming import HostCopy, host_copies


class Event:
    def __init__(self, fail=False):
        self.waits, self.fail = 0, fail

    def synchronize(self):
        self.waits += 1
        if self.fail:
            raise RuntimeError("the device is gone")


def dropped(event):
    copy = HostCopy.__new__(HostCopy)  # (as __init__ leaves it, without a device)
    copy._host, copy._done, copy._source, copy._transposed = None, event, object(), False
    return copy


def test_a_copy_dropped_before_its_result_is_waited_for():
    event = Event()
    copy = dropped(event)
    del copy
    gc.collect()
    assert event.waits == 1


def test_a_copy_whose_result_was_taken_is_not_waited_for_again():
    event = Event()
    copy = dropped(event)
    assert copy.result() is None and event.waits == 1
    del copy
    gc.collect()
    assert event.waits == 1


def test_a_failing_wait_at_drop_raises_nothing(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    event = Event(fail=True)
    copy = dropped(event)
    del copy
    gc.collect()
    assert event.waits == 1 and seen == []
    half = HostCopy.__new__(HostCopy)  # (__init__ failed before its copy was queued)
    del half
    gc.collect()
    assert seen == []


def test_host_copies_leave_numpy_arrays_as_they_are():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(6).reshape(3, 2).T
    got = host_copies([a, b])
    assert got[0] is a and got[1] is b and host_copies([]) == []


@pytest.mark.gpu
def test_every_layout_comes_back_as_it_was():
    cp = pytest.importorskip("cupy")
    a = cp.arange(24, dtype=cp.float32).reshape(2, 3, 4)
    views = [a, a.T, a.transpose(1, 0, 2), a[:, ::2], a[0].T, cp.arange(5.0), a[:, :1].T]
    for v in views:
        got = HostCopy(v).result()
        assert got.shape == v.shape and np.array_equal(got, cp.asnumpy(v))
    mixed = host_copies([a.T, np.ones(2), a[1]])
    assert np.array_equal(mixed[0], cp.asnumpy(a.T)) and mixed[1].tolist() == [1.0, 1.0]
    assert np.array_equal(mixed[2], cp.asnumpy(a[1]))


def test_ready_asks_the_copys_event_and_never_waits():
    class Event:
        done = False

        def synchronize(self):
            raise AssertionError("ready() waited")

    copy = HostCopy.__new__(HostCopy)  # (as __init__ leaves it, without a device)
    copy._done, copy._source = Event(), None
    assert copy.ready() is False
    copy._done.done = True
    assert copy.ready() is True
    copy._done = None  # (waited for already)
    assert copy.ready() is True


@pytest.mark.gpu
def test_ready_says_whether_the_copy_landed():
    cp = pytest.importorskip("cupy")
    a = cp.arange(1 << 20, dtype=cp.float32)
    copy = HostCopy(a)
    first = copy.ready()  # (queued: either answer, without waiting)
    cp.cuda.get_current_stream().synchronize()
    assert isinstance(first, bool) and copy.ready()
    assert np.array_equal(copy.result(), cp.asnumpy(a)) and copy.ready()
