"""Whole sessions in one call: :func:`align_sessions` aligns many recordings with the same
options, each into its own outputs folder (``STEM_xcorr``), and sums them up in one table
(``sessions.csv``); a recording whose folder holds a finished run is skipped, so a session
interrupted half-way is resumed by the same call.

Examples
--------
>>> session_folder("/data/day1/mouse3.tif"), session_folder("day2/m.ome.tif", "results")
(PosixPath('mouse3_xcorr'), PosixPath('results/m.ome_xcorr'))
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import io
import json
import threading
import time
from pathlib import Path

import numpy as np

from ..errors import InputError, OutputError, XcorrError
from ..io import HoldsVolumes, plural
from ._options import AlignOptions

__all__ = ["Session", "align_sessions", "is_pattern", "session_folder", "session_paths", "finished_run",
           "sessions_csv", "SESSIONS_TABLE", "SESSION_COLUMNS", "SAVE_OPTIONS"]

#: the summary table of :func:`align_sessions`, in ``out`` (or the current folder)
SESSIONS_TABLE = "sessions.csv"
#: its columns: one row a recording
SESSION_COLUMNS = ("path", "folder", "status", "reason", "frames", "median_confidence",
                   "low_confidence_frames", "seconds")
#: the keywords of :func:`align_sessions` that go to :meth:`AlignResult.save` (the others are
#: the run's :class:`AlignOptions`)
SAVE_OPTIONS = ("aligned", "format", "plots", "resample", "crop", "fill", "keep_dtype",
                "channels", "in_place")


def is_pattern(path) -> bool:
    """Whether ``path`` is a glob pattern (``*``, ``?``, ``[...]``) naming no existing file or
    folder itself (``movie.tif?z=2`` is a plane of ``movie.tif``, not a pattern).

    >>> is_pattern("runs/*.tif"), is_pattern("run.tif"), is_pattern("no/such.tif?z=2")
    (True, False, False)
    """
    from ..io import split_source

    text = str(path)
    if not glob.has_magic(text) or Path(text).exists():
        return False
    try:
        file = split_source(text)[0]  # (without its ?z=K&axes=A)
    except InputError:  # (a query of a source path, badly written: no pattern)
        return False
    return glob.has_magic(str(file)) and not file.exists()


def session_paths(paths) -> list:
    """The recordings ``paths`` names: one path, a glob pattern (:func:`is_pattern`: its
    matches, sorted) or a sequence of them, in order, each once.  A folder is one recording
    (a folder of TIFFs is one stack, as :func:`~xcorr_app.align` reads it): the recordings of
    a folder are named by a pattern, ``"session/*.tif"``.  An :class:`InputError` for no
    recording, or a pattern that matches nothing."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths) \
        if isinstance(paths, (list, tuple)) else None
    if items is None or any(not isinstance(p, (str, Path)) for p in items):
        raise InputError(f"paths must be a path, a glob pattern or a list of them, got "
                         f"{type(paths).__name__ if items is None else 'a list with other items'}")
    out = []
    for p in items:
        if is_pattern(p):
            matches = sorted(glob.glob(str(p)))
            if not matches:
                raise InputError(f"{p} matches no file or folder")
            out += matches
        elif not str(p).strip():
            raise InputError("paths holds an empty path")
        else:
            out.append(p)
    out = list(dict.fromkeys(out))
    if not out:
        raise InputError("paths names no recording: give at least one path")
    return out


def session_folder(path, out=None) -> Path:
    """The outputs folder of the recording ``path``: ``STEM_xcorr`` in ``out`` (default: the
    current folder), named as ``xcorr align`` names its default ``--out`` (a source path
    ``FILE:/DATASET?z=K``: FILE's stem; a folder: its name)."""
    from ..io import split_source

    file = split_source(path)[0]
    name = f"{file.resolve().name if file.is_dir() else file.stem}_xcorr"
    return Path(name) if out is None else Path(out) / name


