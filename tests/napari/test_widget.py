"""The dock widget on a ViewerModel: a run gives the aligned layer and the table of
``xcorr_app.align`` on the same data; cancelling adds nothing; shifts apply to other layers."""

import time

import numpy as np
import pytest

import xcorr_app
from qt_helpers import wait_for
from synthetic import drift_stack
from xcorr_app.napari import _widget
from xcorr_app.napari._layers import VOLUMES
from xcorr_app.napari._widget import AlignWidget

OPTIONS = {"max_shift": 10, "device": "cpu"}


@pytest.fixture
def viewer():
    """A ``ViewerModel``: the viewer without a canvas."""
    from napari.components import ViewerModel

    return ViewerModel()


@pytest.fixture
def stack(rng):
    return drift_stack(rng, n=6, shape=(48, 56))[0]


def _widget_for(viewer, data, **form):
    viewer.add_image(data, name="cells")
    w = AlignWidget(viewer)
    w.form.device.value = "cpu"
    w.form.max_shift.value = 10
    for key, value in form.items():
        getattr(w.form, key).value = value
    return w


def _aligned(stack, **options):
    out = np.empty(stack.shape, np.float32)
    return xcorr_app.align(stack, out=out, **options), out


def test_a_run_gives_the_aligned_layer_and_the_table_of_align(viewer, stack):
    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    res, out = _aligned(stack, **OPTIONS)
    assert w.status.value.startswith("aligned 6 frames")
    np.testing.assert_array_equal(viewer.layers["cells aligned"].data, out)
    assert w.results.result.csv_text() == res.csv_text()
    table = w.results.table.value["data"]
    assert [row[1:3] for row in table] == [[r["dy"], r["dx"]] for r in res.frame_records()]
    assert w.progress.value == w.progress.max > 0
    assert w.results.plot_image.ndim == 3 and w.apply_button.enabled


def test_cancel_adds_no_layer_and_leaves_no_file(viewer, stack, tmp_path, monkeypatch):
    run_job = _widget.run_job

    def cancelled_at_once(job, report, cancel):
        cancel.set()  # as the button does, before the first chunk is through
        return run_job(job, report, cancel)

    monkeypatch.setattr(_widget, "run_job", cancelled_at_once)
    w = _widget_for(viewer, stack)
    w.out_file.value = tmp_path / "aligned.tif"
    wait_for(w, w.start())
    assert w.status.value == "cancelled"
    assert [layer.name for layer in viewer.layers] == ["cells"]
    assert list(tmp_path.iterdir()) == [] and w.run_button.enabled


def test_cancel_stops_a_run_between_chunks(stack):
    import threading

    from xcorr_app.napari import Cancelled, Job, run_job

    cancel, seen = threading.Event(), []

    def report(done, total):
        seen.append(done)
        cancel.set()

    with pytest.raises(Cancelled):
        run_job(Job(data=stack, axes="TYX", options={**OPTIONS, "chunk_frames": 2}), report,
                cancel)
    assert len(seen) == 1 and 0 < seen[0] < 6  # the first chunk's report, then the stop


def test_shifts_apply_to_another_layer_and_to_channels(viewer, stack, tmp_path):
    other = np.flip(stack, axis=2).copy()
    both = np.stack([other, stack], axis=1)  # (T, C, Y, X): measured on channel 1
    w = _widget_for(viewer, both)
    w.channel.value = 1
    viewer.add_image(other, name="other")
    w.apply_to.value = [viewer.layers["other"]]
    wait_for(w, w.start())
    res, _ = _aligned(stack, **OPTIONS)
    np.testing.assert_array_equal(w.shifts.shifts, res.shifts)
    expect = np.concatenate([c for _, c in xcorr_app.apply_shifts(other, res.shifts,
                                                                  device="cpu")])
    np.testing.assert_array_equal(viewer.layers["cells aligned"].data[:, 0], expect)
    np.testing.assert_array_equal(viewer.layers["other aligned"].data, expect)
    # later: the same shifts on a layer of its own, from the table saved
    w.shifts = None
    w.load(w.results.save_table(tmp_path / "shifts.csv"))
    np.testing.assert_allclose(w.shifts.shifts, res.shifts, atol=1e-4)  # (as the CSV writes)
    w.target.value = viewer.layers["other"]
    wait_for(w, w.start_apply())
    assert viewer.layers[-1].name.startswith("other aligned ")  # (napari numbers the second)
    expect = np.concatenate([c for _, c in xcorr_app.apply_shifts(other, w.shifts.shifts,
                                                                  device="cpu")])
    np.testing.assert_array_equal(viewer.layers[-1].data, expect)


