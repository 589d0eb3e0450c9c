"""A run split into ranges of frames (several GPUs, Dask tasks) measures every frame as one run
does: the range arithmetic on the CPU, the threads of ``--gpus`` on the GPU."""

import numpy as np
import pytest
import tifffile

from sample_paths import folder_path, stack_path
from synthetic import drift_stack, write_damaged_tiff, write_stack
from xcorr_app import align
from xcorr_app.alignment import AlignOptions
from xcorr_app.alignment.rigid import measure_frames, prepared_reference
from xcorr_app.streaming import frame_ranges
from xcorr_app.io import ArraySource, FrameRange, open_source


@pytest.mark.parametrize("n", [1, 2, 7, 12, 100])
@pytest.mark.parametrize("parts", [1, 2, 3, 8])
def test_frame_ranges_cover_every_frame_once(n, parts):
    ranges = frame_ranges(n, parts)
    assert len(ranges) == min(n, parts)
    covered = np.concatenate([np.arange(a, b) for a, b in ranges])
    np.testing.assert_array_equal(covered, np.arange(n))
    sizes = [b - a for a, b in ranges]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_frame_range_reads_and_names_frames_of_its_source():
    stack = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3)
    part = FrameRange(ArraySource(stack, name="s"), 1, 4)
    assert part.n_frames == 3 and part.frame_shape == (2, 3) and part.source_name(0) == "s"
    np.testing.assert_array_equal(part.read(1, 3), stack[2:4])
    np.testing.assert_array_equal(part.stack, stack[1:4])
    with pytest.raises(ValueError):
        FrameRange(ArraySource(stack), 3, 6)


@pytest.mark.parametrize("reference", ["first", "previous", "mean"])
@pytest.mark.parametrize("cuts", [(5,), (1, 2, 11), (4, 8)])
@pytest.mark.parametrize("path", [stack_path("cell"), folder_path("cell")],
                         ids=["file", "folder"])
def test_ranges_measured_apart_equal_one_run(reference, cuts, path):
    """Rows of ranges measured separately (the frame before a range read for "previous")
    are bit for bit the rows of one pass, whatever the chunking inside each range; a folder,
    whose reader keeps one file open at a time, too."""
    opts = AlignOptions(reference=reference, max_shift=10, min_confidence=2.0)
    with open_source(path) as src:
        ref = prepared_reference(opts, src, np, 4)
        whole, plan = measure_frames(opts, src, np, 4, ref)
        bounds = [0, *cuts, src.n_frames]
        rows = [measure_frames(opts, src, np, c, ref, plan=plan, start=a, stop=b)[0]
                for c, (a, b) in zip((1, 3, 5, 2), zip(bounds[:-1], bounds[1:]))]
    np.testing.assert_array_equal(np.concatenate(rows), whole)


def test_nan_frame_in_a_later_range_is_flagged_at_its_stack_index():
    """A frame with a NaN pixel is not an error: its row says so (``finite`` 0), at its
    place in the stack, and the rows of a range are those of the whole run."""
    from xcorr_app.alignment.rigid import COLUMN

    stack = tifffile.imread(stack_path("cell")).astype(np.float32)
    stack[9, 0, 0] = np.nan
    opts = AlignOptions(reference="first", max_shift=5)
    src = ArraySource(stack)
    ref = prepared_reference(opts, src, np, 4)
    part = measure_frames(opts, src, np, 3, ref, start=6, stop=12)[0]
    whole = measure_frames(opts, src, np, 5, ref)[0]
    np.testing.assert_array_equal(part, whole[6:])
    assert np.flatnonzero(whole[:, COLUMN["finite"]] == 0).tolist() == [9]


# ------------------------------------------------------------------------------------ GPU

def _gpu_count():
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


@pytest.mark.gpu
@pytest.mark.parametrize("reference", ["first", "previous", "mean"])
@pytest.mark.parametrize("max_shift", [None, 6])
def test_gpus_option_equals_one_gpu(tmp_path, rng, reference, max_shift):
    """--gpus (every GPU of the host, and GPU 0 alone): the shifts of a one-GPU run, up to the
    atomicAdd rounding of the bounded kernels and cuFFT's rounding at other batch sizes."""
    stack, _ = drift_stack(rng, n=29, shape=(96, 130), max_shift=4, peak_counts=500)
    path = write_stack(tmp_path / "s.tif", stack)
    kw = dict(reference=reference, max_shift=max_shift, device="gpu", chunk_frames=4)
    base = align(path, **kw)
    for gpus in ("all", [0]):
        got = align(path, gpus=gpus, **kw)
        assert got.settings["gpus"] == (list(range(_gpu_count())) if gpus == "all" else [0])
        atol = 5e-4 if reference == "previous" else 1e-4
        np.testing.assert_allclose(got.shifts, base.shifts, atol=atol)
        np.testing.assert_array_equal(np.round(got.fft_shifts * 20), np.round(base.fft_shifts * 20))
        np.testing.assert_array_equal(got.agree, base.agree)
        assert got.plan == base.plan


