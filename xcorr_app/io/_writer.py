"""Safe writing of output files.

Every output is first written to a hidden temporary file in the destination folder
(``.NAME.tmp-PID-RAND`` plus the suffix of ``NAME``) and renamed onto its final name only when
complete, so an interrupted run never leaves a half-written file under the real name.  Inside
:class:`StagedOutputs` the renames wait for one :meth:`StagedOutputs.commit`, so the outputs of
a run appear together or not at all.  Temporary files of writers that died are removed by
:func:`prepare_outputs` (:func:`remove_stale_temps`).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.io._writer import prepare_outputs, write_text, write_tiff
>>> prepare_outputs(["out/shifts.csv", "out/reg.tif"], force=True)  # doctest: +SKIP
>>> write_text("out/shifts.csv", "frame,dy,dx\\n0,0,0\\n")  # doctest: +SKIP
>>> write_tiff("out/reg.tif", np.zeros((3, 64, 64), np.float32))  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import tifffile

from ..backend import to_numpy
from ..errors import InputError, OutputError
from ._temps import FOLDER_OUTPUTS, remove_path, remove_stale_temps, temp_name

IMAGEJ_DTYPES = tuple(np.dtype(t) for t in ("uint8", "uint16", "int16", "float32"))
"""Pixel types ImageJ reads (int16: as 16-bit with an offset calibration); ImageJ outputs of
other types are stored as float32."""


@contextlib.contextmanager
def os_errors(path: Path):
    """Turn an operating-system failure while writing ``path`` into an :class:`OutputError`."""
    try:
        yield
    except OSError as exc:
        why = " ".join(str(exc.strerror or exc).split())  # (HDF5's say several lines)
        raise OutputError(f"cannot write {path} ({why}); check free disk space and "
                          "permissions of the output folder") from exc


def prepare_outputs(paths, force: bool) -> None:
    """Check that the output files can be written, creating missing folders, and delete the
    temporary files that writers of these outputs left when they died.

    Parameters
    ----------
    paths : iterable of str or os.PathLike
        The files that will be written.
    force : bool
        Allow overwriting existing files.

    Raises
    ------
    OutputError
        If a file exists and ``force`` is false, a path is a folder, or a folder cannot be
        created or written to.

    Examples
    --------
    >>> prepare_outputs(["results/shifts.csv"], force=False)  # doctest: +SKIP
    """
    paths = [Path(p) for p in paths]
    check_outputs(paths, force)
    make_folders(paths)
    remove_stale_temps(paths)


def check_outputs(paths, force: bool) -> None:
    """Raise :class:`OutputError` if an output is a folder, or exists and ``force`` is false."""
    for path in map(Path, paths):
        if path.is_dir() and not path.name.lower().endswith(FOLDER_OUTPUTS):
            raise OutputError(f"output {path} is a folder; give a file name")
        if path.exists() and not force:
            raise OutputError(f"{path} exists; pass force=True to overwrite")


def make_folders(paths) -> list:
    """Create the missing folders of ``paths`` and check that each folder is writable.

    Returns the folders created, outermost first (a failed run removes them again).
    """
    created = []
    for folder in dict.fromkeys(Path(p).absolute().parent for p in paths):
        missing = [f for f in (folder, *folder.parents) if not f.exists()][::-1]
        try:
            for f in missing:
                try:
                    f.mkdir()
                    created.append(f)
                except FileExistsError:
                    pass  # made meanwhile by another run, or a file: checked below
            if not folder.is_dir():
                raise FileExistsError(errno.EEXIST, "a file of that name exists")
        except OSError as exc:
            raise OutputError(f"cannot create folder {folder} ({exc.strerror or exc}); "
                              "choose another output location") from exc
        probe = None
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".xcorr-write-test-")
            os.close(fd)
            os.remove(probe)
            probe = None
        except OSError as exc:
            raise OutputError(f"folder {folder} is not writable ({exc.strerror or exc}); "
                              "choose another output location") from exc
        finally:  # (Ctrl-C between its creation and removal: the probe removed all the same)
            if probe is not None:
                with contextlib.suppress(OSError):
                    os.remove(probe)
    return created


_STAGING = contextvars.ContextVar("xcorr_staged_outputs", default=None)


class AtomicTarget:
    """The one way an output is written: to a hidden temporary name in the destination folder
    (``.NAME.tmp-PID-RAND`` plus the suffix of ``NAME``, so writers pick the format), renamed
    onto ``path`` by :meth:`commit` or deleted by :meth:`discard`.

    Inside an active :class:`StagedOutputs` that holds ``path``, :meth:`commit` only hands
    the finished file to it; the rename waits for :meth:`StagedOutputs.commit`.

    Examples
    --------
    >>> import tempfile
    >>> target = AtomicTarget(Path(tempfile.mkdtemp()) / "a.csv")
    >>> _ = target.tmp.write_text("x")
    >>> target.commit()
    >>> target.path.read_text()
    'x'
    """

    def __init__(self, path):
        self.path = Path(path)
        self.tmp = self.temp_name("")
        staging = _STAGING.get()
        self._staging = staging if staging is not None and staging.holds(self.path) else None
        if self._staging is not None:
            self._staging.targets.append(self)

    def temp_name(self, tag: str) -> Path:
        """A new hidden name beside :attr:`path`: ``.NAME.tmp-PID-RAND<tag><suffix>``."""
        return temp_name(self.path, tag)

    def commit(self) -> None:
        """Rename the finished temporary file onto :attr:`path` (atomic on one filesystem),
        or hand it to the active :class:`StagedOutputs`."""
        if self._staging is not None:
            self._staging.staged.append(self)
            return
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        """Delete the temporary file; :attr:`path` is left untouched."""
        remove_path(self.tmp)


class StagedOutputs:
    """The outputs of one run, renamed onto their names together by one :meth:`commit`.

    While active (``with``), every :class:`AtomicTarget` for one of ``paths`` (so every
    :func:`atomic_path`, :func:`write_text`, :func:`write_tiff` and :class:`TiffStackWriter`)
    stays a temporary file when it completes.  :meth:`commit` renames them all; if a rename
    fails, those done are undone (a replaced file comes back).  Leaving the block without
    :meth:`commit` deletes every temporary file: nothing of the run appears.

    Parameters
    ----------
    paths : iterable of str or os.PathLike
        The outputs of the run.
    remove : iterable of str or os.PathLike
        Files (or folder outputs) of an earlier run that this run does not write again (e.g.
        ``aligned.tif`` of a run with ``--no-aligned``): deleted by the same :meth:`commit`
        (and brought back if it fails), so no stale output stays beside the new ones.

    Examples
    --------
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> with StagedOutputs([out / "a.csv", out / "b.csv"]) as staged:
    ...     write_text(out / "a.csv", "a")
    ...     write_text(out / "b.csv", "b")
    ...     print(sorted(p.name for p in out.iterdir() if not p.name.startswith(".")))
    ...     staged.commit()
    []
    >>> sorted(p.name for p in out.iterdir())
    ['a.csv', 'b.csv']
    """

    def __init__(self, paths, remove=()):
        self.paths = {Path(p).absolute() for p in paths}
        self.remove = [Path(p) for p in remove if Path(p).absolute() not in self.paths]
        self.targets = []  # every target created for one of the paths
        self.staged = []  # the finished ones, in order
        self.committed = False
        self._token = None

    def holds(self, path) -> bool:
        """Whether ``path`` is one of the outputs."""
        return Path(path).absolute() in self.paths

    def commit(self) -> None:
        """Rename every finished output onto its name and delete the files of :attr:`remove`;
        on a failure undo what was done."""
        done = []  # (path, temporary file renamed onto it or None, what it held before or None)
        try:
            for target in self.staged:
                backup = None
                if target.path.is_dir():  # a folder output: set aside whole, put back on undo
                    backup = target.temp_name(".old")
                    with os_errors(target.path):
                        os.replace(target.path, backup)
                elif target.path.exists():
                    backup = target.temp_name(".old")
                    try:
                        os.link(target.path, backup)
                    except OSError:
                        backup = None  # no hard links here: this one cannot be undone
                done.append((target.path, target.tmp, backup))
                with os_errors(target.path):
                    os.replace(target.tmp, target.path)
            for path in self.remove:
                if path.exists() or path.is_symlink():  # (a file, or a folder output)
                    backup = temp_name(path, ".old")  # a rename: undone by renaming back
                    with os_errors(path):
                        os.replace(path, backup)
                    done.append((path, None, backup))
        except BaseException:
            for path, tmp, backup in reversed(done):
                with contextlib.suppress(OSError):
                    if backup is not None:
                        if backup.is_dir() and path.is_dir():
                            shutil.rmtree(path)  # (a folder is not replaced by a rename)
                        os.replace(backup, path)
                    elif tmp.exists():
                        continue  # not renamed yet
                    else:
                        remove_path(path)
            raise
        finally:
            for _, _, backup in done:
                if backup is not None:
                    remove_path(backup)
        self.committed = True

    def discard(self) -> None:
        """Delete every temporary file of the run."""
        for target in self.targets:
            with contextlib.suppress(OSError):
                target.discard()

    def __enter__(self):
        self._token = _STAGING.set(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        _STAGING.reset(self._token)
        if not self.committed:
            self.discard()


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path to write to; it replaces ``path`` when the block succeeds.

    On any exception (including :class:`KeyboardInterrupt`) the temporary file is deleted,
    ``path`` is left untouched, and the exception propagates; an operating-system failure
    (a full disk, say) as an :class:`~xcorr_app.errors.OutputError` naming ``path``.

    Examples
    --------
    >>> with atomic_path("out/table.csv") as tmp:  # doctest: +SKIP
    ...     tmp.write_text("a,b\\n1,2\\n")
    """
    target = AtomicTarget(path)
    try:
        with os_errors(target.path):  # (the writer's OSError names no path)
            yield target.tmp
            target.commit()
    except BaseException:
        target.discard()
        raise


