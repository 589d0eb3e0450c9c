"""One writer per output: an exclusive lock file that names the process holding it.

A run takes the lock before it looks at or writes its outputs and gives it back (deleting the
lock file) when it ends; a second run asking for the same lock is refused at once with the first
run's pid.  The lock is the operating system's (``flock``), so a run that is killed outright
(``SIGKILL``, a crash) frees it: the file it leaves behind is taken over by the next run.

Examples
--------
>>> import tempfile
>>> from pathlib import Path
>>> lock_path = Path(tempfile.mkdtemp()) / ".xcorr.lock"
>>> with OutputLock(lock_path, "the folder"):
...     lock_path.exists()
True
>>> lock_path.exists()
False
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ..errors import OutputError

try:
    import fcntl
except ImportError:  # not POSIX: filelock's lock, without the holder's pid
    fcntl = None

__all__ = ["OutputLock"]

_HELD = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES)


class OutputLock:
    """An exclusive, non-blocking lock on ``path`` (created, holding this process's pid, and
    deleted on :meth:`release`).

    Parameters
    ----------
    path : str or os.PathLike
        The lock file, e.g. ``OUT/.xcorr.lock`` or ``.out.tif.lock`` beside a file.
    what : str
        What the lock protects, for the error message (e.g. the output folder).

    Raises
    ------
    OutputError
        From :meth:`acquire` (and ``with``) when another process holds the lock; the message
        names its pid when known.

    Examples
    --------
    >>> with OutputLock("out/.xcorr.lock", "out"):  # doctest: +SKIP
    ...     pass
    """

    def __init__(self, path, what: str):
        self.path = Path(path)
        self.what = what
        self._fd = None
        self._fallback = None

    def holder(self) -> int | None:
        """The pid written into the lock file by the run holding it, if it can be read."""
        try:
            return int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _refuse(self):
        pid = self.holder()
        by = f"another xcorr run (pid {pid})" if pid else "another xcorr run"
        return OutputError(f"{self.what} is being written by {by}; wait for it to end or choose "
                           "another output")

    def acquire(self) -> None:
        """Take the lock or raise :class:`~xcorr_app.errors.OutputError` at once."""
        if fcntl is None:
            import filelock

            self._fallback = filelock.FileLock(self.path, timeout=0)
            try:
                self._fallback.acquire()
            except filelock.Timeout:
                self._fallback = None
                raise self._refuse() from None
            return
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise OutputError(f"cannot create the lock file {self.path} "
                                  f"({exc.strerror or exc}); choose another output") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in _HELD:
                    raise self._refuse() from None
                self.path.unlink(missing_ok=True)
                return  # a filesystem without locks: go on unlocked, as before
            try:  # the file may have been deleted by the holder just before we locked it
                st, held = os.stat(self.path), os.fstat(fd)
                same = (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Delete the lock file and give the lock back (nothing if not held)."""
        if self._fallback is not None:
            self._fallback.release()
            self._fallback = None
            self.path.unlink(missing_ok=True)
            return
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.path.unlink(missing_ok=True)  # before unlocking: no one locks a deleted file
        finally:
            os.close(fd)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.release()