@pytest.mark.gpu
def test_map_chunks_over_gpus_keeps_frame_order(rng):
    """Chunks handed out to the GPUs in turn come back in frame order, each computed right."""
    import cupy

    from xcorr_app.filters import gaussian
    from xcorr_app.streaming import map_chunks

    stack = rng.random((23, 33, 65)).astype(np.float32)
    seen = []

    def fn(start, frames):
        seen.append(cupy.cuda.Device().id)
        return gaussian(frames, 1.5) + start

    out = list(map_chunks(lambda: ArraySource(stack), 4, fn, gpus="all"))
    assert [a for a, _ in out] == list(range(0, 23, 4))
    want = gaussian(stack, 1.5)
    for a, got in out:
        np.testing.assert_allclose(got, want[a:a + 4] + a, rtol=1e-5, atol=1e-5)
    assert sorted(set(seen)) == list(range(min(_gpu_count(), 6)))


@pytest.mark.gpu
def test_gpus_flag_an_inf_frame_as_one_gpu_does(tmp_path):
    stack = tifffile.imread(stack_path("cell")).astype(np.float32)
    stack[10, 1, 1] = np.inf
    path = tmp_path / "inf.tif"
    tifffile.imwrite(path, stack)
    many = align(path, gpus="all", device="gpu", chunk_frames=2)
    one = align(path, device="gpu", chunk_frames=2)
    assert np.isnan(many.shifts[10]).all() and many.low_confidence[10]
    np.testing.assert_array_equal(np.isnan(many.shifts), np.isnan(one.shifts))
    np.testing.assert_array_equal(many.low_confidence, one.low_confidence)


@pytest.mark.gpu
def test_gpus_error_stops_every_gpu(tmp_path):
    """A compressed page whose data are damaged: the error reaches the caller, no GPU hangs."""
    from xcorr_app.errors import InputError

    stack = np.tile(tifffile.imread(stack_path("cell")).astype(np.float32), (4, 1, 1))
    path = tmp_path / "damaged.tif"
    write_damaged_tiff(path, stack, page=29)
    with pytest.raises(InputError, match="cannot read"):
        align(path, gpus="all", device="gpu", chunk_frames=2)


@pytest.mark.gpu
def test_dask_workers_on_gpus_equal_one_process(tmp_path, rng):
    """Two worker processes sharing the GPUs (worker name modulo the GPU count)."""
    distributed = pytest.importorskip("dask.distributed")  # (not tests/distributed)
    from xcorr_app import dask as xdask

    stack, _ = drift_stack(rng, n=20, shape=(80, 112), max_shift=4, peak_counts=500)
    path = write_stack(tmp_path / "s.tif", stack)
    base = align(path, reference="previous", device="gpu")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        got = xdask.align(path, reference="previous", device="gpu", task_frames=6,
                          client=client)
        filt = np.concatenate([b for _, b in xdask.iter_blocks(
            xdask.filter(path, "gaussian:2", device="gpu", task_frames=6), client)])
    np.testing.assert_allclose(got.shifts, base.shifts, atol=5e-4)
    np.testing.assert_array_equal(np.round(got.fft_shifts * 20), np.round(base.fft_shifts * 20))
    from xcorr_app.filters import gaussian

    import cupy

    want = cupy.asnumpy(gaussian(cupy.asarray(stack), 2))
    np.testing.assert_array_equal(filt, want)


@pytest.mark.gpu
def test_dask_array_of_cupy_blocks_stays_on_the_gpu(rng):
    """CuPy-backed blocks are measured and filtered where they are; CuPy blocks come back."""
    import cupy

    da = pytest.importorskip("dask.array")
    from xcorr_app import dask as xdask
    from xcorr_app.filters import gaussian

    stack, _ = drift_stack(rng, n=11, shape=(64, 96), max_shift=4, peak_counts=500)
    on_gpu = cupy.asarray(stack)
    arr = da.from_array(on_gpu, chunks=(4, -1, -1), asarray=False)
    base = align(on_gpu, reference="previous", max_shift=6, device="gpu")
    got = xdask.align(arr, reference="previous", max_shift=6, device="gpu", scheduler="sync")
    np.testing.assert_allclose(got.shifts, base.shifts, atol=5e-4)
    lazy = xdask.filter(arr, "gaussian:1.5", device="gpu")
    blocks = [b for _, b in xdask.iter_blocks(lazy)]
    assert all(isinstance(b, cupy.ndarray) for b in blocks)
    np.testing.assert_allclose(cupy.asnumpy(cupy.concatenate(blocks)),
                               cupy.asnumpy(gaussian(on_gpu, 1.5)), rtol=1e-6, atol=1e-6)


def test_lazily_sliced_stacks_are_read_chunk_by_chunk():
    """An array-like that reads on slicing (h5py, zarr) is sliced one chunk at a time."""
    data = np.random.default_rng(1).random((10, 16, 18)).astype(np.float32)

    class Lazy:
        shape, dtype, ndim = data.shape, data.dtype, 3
        reads = []

        def __getitem__(self, key):
            self.reads.append((key.start, key.stop))
            return data[key]

    lazy = Lazy()
    res = align(lazy, max_shift=3, device="cpu", chunk_frames=3)
    np.testing.assert_array_equal(res.shifts, align(data, max_shift=3, device="cpu").shifts)
    assert max(b - a for a, b in lazy.reads if a is not None) <= 3, lazy.reads
