"""Arrays a cache keeps on a device (``upload_shared``, ``kept_on_device``): whole for every
stream as soon as they are made, and not copied over while a kernel still reads them; a
thread's own default stream (``own_stream``) and the pool blocks it keeps to itself."""

import numpy as np
import pytest

N = 1 << 25  # float64 elements: 256 MiB, a copy of milliseconds


def _pinned_arange(n, start=0.0):
    """A page-locked host array (its copy is queued at once, behind the stream's work, where
    CuPy would first stage pageable memory on the host)."""
    from xcorr_app.streaming import host_buffer

    a = host_buffer((n,), np.float64, pinned=True)
    a[:] = np.arange(n, dtype=np.float64) + start
    return a


def _busy(stream, passes=200):
    """Tens of milliseconds of work queued on ``stream``."""
    import cupy as cp

    with stream:
        x = cp.zeros(1 << 27, cp.float32)
        for _ in range(passes):
            x += 1
    return x


@pytest.mark.gpu
def test_an_uploaded_array_is_whole_for_another_stream_at_once():
    """A kernel on another stream (another thread's) reads the array as soon as it is made
    while the caller's stream is still busy: its copy must have landed (queued on the caller's
    stream behind its work, the other stream's kernel read the memory before it)."""
    import cupy as cp

    from xcorr_app._cuda import upload_shared

    host = _pinned_arange(N)
    want = float(host.sum())  # (exact: every partial sum is an integer below 2**53)
    caller, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    busy = _busy(caller)
    with caller:
        kept = upload_shared(host)
    with other:
        got = float(kept.sum())
    caller.synchronize()
    del busy
    assert got == want
    assert kept.shape == host.shape and kept.dtype == host.dtype
    assert kept.device.id == cp.cuda.Device().id


@pytest.mark.gpu
def test_a_dropped_array_is_not_copied_over_while_a_kernel_reads_it():
    """A cache drops an array while a kernel queued behind other work still reads it, and the
    next upload comes at once: the kernel still reads the first array's values (a block of
    the pool freed to the upload stream was handed to the next copy at once)."""
    import cupy as cp

    from xcorr_app._cuda import upload_shared

    first, second = _pinned_arange(N), _pinned_arange(N, start=1.0)
    caller = cp.cuda.Stream(non_blocking=True)
    kept = upload_shared(first)
    busy = _busy(caller)
    with caller:
        total = kept.sum()  # (queued behind the busy work)
    del kept  # (the cache drops it)
    again = upload_shared(second)
    caller.synchronize()
    del busy
    assert float(total) == float(first.sum())
    assert float(again[0]) == 1.0


@pytest.mark.gpu
def test_kept_on_device_uploads_once_per_content_and_keeps_shape():
    import cupy as cp

    from xcorr_app._cuda import kept_on_device

    taps = np.array([0.25, 0.5, 0.25], np.float32)
    a, b = kept_on_device(taps), kept_on_device(taps.copy())
    assert a is b and a.dtype == np.float32 and a.shape == (3,)
    np.testing.assert_array_equal(cp.asnumpy(a), taps)


def _freed_in_a_thread(size, own):
    """The address of a ``size``-byte block allocated and freed in another thread on the
    legacy default stream (in ``own_stream`` where ``own``)."""
    import contextlib
    import threading

    import cupy as cp

    from xcorr_app._cuda import own_stream

    got = {}

    def work():
        with own_stream() if own else contextlib.nullcontext():
            got["stream"] = cp.cuda.get_current_stream().ptr
            block = cp.empty(size, cp.uint8)
            got["ptr"] = block.data.ptr
            del block  # (back to the pool's arena of the stream it was made on)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return got


@pytest.mark.gpu
def test_a_threads_freed_blocks_go_to_no_other_thread():
    """Two threads on the legacy default stream share CuPy's pool arena: a block one frees
    (its chunk streams may still use it) is the next the other allocates.  In ``own_stream``
    each thread has a stream and an arena of its own."""
    import cupy as cp

    size = 3 * 2**20 + 7 * 512  # (a size of its own: the freed block is the bin's only one)
    shared = _freed_in_a_thread(size, own=False)
    assert shared["stream"] == 0
    again = cp.empty(size, cp.uint8)  # (this thread, the legacy stream too)
    assert again.data.ptr == shared["ptr"]  # (the hazard, as CuPy's pool has it)
    del again
    own = _freed_in_a_thread(size + 512, own=True)
    assert own["stream"] == cp.cuda.Stream.ptds.ptr
    other = cp.empty(size + 512, cp.uint8)
    assert other.data.ptr != own["ptr"]


@pytest.mark.gpu
def test_own_stream_leaves_a_chosen_stream_alone():
    import cupy as cp

    from xcorr_app._cuda import own_stream

    s = cp.cuda.Stream(non_blocking=True)
    with s, own_stream():
        assert cp.cuda.get_current_stream() == s
    assert cp.cuda.get_current_stream().ptr == 0
    with own_stream():
        assert cp.cuda.get_current_stream().ptr == cp.cuda.Stream.ptds.ptr
    assert cp.cuda.get_current_stream().ptr == 0