def test_loaded_rows_are_matched_to_frames_and_a_bad_table_is_told(viewer, stack, tmp_path):
    """A table's rows in another order give each frame its own shift (by the ``frame``
    column); a file that is not a table, or a table that does not fit the layer (a frame
    missing, another frame size), is one status line, no traceback, as ``xcorr apply``."""
    import json

    w = _widget_for(viewer, stack)
    w.target.value = viewer.layers["cells"]
    n, h, wd = stack.shape
    shifts = np.random.default_rng(4).uniform(-3, 3, (n, 2)).round(3)
    rows = [f"{k},{dy},{dx}" for k, (dy, dx) in enumerate(shifts)][::-1]
    table = tmp_path / "shifts.csv"
    table.write_text("frame,dy,dx\n" + "\n".join(rows) + "\n")
    w.load(table)
    np.testing.assert_array_equal(w.shifts.shifts, shifts)
    w.shifts = None
    table.write_text("not a table\n")
    w.load(table)
    assert w.shifts is None and w.status.value.startswith("cannot load shifts:")
    gap = "\n".join(f"{k + (k == n - 1)},0,0" for k in range(n))  # (frame n-1 given as n)
    table.write_text("frame,dy,dx\n" + gap + "\n")
    other = tmp_path / "shifts.json"
    other.write_text(json.dumps({"frame_shape": [2 * h, 2 * wd], "frames": [
        {"frame": k, "dy": 0.5, "dx": 0.5} for k in range(n)]}))
    for path, words in ((table, f"frame {n}"), (other, f"{2 * h}x{2 * wd}")):
        w.load(path)
        assert w.start_apply() is None
        assert w.status.value.startswith("cannot apply:") and words in w.status.value, \
            w.status.value
        assert "\n" not in w.status.value


def test_patches_add_the_motion_field_as_vectors(viewer, stack):
    w = _widget_for(viewer, stack, patches="2x2")
    wait_for(w, w.start())
    res = xcorr_app.align(stack, patches="2x2", **OPTIONS)
    vectors = viewer.layers["cells motion field"].data
    assert vectors.shape == (6 * 4, 2, 3)
    np.testing.assert_array_equal(vectors[:, 1, 1:], res.motion_field.reshape(-1, 2))
    np.testing.assert_array_equal(vectors[:, 0, 0], np.repeat(np.arange(6), 4))


def test_a_dask_layer_is_aligned_into_a_file_opened_lazily(viewer, stack, tmp_path):
    import dask.array as da

    w = _widget_for(viewer, da.from_array(stack, chunks=(2, -1, -1)))
    assert w.is_streamed()
    assert w.start() is None and "choose one" in w.status.value  # no file chosen yet
    w.out_file.value = tmp_path / "big.npy"
    wait_for(w, w.start())
    res, out = _aligned(stack, **OPTIONS)
    layer = viewer.layers["cells aligned"]
    assert isinstance(layer.data, np.memmap) and (tmp_path / "big.npy").exists()
    np.testing.assert_array_equal(w.shifts.shifts, res.shifts)
    np.testing.assert_array_equal(np.asarray(layer.data), out)


def test_low_confidence_frames_are_listed_and_a_click_jumps_there(viewer, stack):
    stack = stack.copy()
    stack[3] = 7  # a constant frame: no shift can be measured, flagged
    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    assert list(w.results.low.choices) == [3]
    assert viewer.dims.current_step[0] != 3
    w.results.low.value = [3]
    assert viewer.dims.current_step[0] == 3


