"""The package's messages in the command line's words, in one place.

The package names its options as the Python API does (``max_shift``, ``verify=False``,
``device='cpu'``, ``force=True``); the command line prints every error and note through
:func:`as_flags`, which says them as the flags that give them (``--max-shift``, ``--no-verify``,
``--device cpu``, ``--force``).

Examples
--------
>>> as_flags("max_memory 1 GiB is too small; try max_shift=N, or verify=False, or device='cpu'")
'--max-memory 1 GiB is too small; try --max-shift N, or --no-verify, or --device cpu'
>>> as_flags("shifts.csv exists; pass force=True to overwrite")
'shifts.csv exists; pass --force to overwrite'
>>> as_flags("channel 3 is out of range: the reference is a file")
'--channel 3 is out of range: the reference is a file'
>>> print(as_flags("C:\\\\data\\\\chunk_frames\\\\a.tif is damaged"))  # (a path keeps its names)
C:\\data\\chunk_frames\\a.tif is damaged
>>> as_flags("axes=TZYX names 4 axes but m.zarr?axes=TZYX has 3")
'--axes TZYX names 4 axes but m.zarr?axes=TZYX has 3'
"""

from __future__ import annotations

import dataclasses
import functools
import re

__all__ = ["as_flags", "note_later", "say_later"]

#: notes said once a command's checks have passed (:func:`say_later`: its first bar, its
#: reader's notes, its end), so that a command refused is its one ``error:`` line
_LATER: list = []

#: options whose flag says the opposite of their name (``verify=False`` is ``--no-verify``)
NEGATED = {"verify": "--no-verify", "quality": "--no-quality", "aligned": "--no-aligned"}
#: options whose flag has another name than the API's keyword (:meth:`AlignResult.save`'s)
RENAMED = {"format": "--out-format", "channels": "--apply-to"}
#: the other options of the commands that the package's messages name (as ``name=value``, or a
#: message's first word)
OTHERS = ("max_memory", "chunk_frames", "force", "resample", "crop", "fill", "keep_dtype",
          "workers", "scheduler", "readable_frames", "dataset", "mix", "in_place")


@functools.lru_cache(maxsize=1)
def _names() -> frozenset:
    from ..alignment import AlignOptions

    return frozenset([f.name for f in dataclasses.fields(AlignOptions)] + list(OTHERS)
                     + list(NEGATED) + list(RENAMED))


def _flag(name: str) -> str:
    return RENAMED.get(name) or "--" + name.replace("_", "-")


def _assignment(m) -> str:
    name, value = m.group(1), m.group(2).strip("'\"")
    if name not in _names():
        return m.group(0)
    if name in NEGATED and value == "False":
        return NEGATED[name]
    if value == "True":
        return _flag(name)
    return f"{_flag(name)} {value}"


def note_later(note: str) -> None:
    """Say ``note`` (a whole line) once the command's checks have passed."""
    _LATER.append(note)


def say_later(said: bool = True) -> None:
    """Say the notes kept by :func:`note_later` (to stderr), or with ``said=False`` drop them
    (the command stopped with an error)."""
    import click

    while _LATER:
        note = _LATER.pop(0)
        if said:
            click.echo(note, err=True)


def as_flags(message: str) -> str:
    """``message`` with the options it names as the flags that give them: ``name=value``
    forms, names with an underscore anywhere, and a message's first word where it is an
    option (``channel 3 is out of range``)."""
    names = _names()
    # (not a source path's PATH?z=K&axes=TZYX)
    message = re.sub(r"(?<![\w.\\/?&-])([a-z][a-z_]*)=('[^']*'|\"[^\"]*\"|[^\s,;)]+)",
                     _assignment, message)
    message = re.sub(r"(?<![\w.`/\\-])([a-z]+(?:_[a-z]+)+)(?![\w(/\\-])",
                     lambda m: _flag(m.group(1)) if m.group(1) in names else m.group(0),
                     message)
    first = message.split(" ", 1)[0]
    if first in names:
        message = _flag(first) + message[len(first):]
    return message
