"""``python -m xcorr_app.cli``: the same as the ``xcorr`` command."""

from ._main import run

run()