def test_the_table_saves_as_csv_and_json(viewer, stack, tmp_path):
    import json

    from xcorr_app.io import strict_json

    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    csv = w.results.save_table(tmp_path / "s.csv").read_text()
    doc = json.loads(w.results.save_table(tmp_path / "s.json").read_text())
    assert csv == w.results.result.csv_text() == w.results.copy_table()
    records = json.loads(json.dumps(strict_json(w.results.result.frame_records())))
    assert doc["frames"] == records


def test_save_outputs_writes_what_align_writes(viewer, stack, tmp_path):
    """The widget's "Save outputs…" is AlignResult.save: the tables and plots of the run,
    the same bytes as the result saved from Python; an existing folder is kept."""
    from xcorr_app.errors import OutputError

    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    written = w.results.save_outputs(tmp_path / "w")
    assert sorted(written) == ["drift.png", "quality.png", "shifts.csv", "shifts.json"]
    again = w.results.result.save(tmp_path / "py", aligned=False)
    for name in ("shifts.csv", "drift.png", "quality.png"):
        assert written[name].read_bytes() == again[name].read_bytes()
    with pytest.raises(OutputError):
        w.results.save_outputs(tmp_path / "w")


def test_save_outputs_keeps_an_aligned_tif_of_no_run(viewer, stack, tmp_path, monkeypatch):
    """"Save outputs…" into a folder holding an ``aligned.tif`` of the user's own (no run's
    shifts.json beside it): nothing written or removed, and the message names the file and
    says to choose another folder; a caller's ``force`` does not remove it either."""
    import tifffile
    from qtpy.QtWidgets import QFileDialog, QMessageBox

    from xcorr_app.errors import OutputError

    folder = tmp_path / "mine"
    folder.mkdir()
    tifffile.imwrite(folder / "aligned.tif", stack)
    before = (folder / "aligned.tif").read_bytes()
    said = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        staticmethod(lambda *args, **kwargs: str(folder)))
    monkeypatch.setattr(QMessageBox, "warning",
                        staticmethod(lambda parent, title, text: said.append(text)))
    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    w.results.save_all.native.click()
    assert len(said) == 1 and str(folder / "aligned.tif") in said[0], said
    assert "nothing was written" in said[0] and "choose another folder" in said[0]
    with pytest.raises(OutputError, match="not the aligned stack of an earlier xcorr run"):
        w.results.save_outputs(folder, force=True)
    assert [p.name for p in folder.iterdir()] == ["aligned.tif"]
    assert (folder / "aligned.tif").read_bytes() == before


def test_the_quality_plot_is_shown_and_its_flagged_frames_listed(viewer, stack):
    from xcorr_app.napari._panels import flagged_frames

    stack = stack.copy()
    stack[4] = stack[4][:, ::-1]  # (mirrored: correlates poorly whatever its shift)
    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    result = w.results.result
    assert result.quality.flagged[4] and not result.low_confidence[4]
    assert not w.results.quality_plot.native.isHidden()
    assert w.results.quality_image.ndim == 3
    listed = flagged_frames(result)
    assert (f"frame 4 ({'worse' if result.quality.worse[4] else 'poor'})", 4) in listed
    assert list(w.results.low.choices) == [i for _, i in listed]
    off = _widget_for(viewer, stack, quality=False)
    wait_for(off, off.start())
    assert off.results.result.quality is None and off.results.quality_plot.native.isHidden()
    assert list(off.results.low.choices) == []


def test_a_single_image_layer_is_told_not_a_traceback(viewer, stack):
    """(A 2-D layer selected, a mean projection: the dock failed with a traceback.)"""
    viewer.add_image(stack.mean(axis=0), name="mean")
    w = AlignWidget(viewer)
    assert w.layer.value.name == "mean"
    assert w.status.value.startswith("mean: a layer of 2 dimensions cannot be aligned")
    assert w.start() is None and w.status.value.startswith("cannot run")
    viewer.add_image(stack, name="cells")
    w.layer.value = viewer.layers["cells"]
    assert (w.axes.value, w.status.value) == ("TYX", "")


