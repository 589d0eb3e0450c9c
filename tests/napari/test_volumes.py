"""The dock widget's "3-D (volumes)" plane choice: a layer with T and Z axes registered as
whole volumes (``align_volumes``), every channel moved by the (dz, dy, dx) shifts, the table
and plot of the 3-D run; what cannot run is told on the status line."""

import json

import numpy as np
import pytest

from qt_helpers import wait_for
from synthetic import fourier_moved, periodic_texture
from xcorr_app.alignment import VolumeOptions, align_volumes
from xcorr_app.alignment.volume import shift_volumes
from xcorr_app.napari import Cancelled, Job, run_volumes
from xcorr_app.napari import _volumes
from xcorr_app.napari._layers import VOLUMES
from xcorr_app.napari._panels import NO_VOLUME_OUTPUTS
from xcorr_app.napari._widget import AlignWidget

SHAPE = (10, 32, 36)  # (Z, Y, X) of each volume


@pytest.fixture
def viewer():
    from napari.components import ViewerModel

    return ViewerModel()


def _drifting(rng, n=5, shape=SHAPE, most=(1.5, 2.5, 2.5)):
    """``(volumes (n, Z, Y, X) float32, truth (n, 3))``: a periodic texture moved by subvoxel
    shifts (exact, by Fourier); ``truth[t]`` aligns volume ``t`` onto volume 0."""
    base = periodic_texture(rng, shape, 0.1)
    truth = rng.uniform(-1, 1, (n, 3)) * most
    truth[0] = 0.0
    return np.stack([fourier_moved(base, -s) for s in truth]).astype(np.float32), truth


def _widget(viewer, data, labels, scale=None, **form):
    layer = viewer.add_image(data, name="vol", scale=scale)
    if not hasattr(layer, "axis_labels"):
        pytest.skip("this napari's layers have no axis labels")
    layer.axis_labels = labels
    w = AlignWidget(viewer)
    w.form.device.value = "cpu"
    for key, value in form.items():
        getattr(w.form, key).value = value
    w.plane.value = VOLUMES
    return w


def _interior_correlation(a, b, margin=3):
    inner = (slice(margin, -margin),) * 3
    return np.corrcoef(a[inner].ravel(), b[inner].ravel())[0, 1]


def test_volumes_are_registered_in_3d_and_every_volume_moved(viewer, rng, tmp_path):
    data, truth = _drifting(rng)
    w = _widget(viewer, data, ("t", "z", "y", "x"), scale=(1.0, 2.0, 0.5, 0.5))
    assert w.axes.value == "TZYX" and list(w.plane.choices)[:2] == ["max", VOLUMES]
    wait_for(w, w.start())
    assert w.status.value.startswith("aligned 5 volumes in 3-D on cpu"), w.status.value
    shifts = w.shifts.shifts
    assert shifts.shape == (5, 3)
    assert np.sqrt(np.mean((shifts - truth) ** 2)) < 0.05, shifts - truth
    aligned = viewer.layers["vol aligned"]
    assert aligned.data.shape == data.shape and aligned.data.dtype == np.float32
    for t in range(1, 5):  # (before: the drift; after: the first volume's content)
        assert _interior_correlation(data[t], data[0]) < 0.95
        assert _interior_correlation(aligned.data[t], data[0]) > 0.99
    assert tuple(aligned.axis_labels) == ("t", "z", "y", "x")
    np.testing.assert_array_equal(aligned.scale, [1.0, 2.0, 0.5, 0.5])
    assert w.progress.value == w.progress.max == 10  # (5 measured, 5 moved)
    # the table and plot: dz, dy, dx and what the 3-D run measures (no invented columns)
    table = w.results.table.value
    assert list(table["columns"]) == ["dz", "dy", "dx", "peak", "confidence", "at_bound",
                                      "verified"]
    np.testing.assert_allclose([row[:3] for row in table["data"]], shifts, atol=5e-4)
    assert w.results.plot_image.shape[-1] == 3 and not w.results.quality_plot.visible
    assert w.results.summary.value.startswith("5 volumes registered in 3-D, 0 flagged")
    # Save table: xcorr align --volumes's shifts.csv, or JSON; Save outputs: off, said why
    csv = w.results.save_table(tmp_path / "s.csv").read_text()
    assert csv == w.shifts.to_csv() == w.results.copy_table()
    assert csv.splitlines()[0] == "t,dz,dy,dx,peak,confidence,at_bound,verified"
    doc = json.loads(w.results.save_table(tmp_path / "s.json").read_text())
    np.testing.assert_allclose([[v["dz"], v["dy"], v["dx"]] for v in doc["volumes"]], shifts)
    assert not w.results.save_all.enabled and w.results.save_all.tooltip == NO_VOLUME_OUTPUTS
    assert w.apply_button.enabled


