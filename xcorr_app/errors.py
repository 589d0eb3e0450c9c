"""User-facing errors.

Every problem a user can cause (a bad path, a bad argument, a broken file) is raised as a
:class:`XcorrError` with a one-line message that says what went wrong and what to do.  The
command-line app prints such messages as ``error: ...`` and exits with status 2; anything else
is a bug.
"""


class XcorrError(Exception):
    """An error caused by the input or the arguments, with a one-line message for the user."""


class InputError(XcorrError):
    """The input data cannot be used (missing, unreadable, wrong shape or content)."""


class OutputError(XcorrError):
    """An output cannot be written (exists without ``force``, folder not writable)."""