def test_the_layers_axis_labels_say_its_axes_and_the_plane_stays_chosen(viewer, rng):
    """(Labelled t, z, y, x were read as T, C, Y, X by the dimensions alone.)"""
    data = rng.random((4, 3, 20, 24)).astype(np.float32)
    layer = viewer.add_image(data, name="tzyx")
    if not hasattr(layer, "axis_labels"):
        pytest.skip("this napari's layers have no axis labels")
    layer.axis_labels = ("t", "z", "y", "x")
    w = AlignWidget(viewer)
    assert w.axes.value == "TZYX" and list(w.plane.choices) == ["max", VOLUMES, 0, 1, 2]
    w.plane.value = 2
    viewer.add_image(data[:, 0], name="other")
    w.layer.value = viewer.layers["tzyx"]  # (the choices made again)
    assert w.plane.value == 2


def test_the_dock_scrolls_to_fit_a_small_screen(viewer, stack):
    """napari docks the widget's ``native``: the scroll area, not the whole form (whose height,
    about 1200 px, pushed the dock's bottom off a 1000-px screen)."""
    from qtpy.QtWidgets import QScrollArea

    w = _widget_for(viewer, stack)
    assert isinstance(w.native, QScrollArea)
    assert w.native.minimumSizeHint().height() < 400
    assert w.native.widget().minimumSizeHint().height() > 800  # (the form itself, scrolled)


def _rgb(stack, weights=(1.0, 0.6, 0.3)):
    grey = stack.astype(np.float64) / stack.max()
    return np.stack([grey * w * 255 for w in weights], -1).round().astype(np.uint8)


def test_an_rgb_layer_is_aligned_into_an_rgb_layer(viewer, stack):
    """(An RGB movie failed: "frames of 56x3 pixels".)"""
    from xcorr_app.napari import measure_stack

    rgb = _rgb(stack)
    viewer.add_image(rgb, name="cells", rgb=True)
    w = AlignWidget(viewer)
    w.form.device.value, w.form.max_shift.value, w.form.patches.value = "cpu", 10, "2x2"
    assert w.axes.value == "TYXS" and not w.colour.native.isHidden()
    assert w.channel.native.isHidden() and w.plane.native.isHidden()
    assert list(w.colour.choices) == ["luminance", "red", "green", "blue"]
    wait_for(w, w.start())
    assert w.status.value.startswith("aligned 6 frames"), w.status.value
    res = xcorr_app.align(measure_stack(rgb, "TYXS"), patches="2x2", **OPTIONS)
    np.testing.assert_array_equal(w.shifts.shifts, res.shifts)
    layer = viewer.layers["cells aligned"]
    assert layer.rgb and layer.data.shape == rgb.shape and layer.ndim == 3
    blue = np.concatenate([c for _, c in xcorr_app.alignment.apply_field(
        rgb[..., 2], res.motion_field, res.patch_centres, device="cpu")])
    np.testing.assert_array_equal(layer.data[..., 2], blue)
    assert viewer.layers["cells motion field"].data.shape == (6 * 4, 2, 3)
    w.colour.value = "red"  # (one colour measures; all are aligned)
    viewer.add_image(stack, name="grey")  # (the lists made again: the colour kept)
    assert (w.layer.value.name, w.colour.value) == ("cells", "red")
    wait_for(w, w.start())
    red = xcorr_app.align(rgb[..., 0], patches="2x2", **OPTIONS)
    np.testing.assert_array_equal(w.shifts.shifts, red.shifts)


def test_a_channel_axis_labelled_c_is_measured_on_the_chosen_channel(viewer, stack):
    """(Axis labels c, t, y, x: a channel axis first, read by the labels, not the dimensions.)"""
    noise = np.random.default_rng(1).integers(0, 100, stack.shape).astype(stack.dtype)
    data = np.stack([noise, stack])  # C T Y X
    layer = viewer.add_image(data, name="cells")
    layer.axis_labels = ("Channel", "time", "y", "x")
    w = AlignWidget(viewer)
    w.form.device.value, w.form.max_shift.value = "cpu", 10
    assert w.axes.value == "CTYX" and not w.channel.native.isHidden() and w.channel.max == 1
    assert w.colour.native.isHidden()
    w.channel.value = 1
    wait_for(w, w.start())
    res, out = _aligned(stack, **OPTIONS)
    np.testing.assert_array_equal(w.shifts.shifts, res.shifts)
    aligned = viewer.layers["cells aligned"].data
    np.testing.assert_array_equal(aligned[1], out)
    np.testing.assert_array_equal(aligned[0], np.concatenate(
        [c for _, c in xcorr_app.apply_shifts(noise, res.shifts, device="cpu")]))


