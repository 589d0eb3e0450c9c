"""The results of a run in the dock widget: the shift table (copy, save as CSV or JSON), the
drift plot (:func:`xcorr_app.alignment.outputs.plot_drift`: shifts and confidence, flagged frames shaded), the
quality plot (:func:`xcorr_app.alignment.outputs.plot_quality`: each frame's correlation with the template
before and after, the residual shift) and the flagged frames, low confidence or worse or poor
after alignment (a click jumps the viewer there); and the layers a run adds.

Examples
--------
>>> import numpy as np, xcorr_app
>>> res = xcorr_app.align(np.random.default_rng(0).random((3, 32, 32)), device="cpu")
>>> panel = ResultsPanel(jump=print)
>>> panel.show(res)
>>> panel.table.shape[0], panel.plot_image.shape[-1], panel.plot.native.pixmap().isNull()
(3, 3, False)
>>> panel.quality_image.shape[-1], panel.quality_plot.native.isHidden()
(3, False)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from magicgui import widgets

from ..alignment import VolumeResult
from ..alignment.outputs import plot_drift, plot_quality
from ..errors import InputError, OutputError, XcorrError
from ..io import write_text
from ._run import table_text
from ._volumes import volume_table_text

#: the table's least width, px (wider rows scroll within it)
TABLE_MIN_WIDTH = 200
#: columns of the table shown (all of them are in the CSV and JSON saved)
COLUMNS = ("frame", "dy", "dx", "confidence", "low_confidence", "agree")
#: the table's confidence of a frame whose peak has no rival (``inf`` in ``shifts.csv``)
NO_SECOND_PEAK = "no 2nd peak"
#: the table's confidence of a frame not measured (NaN; ``null`` in ``shifts.json``)
NOT_MEASURED = "\u2014"


def confidence_cell(value):
    """What the table shows of a frame's confidence (``frame_records``' value): the number,
    :data:`NO_SECOND_PEAK` for ``inf`` (peak over second peak with no second peak), or
    :data:`NOT_MEASURED` for none.

    >>> confidence_cell(2.345678), confidence_cell("inf"), confidence_cell(None)
    (2.346, 'no 2nd peak', '\u2014')
    """
    if value is None:
        return NOT_MEASURED
    value = float(value)
    return NO_SECOND_PEAK if value == float("inf") else round(value, 3)


def confidence_note(result) -> str:
    """The summary's words on the confidence column: how many frames have no second peak
    (drawn as triangles at the top of the plot), and for a patch run that the column is its
    rigid pass's (each patch's own is in ``motion_field.npz``)."""
    conf = np.asarray(result.confidence, float)
    words = []
    if np.isposinf(conf).any():
        words.append(f"{int(np.isposinf(conf).sum())} of {len(conf)} frames: no second peak "
                     "(confidence inf, a triangle atop the plot)")
    if result.motion_field is not None:
        words.append("confidence of the rigid pass (each patch's: motion_field.npz of Save "
                     "outputs)")
    return "; ".join(words)


#: the tooltip of "Save outputs…"
SAVE_ALL_TIP = ("shifts.csv, shifts.json and the plots into a folder, as xcorr align writes "
                "them (the aligned layer: napari's File > Save)")
#: the width the drift plot is shown at in the dock (px): at most this, and no wider than the
#: dock shows (at least :data:`PLOT_MIN_WIDTH`)
PLOT_WIDTH = 480
PLOT_MIN_WIDTH = 280


def _drawn(plot, width) -> np.ndarray:
    """What ``plot(path)`` draws to a PNG, as an RGB array ``width`` pixels wide (scaled to fit
    a dock)."""
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plot.png"
        plot(path)
        with Image.open(path) as im:
            height = round(im.height * width / im.width)
            return np.asarray(im.convert("RGB").resize((width, height), Image.LANCZOS))


def drift_image(result, width=PLOT_WIDTH) -> np.ndarray:
    """The drift plot of ``result`` (:func:`plot_drift`) as an RGB array ``width`` px wide."""
    return _drawn(lambda path: plot_drift(
        path, result, title=f"reference {result.settings.get('reference')}"), width)


#: the 3-D plot's curves and their colours
VOLUME_CURVES = {"dz": (44, 160, 44), "dy": (31, 119, 180), "dx": (255, 127, 14),
                 "peak": (148, 103, 189), "confidence": (80, 80, 80)}
#: the tooltip of "Save outputs…" after a 3-D run (disabled: the table is what it has)
NO_VOLUME_OUTPUTS = ("a 3-D run: Save table… writes shifts.csv or shifts.json (the aligned "
                     "layer: napari's File > Save; drift.png: xcorr align --volumes)")


def volume_drift_image(result, width=PLOT_WIDTH) -> np.ndarray:
    """The drift plot of a 3-D run (a :class:`~xcorr_app.alignment.VolumeResult`) as an RGB
    array ``width`` px wide: dz, dy, dx (voxels) against time point, below them the peak and
    the confidence (0..1); volumes peaking on the ``max_shift`` border in red, NaN (a
    constant volume) left out."""
    from PIL import Image, ImageDraw

    size, left, right = (880, 500), 70, 860
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    s, n = np.asarray(result.shifts, float), len(result.shifts)
    xs = left + (np.arange(n) + 0.5) * (right - left) / max(n, 1)
    marked = np.asarray(result.at_bound, bool)
    panels = (((40, 300), "shift to align (voxels)", None,
               {"dz": s[:, 0], "dy": s[:, 1], "dx": s[:, 2]}),
              ((340, 460), "peak, confidence", (0.0, 1.0),
               {"peak": result.peak, "confidence": result.confidence}))
    for (top, bottom), label, span, curves in panels:
        values = np.concatenate([np.asarray(v, float) for v in curves.values()])
        values = values[np.isfinite(values)]
        lo, hi = span or ((values.min(), values.max()) if values.size else (0.0, 1.0))
        lo, hi = (lo - 0.5, hi + 0.5) if hi - lo < 1e-9 else (lo, hi)

        def y(v, top=top, bottom=bottom, lo=lo, hi=hi):
            return bottom - (v - lo) / (hi - lo) * (bottom - top)
        draw.rectangle((left, top, right, bottom), outline=(60, 60, 60))
        for v in (lo, (lo + hi) / 2, hi):
            draw.text((6, y(v) - 6), f"{v:.2f}", fill=(0, 0, 0))
        draw.text((left, top - 16), label, fill=(0, 0, 0))
        for k, (name, vals) in enumerate(curves.items()):
            colour, vals = VOLUME_CURVES[name], np.asarray(vals, float)
            draw.text((right - 90 * (len(curves) - k), top - 16), name, fill=colour)
            for i in range(n):
                if not np.isfinite(vals[i]):
                    continue
                if i + 1 < n and np.isfinite(vals[i + 1]):
                    draw.line((xs[i], y(vals[i]), xs[i + 1], y(vals[i + 1])), fill=colour,
                              width=2)
                dot = (220, 0, 0) if marked[i] else colour
                draw.ellipse((xs[i] - 3, y(vals[i]) - 3, xs[i] + 3, y(vals[i]) + 3), fill=dot)
    for i in np.unique(np.linspace(0, n - 1, min(n, 8)).round().astype(int)) if n else []:
        draw.text((xs[i] - 4, 464), str(i), fill=(0, 0, 0))
    draw.text(((left + right) / 2 - 30, 480), "time point", fill=(0, 0, 0))
    height = round(size[1] * width / size[0])
    return np.asarray(img.resize((width, height), Image.LANCZOS))


def flagged_volumes(result) -> list:
    """``[(label, time point)]`` of the volumes to look at: peaking on the ``max_shift``
    border, constant (no shift) or unconfirmed by the direct sum."""
    constant = np.isnan(np.asarray(result.shifts, float)).any(axis=1)
    why = {}
    for flags, text in ((result.at_bound, "on the max_shift border"), (constant, "constant"),
                        (~np.asarray(result.verified, bool) & ~constant, "not verified")):
        for i in np.flatnonzero(flags):
            why.setdefault(int(i), []).append(text)
    return [(f"time point {i} ({', '.join(why[i])})", i) for i in sorted(why)]


def quality_image(result, width=PLOT_WIDTH):
    """The quality plot of ``result`` (:func:`plot_quality`, as ``xcorr align`` writes
    ``quality.png``) as an RGB array ``width`` px wide; None for a run without the report."""
    q = result.quality
    if q is None:
        return None
    return _drawn(lambda path: plot_quality(
        path, q.before, q.after, q.residual, q.flagged, (q.sharpness_before, q.sharpness_after),
        title="quality of the alignment", patch_after=q.patch_after,
        patch_flagged=q.patch_flagged), width)


def flagged_frames(result) -> list:
    """``[(label, frame)]`` of the frames to look at: low confidence, or flagged by the quality
    report (worse after alignment, or poor), in frame order."""
    why = {}
    for i in np.flatnonzero(result.low_confidence):
        why.setdefault(int(i), []).append("low confidence")
    q = result.quality
    if q is not None:
        for i in np.flatnonzero(q.flagged):
            why.setdefault(int(i), []).append("worse" if q.worse[i] else "poor")
    return [(f"frame {i} ({', '.join(why[i])})", i) for i in sorted(why)]


def field_vectors(result, axes: str, shape) -> np.ndarray:
    """napari vectors ``(M, 2, ndim)`` of the motion field in a layer of ``axes`` and
    ``shape``: at every patch centre of every frame (and every channel and plane) the shift
    ``(dy, dx)`` that moves that patch onto the reference.  None without patches."""
    if result.motion_field is None:
        return None
    field, centres = result.motion_field, result.patch_centres
    n, gy, gx, _ = field.shape
    other = [(i, shape[i]) for i, a in enumerate(axes) if a in "CZ"]
    reps = int(np.prod([k for _, k in other])) if other else 1
    pos = np.zeros((n, gy, gx, reps, len(axes)))
    pos[..., axes.index("T")] = np.arange(n)[:, None, None, None]
    pos[..., -2:] = centres[None, :, :, None, :]
    if other:
        grid = np.stack(np.meshgrid(*[np.arange(k) for _, k in other], indexing="ij"), -1)
        for j, (i, _) in enumerate(other):
            pos[..., i] = grid.reshape(reps, -1)[:, j]
    vec = np.zeros_like(pos)
    vec[..., -2:] = field[:, :, :, None, :]
    keep = np.isfinite(vec).all(axis=-1)  # (frames without a shift have none)
    return np.stack([pos[keep], vec[keep]], axis=1)


class WrappedLabel(widgets.Label):
    """A magicgui Label that wraps its words at the dock's width (it is one line of fixed
    width otherwise: a long line widened the whole dock), and never asks for more: a word
    longer than the dock (a long path, a file's bytes in a message) is cut at its edge, the
    whole text in the label's tooltip, where it can be read."""

    def __init__(self, **kwargs):
        from qtpy.QtWidgets import QSizePolicy

        super().__init__(**kwargs)
        self.native.setWordWrap(True)
        self.native.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.native.setMinimumWidth(1)

    @property
    def value(self):
        return widgets.Label.value.fget(self)

    @value.setter
    def value(self, value):
        widgets.Label.value.fset(self, value)
        self.native.setToolTip(str(value or ""))


def _pixmap(rgb: np.ndarray):
    from qtpy.QtGui import QImage, QPixmap

    rgb = np.ascontiguousarray(rgb)
    h, w, _ = rgb.shape
    return QPixmap.fromImage(QImage(rgb.data, w, h, 3 * w, QImage.Format_RGB888).copy())


class ResultsPanel(widgets.Container):
    """The table, its buttons, the drift and quality plots and the flagged frames of the last
    run.

    Parameters
    ----------
    jump : callable(int)
        Called with a frame's index when it is clicked in the list of flagged frames.
    """

    def __init__(self, jump):
        self.table = widgets.Table(columns=list(COLUMNS))
        self.copy = widgets.PushButton(text="Copy table")
        self.save = widgets.PushButton(text="Save table…")
        self.save_all = widgets.PushButton(text="Save outputs…", tooltip=SAVE_ALL_TIP)
        self.plot = widgets.Label(value="")  # (its QLabel shows the plot's pixmap)
        self.quality_plot = widgets.Label(value="", visible=False)
        self.plot_image = self.quality_image = None
        self.low = widgets.Select(choices=[], tooltip="flagged frames: click to go there")
        self.low_label = WrappedLabel(value="flagged frames: low confidence, worse or poor "
                                      "after alignment (click: go there)")
        self.summary = WrappedLabel(value="")
        self.table.min_height, self.table.max_height, self.low.max_height = 200, 260, 90
        # (its columns scroll within it: a run's table does not widen the dock past the form)
        self.table.native.setMinimumWidth(TABLE_MIN_WIDTH)
        buttons = widgets.Container(widgets=[self.copy, self.save, self.save_all],
                                    layout="horizontal",
                                    labels=False)
        super().__init__(widgets=[self.summary, self.table, buttons, self.plot,
                                  self.quality_plot, self.low_label, self.low],
                         labels=False)
        self.result, self._jump = None, jump
        self.copy.changed.connect(self.copy_table)
        self.save.changed.connect(self._ask_save)
        self.save_all.changed.connect(self._ask_save_all)
        self.low.changed.connect(self._clicked)

    def show(self, result) -> None:
        """Fill the panel from ``result`` (an :class:`~xcorr_app.alignment.AlignResult`, or a
        3-D run's :class:`~xcorr_app.alignment.VolumeResult`)."""
        self.result = result
        self.save_all.enabled = not isinstance(result, VolumeResult)
        self.save_all.tooltip = SAVE_ALL_TIP if self.save_all.enabled else NO_VOLUME_OUTPUTS
        if isinstance(result, VolumeResult):
            self._show_volumes(result)
            return
        rows = result.frame_records()
        cell = {c: (confidence_cell if c == "confidence" else lambda v: v) for c in COLUMNS}
        self.table.value = {"data": [[cell[c](r[c]) for c in COLUMNS] for r in rows],  # (split)
                            "index": list(range(len(rows))), "columns": list(COLUMNS)}
        width = self._plot_width()
        self.plot_image = drift_image(result, width)
        self.plot.native.setPixmap(_pixmap(self.plot_image))
        self.quality_image = quality_image(result, width)
        if self.quality_image is not None:
            self.quality_plot.native.setPixmap(_pixmap(self.quality_image))
        self.quality_plot.visible = self.quality_image is not None
        self.low.choices = flagged_frames(result)
        s = result.summary()
        note = confidence_note(result)
        self.summary.value = (f"{s['frames']} frames, {s['flagged_frames']} low confidence, "
                              f"max |shift| {s['max_abs_shift']:.2f} px, plan {s['plan']}"
                              + (f"\n{note}" if note else ""))

    def _plot_width(self) -> int:
        """The plots' width: :data:`PLOT_WIDTH`, or the panel's own where the dock is narrower
        (a wider plot would widen the dock, or be cut off)."""
        margins = self.native.layout().contentsMargins()
        shown = self.native.width() - margins.left() - margins.right() \
            - 2 * self.plot.native.frameWidth()
        return int(np.clip(shown if self.native.isVisible() else PLOT_WIDTH, PLOT_MIN_WIDTH,
                           PLOT_WIDTH))

    def _show_volumes(self, result) -> None:
        rows = result.rows()
        columns = [c for c in rows[0] if c != "t"] if rows else []
        self.table.value = {"data": [[round(r[c], 3) if isinstance(r[c], float) else r[c]
                                      for c in columns] for r in rows],
                            "index": [r["t"] for r in rows], "columns": columns}
        self.plot_image = volume_drift_image(result, self._plot_width())
        self.plot.native.setPixmap(_pixmap(self.plot_image))
        self.quality_image, self.quality_plot.visible = None, False
        self.low.choices = flagged_volumes(result)
        s = np.asarray(result.shifts, float)
        biggest = float(np.nanmax(np.abs(s))) if np.isfinite(s).any() else float("nan")
        self.summary.value = (f"{len(s)} volumes registered in 3-D, {len(self.low.choices)} "
                              f"flagged, max |shift| {biggest:.2f} voxels; "
                              f"{'; '.join(result.notes[:3])}")

    def _clicked(self, chosen) -> None:
        if chosen:
            self._jump(int(chosen[-1]))

    def copy_table(self, *_):
        """The table as CSV on the clipboard (pastes into a spreadsheet); returns the text."""
        from qtpy.QtWidgets import QApplication

        text = "" if self.result is None else self._text("csv")
        QApplication.clipboard().setText(text)
        return text

    def save_table(self, path) -> Path:
        """Write the table to ``path``: ``.json`` as JSON, anything else as CSV."""
        path = Path(path)
        fmt = "json" if path.suffix.lower() == ".json" else "csv"
        write_text(path, self._text(fmt))  # (atomically; OutputError naming the path)
        return path

    def _text(self, fmt):
        if isinstance(self.result, VolumeResult):
            return volume_table_text(self.result, fmt)
        return table_text(self.result, fmt)

    def save_outputs(self, folder, force=False) -> dict:
        """Write the run's outputs into ``folder`` by :meth:`AlignResult.save
        <xcorr_app.alignment.AlignResult.save>` (the aligned stack is the layer: not
        written again); returns ``{name: path}``."""
        if isinstance(self.result, VolumeResult):  # (its button is off: the tooltip says)
            raise InputError(NO_VOLUME_OUTPUTS)
        return self.result.save(folder, aligned=False, force=force)

    def _ask_save_all(self, *_):
        from qtpy.QtWidgets import QFileDialog, QMessageBox

        if self.result is None or isinstance(self.result, VolumeResult):
            return
        folder = QFileDialog.getExistingDirectory(self.native, "Save the outputs into")
        if folder:
            try:
                self.save_outputs(folder)
            except OutputError as exc:  # (outputs there already: nothing is replaced)
                QMessageBox.warning(self.native, "xcorr", f"{str(exc).split(';')[0]}: nothing "
                                    "was written; choose another folder, or an empty one")
            except XcorrError as exc:  # (a folder in use, not writable)
                QMessageBox.warning(self.native, "xcorr", str(exc))

    def _ask_save(self, *_):
        from qtpy.QtWidgets import QFileDialog

        if self.result is None:
            return
        path, _ = QFileDialog.getSaveFileName(self.native, "Save the shift table",
                                              "shifts.csv", "CSV (*.csv);;JSON (*.json)")
        if path:
            try:
                self.save_table(path)
            except XcorrError as exc:  # (a folder that is not writable, a full disk)
                from qtpy.QtWidgets import QMessageBox

                QMessageBox.warning(self.native, "xcorr", f"{exc}; nothing was written")