def test_a_channel_is_measured_and_every_channel_moved(viewer, rng):
    """t, c, z, y, x: measured on channel 1; channel 0 (unrelated noise, which would give
    other shifts) moved by the same shifts."""
    moving, truth = _drifting(rng, n=4)
    noise = rng.random(moving.shape).astype(np.float32)
    data = np.stack([noise, moving], axis=1)
    w = _widget(viewer, data, ("time", "channel", "z", "y", "x"))
    assert w.axes.value == "TCZYX"
    w.channel.value = 1
    wait_for(w, w.start())
    shifts = w.shifts.shifts
    assert np.sqrt(np.mean((shifts - truth) ** 2)) < 0.05, shifts - truth
    out = viewer.layers["vol aligned"].data
    assert out.shape == data.shape
    np.testing.assert_array_equal(out[:, 0], np.stack(list(shift_volumes(noise, shifts,
                                                                         device="cpu"))))
    np.testing.assert_array_equal(out[:, 1], np.stack(list(shift_volumes(moving, shifts,
                                                                         device="cpu"))))


def test_the_3d_choice_stays_chosen_across_layer_changes(viewer, rng):
    data = rng.random((4, 3, 20, 24)).astype(np.float32)
    w = _widget(viewer, data, ("t", "z", "y", "x"))
    assert w.plane.value == VOLUMES
    flat = viewer.add_image(data[:, 0], name="other")
    w.layer.value = flat  # (no Z: no plane to choose)
    assert not w.plane.visible
    w.layer.value = viewer.layers["vol"]
    assert w.plane.value == VOLUMES


@pytest.mark.parametrize("shape", [(4, 1, 20, 24), (1, 5, 20, 24)])
def test_a_layer_of_one_plane_or_one_time_point_has_no_3d_choice(viewer, rng, shape):
    data = rng.random(shape).astype(np.float32)
    layer = viewer.add_image(data, name="thin")
    if not hasattr(layer, "axis_labels"):
        pytest.skip("this napari's layers have no axis labels")
    layer.axis_labels = ("t", "z", "y", "x")
    w = AlignWidget(viewer)
    assert w.axes.value == "TZYX" and VOLUMES not in w.plane.choices
    with pytest.raises(ValueError, match="no volumes to register: it needs 2 or more"):
        run_volumes(Job(data=data, axes="TZYX", plane=VOLUMES, options={"device": "cpu"}))


@pytest.mark.parametrize("boundary", ["auto", "circular"])
@pytest.mark.parametrize("reference", ["first", "mean", 3])
def test_steps_measure_what_one_call_measures(monkeypatch, reference, boundary):
    """Measured two volumes a step (the cancel button checked between), each against the
    same reference: the shifts, peaks, flags and boundary of one ``align_volumes`` call, over
    several stacks (a step of few volumes once decided ``auto`` on them alone)."""
    monkeypatch.setattr(_volumes, "VOLUMES_PER_STEP", 2)
    for seed in range(6):
        data, _ = _drifting(np.random.default_rng(seed), n=5, shape=(8, 20, 24))
        data = (data * 1000).astype(np.uint16)
        seen = []
        done = run_volumes(Job(data=data, axes="TZYX", plane=VOLUMES,
                               options=VolumeOptions(device="cpu", reference=reference,
                                                     max_shift=4, boundary=boundary)),
                           report=lambda d, t: seen.append((d, t)))
        one = align_volumes(data, reference=reference, max_shift=4, device="cpu",
                            boundary=boundary)
        assert done.result.boundary == one.boundary, seed
        np.testing.assert_allclose(done.result.shifts, one.shifts, atol=1e-9)
        np.testing.assert_allclose(done.result.peak, one.peak, atol=1e-6)
        np.testing.assert_array_equal(done.result.verified, one.verified)
        measured = [d for d, _ in seen if d <= 5]  # (two a step, the bar moved after each)
        assert sorted(set(measured)) == [0, 2, 4, 5] and measured == sorted(measured)
        assert seen[-1] == (10, 10)


