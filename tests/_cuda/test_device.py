"""Arrays a cache keeps on a device (``upload_shared``, ``kept_on_device``): whole for any stream."""

import numpy as np
import pytest


@pytest.mark.gpu
@pytest.mark.parametrize("make", ["upload_shared", "kept_on_device"])
def test_a_kept_array_is_whole_for_a_kernel_on_another_stream_at_once(make):
    """A kernel on another stream (another thread's) reads the array as soon as it is made,
    while the caller's stream is still busy: its copy must have landed (queued behind the
    caller's work, a kernel on the other stream read the memory before it)."""
    import cupy as cp

    from xcorr_app import _cuda
    from xcorr_app._cuda import device

    host = np.arange(1 << 25, dtype=np.float64)  # 256 MiB: a copy of milliseconds
    want = float(host.sum())  # (exact: every partial sum is an integer below 2**53)
    caller, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    try:
        with caller:
            busy = cp.zeros(1 << 27, cp.float32)
            for _ in range(20):  # (milliseconds of work queued before the array is made)
                busy += 1
            kept = getattr(_cuda, make)(host)
        with other:
            got = float(kept.sum())
        assert got == want
        assert kept.device.id == cp.cuda.Device().id and kept.dtype == host.dtype
    finally:
        device._KEPT.clear()  # (256 MiB of kept_on_device's cache back)
        caller.synchronize()
