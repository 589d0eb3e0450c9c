"""The screenshot of docs/napari.md: a real ``napari.Viewer`` runs the plugin's dock widget on a
drifting stack and the whole window is saved, with the run's timing.

The stack: FRAMES frames of SIZE x SIZE cut from scikit-image's immunohistochemistry image (its
inverted grey: nuclei bright), moved by a random-walk drift within +-12 px (bilinear), Poisson
noise at 800 photons.  The widget aligns it with ``max_shift`` 16 and ``4x4`` patches on DEVICE;
the timing JSON gives the widget's run (Align to the result layers, table and plot shown),
``xcorr_app.align`` alone on the same stack, the first run of the process (kernels built and
loaded) and the RMS error against the drift; the aligned layer must equal ``align(..., out=)``.

Needs napari with a Qt binding (``pip install '.[napari]' 'napari[pyqt6]'``) and a display with
OpenGL (a desktop, or Xvfb with Mesa: ``Xvfb :99 -screen 0 1920x1200x24 +extension GLX`` and
``DISPLAY=:99``)::

    python3 tools/napari_screenshot.py [--frames 512] [--size 512] [--device gpu] [--out DIR]

writes ``DIR/napari_xcorr.png`` and ``DIR/napari_timing.json``.
"""

import argparse
import json
import os
import sys
import time

import numpy as np


def drifting_stack(n, size, seed=0):
    """``(frames, truth)``: ``n`` uint16 frames and the shift that moves each onto frame 0."""
    from scipy import ndimage as ndi
    from skimage import color, data

    rng = np.random.default_rng(seed)
    img = (1 - color.rgb2gray(data.immunohistochemistry())).astype(np.float32)
    margin = 24
    img = ndi.zoom(img, (size + 2 * margin) / min(img.shape), order=1)
    img = img[:size + 2 * margin, :size + 2 * margin]
    img = (img - img.min()) / (img.max() - img.min())
    walk = np.cumsum(rng.normal(0, 0.35, (n, 2)), axis=0)
    walk = np.clip(walk - walk[0], -12, 12)
    frames = np.empty((n, size, size), np.uint16)
    for k, (dy, dx) in enumerate(walk):
        moved = ndi.shift(img, (dy, dx), order=1, mode="nearest")
        frames[k] = np.minimum(rng.poisson(moved[margin:margin + size, margin:margin + size]
                                           * 800 + 50), 65535)
    return frames, -walk


def _libraries_on_the_library_path():
    """vispy finds fontconfig by ``ctypes.util.find_library``, which ignores LD_LIBRARY_PATH:
    look there first (an X stack unpacked beside the system's, as on a headless GPU host)."""
    import ctypes.util
    import glob

    plain = ctypes.util.find_library

    def find(name):
        for folder in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
            hits = sorted(glob.glob(os.path.join(folder, f"lib{name}.so*")))
            if hits:
                return hits[0]
        return plain(name)

    ctypes.util.find_library = find


def _close_notices(window):
    """napari's start-up notices (a PyQt5 deprecation) would cover the canvas's corner."""
    from napari._qt.dialogs.qt_notification import NapariQtNotification

    for note in window.findChildren(NapariQtNotification):
        note.close()


def _settle(app, rounds=30):
    for _ in range(rounds):
        app.processEvents()
        time.sleep(0.01)


def shoot(args) -> dict:
    timing = {}
    t = time.perf_counter()
    stack, truth = drifting_stack(args.frames, args.size)
    timing["make_stack_s"] = time.perf_counter() - t

    _libraries_on_the_library_path()
    import napari
    from qtpy.QtWidgets import QApplication

    import xcorr_app
    from xcorr_app.napari._widget import AlignWidget

    options = {"max_shift": 16, "device": args.device, "patches": "4x4"}
    t = time.perf_counter()  # (kernels built and loaded once, before the timed runs)
    xcorr_app.align(stack[:16], **options)
    timing["first_run_s"] = time.perf_counter() - t
    aligned = np.empty(stack.shape, np.float32)
    t = time.perf_counter()
    xcorr_app.align(stack, out=aligned, **options)
    timing["align_api_s"] = time.perf_counter() - t

    viewer = napari.Viewer(title="xcorr: align a drifting stack", show=True)
    window = viewer.window._qt_window
    window.resize(1800, 1100)
    viewer.add_image(stack, name="cells", colormap="gray")
    widget = AlignWidget(viewer)
    viewer.window.add_dock_widget(widget, name="Align (xcorr)", area="right")
    for key, value in options.items():
        getattr(widget.form, key).value = value
    app = QApplication.instance()
    _settle(app, 20)

    t = time.perf_counter()
    if widget.start() is None:
        raise SystemExit(f"error: the widget did not start: {widget.status.value}")
    while widget.cancel_button.enabled:
        app.processEvents()
        time.sleep(0.002)
    timing["widget_run_s"] = time.perf_counter() - t
    result = widget.results.result
    timing["aligned_equals_api"] = bool(np.array_equal(
        np.asarray(viewer.layers["cells aligned"].data), aligned))
    shifts = result.shifts - result.shifts[0]
    timing["rms_px"] = float(np.sqrt(np.mean(np.sum((shifts - truth) ** 2, axis=1))))
    timing["status"] = widget.status.value
    timing["device"] = result.settings.get("device")
    timing["gpu"] = xcorr_app.backend.gpu_name() if timing["device"] == "gpu" else None

    viewer.layers["cells"].visible = False  # the aligned layer and the field over it
    viewer.dims.set_current_step(0, args.frames // 2)
    viewer.reset_view()
    _close_notices(window)
    _settle(app)
    viewer.screenshot(os.path.join(args.out, "napari_xcorr.png"), canvas_only=False,
                      flash=False)
    viewer.close()
    return timing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=512)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--device", choices=("gpu", "cpu", "auto"), default="gpu")
    parser.add_argument("--out", default=os.environ.get("OUT", "napari_shot"),
                        help="folder of the PNG and the timing JSON (default: $OUT or "
                        "./napari_shot)")
    args = parser.parse_args(argv)
    if args.frames < 16 or args.size < 64:
        parser.exit(2, "error: --frames must be at least 16 and --size at least 64\n")
    try:
        import napari  # noqa: F401
        import qtpy  # noqa: F401
    except ImportError:
        parser.exit(2, "error: napari and a Qt binding are needed: pip install '.[napari]' "
                    "'napari[pyqt6]'\n")
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        parser.exit(2, "error: napari's canvas needs a display: start Xvfb (Xvfb :99 -screen 0 "
                    "1920x1200x24 +extension GLX) and set DISPLAY=:99\n")
    os.makedirs(args.out, exist_ok=True)
    timing = shoot(args)
    with open(os.path.join(args.out, "napari_timing.json"), "w") as fh:
        json.dump(timing, fh, indent=1)
    print(json.dumps(timing, indent=1))
    return 0 if timing["aligned_equals_api"] else 1


if __name__ == "__main__":
    sys.exit(main())
