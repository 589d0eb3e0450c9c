"""align_volumes on the GPU (CuPy, cuFFT) gives the CPU's shifts within 1e-3 voxel."""

import numpy as np
import pytest

from xcorr_app.alignment import align_volumes
from xcorr_app.alignment.volume import zlocate

from fresh_process import first_cupyx_import
from volume_samples import depth_movie, random_shifts, shifted_stack, volume

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("names, reference", [(("camera", "coins"), "first"),
                                              (("moon", "astronaut"), "mean")])
def test_gpu_matches_cpu(names, reference):
    true = random_shifts(8, seed=5)
    stack = shifted_stack(volume(names), true, photons=50.0, seed=7)
    cpu = align_volumes(stack, reference=reference, max_shift=(5, 8, 8), device="cpu")
    gpu = align_volumes(stack, reference=reference, max_shift=(5, 8, 8), device="gpu")
    assert gpu.device == "gpu"
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=1e-3)
    np.testing.assert_allclose(gpu.peak, cpu.peak, atol=1e-4)
    assert gpu.verified.all() and (gpu.at_bound == cpu.at_bound).all()


def test_cupy_array_in_chunks():
    import cupy as cp

    true = random_shifts(6, seed=6)
    stack = shifted_stack(volume(depth=16, size=32), true, photons=200.0)
    whole = align_volumes(stack, device="cpu")
    chunked = align_volumes(cp.asarray(stack), memory_limit=80 * 16 * 32 * 32)
    assert chunked.device == "gpu" and "1 volume(s) per chunk" in chunked.notes[1]
    np.testing.assert_allclose(chunked.shifts, whole.shifts, atol=1e-3)


def test_zlocate_gpu_matches_cpu():
    depths = np.linspace(3.2, 19.7, 12)
    offsets = np.random.default_rng(3).integers(-3, 4, (12, 2))
    frames, zstack = depth_movie(("camera", "coins", "moon", "astronaut"), depths, offsets,
                                 photons=100.0)
    cpu = zlocate(frames, zstack, max_shift=5, device="cpu")
    gpu = zlocate(frames, zstack, max_shift=5, device="gpu")
    assert gpu.device == "gpu"
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=1e-3)
    np.testing.assert_allclose(gpu.depth, cpu.depth, atol=1e-3)


def test_refine_planes_gpu_matches_cpu():
    from xcorr_app.alignment.volume import refine_planes

    true = random_shifts(3, seed=8)
    stack = shifted_stack(volume(depth=12, size=32), true, photons=300.0)
    rigid = align_volumes(stack, device="cpu")
    cpu = refine_planes(stack, rigid.shifts, max_shift=3, device="cpu")
    gpu = refine_planes(stack, rigid.shifts, max_shift=3, device="gpu")
    np.testing.assert_allclose(gpu, cpu, atol=1e-3)  # (NaN where the CPU has NaN)


@pytest.mark.parametrize("reference", ["first", "mean"])
def test_a_gpu_run_imports_no_cupyx(reference):
    """The 3-D path never hands a CuPy array to a NumPy ufunc (tests/fresh_process.py)."""
    assert first_cupyx_import(
        "import numpy as np\n"
        "from xcorr_app.alignment import align_volumes\n"
        "stack = np.random.default_rng(0).random((3, 8, 16, 16)).astype(np.float32)\n"
        f"align_volumes(stack, reference={reference!r}, device='gpu')\n") == ""


@pytest.mark.parametrize("shape", [(5, 12, 9), (16, 40, 33), (8, 64, 70)])
@pytest.mark.parametrize("count, step, nyquist", [(1, 1.0, True), (7, 0.05, False)])
def test_gpu_subvoxel_samples_are_the_cpus(monkeypatch, shape, count, step, nyquist):
    """``samples3d`` on the GPU (``kernels/alignment/dft3.cu`` and a cuBLAS product a volume)
    against the CPU's batched products, complex64 spectra of odd and even sizes, whole lags
    with the Nyquist bins and fractional ones around them, several volumes at once and a
    volume a slice (as SAMPLE_BYTES cuts large ones); the pool poisoned first."""
    import cupy as cp

    from xcorr_app.alignment.volume import _dft3

    rng = np.random.default_rng(shape[1])
    vols = rng.normal(size=(3, *shape))
    spec = np.fft.rfftn(vols, axes=(-3, -2, -1)).astype(np.complex64)
    centres = rng.uniform(-3, 3, (3, 3)).round()
    want = _dft3.samples3d(spec, shape, centres, step, count, nyquist)
    junk = cp.full(1 << 20, np.nan)
    del junk
    got = _dft3.samples3d(cp.asarray(spec), shape, centres, step, count, nyquist)
    assert got.dtype == cp.float64 and got.shape == (3, count, count, count)
    np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    monkeypatch.setattr(_dft3, "SAMPLE_BYTES", 1)
    sliced = _dft3.samples3d(cp.asarray(spec), shape, centres, step, count, nyquist)
    np.testing.assert_array_equal(sliced.get(), got.get())