def test_layers_split_by_channel_axis_are_measured_on_one_and_all_aligned(viewer, stack):
    """(``add_image(..., channel_axis=1)``: one layer a channel; pick one, apply to the rest.)"""
    other = np.flip(stack, axis=2).copy()
    viewer.add_image(np.stack([other, stack], axis=1), channel_axis=1, name=["red", "green"])
    w = AlignWidget(viewer)
    w.form.device.value, w.form.max_shift.value = "cpu", 10
    w.layer.value = viewer.layers["green"]
    w.apply_to.value = [viewer.layers["red"], viewer.layers["green"]]  # (itself: left out)
    wait_for(w, w.start())
    res, out = _aligned(stack, **OPTIONS)
    np.testing.assert_array_equal(w.shifts.shifts, res.shifts)
    np.testing.assert_array_equal(viewer.layers["green aligned"].data, out)
    np.testing.assert_array_equal(viewer.layers["red aligned"].data, np.concatenate(
        [c for _, c in xcorr_app.apply_shifts(other, res.shifts, device="cpu")]))
    assert [lay.name for lay in viewer.layers].count("green aligned") == 1


def _confidence_panel_pixels(image):
    """Green pixels (the confidence's colour, antialiased) in the drift plot's confidence
    panel, as the dock shows it."""
    from xcorr_app.alignment.outputs._plots import PANELS, PLOT_SIZE

    s = image.shape[1] / PLOT_SIZE[0]
    x0, y0, x1, y1 = (round(v * s) for v in PANELS["confidence"])
    r, g, b = np.moveaxis(image[y0:y1, x0:x1].astype(int), -1, 0)
    return int(((g > r + 30) & (g > b + 30)).sum())


@pytest.mark.parametrize("patches", ["", "4x4"])
def test_confidence_without_a_second_peak_is_said_and_drawn_not_inf(viewer, patches):
    """(The table showed ``inf`` for every frame, and the confidence plot was empty.)"""
    from sample_paths import stack_path
    from xcorr_app.napari._panels import NO_SECOND_PEAK
    from xcorr_app.napari._reader import read_stack

    ((data, _, _),) = read_stack(stack_path("moon"))
    w = _widget_for(viewer, data, max_shift=16, patches=patches)
    wait_for(w, w.start())
    res = w.results.result
    assert np.isposinf(res.confidence).all()  # (the run's own definition: no rival peak)
    column = [row[3] for row in w.results.table.value["data"]]
    assert column == [NO_SECOND_PEAK] * 12
    assert "12 of 12 frames: no second peak" in w.results.summary.value
    assert ("rigid pass" in w.results.summary.value) == bool(patches)
    assert _confidence_panel_pixels(w.results.plot_image) > 50  # (a triangle a frame)


def test_finite_confidence_is_a_number_in_the_table_and_a_curve(viewer, stack):
    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    conf = w.results.result.confidence
    assert np.isfinite(conf).all()
    assert [row[3] for row in w.results.table.value["data"]] == np.round(conf, 3).tolist()
    assert "no second peak" not in w.results.summary.value
    assert _confidence_panel_pixels(w.results.plot_image) > 50


