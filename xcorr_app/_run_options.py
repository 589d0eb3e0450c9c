"""What the options objects of the runs share (:class:`~xcorr_app.alignment.AlignOptions`,
:class:`~xcorr_app.alignment.VolumeOptions`): a copy with the run's decisions in place, and
an entry point's signature made of the object's fields, so that each default is stated once.

Examples
--------
>>> import dataclasses
>>> @dataclasses.dataclass(frozen=True)
... class Opts(RunOptions):
...     size: int = 3
>>> Opts()._decided(size=5).size
5
>>> def run(stack, *, options=None, **keywords): ...
>>> str(options_signature(run, Opts, ("stack",), ("options",)))
'(stack, *, size=3, options=None)'
"""

from __future__ import annotations

import copy
import dataclasses
import inspect

__all__ = ["RunOptions", "options_signature"]


class RunOptions:
    """The base of a run's frozen options dataclass: checked once, when built; a keyword that
    names no option is an :class:`~xcorr_app.errors.InputError` naming the nearest (the
    dataclass's own ``__init__`` said a TypeError).

    >>> @dataclasses.dataclass(frozen=True, kw_only=True)
    ... class Opts(RunOptions):
    ...     size: int = 3
    >>> Opts(sise=4)
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: unknown option 'sise'; did you mean size?
    """

    def __new__(cls, *args, **keywords):
        from .errors import check_keywords

        check_keywords(keywords, [f.name for f in dataclasses.fields(cls) if f.init])
        return super().__new__(cls)

    def _decided(self, **changes):
        """These options with the run's own decisions in place (``prefilter="auto"``
        resolved, the boundary of a pass, the GPUs found, a volume stack's wrap-around vote):
        a copy, not checked again.

        The options are checked once, when the run's entry point builds them; what the
        pipeline decides afterwards is one of the values they allow, so a copy that ran
        ``__post_init__`` again would only repeat the checks (and ``dataclasses.replace``
        would).
        """
        new = copy.copy(self)
        for name, value in changes.items():
            if name not in self.__dataclass_fields__:
                raise AttributeError(f"{type(self).__name__} has no option {name!r}")
            object.__setattr__(new, name, value)
        return new


def options_signature(fn, options, leading, trailing=()):
    """``fn``'s signature with the fields of the dataclass ``options`` that a caller gives
    (its init fields) as keyword parameters with their defaults (``help(xcorr_app.align)``
    shows them; the defaults stay stated once), between ``fn``'s ``leading`` and
    ``trailing`` parameters."""
    params = list(inspect.signature(fn).parameters.values())
    head = [p for p in params if p.name in leading]
    tail = [p for p in params if p.name in trailing]
    fields = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
              for f in dataclasses.fields(options) if f.init and f.name not in leading]
    return inspect.Signature(head + fields + tail)
