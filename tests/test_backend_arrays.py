"""Array helpers of :mod:`xcorr_app.backend`: copies on the GPU without CuPy's element-wise
kernels (:func:`~xcorr_app.backend.device_copy`, :func:`~xcorr_app.backend.stack_frames`)."""

import numpy as np
import pytest

from xcorr_app.backend import device_copy, stack_frames


def test_stack_frames_on_the_host_is_numpys(rng):
    frames = [rng.random((3, 5)) for _ in range(4)]
    np.testing.assert_array_equal(stack_frames(frames, np), np.stack(frames))
    with pytest.raises(ValueError):  # (nothing to stack, as NumPy says)
        stack_frames([], np)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.complex64])
def test_gpu_stack_frames_and_device_copy_are_exact_copies(rng, dtype):
    """Frames from the host and from the GPU (a strided view among them) stacked into a new
    array, every byte in place (the pool's memory poisoned first); a device copy is a new
    array equal to its source, and a strided one is copied as CuPy copies it; a frame of
    another shape is refused."""
    import cupy as cp

    host = [(rng.random((7, 33)) * 1000).astype(dtype) for _ in range(3)]
    frames = [host[0], cp.asarray(host[1]), cp.asarray(np.ascontiguousarray(host[2].T)).T]
    junk = cp.full(1 << 20, 12345, cp.uint32)
    del junk
    got = stack_frames(frames, cp)
    np.testing.assert_array_equal(got.get(), np.stack(host))
    src = cp.asarray(host[0])
    copy = device_copy(src)
    assert copy.data.ptr != src.data.ptr and copy.flags.c_contiguous
    np.testing.assert_array_equal(copy.get(), host[0])
    np.testing.assert_array_equal(device_copy(src.T).get(), host[0].T)
    with pytest.raises(ValueError, match="stack_frames"):
        stack_frames([host[0], host[0][:, :5]], cp)
