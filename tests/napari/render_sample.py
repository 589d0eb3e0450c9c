"""A real napari window (a display with OpenGL: a desktop, or Xvfb with Mesa's software GL)
runs the plugin's dock widget on the cell sample and saves what it draws; run by
``test_rendered.py`` in a process of its own (Qt's platform is chosen once a process), and by
hand for ``docs/napari_sample.png``::

    DISPLAY=:99 python tests/napari/render_sample.py OUT_DIR [--docs docs/napari_sample.png]

writes ``OUT_DIR/window.png`` (the whole window: canvas and dock), ``OUT_DIR/canvas.png``,
``OUT_DIR/frame.npy`` (the aligned frame shown) and ``OUT_DIR/render.json`` (the run's status,
the dock's place in the window, its RMS error against the sample's truth, the GL renderer).
``--docs PATH``: the window's screenshot also to PATH, in 256 colours (greys for the canvas,
the plot's colours and their blends, the theme's most used colours: about 60 KB).  Exit
status 3: no OpenGL context on this display (the test then skips).
"""

import json
import sys
import time
from pathlib import Path

#: the window's size (fits a 1400x900 screen)
WINDOW = (1360, 860)
#: the dock's width: the drift plot's (``_panels.PLOT_WIDTH``) and the scroll bar
DOCK_WIDTH = 530
#: the exit status that says this display has no OpenGL
NO_GL = 3


def _gl_renderer():
    """The OpenGL renderer's name on this display, or None where no context can be made."""
    from qtpy.QtGui import QOffscreenSurface, QOpenGLContext

    context, surface = QOpenGLContext(), QOffscreenSurface()
    surface.create()
    if not context.create() or not context.makeCurrent(surface):
        return None
    from vispy.gloo import gl

    try:
        return str(gl.glGetParameter(gl.GL_RENDERER))
    except Exception:  # (a context without a usable GL behind it)
        return None
    finally:
        context.doneCurrent()


def _close_notices(window):
    """napari's start-up notices (a binding's deprecation, say) would cover the canvas."""
    try:
        from napari._qt.dialogs.qt_notification import NapariQtNotification
    except ImportError:  # (another napari: none to close)
        return
    for note in window.findChildren(NapariQtNotification):
        note.close()


def _settle(app, rounds=30):
    for _ in range(rounds):
        app.processEvents()
        time.sleep(0.01)


def render(out: Path) -> dict:
    import napari
    import numpy as np
    from qtpy.QtCore import QPoint, Qt
    from qtpy.QtWidgets import QApplication

    from xcorr_app._samples import sample_path
    from xcorr_app.napari._reader import cell_sample
    from xcorr_app.napari._widget import AlignWidget

    viewer = napari.Viewer(title="xcorr: the cell sample aligned", show=True)
    app = QApplication.instance()
    renderer = _gl_renderer()
    if renderer is None:
        viewer.close()
        print("no OpenGL context on this display", file=sys.stderr)
        sys.exit(NO_GL)
    window = viewer.window._qt_window
    window.resize(*WINDOW)
    ((data, kwargs, _),) = cell_sample()
    viewer.add_image(data, **kwargs)
    widget = AlignWidget(viewer)
    dock = viewer.window.add_dock_widget(widget, name="Align (xcorr)", area="right")
    widget.form.device.value, widget.form.max_shift.value = "cpu", 12
    window.resizeDocks([dock], [DOCK_WIDTH], Qt.Horizontal)  # (the plots' width, unscrolled)
    _settle(app, 10)
    if widget.start() is None:
        raise SystemExit(f"the widget did not start: {widget.status.value}")
    end = time.monotonic() + 120
    while widget.cancel_button.enabled and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.005)
    result = widget.results.result
    truth = np.loadtxt(sample_path("cell", truth=True), delimiter=",", skiprows=1)[:, 1:]
    rms = float(np.sqrt(np.mean(np.sum((result.shifts - truth) ** 2, axis=1))))
    viewer.layers[kwargs["name"]].visible = False  # (the aligned layer alone on the canvas)
    shown = len(data) // 2
    viewer.dims.set_current_step(0, shown)
    viewer.reset_view()
    top_left = dock.mapTo(window, dock.rect().topLeft())
    _close_notices(window)
    _settle(app, 10)
    area = widget.native  # (the dock's scroll area: the results at its top)
    area.verticalScrollBar().setValue(widget.results.native.mapTo(area.widget(), QPoint()).y())
    _settle(app)
    viewer.screenshot(str(out / "window.png"), canvas_only=False, flash=False)
    viewer.screenshot(str(out / "canvas.png"), canvas_only=True, flash=False)
    np.save(out / "frame.npy", np.asarray(viewer.layers[f"{kwargs['name']} aligned"].data[shown]))
    info = {"status": widget.status.value, "rms_px": rms, "renderer": renderer,
            "dock_visible": dock.isVisible(),
            "dock_rect": [top_left.x(), top_left.y(), dock.width(), dock.height()],
            "window_size": [window.width(), window.height()],
            "table_rows": widget.results.table.shape[0],
            # (the dock scrolls up and down only: the form's whole width shown)
            "form_width": area.widget().minimumSizeHint().width(),
            "shown_width": area.viewport().width()}
    viewer.close()
    return info


def small_png(src, dst) -> None:
    """``src`` (an RGB screenshot) saved to ``dst`` in 256 colours, without dithering."""
    import numpy as np
    from PIL import Image

    image = Image.open(src).convert("RGB")
    pixels = np.asarray(image).reshape(-1, 3).astype(int)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    plot = np.array([(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40),
                     (255, 205, 205)])  # (the plots' colours, alignment/outputs/_plots.py)
    blends = np.concatenate([plot * t + 255 * (1 - t) for t in (1.0, 0.75, 0.5, 0.3)])
    greys = np.repeat(np.linspace(0, 255, 136)[:, None], 3, 1)
    chroma = colours.max(1) - colours.min(1) > 10
    theme = colours[chroma][np.argsort(-counts[chroma])][:256 - len(greys) - len(blends)]
    palette = np.concatenate([greys, blends, theme]).round().astype(np.uint8)
    holder = Image.new("P", (1, 1))
    holder.putpalette(palette.ravel().tolist() + [0] * (768 - palette.size))
    image.quantize(palette=holder, dither=Image.Dither.NONE).save(dst, optimize=True)


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    docs = None
    if "--docs" in args:
        at = args.index("--docs")
        docs = args[at + 1]
        del args[at:at + 2]
    out = Path((args or ["."])[0])
    out.mkdir(parents=True, exist_ok=True)
    info = render(out)
    (out / "render.json").write_text(json.dumps(info, indent=1))
    if docs:
        small_png(out / "window.png", docs)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
