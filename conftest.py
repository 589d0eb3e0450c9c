"""Collection rules for the whole checkout (``tests/conftest.py`` has the tests' helpers).

The napari plugin's modules that import napari, magicgui or Qt are left out of the docstring
examples, and its tests (``tests/napari``), where the ``napari`` extra is not installed (the
core test run); Qt draws offscreen where there is no display."""

import importlib.util
import os

if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before Qt starts

_NAPARI = all(importlib.util.find_spec(m) for m in ("napari", "magicgui", "qtpy"))
collect_ignore = [] if _NAPARI else [f"xcorr_app/napari/{m}.py"
                                     for m in ("_widget", "_panels", "_form")] + ["tests/napari"]
