"""Helpers of the plugin's tests: the Qt event loop run until a widget's worker is done (Qt
offscreen where there is no display: the checkout's ``conftest.py``).  A module, not a
``conftest.py``: a second ``conftest`` on ``sys.path`` shadowed the tests' own (``from
conftest import poisoned`` failed wherever napari was installed).  The checkout's
``conftest.py`` leaves this folder out without napari and Qt (``pip install
'xcorr-app[napari]'``)."""

import time


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
