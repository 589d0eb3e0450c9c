"""The ``xcorr`` command-line app (entry point :func:`main`)."""

from ._main import main

__all__ = ["main"]
