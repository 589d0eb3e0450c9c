"""The plugin's tests need napari and Qt (``pip install 'xcorr-app[napari]'``); without them
this folder is skipped.  Widgets are made offscreen (no display: the checkout's
``conftest.py``) on a ``ViewerModel`` (no canvas)."""

import time

import pytest

pytest.importorskip("napari", reason="the napari extra is not installed")
pytest.importorskip("qtpy", reason="the napari extra is not installed (no Qt binding)")


def wait_for(widget, worker, timeout=60.0):
    """Run the Qt event loop until the ``widget``'s run ``worker`` has finished and its signals
    have been handled (the widget's cancel button is off again); fails after ``timeout`` s."""
    from qtpy.QtWidgets import QApplication

    assert worker is not None, widget.status.value
    end = time.monotonic() + timeout
    while widget.cancel_button.enabled:  # (turned off by the finished signal, handled last)
        QApplication.processEvents()
        assert time.monotonic() < end, "the worker did not finish"
        time.sleep(0.005)


@pytest.fixture
def viewer():
    from napari.components import ViewerModel

    return ViewerModel()
