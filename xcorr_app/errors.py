"""User-facing errors.

Every problem a user can cause (a bad path, a bad argument, a broken file) is raised as a
:class:`XcorrError` with a one-line message that says what went wrong and what to do.  The
command-line app prints such messages as ``error: ...`` and exits with status 2; anything else
is a bug.

Bad arguments and unusable input data raise :class:`InputError`, which is also a
:class:`ValueError`, so code written for scikit-image or SciPy (``except ValueError``) catches
them.

Examples
--------
>>> import numpy as np
>>> from xcorr_app import phase_cross_correlation
>>> try:
...     phase_cross_correlation(np.ones((8, 8)), np.ones((8, 9)))
... except ValueError as exc:
...     print(type(exc).__name__)
InputError
"""


class XcorrError(Exception):
    """An error caused by the input or the arguments, with a one-line message for the user."""


class InputError(XcorrError, ValueError):
    """The arguments or the input data cannot be used (a bad option, a missing or unreadable
    file, a wrong shape or content).  A :class:`ValueError`, as scikit-image raises."""


class OutputError(XcorrError):
    """An output cannot be written (exists without ``force``, folder not writable)."""


def check_flags(**flags) -> None:
    """InputError unless every keyword's value is True or False (a bool or NumPy's): a string
    such as ``"no"`` is true in Python, and taken as such it would overwrite or write what the
    caller meant to keep.

    >>> check_flags(force=False, plots=True)
    >>> check_flags(force="no")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: force must be True or False, got 'no'
    """
    import numpy as np

    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise InputError(f"{name} must be True or False, got {value!r}")


def check_keywords(keywords, names) -> None:
    """InputError for the first of ``keywords`` not among ``names`` (the options a call
    takes), naming the nearest of them: a misspelt keyword was a TypeError of some function
    inside.

    >>> check_keywords({"max_shfit": 8}, ["max_shift", "device"])
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: unknown option 'max_shfit'; did you mean max_shift?
    """
    import difflib

    for key in keywords:
        if key not in names:
            near = difflib.get_close_matches(key, sorted(names), 1)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise InputError(f"unknown option {key!r}{hint}")
