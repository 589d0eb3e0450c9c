"""streaming.HostCopy on the CPU: a copy dropped before its result is waited for (its
page-locked buffer goes back to CuPy's pool, which does not wait for copies into it); the
device's copies themselves are covered by the GPU tests of the paths that use it."""
import gc
import sys

from xcorr_app.streaming import HostCopy


class Event:
    def __init__(self, fail=False):
        self.waits, self.fail = 0, fail

    def synchronize(self):
        self.waits += 1
        if self.fail:
            raise RuntimeError("the device is gone")


def dropped(event):
    copy = HostCopy.__new__(HostCopy)  # (as __init__ leaves it, without a device)
    copy._host, copy._done, copy._source = None, event, object()
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
