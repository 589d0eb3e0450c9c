"""On the GPU: Zarr, HDF5, OME-TIFF and ND2 stacks streamed through the GPU pipeline (pinned
buffers, read-ahead) give the shifts of the same frames as an array."""

import numpy as np
import pytest
import tifffile

from xcorr_app import align

from synthetic import drift_stack

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def frames():
    pytest.importorskip("cupy")
    from xcorr_app import backend

    if not backend.gpu_available():
        pytest.skip(f"no usable GPU: {backend.gpu_unavailable_reason()}")
    stack, _ = drift_stack(np.random.default_rng(9), n=24, shape=(96, 112))
    return stack


def shifts(src):
    return align(src, device="gpu", max_shift=8, chunk_frames=5).shifts


def test_readers_on_the_gpu_as_the_array(tmp_path, frames):
    zarr = pytest.importorskip("zarr")
    h5py = pytest.importorskip("h5py")
    want = shifts(frames)
    zarr.open_array(str(tmp_path / "m.zarr"), mode="w", shape=frames.shape, chunks=(4, 96, 112),
                    dtype=frames.dtype)[...] = frames
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.create_dataset("scan/data", data=frames, chunks=(3, 96, 112))
    tzyx = np.stack([frames, frames[:, ::-1]], axis=1)  # T, Z: plane 1 flipped
    tifffile.imwrite(tmp_path / "m.ome.tif", tzyx, ome=True, metadata={"axes": "TZYX"})
    # (within 1e-4 px: the array is kept on the GPU, the files streamed through pinned
    # buffers; float32 reductions grouped otherwise, as tests/alignment/test_run_equality.py)
    for path in (str(tmp_path / "m.zarr"), f"{tmp_path / 'm.h5'}:/scan/data",
                 f"{tmp_path / 'm.ome.tif'}?z=0"):
        np.testing.assert_allclose(shifts(path), want, atol=1e-4, rtol=0, err_msg=path)


def test_nd2_on_the_gpu_as_the_array(tmp_path, frames):
    pytest.importorskip("nd2")
    from nd2_files import write_nd2

    write_nd2(tmp_path / "m.nd2", np.stack([frames[:, ::-1], frames], axis=1), ["a", "b"])
    got = align(tmp_path / "m.nd2", channel=1, device="gpu", max_shift=8, chunk_frames=5).shifts
    np.testing.assert_allclose(got, shifts(frames), atol=1e-4, rtol=0)