def write_text(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; a file name's bytes that are not UTF-8
    in it (lone surrogates) as backslash escapes."""
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(text, encoding="utf-8", errors="backslashreplace")


def write_tiff(path, stack, *, imagej: bool = True, metadata: dict | None = None) -> None:
    """Write a 2-D image or a ``(T, H, W)`` stack to ``path`` atomically.

    Parameters
    ----------
    path : str or os.PathLike
    stack : array_like
        2-D or 3-D array (NumPy or CuPy).
    imagej : bool
        Write an ImageJ-compatible file (axes ``TYX``; types other than :data:`IMAGEJ_DTYPES`
        are stored as float32).  Otherwise a plain tifffile stack of the input type.
    metadata : dict, optional
        Extra tifffile metadata (for ImageJ e.g. ``{"spacing": 0.1, "unit": "um"}``).

    Examples
    --------
    >>> write_tiff("out/registered.tif", np.ones((2, 8, 8)))  # doctest: +SKIP
    """
    stack = np.asarray(to_numpy(stack))
    if stack.ndim not in (2, 3):
        raise InputError(f"write_tiff needs a 2-D image or a 3-D stack, got shape {stack.shape}")
    frames = stack.reshape((-1, *stack.shape[-2:]))
    with TiffStackWriter(path, frames.shape[1:], frames.dtype, len(frames), imagej=imagej,
                         metadata=metadata) as writer:
        writer.write(frames)


class TiffStackWriter:
    """Write a TIFF stack chunk by chunk; the file appears under its name only on :meth:`close`.

    Parameters
    ----------
    path : str or os.PathLike
        Final file name.
    frame_shape : tuple of int
        ``(H, W)`` of every frame.
    dtype : numpy.dtype
        Pixel type of the frames (for ImageJ, stored as float32 unless one of
        :data:`IMAGEJ_DTYPES`).
    n_frames : int, optional
        Number of frames that will be written, when known (checked on :meth:`close`).
    imagej : bool
        Write an ImageJ-compatible ``TYX`` stack (default), else a plain tifffile stack.
    metadata : dict, optional
        Extra tifffile metadata.
    channels : int
        With ImageJ, pages are written time frame by time frame, ``channels`` pages each: an
        ImageJ hyperstack (T, C, Y, X).
    slices : int
        With ImageJ, the pages of a time frame are ``slices`` Z planes of ``channels`` pages
        each: a hyperstack (T, Z, C, Y, X).
    resolution : (float, float), optional
        Pixels per unit along x and y (the TIFF resolution tags; ImageJ's ``unit`` in
        ``metadata``).

    Used as a context manager, it closes on success and aborts (deletes the temporary file)
    on an exception.

    Why not tifffile's own streamed write (``TiffWriter.write(iterator, shape=, dtype=)``,
    which writes the ImageJ hyperstack description itself): it pulls the whole stack from one
    iterator in one call, while this writer is pushed one chunk at a time by loops that do
    other work between chunks (progress, the next chunk's computation), so bridging the two
    needs a writer thread and a queue; ``n_frames`` may be unknown (plain TIFF); and its
    description adds ``loop=false``, so the ImageJ metadata read back would change (tifffile
    2026.3.3).  Pages are therefore appended one call each in contiguous mode, and the one
    line of the description that tifffile gets wrong for appended pages (it counts them as
    channels) is corrected on :meth:`close`.

    Examples
    --------
    >>> with TiffStackWriter("out/reg.tif", (64, 64), np.float32, n_frames=10) as w:
    ...     for start in range(0, 10, 4):
    ...         w.write(np.zeros((min(4, 10 - start), 64, 64), np.float32))
    ... # doctest: +SKIP
    """

    def __init__(self, path, frame_shape, dtype, n_frames: int | None = None,
                 imagej: bool = True, metadata: dict | None = None, channels: int = 1,
                 resolution=None, slices: int = 1):
        self.path = Path(path)
        self.channels, self.slices = int(channels), int(slices)
        self.frame_shape = tuple(int(n) for n in frame_shape)
        dtype = np.dtype(dtype)
        self.dtype = np.dtype(np.float32) if imagej and dtype not in IMAGEJ_DTYPES else dtype
        self.n_frames = n_frames
        self.n_written = 0
        self._imagej = imagej
        self._metadata = {k: v for k, v in (metadata or {}).items() if k != "axes"}
        self._resolution = resolution
        nbytes = (n_frames or 0) * self.dtype.itemsize * int(np.prod(self.frame_shape))
        bigtiff = not imagej and (n_frames is None or nbytes > 2**32 - 2**25)
        self._target = AtomicTarget(self.path)
        self._tmp = self._target.tmp
        with os_errors(self.path):
            self._tw = tifffile.TiffWriter(self._tmp, bigtiff=bigtiff, imagej=imagej)

    def write(self, chunk) -> None:
        """Append frames: a ``(k, H, W)`` chunk or one ``(H, W)`` frame."""
        if self._tw is None:
            raise ValueError(f"writer for {self.path} is already closed")
        chunk = np.asarray(to_numpy(chunk))
        chunk = chunk[None] if chunk.ndim == 2 else chunk
        if chunk.shape[1:] != self.frame_shape:
            raise InputError(f"chunk of shape {chunk.shape} does not hold frames of shape "
                             f"{self.frame_shape}")
        if self.n_frames is not None and self.n_written + len(chunk) > self.n_frames:
            raise InputError(f"more than the {self.n_frames} announced frames written to "
                             f"{self.path}")
        with os_errors(self.path):
            for frame in chunk.astype(self.dtype, copy=False):
                # one page per call: contiguous mode appends pages of the same shape
                self._tw.write(frame, contiguous=True, photometric="minisblack",
                               metadata=self._metadata, resolution=self._resolution)
        self.n_written += len(chunk)

    def close(self) -> None:
        """Finish the file and rename it onto :attr:`path`."""
        if self._tw is None:
            return
        if self.n_written == 0 or self.n_frames not in (None, self.n_written) \
                or self.n_written % (self.channels * self.slices):
            self.abort()
            raise InputError(f"{self.n_written} frames written to {self.path}, expected "
                             f"{self.n_frames or 'at least 1'}")
        try:
            with os_errors(self.path):
                self._tw.close()
                self._tw = None
                if self._imagej and self.n_written > 1:
                    # tifffile labels appended pages as channels; ImageJ must see time frames
                    n, c, z = self.n_written, self.channels, self.slices
                    axes = f"\nframes={n}\n" if c == z == 1 else (
                        (f"\nchannels={c}" if c > 1 else "") + (f"\nslices={z}" if z > 1 else "")
                        + f"\nframes={n // (c * z)}\nhyperstack=true\n")
                    description = tifffile.tiffcomment(self._tmp)
                    tifffile.tiffcomment(self._tmp, description.replace(
                        f"\nchannels={n}\n", axes))
                self._target.commit()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop writing and delete the temporary file; :attr:`path` is left untouched."""
        if self._tw is not None:
            with contextlib.suppress(Exception):
                self._tw.close()
            self._tw = None
        self._target.discard()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
