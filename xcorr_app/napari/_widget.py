"""The dock widget: align the selected image layer in a worker thread, show the results, apply
the shifts to other layers.

The run is :func:`~._run.run_job` in napari's worker thread (the viewer stays responsive); its
progress comes back through a Qt signal (queued to the main thread) and the cancel button sets
an event the progress callback checks (it raises :class:`~._layers.Cancelled`, which stops
:func:`xcorr_app.align` between chunks; files are written under temporary names and renamed
only at the end, so a cancelled run adds no layer and leaves no file).

Examples
--------
>>> import numpy as np
>>> from napari.components import ViewerModel
>>> viewer = ViewerModel()
>>> _ = viewer.add_image(np.zeros((4, 2, 16, 16), np.uint16), name="cells")
>>> w = AlignWidget(viewer)
>>> w.layer.value.name, w.axes.value, w.plane.visible, w.channel.max
('cells', 'TCYX', False, 1)
"""

from __future__ import annotations

import threading
from pathlib import Path

from magicgui import widgets
from qtpy.QtCore import QObject, Signal

from ..alignment import VolumeResult

from ._form import form_options, options_form
from ._layers import (COLOURS, LUMINANCE, MAX_PROJECTION, VOLUMES, Cancelled,
                      axes_from_labels, check_axes, default_axes, is_lazy)
from ._panels import ResultsPanel, WrappedLabel, field_vectors
from ._run import (Job, SavedShifts, Watch, check_targets, frames_of, load_shifts, run_job,
                   warp_layers)
from ._volumes import (can_register_volumes, check_volume_targets, run_volumes, volume_options,
                       volumes_in, warp_volume_layers)


class _Relay(QObject):
    """Carries ``(done, total)`` from the worker thread to the main thread (a queued
    signal: the widgets are touched only there)."""

    step = Signal(int, int)


def _image_layers(viewer):
    from napari.layers import Image

    return [layer for layer in viewer.layers if isinstance(layer, Image)]


def _layer_data(layer):
    return layer.data[0] if getattr(layer, "multiscale", False) else layer.data


def _look(layer) -> dict:
    """How an aligned copy of ``layer`` is shown: its scale, translate, contrast, axis labels
    and colormap (an RGB layer stays one)."""
    look = {"scale": layer.scale, "translate": layer.translate,
            "contrast_limits": layer.contrast_limits}
    if hasattr(layer, "axis_labels"):  # (napari >= 0.5)
        look["axis_labels"] = layer.axis_labels
    if layer.rgb:
        look["rgb"] = True
    else:
        look["colormap"] = layer.colormap.name
    return look


def _axes_of(layer) -> str:
    """The layer's axes: as a run set them, else its own axis labels where they name T, C, Z,
    Y, X (:func:`~._layers.axes_from_labels`: a layer napari read with labels), else by its
    dimensions (:func:`~._layers.default_axes`; ValueError for a layer of no frames); an
    RGB(A) layer's colours are an S axis after them (napari's dimensions leave it out)."""
    if layer.metadata.get("xcorr_axes"):
        return layer.metadata["xcorr_axes"]
    ndim = _layer_data(layer).ndim - bool(getattr(layer, "rgb", False))
    axes = axes_from_labels(getattr(layer, "axis_labels", ()), ndim) or default_axes(ndim)
    return axes + ("S" if getattr(layer, "rgb", False) else "")


