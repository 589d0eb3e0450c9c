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


@pytest.mark.parametrize("axes", ["TYXC", "TTYX", "TCY", "CZYX", "tqyx", "TYSX", "TYXS"])
def test_axes_that_do_not_fit_are_refused(axes):
    with pytest.raises(ValueError, match="do not fit"):
        check_axes(axes, (2, 3, 4, 5))  # (S: 3 or 4 colours last, never 5)


def test_colour_samples_are_an_s_axis_after_yx():
    assert check_axes("tyxs", (2, 4, 5, 3)) == "TYXS" and check_axes("TZYXS", (2, 3, 4, 5, 4))
    with pytest.raises(ValueError, match="do not fit"):
        check_axes("TYXS", (2, 4, 5, 2))


@pytest.mark.parametrize("labels, ndim, axes", [
    (("t", "z", "y", "x"), 4, "TZYX"), (("Time", "Channel", "y", "x"), 4, "TCYX"),
    (("frames", "c", "depth", "Y", "X"), 5, "TCZYX"), (("-3", "-2", "-1"), 3, None),
    (("t", "y", "z"), 3, None), (("t", "t", "y", "x"), 4, None), (("t", "y", "x"), 4, None)])
def test_axis_labels_name_the_axes_or_nothing(labels, ndim, axes):
    from xcorr_app.napari._layers import axes_from_labels

    assert axes_from_labels(labels, ndim) == axes


def _rgb(stack, weights=(1.0, 0.6, 0.3), alpha=None):
    """A (T, Y, X, 3|4) uint8 movie whose colours all drift as ``stack`` does."""
    grey = stack.astype(np.float64) / stack.max()
    colours = [grey * w * 255 for w in weights] + ([np.full(grey.shape, alpha)] if alpha else [])
    return np.stack(colours, -1).round().astype(np.uint8)


def _shifted(frames, shifts):
    import xcorr_app

    return np.concatenate([c for _, c in xcorr_app.apply_shifts(
        frames, shifts, chunk_frames=len(frames), device="cpu")])


@pytest.mark.parametrize("alpha", [None, 255])
def test_an_rgb_movie_is_measured_on_its_luminance_or_a_colour_and_aligned_in_colour(alpha):
    """(An RGB movie failed: "frames of 512x3 pixels".)"""
    import xcorr_app
    from synthetic import drift_stack
    from xcorr_app.napari import Job, run_job

    stack, truth = drift_stack(np.random.default_rng(2), n=5, shape=(64, 72))
    rgb = _rgb(stack, alpha=alpha)
    options = {"device": "cpu", "max_shift": 8}
    done = run_job(Job(data=rgb, axes="TYXS", options=options))
    luminance = measure_stack(rgb, "TYXS")
    weights = np.array([0.299, 0.587, 0.114], np.float32)
    np.testing.assert_allclose(luminance, rgb[..., :3].astype(np.float32) @ weights, rtol=1e-6)
    np.testing.assert_array_equal(done.result.shifts,
                                  xcorr_app.align(luminance, **options).shifts)
    assert np.abs(done.result.shifts - truth).max() < 0.3
    out = done.aligned["aligned"]
    assert out.shape == rgb.shape and out.dtype == np.float32
    for k in range(rgb.shape[-1]):  # every colour moved by the same shifts
        np.testing.assert_array_equal(out[..., k], _shifted(rgb[..., k], done.result.shifts))
    green = run_job(Job(data=rgb, axes="TYXS", colour="green", options=options))
    np.testing.assert_array_equal(green.result.shifts,
                                  xcorr_app.align(rgb[..., 1], **options).shifts)
    if alpha is None:
        with pytest.raises(ValueError, match="3 colours"):
            measure_stack(rgb, "TYXS", colour="alpha")


