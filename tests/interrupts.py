"""Ctrl-C at every step: :func:`each_line` runs a trial once for every line of Python that a
piece of it runs (the standard library's included), raising :class:`KeyboardInterrupt` at that
line, as a signal handler's exception can land between any two steps of Python code in the
main thread; and checks that every trial, clean-up included, then ends.

Used by the tests of the threads that the main thread hands work to (``BackgroundWrites``,
``ChunkPrefetcher``): a queue or condition of the standard library left half changed there
could leave a thread asleep for good, and the interrupted run hung in its clean-up.
"""

import sys
import threading


class Interrupting:
    """A context manager: within it, the ``n``-th line run by a function called in this thread
    raises :class:`KeyboardInterrupt` (``sys.settrace``; CPython stops tracing once the trace
    function has raised).  :attr:`lines` counts the lines seen, :attr:`where` says where it
    raised."""

    def __init__(self, n: int):
        self.n, self.lines, self.where = n, 0, None
        self._previous = None

    def _global(self, frame, event, arg):
        return None if frame.f_code.co_filename == __file__ else self._local

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines += 1
            if self.lines == self.n:
                code = frame.f_code
                self.where = f"{code.co_filename}:{frame.f_lineno} ({code.co_name})"
                raise KeyboardInterrupt(f"as a signal handler raises it, at {self.where}")
        return self._local

    def __enter__(self):
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc):
        sys.settrace(self._previous)


def each_line(trial, timeout: float = 10.0) -> int:
    """Run ``trial(interrupting)`` with ``interrupting`` an :class:`Interrupting` for its 1st,
    2nd, ... line, until one runs to its end without the interrupt; each trial in a thread of
    its own that must end within ``timeout`` seconds (a trial's own assertions fail the test).
    Returns the number of lines interrupted."""
    n = 0
    while True:
        n += 1
        interrupting = Interrupting(n)
        errors = []

        def run():
            try:
                trial(interrupting)
            except BaseException as exc:  # noqa: BLE001 - raised in the test's thread
                errors.append(exc)

        thread = threading.Thread(target=run, name=f"ctrl-c-at-line-{n}", daemon=True)
        thread.start()
        thread.join(timeout)
        assert not thread.is_alive(), f"hung after Ctrl-C at line {n}: {interrupting.where}"
        if errors:
            raise AssertionError(f"Ctrl-C at line {n}: {interrupting.where}") from errors[0]
        if interrupting.where is None:
            return n - 1