def test_cancel_stops_the_volumes_and_leaves_no_file(rng, tmp_path, monkeypatch):
    import threading

    data, _ = _drifting(rng, n=4, shape=(6, 16, 16))
    monkeypatch.setattr(_volumes, "VOLUMES_PER_STEP", 1)
    stop, seen = threading.Event(), []

    def report(done, total):
        seen.append(done)
        stop.set()

    out = tmp_path / "aligned.npy"
    with pytest.raises(Cancelled):
        run_volumes(Job(data=data, axes="TZYX", plane=VOLUMES, options={"device": "cpu"},
                        out_path=out), report, stop)
    assert seen == [0] and list(tmp_path.iterdir()) == []


def test_options_a_3d_run_does_not_take_are_told(viewer, rng):
    data = rng.random((3, 4, 16, 16)).astype(np.float32)
    w = _widget(viewer, data, ("t", "z", "y", "x"), patches="2x2")
    assert w.start() is None
    assert w.status.value == ("cannot run: patches does not apply to 3-D volumes: set the form "
                              "back to its default, or measure a plane")
    w.form.patches.value = ""
    w.form.reference.value = "refined"
    assert w.start() is None and "reference 'refined' does not apply" in w.status.value


def test_3d_shifts_apply_to_a_layer_with_planes_not_to_one_without(viewer, rng):
    data, truth = _drifting(rng, n=3, shape=(6, 16, 20))
    w = _widget(viewer, data, ("t", "z", "y", "x"))
    wait_for(w, w.start())
    other = viewer.add_image(np.flip(data, axis=3).copy(), name="other")
    other.axis_labels = ("t", "z", "y", "x")
    w.target.value = other
    wait_for(w, w.start_apply())
    expect = np.stack(list(shift_volumes(other.data, w.shifts.shifts, device="cpu")))
    np.testing.assert_array_equal(viewer.layers["other aligned"].data, expect)
    w.target.value = viewer.add_image(data[:, 0], name="flat")
    assert w.start_apply() is None
    assert w.status.value == ("cannot apply: flat (TYX): 3-D shifts move layers with a Z axis "
                              "and no colours")


def test_a_dask_layer_of_volumes_is_aligned_into_a_file(viewer, rng, tmp_path):
    import dask.array as da

    data, truth = _drifting(rng, n=3, shape=(6, 16, 20))
    w = _widget(viewer, da.from_array(data, chunks=(1, 6, 16, 20)), ("t", "z", "y", "x"))
    assert w.start() is None and "aligned into a file" in w.status.value
    w.out_file.value = str(tmp_path / "aligned.npy")
    wait_for(w, w.start())
    out = viewer.layers["vol aligned"].data
    assert isinstance(out, np.memmap) and list(tmp_path.iterdir()) == [tmp_path / "aligned.npy"]
    np.testing.assert_array_equal(out, np.stack(list(shift_volumes(data, w.shifts.shifts,
                                                                   device="cpu"))))


def test_the_form_s_boundary_reaches_the_3d_run(viewer):
    """The form's boundary is the 3-D run's: ``linear`` given, the volumes measured over the
    overlap, as one ``align_volumes(boundary="linear")`` call measures them."""
    data, _ = _drifting(np.random.default_rng(5), n=4, shape=(8, 20, 24))
    w = _widget(viewer, data, ("t", "z", "y", "x"), boundary="linear")
    wait_for(w, w.start())
    one = align_volumes(data, boundary="linear", device="cpu")
    assert w.shifts.boundary == "linear"
    np.testing.assert_allclose(w.shifts.shifts, one.shifts, atol=1e-9)
    assert _volumes.volume_options({"boundary": "circular", "device": "cpu"}).boundary \
        == "circular"