class AlignWidget(widgets.Container):
    """Align the selected image layer (the dock widget of the ``xcorr-app`` plugin).

    Parameters
    ----------
    napari_viewer : napari.viewer.Viewer or napari.components.ViewerModel
    """

    def __init__(self, napari_viewer):
        self.viewer = napari_viewer
        layers = lambda _w: [(lay.name, lay) for lay in _image_layers(self.viewer)]  # noqa: E731
        self.layer = widgets.ComboBox(label="layer", choices=layers)
        self.axes = widgets.LineEdit(label="axes", tooltip="one letter a dimension: T frames, "
                                     "C channels, Z planes, then YX")
        self.channel = widgets.SpinBox(label="measure channel", min=0, max=0)
        self.plane = widgets.ComboBox(label="measure plane", choices=[MAX_PROJECTION],
                                      tooltip="max: the planes' maximum; a number: that plane; "
                                      f"{VOLUMES}: whole volumes registered in 3-D (dz, dy, dx)")
        self.colour = widgets.ComboBox(label="measure colour", choices=[LUMINANCE],
                                       tooltip="an RGB layer: measured on the luminance or "
                                       "one colour; every colour is aligned")
        self.form = options_form()
        self.apply_to = widgets.Select(label="also apply to", choices=layers)
        self.out_file = widgets.FileEdit(label="aligned file", mode="w",
                                         filter="*.tif *.tiff *.npy",
                                         tooltip="write the aligned stack here and open it "
                                         "lazily (needed for Dask/Zarr layers)")
        self.run_button = widgets.PushButton(text="Align")
        self.cancel_button = widgets.PushButton(text="Cancel", enabled=False)
        self.progress = widgets.ProgressBar(value=0, min=0, max=1, label="progress")
        self.status = WrappedLabel(value="")  # (a run's notes: never wider than the dock)
        self.results = ResultsPanel(jump=self.jump_to)
        self.target = widgets.ComboBox(label="apply shifts to", choices=layers)
        self.load_button = widgets.PushButton(text="Load shifts…")
        self.apply_button = widgets.PushButton(text="Apply shifts", enabled=False)
        run_row = widgets.Container(widgets=[self.run_button, self.cancel_button],
                                    layout="horizontal", labels=False)
        apply_row = widgets.Container(widgets=[self.load_button, self.apply_button],
                                      layout="horizontal", labels=False)
        super().__init__(widgets=[self.layer, self.axes, self.channel, self.plane,
                                  self.colour, self.form, self.apply_to, self.out_file,
                                  run_row, self.progress, self.status, self.results,
                                  self.target, apply_row],
                         scrollable=True)
        self.shifts, self.worker, self._cancel, self._axes_shown = None, None, None, {}
        # (the run's layers as they looked at its start: picking another layer, or deleting
        # this one, before it ends does not rename or restyle what it adds)
        self._looks, self._run_name, self._gone = {}, None, False
        self._planes, self._choosing = {}, False  # (each layer's plane, as the user chose it)
        self._relay = _Relay()
        self._relay.step.connect(self._step)
        self.layer.changed.connect(self._layer_changed)
        self.axes.changed.connect(self._axes_changed)
        self.plane.changed.connect(self._plane_chosen)
        self.run_button.changed.connect(self.start)
        self.cancel_button.changed.connect(self.cancel)
        self.load_button.changed.connect(self._ask_load)
        self.apply_button.changed.connect(self.start_apply)
        for event in (napari_viewer.layers.events.inserted, napari_viewer.layers.events.removed):
            event.connect(self.reset_choices)
        self.reset_choices()
        if self.viewer.layers.selection.active in _image_layers(self.viewer):
            self.layer.value = self.viewer.layers.selection.active
        self._layer_changed(self.layer.value)
        self._fit_width()
        # (the viewer or the dock closed: the run stops at its next chunk, and nothing it
        # reports touches the deleted widgets)
        self.native.destroyed.connect(self._closed)

    def _closed(self, *_) -> None:
        self._gone = True
        if self._cancel is not None:
            self._cancel.set()

    def _fit_width(self) -> None:
        """The scroll area at least as wide as the form's least width and its vertical
        scroll bar (a narrower dock cut off the form's right edge: the second button of a
        row); anything wider still scrolls sideways, never cut off."""
        from qtpy.QtCore import Qt

        area = self.root_native_widget
        inner = area.widget() if hasattr(area, "widget") else None
        if inner is None:
            return
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)  # (never cut: scrolled)
        area.setMinimumWidth(inner.minimumSizeHint().width()
                             + area.verticalScrollBar().sizeHint().width()
                             + 2 * area.frameWidth())

    @property
    def native(self):
        """The dock's widget: the scroll area around the form (napari docks ``native``, which
        magicgui makes the form inside it: the dock then asked the form's whole height, about
        1200 px, and pushed its bottom off a 1000-px screen)."""
        return self.root_native_widget

    # -- the layer and its axes
    def _layer_changed(self, layer) -> None:
        if layer is None:
            return
        try:
            axes = _axes_of(layer)
        except ValueError as e:  # (a single 2-D image, a projection: nothing to align)
            self.axes.value = ""
            self.status.value = f"{layer.name}: {e}"
            self.run_button.enabled = False  # (the status line says why; kept there)
            return
        self.status.value = ""
        self.run_button.enabled = self.worker is None or not self.cancel_button.enabled
        self.axes.value = axes
        self._axes_changed(self.axes.value)

    def _axes_changed(self, axes) -> None:
        layer = self.layer.value
        if layer is None or not axes:  # (none: a layer of no frames, said on the status line)
            return
        shape = _layer_data(layer).shape
        try:
            axes = check_axes(axes, shape)
        except ValueError as e:
            self.status.value = str(e)
            return
        self.channel.visible = "C" in axes
        self.channel.max = shape[axes.index("C")] - 1 if "C" in axes else 0
        self.plane.visible = "Z" in axes
        self.colour.visible = "S" in axes
        self.colour.choices = [LUMINANCE, *COLOURS[:shape[-1] if "S" in axes else 0]]
        chosen = self._planes.get(layer.name, self.plane.value)
        self._choosing = True
        self.plane.choices = [MAX_PROJECTION] + ([VOLUMES] if can_register_volumes(
            shape, axes) else []) + (list(range(shape[axes.index("Z")])) if "Z" in axes else [])
        if chosen in self.plane.choices:  # (the layer's choice, where it still fits, kept)
            self.plane.value = chosen
        self._choosing = False

    def _plane_chosen(self, value) -> None:
        layer = self.layer.value
        if layer is not None and not getattr(self, "_choosing", True):
            self._planes[layer.name] = value

    def reset_choices(self, *args) -> None:
        """The layers' lists made again (a layer added or removed): magicgui resets every
        list, the planes' and colours' too, which are made again for the layer (its chosen
        plane and colour kept)."""
        colour = self.colour.value if hasattr(self, "colour") else None
        self._choosing = True
        try:
            super().reset_choices(*args)
        finally:
            self._choosing = False
        if hasattr(self, "_planes"):
            self._axes_changed(self.axes.value)
            if colour in self.colour.choices:
                self.colour.value = colour

    def _out_path(self):
        value = str(self.out_file.value or "")
        return None if value in ("", ".") or Path(value).is_dir() else Path(value)

    def job(self) -> Job:
        """The run the widget is set up for (ValueError for settings that cannot run)."""
        layer = self.layer.value
        if layer is None:
            raise ValueError("no image layer to align: open a stack first")
        data = _layer_data(layer)
        if not self.axes.value:
            _axes_of(layer)  # (why it has none: a layer of no frames, as the status line said)
        others = {lay.name: (_layer_data(lay), _axes_of(lay)) for lay in self.apply_to.value
                  if lay is not layer}
        axes = check_axes(self.axes.value, data.shape)
        check_targets({layer.name: (data, axes), **others}, data.shape[axes.index("T")],
                      self._out_path())  # (before the worker starts: the status line says)
        options = form_options(self.form)
        if self.plane.value == VOLUMES:  # (3-D: its options parsed once, here)
            options = volume_options(options)
            check_volume_targets(others)
        return Job(data=data, axes=axes, channel=self.channel.value, plane=self.plane.value,
                   colour=self.colour.value, options=options, apply_to=others,
                   out_path=self._out_path(), name=layer.name)

    # -- running
    def start(self, *_):
        """Start the run in a worker thread; returns the worker (None when the settings
        cannot run: the status line says why)."""
        try:
            job = self.job()
        except Exception as e:  # (a bad axes string, option or file name)
            self.status.value = f"cannot run: {e}"
            return None
        self._axes_shown = {job.name: job.axes, **{k: a for k, (_, a) in job.apply_to.items()}}
        self._remember([job.name, *job.apply_to], job.name)
        if job.plane == VOLUMES:
            return self._launch(run_volumes, job, self._aligned, "aligning the volumes in 3-D")
        return self._launch(run_job, job, self._aligned, "aligning")

    def _remember(self, names, main) -> None:
        """The run's layers' looks (:func:`_look`) and the name of the layer it aligns."""
        self._looks = {n: _look(self.viewer.layers[n]) for n in names if n in self.viewer.layers}
        self._run_name = main

    def _launch(self, fn, job, done, what):
        from napari.qt.threading import create_worker

        self._cancel = threading.Event()
        self.worker = create_worker(fn, job, report=self._relay.step.emit,
                                    cancel=self._cancel, _start_thread=False,
                                    _ignore_errors=True)  # (errors go to _failed)
        self.worker.returned.connect(done)
        self.worker.errored.connect(self._failed)
        self.worker.finished.connect(self._finished)
        self.run_button.enabled = self.apply_button.enabled = False
        self.cancel_button.enabled = True
        self.progress.value, self.status.value = 0, f"{what}…"
        self.worker.start()
        return self.worker

    def cancel(self, *_) -> None:
        """Stop the run at its next chunk: no layer is added, no file left."""
        if self._cancel is not None:
            self._cancel.set()
            self.status.value = "cancelling…"

    def _step(self, done, total) -> None:
        if self._gone:
            return
        self.progress.max = max(total, 1)
        self.progress.value = done

    def _failed(self, exc) -> None:
        if self._gone:
            return
        self.status.value = "cancelled" if isinstance(exc, Cancelled) else f"failed: {exc}"

    def _finished(self) -> None:
        if self._gone:
            return
        # (not for a layer of no frames, picked during the run: its status line says why)
        self.run_button.enabled = self.layer.value is None or bool(self.axes.value)
        self.cancel_button.enabled = False
        self.apply_button.enabled = self.shifts is not None

    def _add_aligned(self, aligned: dict) -> list:
        return [self.viewer.add_image(
            data, name=f"{name} aligned",
            metadata={"xcorr_axes": self._axes_shown.get(name), "xcorr_aligned": True},
            **self._looks.get(name, {})) for name, data in aligned.items()]

    def _applied(self, aligned: dict) -> None:
        if self._gone:
            return
        self._add_aligned(aligned)
        self.status.value = f"applied the shifts to {', '.join(aligned)}"

    def _aligned(self, output) -> None:
        if self._gone:
            return
        result = output.result
        self.shifts = result
        added = self._add_aligned(output.aligned)
        if isinstance(result, VolumeResult):
            self.results.show(result)
            self._fit_width()
            flags = result.notes[3:]
            self.status.value = (f"aligned {len(result.shifts)} volumes in 3-D on "
                                 f"{result.device}" + (f"; {'; '.join(flags)}" if flags else ""))
            return
        main = self._run_name
        axes = self._axes_shown.get(main, "TYX")
        vectors = field_vectors(result, axes.rstrip("S"), added[0].data.shape[:len(
            axes.rstrip("S"))]) if added else None
        if vectors is not None and len(vectors):
            self.viewer.add_vectors(vectors, name=f"{main} motion field", edge_color="yellow",
                                    edge_width=1, length=4, scale=added[0].scale,
                                    translate=added[0].translate)
        self.results.show(result)
        self._fit_width()
        n = len(result.shifts)
        self.status.value = (f"aligned {n} frames on {result.settings.get('device')}"
                             + (f"; {'; '.join(result.notes)}" if result.notes else ""))

    # -- applying saved shifts to another layer
    def load(self, path) -> None:
        """Take the shifts of a saved table (``shifts.csv`` or ``.json``) for
        :meth:`start_apply`."""
        try:
            self.shifts = load_shifts(path)
        except ValueError as e:  # (InputError: one line on the status line)
            self.status.value = f"cannot load shifts: {e}"
            return
        self.apply_button.enabled = True
        self.status.value = f"{len(self.shifts.shifts)} shifts from {Path(path).name}"

    def _ask_load(self, *_):
        from qtpy.QtWidgets import QFileDialog

        path, _ = QFileDialog.getOpenFileName(self.native, "Shifts to apply", "",
                                              "Shift tables (*.csv *.json *.npz)")
        if path:
            self.load(path)

    def start_apply(self, *_):
        """Warp the layer chosen in ``apply shifts to`` by the last run's (or the loaded)
        shifts, in a worker; returns it (None when it cannot run)."""
        layer = self.target.value
        try:
            if self.shifts is None or layer is None:
                raise ValueError("align a layer or load shifts first, and pick a layer")
            data, axes = _layer_data(layer), _axes_of(layer)
            out = self._out_path()
            if isinstance(self.shifts, VolumeResult):  # (3-D shifts: layers with a Z axis)
                check_volume_targets({layer.name: (data, axes)})
            if isinstance(self.shifts, SavedShifts):  # (as xcorr apply checks a table)
                self.shifts.fit(data.shape[axes.index("T")],
                                [data.shape[axes.index(a)] for a in "YX"], layer.name)
            targets = check_targets({layer.name: (data, axes)}, len(self.shifts.shifts), out)
        except Exception as e:
            self.status.value = f"cannot apply: {e}"
            return None
        self._axes_shown = {layer.name: axes}
        self._remember([layer.name], layer.name)
        shifts = self.shifts

        def apply(targets, report, cancel):
            if isinstance(shifts, VolumeResult):
                return warp_volume_layers(shifts, targets, out,
                                          Watch(volumes_in(targets), report, cancel), layer.name)
            watch = Watch(frames_of(targets), report, cancel)
            return warp_layers(shifts, targets, out, watch, main=layer.name)

        return self._launch(apply, targets, self._applied, "applying")

    def jump_to(self, frame: int) -> None:
        """Show ``frame`` in the viewer (the T axis of the layer being aligned)."""
        layer = self.layer.value
        if layer is None:
            return
        axes = self.axes.value.upper()
        dim = self.viewer.dims.ndim - layer.ndim + (axes.index("T") if "T" in axes else 0)
        self.viewer.dims.set_current_step(dim, frame)

    def is_streamed(self) -> bool:
        """True when the selected layer is Dask or Zarr backed (streamed, aligned to a file)."""
        return self.layer.value is not None and is_lazy(_layer_data(self.layer.value))