def test_a_run_keeps_its_layers_when_another_is_picked_and_the_field_sits_on_the_image(
        viewer, stack):
    """The run names and styles what it adds by the layers it started with (a layer picked, or
    its own deleted, before it ends changed neither), and the motion field's vectors carry the
    image's translate as well as its scale (they sat 10 and 20 um off the image)."""
    w = _widget_for(viewer, stack, patches="2x2")
    cells = viewer.layers["cells"]
    cells.scale, cells.translate = (1, 0.5, 0.5), (0, 10, 20)
    viewer.add_image(stack.copy(), name="other")
    worker = w.start()
    w.layer.value = viewer.layers["other"]  # (before the run's result is handled)
    wait_for(w, worker)
    names = [layer.name for layer in viewer.layers]
    assert names == ["cells", "other", "cells aligned", "cells motion field"]
    field = viewer.layers["cells motion field"]
    np.testing.assert_array_equal(field.translate, cells.translate)
    np.testing.assert_array_equal(field.scale, cells.scale)
    w.layer.value = cells
    worker = w.start()
    del viewer.layers["cells"]  # (its look kept from the start)
    wait_for(w, worker)
    np.testing.assert_array_equal(viewer.layers[-2].translate, (0, 10, 20))
    assert viewer.layers[-2].name.startswith("cells aligned")


def test_applying_saved_shifts_ends_with_what_it_did(viewer, stack, tmp_path):
    w = _widget_for(viewer, stack)
    viewer.add_image(stack.copy(), name="other")
    wait_for(w, w.start())
    w.target.value = viewer.layers["other"]
    wait_for(w, w.start_apply())
    assert w.status.value == "applied the shifts to other"


def test_closing_the_dock_mid_run_stops_it_quietly(viewer, stack, monkeypatch):
    """The viewer (or the dock) closed during a run: the run is cancelled at its next chunk,
    and nothing it reports touches the deleted widgets (their signals raised "wrapped C/C++
    object ... has been deleted" four times)."""
    import sys

    from qtpy.QtWidgets import QApplication

    raised = []
    monkeypatch.setattr(sys, "excepthook", lambda *exc: raised.append(exc))
    w = _widget_for(viewer, stack)
    worker = w.start()
    ended = []
    worker.finished.connect(lambda: ended.append(True))
    try:
        from PyQt6 import sip
    except ImportError:  # (PyQt5)
        import sip
    sip.delete(w.native)  # (as the viewer's close deletes its docks)
    assert w._cancel.is_set()
    end = time.monotonic() + 60
    while not ended:
        QApplication.processEvents()
        assert time.monotonic() < end
        time.sleep(0.005)
    QApplication.processEvents()
    assert raised == [] and not [lay for lay in viewer.layers if "aligned" in lay.name]


def test_a_layer_of_no_frames_cannot_start_and_says_why(viewer, stack):
    viewer.add_image(stack.mean(axis=0), name="mean")
    w = AlignWidget(viewer)
    assert not w.run_button.enabled
    assert w.start() is None
    assert "a layer of 2 dimensions cannot be aligned" in w.status.value
    viewer.add_image(stack, name="cells")
    w.layer.value = viewer.layers["cells"]
    assert w.run_button.enabled


def test_long_words_on_the_status_line_do_not_widen_the_dock(viewer, stack, tmp_path):
    """A long path or a file's bytes in a message: cut at the dock's edge (the whole text in
    the tooltip), not a dock wider than the screen; a file that is not a table says so in a
    short line."""
    import tifffile

    w = _widget_for(viewer, stack)
    width = w.native.widget().minimumSizeHint().width()
    w.status.value = "failed: cannot write /" + "a_really_long_folder_name" * 20
    assert w.native.widget().minimumSizeHint().width() <= width
    assert w.status.native.toolTip() == w.status.value
    image = tmp_path / "not_a_table.csv"
    tifffile.imwrite(image, stack)
    w.load(image)
    assert "a binary file" in w.status.value and len(w.status.value) < 250


def test_a_table_saved_where_it_cannot_be_written_is_told(viewer, stack, monkeypatch):
    from qtpy.QtWidgets import QFileDialog, QMessageBox

    w = _widget_for(viewer, stack)
    wait_for(w, w.start())
    told = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        staticmethod(lambda *a, **k: ("/proc/xcorr/shifts.csv", "")))
    monkeypatch.setattr(QMessageBox, "warning", staticmethod(lambda *a: told.append(a[2])))
    w.results.save.changed.emit(True)
    assert len(told) == 1 and "cannot write /proc/xcorr/shifts.csv" in told[0]
