"""A layer's data as the stacks measured and warped: the axes, the channel, the planes."""

import numpy as np
import pytest

from xcorr_app.napari import default_axes, measure_stack, planes
from xcorr_app.napari._layers import check_axes


def test_the_measured_stack_is_the_channel_and_the_plane_or_their_maximum():
    data = np.random.default_rng(0).random((4, 3, 2, 6, 7))  # T Z C Y X
    np.testing.assert_array_equal(measure_stack(data, "TZCYX", channel=1, plane=2),
                                  data[:, 2, 1])
    np.testing.assert_array_equal(measure_stack(data, "TZCYX", channel=0),
                                  data[:, :, 0].max(axis=1))
    assert measure_stack(data.astype(np.int64)[:, 0, 0], "TYX").dtype == np.float32


def test_planes_cover_every_channel_once_whatever_the_order():
    data = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)  # C T Y X
    out = np.zeros_like(data)
    for index, stack in planes(data, "CTYX"):
        assert stack.shape == (3, 4, 5)
        out[index] += stack
    np.testing.assert_array_equal(out, data)


@pytest.mark.parametrize("axes", ["TYXC", "TTYX", "TCY", "CZYX", "tqyx"])
def test_axes_that_do_not_fit_are_refused(axes):
    with pytest.raises(ValueError, match="do not fit"):
        check_axes(axes, (2, 3, 4, 5))


def test_default_axes():
    assert [default_axes(n) for n in (3, 4, 5)] == ["TYX", "TCYX", "TZCYX"]
    with pytest.raises(ValueError):
        default_axes(2)


def test_a_run_into_a_tiff_writes_every_layer_beside_it_and_maps_them(tmp_path):
    from xcorr_app.napari import Job, run_job

    rng = np.random.default_rng(3)
    data = rng.random((4, 24, 28)).astype(np.float32)
    other = rng.random((2, 4, 24, 28)).astype(np.float32)  # C T Y X
    job = Job(data=data, axes="TYX", options={"device": "cpu", "max_shift": 4},
              apply_to={"other": (other, "CTYX")}, name="main")
    in_memory = run_job(job).aligned
    job.out_path = tmp_path / "a.tif"
    on_disk = run_job(job).aligned
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tif", "a_other.tif"]
    for name in ("main", "other"):
        assert isinstance(on_disk[name], np.memmap)
        np.testing.assert_array_equal(on_disk[name], in_memory[name])


def test_a_dask_stack_is_measured_in_blocks_of_whole_frames():
    da = pytest.importorskip("dask.array")
    data = da.zeros((6, 2, 16, 16), chunks=(2, 1, 8, 8), dtype=np.uint16)
    stack = measure_stack(data, "TCYX", channel=1)
    assert stack.chunks == ((2, 2, 2), (16,), (16,))


def test_a_zarr_layer_is_streamed_into_a_file(tmp_path):
    zarr = pytest.importorskip("zarr")
    from xcorr_app.napari import Job, run_job

    data = np.random.default_rng(5).random((4, 20, 24)).astype(np.float32)
    z = zarr.zeros(data.shape, chunks=(2, 10, 24), dtype=np.float32)
    z[:] = data
    options = {"device": "cpu", "max_shift": 3}
    done = run_job(Job(data=z, axes="TYX", options=options, out_path=tmp_path / "z.npy"))
    expect = run_job(Job(data=data, axes="TYX", options=options))
    np.testing.assert_array_equal(done.result.shifts, expect.result.shifts)
    np.testing.assert_array_equal(done.aligned["aligned"], expect.aligned["aligned"])