def finished_run(folder):
    """``shifts.json`` of the finished 2-D run in ``folder`` (its settings, summary and every
    frame's record: the outputs are committed together, so it is there only once all are), or
    None."""
    try:
        doc = json.loads((Path(folder) / "shifts.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict) \
            or not isinstance(doc.get("frames"), list) \
            or (doc.get("summary") or {}).get("frames") != len(doc["frames"]):
        return None
    return doc


def align_sessions(paths, out=None, *, force=False, progress=None, options=None, **keywords):
    """Align every recording of a session with the same options, each into its own folder.

    Each recording is aligned by :func:`~xcorr_app.align` and saved by
    :meth:`AlignResult.save <xcorr_app.AlignResult.save>` into ``OUT/STEM_xcorr``
    (:func:`session_folder`), as ``xcorr align PATH --out OUT/STEM_xcorr`` would: the same
    shifts, the same files.  Then one table, ``sessions.csv`` in ``out`` (or the current
    folder), rewritten atomically by every call, sums the session up.

    Parameters
    ----------
    paths : str, Path or sequence of them
        The recordings (any input :func:`~xcorr_app.align` reads); a glob pattern such as
        ``"session/*.tif"`` stands for its matches (sorted).  A folder is one recording (a
        folder of TIFFs: one stack); a pattern names the recordings of a folder.  Two
        recordings whose folders would be the same (the same stem) are an
        :class:`~xcorr_app.errors.InputError`: align them into different ``out`` folders.
    out : str or Path, optional
        The folder the recordings' folders and ``sessions.csv`` go into (made if missing);
        default: the current folder.
    force : bool
        Align again the recordings whose folder holds a finished run (:func:`finished_run`),
        replacing it; without it they are skipped (the session resumes where it stopped).
    progress : callable(int), optional
        Called with 1 as each recording is done, skipped or failed (from the GPUs' threads
        with ``gpus``).
    options : AlignOptions, optional
        The run's options built before, instead of their keywords.
    **keywords
        The options of :func:`~xcorr_app.align` (built once into one :class:`AlignOptions`),
        and those of :meth:`AlignResult.save <xcorr_app.AlignResult.save>`
        (:data:`SAVE_OPTIONS`: ``aligned``, ``format``, ``resample``, ...; ``channels="all"``:
        every channel of each recording).  ``gpus`` (``"all"``, ``"0,1"``) aligns several
        recordings at once, one a GPU (each on its GPU alone, ``device="gpu"``), instead of
        sharing the frames of one over them; without it the recordings run one after
        another (each run uses the whole device already).

    Returns
    -------
    list of dict
        One row a recording, in order, keys :data:`SESSION_COLUMNS`: ``path`` (as given or
        matched), ``folder``, ``status`` (``done``, ``skipped``: a finished run was there, or
        ``failed``), ``reason`` (why it failed or was skipped, one line; where done, the
        reader's warnings: a truncated file's frames left out under
        :func:`~xcorr_app.io.readable_frames`), ``frames``,
        ``median_confidence`` and ``low_confidence_frames`` (of its run, the earlier one where
        skipped; None where failed) and ``seconds`` (spent on it by this call).  A recording
        that cannot be aligned (an :class:`~xcorr_app.errors.InputError` or
        :class:`~xcorr_app.errors.OutputError`: a damaged file, a folder holding someone's
        files...) fails alone; the others go on.

    Raises
    ------
    InputError
        Bad options or paths (checked before any recording runs).

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> from scipy import ndimage as ndi
    >>> from xcorr_app.io import write_tiff
    >>> folder = Path(tempfile.mkdtemp())
    >>> base = ndi.gaussian_filter(np.random.default_rng(0).random((40, 48)), 2)
    >>> for name in ("a", "b"):
    ...     write_tiff(folder / f"{name}.tif", np.stack([base, np.roll(base, (1, -2), (0, 1))]))
    >>> rows = align_sessions(str(folder / "*.tif"), folder / "out", max_shift=4,
    ...                       device="cpu", quality=False, aligned=False)
    >>> [(Path(r["folder"]).name, r["status"], r["frames"]) for r in rows]
    [('a_xcorr', 'done', 2), ('b_xcorr', 'done', 2)]
    >>> [r["status"] for r in align_sessions(str(folder / "*.tif"), folder / "out")]
    ['skipped', 'skipped']
    """
    session = Session.plan(paths, out, force, options, keywords)
    gpu_ids = None
    if session.opts.gpus is not None:
        from ..streaming import parse_gpus

        gpu_ids = parse_gpus(session.opts.gpus)  # (every GPU aligns recordings of its own)
        session.opts = session.opts._decided(gpus=None, device="gpu")

    def one(k):
        row = session.align(k)
        if progress is not None:
            progress(1)
        return row

    return session.finish(_spread(len(session.recordings), one, gpu_ids))


@dataclasses.dataclass
class Session:
    """A session checked before any recording runs (:meth:`plan`): the run's options, the
    save options, the recordings and their folders; :meth:`align` runs one recording (in this
    process, or as a Dask task on a worker: :func:`xcorr_app.dask.align_sessions`), and
    :meth:`finish` writes the table of their rows."""

    opts: AlignOptions
    save: dict
    recordings: list
    folders: list
    out: object
    force: bool

    @classmethod
    def plan(cls, paths, out, force, options, keywords, executor="process") -> "Session":
        """The session of :func:`align_sessions`' arguments, every option and path checked
        (``executor``: ``"process"``, or ``"dask"``: its recordings spread over a cluster's
        workers, each aligned in one worker's process)."""
        keywords = dict(keywords)
        save = {k: keywords.pop(k) for k in SAVE_OPTIONS if k in keywords}
        opts = AlignOptions.from_arguments(keywords.pop("reference", None), options, **keywords)
        if executor == "dask" and opts.gpus is not None:  # (gpus and a cluster: refused)
            opts.check_executor("dask")
        # (on a cluster too, each recording runs in one process: a worker's)
        opts.check_executor("gpus" if opts.gpus is not None else "process")
        _check_save(opts, save, force)
        if out is not None and (not str(out).strip() or Path(out).is_file()):
            raise InputError(f"out is the folder of the recordings' folders and "
                             f"{SESSIONS_TABLE}, not {'a file' if str(out).strip() else 'empty'}"
                             f": {out}")
        recordings = session_paths(paths)
        folders = [session_folder(p, out) for p in recordings]
        _check_folders(recordings, folders)
        session = cls(opts, save, recordings, folders, out, bool(force))
        _check_table(session.table)
        return session

    @property
    def table(self) -> Path:
        return Path(SESSIONS_TABLE) if self.out is None else Path(self.out) / SESSIONS_TABLE

    def align(self, k) -> dict:
        """Recording ``k`` aligned and saved (or skipped, or failed): its row."""
        return _one(self.recordings[k], self.folders[k], self.opts, self.save, self.force)

    def failed(self, k, exc, seconds=0.0) -> dict:
        """The row of recording ``k`` that failed with ``exc`` outside its run (a worker
        that died, a device it could not use)."""
        row = dict.fromkeys(SESSION_COLUMNS)
        row.update(path=str(self.recordings[k]), folder=str(self.folders[k]), status="failed",
                   reason=failure_reason(exc), seconds=round(seconds, 3))
        return row

    def finish(self, rows) -> list:
        """``rows`` (one a recording, in order) written as the session's table; returned."""
        if self.out is not None:
            Path(self.out).mkdir(parents=True, exist_ok=True)
        from ..io import write_text

        write_text(self.table, sessions_csv(rows))
        return rows


def _check_save(opts, save, force):
    """The options of the saved outputs, checked once before any recording runs."""
    from ..io import parse_out_format
    from .outputs import check_save

    kw = {k: save[k] for k in ("aligned", "plots", "resample", "crop", "fill", "keep_dtype",
                               "in_place") if k in save}
    channels = save.get("channels")
    if channels is not None and opts.channel is None:
        raise InputError("channels writes other channels aligned by the shifts of one: give "
                         "channel=K, the channel the shifts are measured on")
    # ("all": every recording's channels, counted per recording; refused with NWB here, once)
    check_save(patches=opts.patches is not None, format=parse_out_format(
        save.get("format", "tiff"))[0], channels=channels, model=opts.model, force=force, **kw)


def _check_folders(recordings, folders):
    seen = {}
    for path, folder in zip(recordings, folders):
        key = folder.absolute()
        if key in seen:
            raise InputError(f"{seen[key]} and {path} would both be written into {folder}: "
                             "align them into different out folders, or rename one")
        seen[key] = path


def _check_table(table):
    """Refuse (before any run) a ``sessions.csv`` that is not an earlier summary table."""
    try:
        with open(table, encoding="utf-8") as f:
            first = f.readline().strip()
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError):
        first = None
    if first != ",".join(SESSION_COLUMNS):
        raise OutputError(f"{table} is not a summary table of xcorr's; it is kept and nothing "
                          "was aligned: choose another out folder, or move it")


def _one(path, folder, opts, save, force) -> dict:
    """One recording aligned and saved (or skipped, or failed): its row."""
    t0 = time.perf_counter()
    row = dict.fromkeys(SESSION_COLUMNS)
    row.update(path=str(path), folder=str(folder))
    done = None if force else finished_run(folder)
    if done is not None:
        frames = done["frames"]
        conf = [_number(f.get("confidence")) for f in frames]
        row.update(status="skipped", reason=f"a finished run is in {folder} (force redoes it)",
                   frames=len(frames), median_confidence=_median(conf),
                   low_confidence_frames=sum(bool(f.get("low_confidence")) for f in frames))
    else:
        from ._api import align

        try:
            res = align(path, options=opts)
            kw = dict(save)
            if kw.get("channels") == "all":
                from .outputs import channels_of

                kw["channels"] = list(range(channels_of(path, opts.channel)))
            res.save(folder, force=force, **kw)
        except HoldsVolumes as exc:  # (--volumes takes one path: say what a session can do)
            row.update(status="failed", reason=(
                f"{path} holds volumes: {plural(exc.times, 'time point')} of "
                f"{plural(exc.planes, 'Z plane')} (axes {exc.axes}); a session aligns 2-D "
                "recordings: align it on its own (xcorr align PATH registers volumes in 3-D) "
                "or pick one plane (PATH?z=K)"))
        except Exception as exc:  # noqa: BLE001 - (one recording's failure, whatever it is,
            # is its row: the others go on and the table is written; Ctrl-C is no Exception)
            row.update(status="failed", reason=failure_reason(exc))
        else:
            warned = [n for n in res.settings.get("notes", []) if n.startswith("warning: ")]
            row.update(status="done", reason="; ".join(warned), frames=res.n_frames,
                       median_confidence=_median(res.confidence),
                       low_confidence_frames=int(np.asarray(res.low_confidence).sum()))
    row["seconds"] = round(time.perf_counter() - t0, 3)
    return row


def failure_reason(exc) -> str:
    """A failed recording's reason, one line: the message of an error of ours (or a lack of
    memory), else the exception's type and message as an internal error."""
    said = " ".join(str(exc).split()) or type(exc).__name__
    return said if isinstance(exc, (XcorrError, MemoryError)) else \
        f"internal error: {type(exc).__name__}: {said}"


def _number(value) -> float:
    try:
        return float(value)  # (shifts.json writes infinity as "inf", an unmeasured frame null)
    except (TypeError, ValueError):
        return float("nan")


def _median(values):
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return round(float(np.median(v)), 4) if v.size else None


def _spread(n, one, gpu_ids) -> list:
    """``one(k)`` for every recording ``k``: one after another, or, with ``gpu_ids``, on every
    GPU's worker thread at once, each taking the next recording as it finishes one."""
    if gpu_ids is None:
        return [one(k) for k in range(n)]
    from ..streaming import Cancelled, run_on_gpus

    rows, lock, todo = [None] * n, threading.Lock(), iter(range(n))

    def work(_, stop):
        while True:
            if stop.is_set():
                raise Cancelled
            with lock:
                k = next(todo, None)
            if k is None:
                return
            rows[k] = one(k)

    run_on_gpus(gpu_ids[:n], work)
    return rows


def sessions_csv(rows) -> str:
    """``sessions.csv``'s text: :data:`SESSION_COLUMNS`, one row a recording."""
    text = io.StringIO()
    writer = csv.DictWriter(text, SESSION_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if r[k] is None else r[k] for k in SESSION_COLUMNS} for r in rows)
    return text.getvalue()
