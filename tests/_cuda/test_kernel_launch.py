"""The prepared kernel launch: parameter packing (CPU) and launches against CuPy's (GPU)."""

import numpy as np
import pytest

from xcorr_app._cuda.launch import pack_arguments


class _FakeDeviceArray:
    class data:  # noqa: N801 - the attribute path of cupy.ndarray.data.ptr
        ptr = 0x7F00_1234_5670


def test_pack_arguments_places_each_parameter_at_its_alignment():
    consts = (np.int32(-3), np.float32(2.5), _FakeDeviceArray(), np.int8(9), np.float64(0.25),
              np.int32(11))
    buf, offsets, size = pack_arguments(3, consts)
    # 3 pointers, int32 at 24, float at 28, pointer at 32, int8 at 40, double at 48, int at 56
    assert offsets == [0, 8, 16, 24, 28, 32, 40, 48, 56]
    assert size == 60  # the end of the last int: not padded to 8 (the driver wants it exact)
    raw = buf.view(np.uint8)
    assert buf.dtype == np.uint64 and buf.nbytes == 64
    assert not raw[:24].any()  # the per-call pointer slots start empty
    assert raw[24:28].view(np.int32)[0] == -3
    assert raw[28:32].view(np.float32)[0] == 2.5
    assert raw[32:40].view(np.uint64)[0] == 0x7F00_1234_5670
    assert raw[40] == 9 and not raw[41:48].any()
    assert raw[48:56].view(np.float64)[0] == 0.25
    assert raw[56:60].view(np.int32)[0] == 11


def test_pack_arguments_refuses_python_numbers():
    with pytest.raises(TypeError, match="NumPy scalars"):
        pack_arguments(1, (5,))


@pytest.mark.gpu
def test_prepared_launch_equals_cupys_launch():
    import cupy as cp

    from xcorr_app._cuda.launch import PreparedLaunch

    src = r'''
    extern "C" __global__ void k(const float* a, float* out, int n, float s, const int* idx,
                                 double d, int m) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[idx[i % m]] * s + (float)d + m;
    }'''
    fn = cp.RawKernel(src, "k")
    n, m = 1001, 7
    a = cp.random.rand(n, dtype=cp.float32)
    idx = cp.asarray(np.random.default_rng(0).integers(0, n, m), cp.int32)
    consts = (np.int32(n), np.float32(1.5), idx, np.float64(0.25), np.int32(m))
    want = cp.full(n, cp.nan, cp.float32)
    fn((-(-n // 128),), (128,), (a, want) + consts)
    prepared = PreparedLaunch(fn, (-(-n // 128),), (128,), 2, consts)
    for _ in range(3):  # again with fresh outputs: only the pointers change between calls
        got = cp.full(n, cp.nan, cp.float32)
        prepared(a, got)
        cp.testing.assert_array_equal(got, want)
    assert np.isfinite(cp.asnumpy(want)).all()


@pytest.mark.gpu
def test_launch_checks_the_callers_output():
    import cupy as cp

    from xcorr_app.correlate._warp_shuffle import warp_per_shift_xcorr
    from xcorr_app.correlate._direct import xcorr_direct

    rng = np.random.default_rng(1)
    a, b = rng.random((5, 7), np.float32), rng.random((3, 6), np.float32)
    want = xcorr_direct(a, b)
    out = cp.full(want.shape, cp.nan, cp.float32)
    assert warp_per_shift_xcorr(cp.asarray(a), cp.asarray(b), out=out) is out
    np.testing.assert_allclose(out.get(), want, rtol=1e-5, atol=1e-5)
    bad = [np.zeros(want.shape, np.float32), cp.zeros(want.shape[::-1], cp.float32),
           cp.zeros(want.shape, cp.float64), cp.zeros((want.shape[0], 2 * want.shape[1]),
                                                     cp.float32)[:, ::2]]
    for o in bad:
        with pytest.raises(ValueError, match="out must be"):
            warp_per_shift_xcorr(cp.asarray(a), cp.asarray(b), out=o)


@pytest.mark.gpu
def test_shared_memory_opt_in_is_never_lowered():
    """Two problems of one compiled function with different shared memory beyond 48 KiB: the
    one prepared first still launches after the second is prepared (the opt-in is per function;
    lowering it made the first fail with CUDA_ERROR_INVALID_VALUE in the planner)."""
    import cupy as cp

    from xcorr_app._cuda.launch import PreparedLaunch

    src = r'''
    extern "C" __global__ void k(float* out, int n) {
        extern __shared__ float s[];
        s[threadIdx.x] = threadIdx.x;
        __syncthreads();
        if (threadIdx.x == 0) out[blockIdx.x] = s[n - 1] + n;
    }'''
    fn = cp.RawKernel(src, "k")
    big, small = 100 * 1024, 60 * 1024
    out = cp.full(4, cp.nan, cp.float32)
    first = PreparedLaunch(fn, (4,), (64,), 1, (np.int32(64),), shared_mem=big)
    second = PreparedLaunch(fn, (4,), (64,), 1, (np.int32(64),), shared_mem=small)
    assert fn.max_dynamic_shared_size_bytes >= big
    for launch in (first, second, first):
        out.fill(cp.nan)
        launch(out)
        cp.testing.assert_array_equal(out, cp.full(4, 127, cp.float32))
