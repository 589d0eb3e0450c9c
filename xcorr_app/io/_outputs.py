"""The outputs of one run, kept safe from start to end (used by ``xcorr align`` and ``filter``).

:class:`OutputRun` is the whole life of a run's outputs:

1. no output may replace an input or land inside an input folder (:func:`check_apart`);
2. missing folders are made (and removed again if the run fails), and one writer at a time
   holds the outputs (:class:`~xcorr_app.io._lock.OutputLock`);
3. every output is written to a temporary file and all are renamed together by one
   :meth:`OutputRun.commit` (:class:`~xcorr_app.io._writer.StagedOutputs`): a run that fails
   or is interrupted leaves nothing, a finished one leaves everything;
4. ``SIGTERM`` and ``SIGHUP`` stop the run as ``SIGINT`` does (:class:`Interrupted`, a
   :class:`KeyboardInterrupt`), and a signal during the renames waits until they are done.

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> from xcorr_app.io._writer import write_text
>>> out = Path(tempfile.mkdtemp()) / "out"
>>> with OutputRun([out / "a.csv", out / "b.csv"], lock=out / ".xcorr.lock") as run:
...     write_text(out / "a.csv", "a")
...     write_text(out / "b.csv", "b")
...     run.commit()
>>> sorted(p.name for p in out.iterdir())
['a.csv', 'b.csv']
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

from ..errors import OutputError
from ._lock import OutputLock
from ._writer import StagedOutputs, check_outputs, make_folders, remove_stale_temps

__all__ = ["Interrupted", "OutputRun", "check_apart", "stopped_by_signals"]

#: the signals that stop a run like Ctrl-C, with the handler they must have for it (the default
#: one: a signal the user's shell ignores, e.g. SIGHUP under nohup, stays ignored)
STOP_SIGNALS = tuple((getattr(signal, name), default) for name, default in (
    ("SIGINT", signal.default_int_handler), ("SIGTERM", signal.SIG_DFL),
    ("SIGHUP", signal.SIG_DFL)) if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """A run stopped by a signal (``SIGINT``, ``SIGTERM`` or ``SIGHUP``): a
    :class:`KeyboardInterrupt` that knows its signal number (:attr:`signum`)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def stopped_by_signals():
    """Inside the block, ``SIGTERM`` and ``SIGHUP`` (where they have their default handler)
    raise :class:`Interrupted` as ``SIGINT`` raises :class:`KeyboardInterrupt`: a command
    stopped between its outputs (a sessions run between two recordings) says so and exits
    128 + N, where the default handler killed the process without a word; an
    :class:`OutputRun` inside takes them over while it writes (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = {}
    for signum, default in STOP_SIGNALS:
        if default is signal.SIG_DFL and signal.getsignal(signum) is default:
            taken[signum] = signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        for signum, previous in taken.items():
            signal.signal(signum, previous)


def check_apart(outputs, inputs) -> None:
    """Refuse outputs that would replace an input file or land inside an input folder.

    Links are followed (:meth:`pathlib.Path.resolve`) and hard links recognised
    (:func:`os.path.samefile`).  The folder of each output is checked too, so an output folder
    may be neither an input nor inside an input folder.

    Parameters
    ----------
    outputs : iterable of str or os.PathLike
        The files a run will write.
    inputs : iterable of str or os.PathLike
        The files and folders it reads (ones that do not exist are skipped).

    Raises
    ------
    OutputError
        Naming the output and the input.

    Examples
    --------
    >>> check_apart(["in.tif"], ["in.tif"])  # doctest: +SKIP
    Traceback (most recent call last):
    xcorr_app.errors.OutputError: output in.tif is the input in.tif; choose another output
    """
    inputs = [Path(p) for p in inputs if Path(p).exists()]
    for out in map(Path, outputs):
        for candidate, kind in ((out, "output"), (out.parent, "output folder")):
            where = candidate if str(candidate) else Path(".")
            resolved = where.resolve()
            for src in inputs:
                src_resolved = src.resolve()
                same = resolved == src_resolved
                if not same and where.exists():
                    with contextlib.suppress(OSError):
                        same = os.path.samefile(where, src)
                if same:
                    raise OutputError(f"{kind} {where} is the input {src}; choose another "
                                      "output")
                if src.is_dir() and src_resolved in resolved.parents:
                    raise OutputError(f"{kind} {where} is inside the input folder {src}; "
                                      "choose an output outside it")


class OutputRun:
    """The outputs of one run: checked, locked, written together, or not at all.

    Parameters
    ----------
    outputs : iterable of str or os.PathLike
        The files the run writes (with :mod:`xcorr_app.io._writer`'s writers).
    inputs : iterable of str or os.PathLike
        The files and folders it reads: no output may be one or lie inside one.
    force : bool
        Allow replacing existing outputs.
    lock : str or os.PathLike, optional
        The lock file (``OUT/.xcorr.lock`` for a folder of outputs, ``.NAME.lock`` beside a
        single output); default: ``.xcorr.lock`` in the folder of the first output.
    remove : iterable of str or os.PathLike
        Outputs of the command that this run does not write (``aligned.tif`` with
        ``--no-aligned``): an existing one is refused without ``force`` like an output, and
        with ``force`` deleted by the same :meth:`commit`, so no output of an earlier run
        stays beside the new ones.
    replaced : iterable of str or os.PathLike
        Inputs the run writes anew in place (an NWB input with ``--in-place``): not checked
        as outputs, but renamed onto by the same :meth:`commit` (and put back if it fails), so
        the input is never written without the run's other outputs.

    Attributes
    ----------
    late_signal : int or None
        A stop signal that came while or after the outputs were renamed: they are whole and kept.

    On entering: :func:`check_apart`, existing outputs refused without ``force``, missing folders
    made, the lock taken, stale temporary files of dead writers removed, and ``SIGINT``,
    ``SIGTERM`` and ``SIGHUP`` (those not ignored) made to raise :class:`Interrupted` (main
    thread only).  Leaving the block without
    an exception commits what was not committed.  Leaving it on an exception deletes every
    temporary file, removes the folders it made (when empty), and gives the lock back.

    Examples
    --------
    >>> with OutputRun(["out/shifts.csv"], inputs=["stack.tif"]) as run:  # doctest: +SKIP
    ...     write_text("out/shifts.csv", "frame,dy,dx\\n")
    ...     run.commit()
    """

    def __init__(self, outputs, inputs=(), force: bool = False, lock=None, remove=(),
                 replaced=()):
        self.outputs = [Path(p) for p in outputs]
        self.remove = [Path(p) for p in remove]
        self.replaced = [Path(p) for p in replaced]
        self.inputs = [Path(p) for p in inputs]
        self.force = force
        lock = Path(lock) if lock is not None else self.outputs[0].parent / ".xcorr.lock"
        what = (f"output folder {lock.parent}" if lock.name == ".xcorr.lock"
                else f"output {self.outputs[0]}")
        self.lock = OutputLock(lock, what)
        self.late_signal = None
        self._staged = StagedOutputs(self.outputs + self.replaced, self.remove)
        self._created = []
        self._staging = False
        self._handlers = {}
        self._deferred = False
        self._pending = None
        self._raised = None

    # ------------------------------------------------------------------ signals

    def _on_signal(self, signum, frame):
        if self._deferred or self._staged.committed:
            self._pending = self._pending or signum
            return
        # (raised inside a weakref callback or __del__, Python prints it and goes on: kept so
        # that the commit refuses to run on)
        self._raised = self._raised or signum
        raise Interrupted(signum)

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, default in STOP_SIGNALS:
            if signal.getsignal(signum) in (default, _raise_interrupted):  # (a command's)
                self._handlers[signum] = signal.signal(signum, self._on_signal)

    def _restore_signals(self):
        for signum, previous in self._handlers.items():
            signal.signal(signum, previous)
        self._handlers = {}

    # ------------------------------------------------------------------ the run

    def __enter__(self):
        self._install_signals()
        try:
            every = self.outputs + self.remove
            check_apart(every, self.inputs)
            check_outputs(every, self.force)
            # (a stop signal waits while the folders and the lock file are made: raised inside
            # them, it left a lock file no one had recorded, so the cleaning up kept it)
            self._deferred = True
            try:
                self._created = make_folders(self.outputs + [self.lock.path])
                self.lock.acquire()
            finally:  # (the signal, not an error it came during, stops the run)
                self._deferred = False
                signum, self._pending = self._pending, None
                if signum is not None:
                    raise Interrupted(signum)
            check_outputs(every, self.force)  # what the last writer left
            remove_stale_temps(every + self.replaced)
            self._staged.__enter__()
            self._staging = True
        except BaseException:
            self._clean_up()
            raise
        return self

    def commit(self) -> None:
        """Rename every finished output onto its name, all together; a stop signal that comes
        meanwhile waits until they are done (and is then :attr:`late_signal`)."""
        if self._raised is not None:  # a stop signal whose exception was swallowed
            raise Interrupted(self._raised)
        self._deferred = True
        try:
            self._staged.commit()
        finally:
            self._deferred = False
        if self._pending is not None:
            if not self._staged.committed:
                raise Interrupted(self._pending)
            self.late_signal = self._pending

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None and not self._staged.committed:
                self.commit()
        finally:
            self._clean_up()

    def _clean_up(self):
        """Delete the temporary files and the folders made (unless committed), give the lock
        back and the signals their handlers; a stop signal meanwhile waits."""
        self._deferred = True  # a second Ctrl-C must not stop the cleaning up
        committed = self._staged.committed
        try:
            if self._staging:
                self._staging = False
                self._staged.__exit__(None, None, None)  # deletes what was not committed
            self.lock.release()
            if not committed:
                for folder in reversed(self._created):
                    with contextlib.suppress(OSError):
                        folder.rmdir()
        finally:
            self._restore_signals()
            self._deferred = False
        if committed and self._pending is not None:
            self.late_signal = self._pending