def test_a_lazy_rgb_movie_is_measured_as_the_same_luminance(rng):
    da = pytest.importorskip("dask.array")
    rgb = rng.integers(0, 255, (6, 16, 20, 3), dtype=np.uint8)
    lazy = measure_stack(da.from_array(rgb, chunks=(2, 8, 10, 3)), "TYXS")
    assert lazy.chunks == ((2, 2, 2), (16,), (20,))
    np.testing.assert_allclose(lazy.compute(), measure_stack(rgb, "TYXS"), rtol=1e-6)


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


@pytest.mark.parametrize("shape, axes, photometric", [
    ((4, 24, 28), "TYX", "MINISBLACK"), ((3, 24, 28), "TYX", "MINISBLACK"),
    ((3, 24, 28, 3), "TYXS", "RGB"), ((5, 2, 20, 22, 4), "TCYXS", "RGB")])
def test_an_aligned_tiff_holds_grey_frames_or_colour_frames(tmp_path, shape, axes, photometric):
    """(A stack of 3 or 4 grey frames was written as one RGB picture of planes.)"""
    import tifffile

    from xcorr_app.napari import Job, run_job

    data = np.random.default_rng(4).integers(0, 255, shape).astype(np.uint8)
    job = Job(data=data, axes=axes, options={"device": "cpu", "max_shift": 3})
    in_memory = run_job(job).aligned["aligned"]
    job.out_path = tmp_path / "a.tif"
    on_disk = run_job(job).aligned["aligned"]
    np.testing.assert_array_equal(on_disk, in_memory)
    with tifffile.TiffFile(job.out_path) as tif:
        assert tif.pages[0].photometric.name == photometric
        assert tif.series[0].shape == shape


@pytest.mark.parametrize("options", [{"model": "rigid-body"}, {"bidi": 1.0}])
def test_the_aligned_layer_is_what_the_result_applies(options):
    """A layer the run does not warp itself (written to a file, another layer the shifts
    apply to) is aligned as the result applies (a rigid-body or bidi run's was warped by its
    shifts alone)."""
    from xcorr_app.napari import Job, run_job

    rng = np.random.default_rng(3)
    data = rng.random((6, 48, 56)).astype(np.float32)
    done = run_job(Job(data=data, axes="TYX", apply_to={"other": (data, "TYX")},
                       options={"device": "cpu", "max_shift": 4, **options}))
    want = np.concatenate([c for _, c in done.result.apply(data)])
    for name in ("aligned", "other"):
        np.testing.assert_allclose(done.aligned[name], want, atol=1e-5)


@pytest.mark.parametrize("options", [{"model": "rigid-body"}, {"bidi": 1.0}])
def test_a_saved_table_applies_as_its_run(tmp_path, options):
    """Shifts loaded from a run's shifts.csv (its shifts.json beside it) warp a layer as the
    run's result does: the rotations (as a field) and the line offset it removed."""
    from xcorr_app import align
    from xcorr_app.napari._run import load_shifts, warp_layers

    rng = np.random.default_rng(3)
    data = rng.random((6, 48, 56)).astype(np.float32)
    res = align(data, device="cpu", max_shift=4, **options)
    res.save(tmp_path / "run", aligned=False, plots=False)
    saved = load_shifts(tmp_path / "run" / "shifts.csv")
    saved.fit(len(data), data.shape[1:], "layer")
    got = warp_layers(saved, {"layer": (data, "TYX")}, device="cpu")["layer"]
    want = np.concatenate([c for _, c in res.apply(data)])
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_a_rigid_body_run_refuses_a_layer_of_another_frame_size():
    """(It rotated a larger layer about the run's centre, silently.)"""
    from xcorr_app.errors import InputError
    from xcorr_app.napari import Job, run_job

    rng = np.random.default_rng(3)
    data = rng.random((6, 48, 56)).astype(np.float32)
    larger = rng.random((6, 60, 70)).astype(np.float32)
    with pytest.raises(InputError, match="rotates frames of 48x56"):
        run_job(Job(data=data, axes="TYX", apply_to={"larger": (larger, "TYX")},
                    options={"device": "cpu", "max_shift": 4, "model": "rigid-body"}))
