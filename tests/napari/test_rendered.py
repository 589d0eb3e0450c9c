"""The plugin in a real napari window, rendered by OpenGL: the dock aligns the cell sample, and
``viewer.screenshot`` shows the aligned layer on the canvas and the dock with its plot.

The window runs in a process of its own (``render_sample.py``: Qt's platform is chosen once a
process, and the other tests draw offscreen) on an Xvfb server this test starts, with Mesa's
software OpenGL; where there is no Xvfb, on the session's display.  Skipped without either, or
where the display has no OpenGL, unless ``XCORR_RENDER_TEST=required`` (CI, where Xvfb is
installed): then that fails.
"""

import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xcorr_app.alignment.outputs._plots import COLORS

SCRIPT = Path(__file__).with_name("render_sample.py")
REQUIRED = os.environ.get("XCORR_RENDER_TEST") == "required"


def _unavailable(why):
    if REQUIRED:
        pytest.fail(f"XCORR_RENDER_TEST=required, but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def display():
    """``{"DISPLAY": ...}`` of an Xvfb server started for the module (stopped after it), else
    of the session's display."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        if os.environ.get("DISPLAY"):
            yield {"DISPLAY": os.environ["DISPLAY"]}
            return
        _unavailable("no X display and no Xvfb (Debian: apt install xvfb): the rendered test "
                     "needs an X server with OpenGL")
    read, write = os.pipe()
    server = subprocess.Popen([xvfb, "-displayfd", str(write), "-screen", "0", "1400x900x24",
                               "+extension", "GLX", "-nolisten", "tcp"], pass_fds=(write,),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 30)
        number = os.read(read, 64).decode().strip() if ready else ""
        if not number:
            _unavailable("Xvfb did not start")
        yield {"DISPLAY": f":{number}", "LIBGL_ALWAYS_SOFTWARE": "1"}
    finally:
        os.close(read)
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="module")
def rendered(display, tmp_path_factory):
    """``(info, canvas, window, frame)`` of ``render_sample.py``: its JSON, the canvas's and
    the window's screenshots (RGB arrays) and the aligned frame shown."""
    from PIL import Image

    out = tmp_path_factory.mktemp("rendered")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env.update(display, QT_QPA_PLATFORM="xcb")
    run = subprocess.run([sys.executable, str(SCRIPT), str(out)], env=env, capture_output=True,
                         text=True, timeout=300)
    if run.returncode == 3:
        _unavailable(f"no OpenGL on display {display['DISPLAY']}")
    if "could not load the qt platform plugin" in run.stderr.lower():
        _unavailable("Qt's xcb platform plugin does not load (Debian: apt-get install "
                     f"libxcb-cursor0): {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, run.stderr[-3000:]
    shots = [np.asarray(Image.open(out / name).convert("RGB")).astype(np.int16)
             for name in ("canvas.png", "window.png")]
    return json.loads((out / "render.json").read_text()), *shots, np.load(out / "frame.npy")


@pytest.mark.slow
def test_the_aligned_layer_is_drawn_on_the_canvas(rendered):
    info, canvas, _, frame = rendered
    from PIL import Image

    assert info["status"].startswith("aligned 12 frames") and info["rms_px"] < 0.1
    background = canvas[0, 0]
    drawn = np.abs(canvas - background).sum(-1) > 12
    assert drawn.mean() > 0.2, drawn.mean()  # (the image fills the canvas's middle)
    rows, cols = np.flatnonzero(drawn.any(1)), np.flatnonzero(drawn.any(0))
    box = canvas[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1].mean(-1)
    # the frame as napari maps it (its aspect kept), compared with what was drawn
    assert abs(box.shape[1] / box.shape[0] - frame.shape[1] / frame.shape[0]) < 0.05
    shown = np.asarray(Image.fromarray(frame.astype(np.float32)).resize(box.shape[::-1]))
    assert np.corrcoef(shown.ravel(), box.ravel())[0, 1] > 0.95


@pytest.mark.slow
def test_the_dock_is_drawn_with_its_table_and_plot(rendered):
    info, _, window, _ = rendered
    assert info["dock_visible"] and info["table_rows"] == 12
    assert info["shown_width"] >= info["form_width"], info  # (no button or column cut off)
    x, y, w, h = info["dock_rect"]
    ww, wh = info["window_size"]
    assert 0 <= x and x + w <= ww and 0 <= y and y + h <= wh and w > 300 and h > 400
    scale = window.shape[1] / ww  # (a screen's pixel ratio)
    dock = window[int(y * scale):int((y + h) * scale), int(x * scale):int((x + w) * scale)]

    def pixels(color, tol=40):
        return int((np.abs(dock - np.array(color)).sum(-1) <= tol).sum())

    # the drift plot in the dock: its dy and dx curves, the confidences' triangles (none of
    # these colours is napari's own)
    assert pixels(COLORS["dx"]) > 60 and pixels(COLORS["dy"]) > 40
    assert pixels(COLORS["confidence"]) > 40
