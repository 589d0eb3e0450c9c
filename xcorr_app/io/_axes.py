"""The axes a caller names for a file (``--axes TZYX``, ``axes="TZYX"``, ``PATH?axes=TZYX``):
one letter an axis, in the file's order, replacing those its reader would infer.

Examples
--------
>>> parse_axes("tzyx")
'TZYX'
>>> parse_axes("TQYX")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
xcorr_app.errors.InputError: axes 'TQYX': give one letter for each axis of the file...
"""

from __future__ import annotations

from ..errors import InputError

__all__ = ["AXES_LETTERS", "AxesUnknown", "parse_axes", "given_axes", "guessed_axes"]

#: the letters an axis may be named by: time, depth, channel, colour sample, rows, columns
AXES_LETTERS = "TZCSYX"


def parse_axes(axes) -> str | None:
    """``axes`` checked and upper-cased: letters of :data:`AXES_LETTERS`, each at most once,
    ``Y`` and ``X`` among them; None stays None."""
    if axes is None:
        return None
    text = axes.strip().upper() if isinstance(axes, str) else None
    if not text or any(a not in AXES_LETTERS for a in text) or len(set(text)) != len(text) \
            or "Y" not in text or "X" not in text:
        raise InputError(f"axes {axes!r}: give one letter for each axis of the file, in its "
                         "order, from T, Z, C, S, Y, X (each once, Y and X among them), e.g. "
                         "TYX, TZYX, TCYX, TZCYX")
    return text


def given_axes(found, given: str | None, name, shape, notes=None) -> str:
    """The axes a reader uses: ``given`` (:func:`parse_axes`'s) where the caller named them,
    checked against the ``shape`` of the array ``name`` (a note in ``notes`` where the file
    names others), else ``found`` (the file's own).

    >>> notes = []; given_axes("TXY", "TYX", "m.nwb", (4, 8, 9), notes), notes
    ('TYX', ['m.nwb: read as axes TYX, as given (its metadata say TXY)'])
    """
    if given is None:
        return found
    if len(given) != len(shape):
        raise InputError(f"axes={given} names {len(given)} axes but {name} has {len(shape)} "
                         f"(shape {tuple(shape)}); give one letter for each")
    if found and found != given and notes is not None:
        notes.append(f"{name}: read as axes {given}, as given (its metadata say {found})")
    return given


class AxesUnknown(InputError):
    """An array whose file names no axes and whose shape leaves them open (4-D: channels or
    planes?; 5-D: in which order?): the caller must name them (:attr:`ndim` axes)."""

    def __init__(self, message, ndim):
        super().__init__(message)
        self.ndim = ndim


class ChannelsNeeded(InputError):
    """A file of several channels read without one picked (a run measures one)."""


def guessed_axes(ndim: int, name, shape, channel=None, z=None) -> str:
    """The axes of an array whose file names none: ``YX``, ``TYX``; a 4-D array is ``TCYX``
    where a channel is picked and ``TZYX`` where a plane is; any other is
    :class:`AxesUnknown`, naming ``axes=``.

    >>> guessed_axes(3, "m.h5:/data", (5, 8, 8)), guessed_axes(4, "m.h5", (5, 2, 8, 8), z=1)
    ('TYX', 'TZYX')
    """
    if ndim in (2, 3):
        return "TYX"[3 - ndim:]
    if ndim == 4 and (channel is None) != (z is None):
        return "TCYX" if channel is not None else "TZYX"
    examples = "axes=TZYX (volumes) or axes=TCYX (channels)" if ndim == 4 else \
        "axes=TCZYX or axes=TZCYX" if ndim == 5 else "one letter an axis"
    raise AxesUnknown(f"{name} is a {ndim}-D array (shape {tuple(shape)}) whose file names no "
                      f"axes; name them: {examples}", ndim)
