"""The ``xcorr`` command-line app (entry points: :func:`run`, the process; :func:`main`, the
command in this process)."""

from ._main import main, run

__all__ = ["main", "run"]
