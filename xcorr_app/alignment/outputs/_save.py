"""A run's outputs folder: ``shifts.csv``, ``shifts.json``, ``drift.png``, ``quality.png``, with
``patches`` ``motion_field.npz`` and ``motion_field.png``, and the aligned stack (TIFF, OME-Zarr
or HDF5), written together or not at all.

:meth:`AlignResult.save <xcorr_app.alignment.AlignResult.save>` writes them for a finished
result; ``xcorr align`` opens the same :class:`RunOutputs` before its run, so the run itself can
write the aligned stack as it goes (:meth:`RunOutputs.aligned_sink`), and then writes the rest
through the same :meth:`RunOutputs.write`: the command and the package write the same bytes.

Examples
--------
>>> import tempfile
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> from xcorr_app import align
>>> base = ndi.gaussian_filter(np.random.default_rng(0).random((40, 48)), 2)
>>> stack = np.stack([base, np.roll(base, (1, -2), axis=(0, 1))]).astype(np.float32)
>>> res = align(stack, max_shift=4, device="cpu", quality=False)
>>> folder = Path(tempfile.mkdtemp()) / "run"
>>> sorted(p.name for p in res.save(folder).values())
['aligned.tif', 'drift.png', 'shifts.csv', 'shifts.json']
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np

from ..._environment import environment
from ...errors import InputError, OutputError, check_flags
from ...io import OUT_FORMATS, aligned_name, json_numbers, json_text, out_format
from ..warp import RESAMPLE, check_fill

__all__ = ["RunOutputs", "AlignedSink", "aligned_as", "aligned_of", "channel_metadata",
           "check_channels", "check_save", "check_stale", "frame_columns", "output_names",
           "stale_outputs", "RUN_FILES",
           "result_document", "write_chunks"]

def output_names(*, aligned=True, format="tiff", plots=True, quality=True, patches=False):
    """The files of an outputs folder, name -> file name (the same: the aligned stack's
    name is its format's, ``aligned.ome.zarr`` say).

    >>> output_names(format="ome-zarr", quality=False)
    {'shifts.csv': 'shifts.csv', 'shifts.json': 'shifts.json', 'drift.png': 'drift.png', \
'aligned.ome.zarr': 'aligned.ome.zarr'}
    """
    names = ["shifts.csv", "shifts.json"] + (["drift.png"] if plots else [])
    names += ["quality.png"] if quality and plots else []
    names += ["motion_field.npz"] if patches else []
    names += ["motion_field.png"] if patches and plots else []
    out = {k: k for k in names}
    if aligned:
        out[aligned_name(format)] = aligned_name(format)
    return out


def check_save(*, patches, aligned=True, format="tiff", resample="bilinear", crop=False,
               fill=0.0, keep_dtype=False, channels=None, in_place=False, model="translation",
               plots=True, force=False):
    """The options of the aligned stack, checked before anything is read or written (an
    :class:`InputError` in the API's names; ``xcorr align`` says them as flags).  Returns the
    fill value, checked (:func:`~xcorr_app.alignment.warp.check_fill`).  ``model``
    ``rigid-body`` warps as a motion field does (``resample`` bilinear or cubic)."""
    from ..piecewise import FIELD_RESAMPLE

    check_flags(aligned=aligned, plots=plots, force=force, crop=crop, keep_dtype=keep_dtype,
                in_place=in_place)
    if format not in OUT_FORMATS:
        raise InputError(f"unknown format {format!r}; use one of {', '.join(OUT_FORMATS)}")
    if in_place and (format != "nwb" or not aligned):
        raise InputError("in_place=True writes the aligned movie into the NWB input: it needs "
                         "format='nwb'" + ("" if aligned else " and the aligned stack"))
    if format == "nwb" and channels is not None:
        raise InputError("an NWB output holds the aligned movie of one channel: leave "
                         "channels out")
    if resample not in RESAMPLE and resample not in FIELD_RESAMPLE:
        raise InputError(f"unknown resampling {resample!r}; use "
                         f"{' or '.join(RESAMPLE)} (rigid shifts), or "
                         f"{' or '.join(FIELD_RESAMPLE)} (patches, model rigid-body)")
    if model != "translation" and not patches and resample not in FIELD_RESAMPLE:
        raise InputError(f"resample={resample} is not available with model {model}, which "
                         f"rotates the frames (use resample="
                         f"{' or resample='.join(FIELD_RESAMPLE)})")
    if model != "translation":
        patches = True  # (its warp: a motion field's)
    if not patches and resample not in RESAMPLE:
        raise InputError(f"resample={resample} warps by a motion field (patches): use "
                         f"resample={' or resample='.join(RESAMPLE)} for rigid shifts")
    if patches and resample not in FIELD_RESAMPLE:
        raise InputError(f"resample={resample} is not available with patches (use "
                         f"resample={' or resample='.join(FIELD_RESAMPLE)})")
    if not aligned:
        given = [f"{name}={value}" for name, value, on in (
            ("crop", True, crop), ("fill", fill, fill != 0.0), ("resample", resample,
                                                               resample != "bilinear"),
            ("format", format, format != "tiff"), ("keep_dtype", True, keep_dtype),
            ("channels", channels, channels is not None)) if on]
        if given:
            raise InputError(f"{', '.join(given)} shape the aligned stack, which aligned=False "
                             "does not write: drop one or the other")
    return check_fill(fill)


def check_channels(channels, n_channels, measured):
    """``channels`` (a sequence of channel numbers, or None) checked against the input's
    ``n_channels`` and the channel the shifts were measured on (``measured``): a list of ints,
    or None.

    >>> check_channels((2, 0), 3, 1)
    [2, 0]
    """
    if channels is None:
        return None
    if measured is None:
        raise InputError("channels writes other channels aligned by the shifts of one: the run "
                         "must measure one channel of a multi-channel input (channel=K)")
    try:
        listed = [int(c) for c in channels]
    except (TypeError, ValueError):
        raise InputError(f"channels {channels!r}: give channel numbers such as [0, 2]") from None
    bad = [c for c in listed if not 0 <= c < n_channels]
    if bad or not listed or len(set(listed)) != len(listed):
        why = f"{bad[0]} is not one of its channels 0 to {n_channels - 1}" if bad else \
            "a channel is named twice" if listed else "no channel is named"
        raise InputError(f"channels {list(channels)}: {why}")
    return listed


def aligned_as(src, path, keep_dtype, format=None, dataset=None, force=False,
               fill=0.0) -> dict:
    """How the aligned stack of ``src`` (opened from ``path``) is written: ``keep`` (the input's
    pixel type with ``keep_dtype``, else float32), the ``metadata`` carried into it (pixel
    size, channel names, frame interval, source, an OME-Zarr input's OME-NGFF version) and an
    HDF5 output's ``dataset`` (:func:`~xcorr_app.io.parse_out_format`'s, where given).  A pixel
    size that is no calibration (NaN, zero, negative) is dropped, with a note in ``src.notes``
    (where it has them).  With ``format`` (:data:`~xcorr_app.io.OUT_FORMATS`), an
    :class:`InputError` where it cannot hold the kept type (:func:`~xcorr_app.io.check_keep`),
    or, for NWB, where ``path`` is no NWB series or holds a corrected movie of it (an earlier
    xcorr run's is replaced with ``force``: :func:`~xcorr_app.io.check_nwb_out`), or where
    the kept type cannot hold ``fill`` (the value of pixels shifted in), before anything is
    written."""
    from ...io import calibration, check_keep, check_nwb_out, usable_pixel_size

    if keep_dtype and format is not None:
        check_keep(format, src.dtype)
    if keep_dtype:
        _check_fill_fits(fill, src.dtype)
    if format == "nwb":
        check_nwb_out(path, force)

    said = calibration(path) if isinstance(path, (str, Path)) else {}
    size = said.get("pixel_size")
    if size and usable_pixel_size(size) is None:
        note = (f"{_title_name(path)} says a pixel size of {size[0]} x {size[1]}, which is no "
                "calibration: the aligned stack carries none")
        if isinstance(getattr(src, "notes", None), list):
            src.notes.append(note)
        size = None
    return {"keep": src.dtype if keep_dtype else None,
            "metadata": {"pixel_size": size, "source": _input_name(path),
                         "channel_names": said.get("channel_names") or [],
                         "frame_interval": said.get("frame_interval"),
                         "z_step": said.get("z_step") if size else None,
                         "ngff_version": said.get("ngff_version"),
                         **({"replace": bool(force)} if format == "nwb" else {})},
            **({"dataset": dataset} if dataset is not None else {})}


class AlignedSink:
    """The aligned stack's chunks handed to a writer thread: ``write(frames)`` (float32 or
    :attr:`dtype` chunks, which must be fresh arrays: apply_shifts', apply_field's, the Dask
    blocks', ``align(out=)``'s), and ``align(out=)``'s ``(start, frames)`` with ``dtype``,
    the type stored (chunks the run rounds into it on the GPU are stored as they are), CuPy
    chunks among them (:attr:`takes_device`: the thread copies them to the host)."""

    takes_device = True

    def __init__(self, background, dtype, writer=None):
        self.write, self.dtype = background.write, dtype
        self.writer = writer  # (an NWB writer's ``record``: the shifts, before it closes)

    def __call__(self, start, frames):
        self.write(frames)


@contextlib.contextmanager
def aligned_file(out_shape, n, out_path, aligned=None, channels=1, slices=1):
    """An :class:`AlignedSink` appending to ``out_path`` (TIFF, OME-Zarr or HDF5 by its name;
    ``aligned``: :func:`aligned_as`; ``slices``: the Z planes of a time point, of the planes
    of volumes in time order) by a writer thread."""
    from ...io import BackgroundWrites, stack_writer

    with stack_writer(out_path, out_shape, n * channels, channels=channels, slices=slices,
                      **(aligned or {})) as writer, BackgroundWrites(writer) as background:
        yield AlignedSink(background, writer.dtype, writer)


def write_chunks(parts, shape, n, out_path, aligned=None, channels=1, progress=None,
                 record=None, slices=1):
    """Write the aligned chunks ``parts`` (a tuple a chunk of ``(start, frames)`` a channel, as
    :func:`xcorr_app.alignment._apply.aligned_channels` makes them) of ``n`` frames of ``shape``
    into ``out_path`` by a writer thread: one stack, or a T x C hyperstack of several channels
    (every channel of one frame together); ``aligned``: :func:`aligned_as`; ``progress(k)``
    after every chunk; ``record``: the arguments of an NWB writer's ``record`` (the shifts and
    the provenance: :func:`nwb_record`); ``slices``: :func:`aligned_file`'s."""
    with aligned_file(shape, n, out_path, aligned, channels=channels, slices=slices) as sink:
        if record is not None and hasattr(sink.writer, "record"):
            sink.writer.record(*record)
        for part in parts:
            pieces = [chunk for _, chunk in part]
            k = len(pieces[0])
            sink.write(np.stack(pieces, axis=1).reshape(k * channels, *shape) if channels > 1
                       else pieces[0])
            if progress is not None:
                progress(k)


def _printable(name: str) -> str:
    """``name`` as the outputs write it: a file name's bytes that are not UTF-8 (Python keeps
    them as lone surrogates, which no UTF-8 writer takes) as backslash escapes."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _input_name(source) -> str:
    return _printable(str(source)) if isinstance(source, (str, Path)) else \
        f"array {'x'.join(map(str, getattr(source, 'shape', ())))}"


def _title_name(source) -> str:
    return _printable(Path(source).name) if isinstance(source, (str, Path)) else "stack"


def frame_columns(res) -> dict:
    """The records of :meth:`AlignResult.frame_records
    <xcorr_app.alignment.AlignResult.frame_records>` as columns, key -> one standard JSON
    value a frame, each column converted at once (a long run's records one value at a time
    cost a large share of a one-shot run).

    >>> from types import SimpleNamespace
    >>> res = SimpleNamespace(n_frames=2, sources=["a.tif", "a.tif"], shifts=np.zeros((2, 2)),
    ...                       peak=np.array([1.0, np.nan]), confidence=np.array([np.inf, 0]),
    ...                       low_confidence=np.array([False, True]), fft_shifts=np.zeros((2, 2)),
    ...                       agree=np.ones(2, bool), border=np.zeros(2, bool), quality=None)
    >>> frame_columns(res)["confidence"], frame_columns(res)["peak"]
    (['inf', 0.0], [1.0, None])
    """
    from ...io import strict_json

    n = res.n_frames
    shifts, fft = np.asarray(res.shifts).reshape(n, 2), np.asarray(res.fft_shifts).reshape(n, 2)

    def flag(values):
        return np.asarray(values, bool).reshape(n).tolist()

    columns = {"frame": list(range(n)), "source": [_printable(res.sources[i]) for i in range(n)],
               "dy": json_numbers(shifts[:, 0]), "dx": json_numbers(shifts[:, 1]),
               "peak": json_numbers(res.peak), "confidence": json_numbers(res.confidence),
               "low_confidence": flag(res.low_confidence), "fft_dy": json_numbers(fft[:, 0]),
               "fft_dx": json_numbers(fft[:, 1]), "agree": flag(res.agree),
               "peak_on_border": flag(res.border)}
    if getattr(res, "rotation_deg", None) is not None:  # (rigid-body: xcorr apply reads it)
        columns["rotation_deg"] = json_numbers(res.rotation_deg)
    quality = None if res.quality is None else res.quality.records()
    for key in quality[0] if quality else ():
        values = [r[key] for r in quality]
        columns[key] = json_numbers(values) if all(type(v) is float for v in values) \
            else strict_json(values)
    return columns


def result_document(res, *, resample="bilinear", crop=False, fill=0.0, aligned=None) -> dict:
    """``shifts.json`` of ``res``: its input, the aligned stack ``aligned`` (its name in the
    outputs folder as xcorr reads it, ``aligned.h5:/data``; left out where None), settings
    (with those of the aligned stack), summary, environment, time and one record per frame
    (:func:`frame_columns`), as standard JSON values."""
    from ...io import strict_json

    seconds = res.seconds if res.seconds is not None else float("nan")
    settings = dict(res.settings, resample=resample, crop=crop, fill=fill)
    doc = {"input": _input_name(res.source), **({"aligned": aligned} if aligned else {}),
           "frame_shape": list(res.frame_shape),
           "settings": settings, "summary": res.summary(),
           **environment(res.settings.get("device", "cpu")),
           "seconds_measuring": round(seconds, 4),
           "frames_per_second": round(res.n_frames / max(seconds, 1e-9), 2)}
    doc = strict_json(doc)  # no bare NaN: shifts.json is standard JSON
    columns = frame_columns(res)  # (standard JSON already)
    doc["frames"] = [dict(zip(columns, row)) for row in zip(*columns.values())]
    return doc


def beside_a_run(path) -> bool:
    """Whether ``path`` lies in the outputs folder of an ``xcorr align`` run: beside it the
    ``shifts.json`` that the run wrote (:func:`result_document`: its settings and frames; a
    run of volumes: its input and volumes).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> beside_a_run(folder / "aligned.tif")
    False
    >>> _ = (folder / "shifts.json").write_text('{"settings": {}, "frames": []}')
    >>> beside_a_run(folder / "aligned.tif")
    True
    """
    try:
        doc = json.loads((Path(path).parent / "shifts.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and (
        (isinstance(doc.get("settings"), dict) and isinstance(doc.get("frames"), list))
        or (isinstance(doc.get("input"), str) and isinstance(doc.get("volumes"), list)))


#: every file an ``xcorr align`` run may write into its outputs folder (2-D: :func:`output_names`
#: of every option; ``--volumes``: shifts.csv, shifts.json, drift.png, aligned.tif)
RUN_FILES = ("shifts.csv", "shifts.json", "drift.png", "quality.png", "motion_field.npz",
             "motion_field.png", *OUT_FORMATS.values())


def stale_outputs(folder, written, inputs=()) -> list:
    """The files of :data:`RUN_FILES` in ``folder`` that a run writing ``written`` does not
    write again, its ``inputs`` left out: an earlier run's outputs would no longer match its
    shifts (its commit removes them, with ``force``: that run's shifts.json exists); a file of
    such a name that no run wrote is refused by :func:`check_stale`.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "quality.png").write_bytes(b"")
    >>> [p.name for p in stale_outputs(folder, [folder / "shifts.csv"])]
    ['quality.png']
    """
    folder = Path(folder)
    kept = {Path(p).absolute() for p in written} | {Path(p).absolute() for p in inputs}
    return [folder / name for name in RUN_FILES if (folder / name).absolute() not in kept
            and ((folder / name).exists() or (folder / name).is_symlink())]


def check_stale(paths) -> None:
    """:class:`OutputError` for an existing one of ``paths`` (:func:`stale_outputs`) that no
    earlier run wrote (:func:`beside_a_run`): a user's file is kept, and the run refused, for
    its shifts.json beside that file would make a later run take it for its own."""
    aligned = set(OUT_FORMATS.values())
    for path in map(Path, paths):
        if (path.exists() or path.is_symlink()) and not beside_a_run(path):
            what = "the aligned stack" if path.name in aligned else "an output"
            raise OutputError(f"{path} is not {what} of an earlier xcorr run (no shifts.json "
                              "of one beside it); it is kept and nothing was written: choose "
                              "another folder, or move it")


class RunOutputs:
    """The outputs folder of one alignment run, written together or not at all.

    Parameters
    ----------
    folder : str or Path
        The folder (made if missing; refused if it is a file or named like one).
    aligned, format, plots, force
        As :meth:`AlignResult.save <xcorr_app.alignment.AlignResult.save>`.
    quality, patches : bool
        Whether the run makes a quality report and a motion field (their files).
    inputs : sequence of paths
        What the run reads: no output may be one or lie inside one.
    name : str
        The argument that named ``folder``, as its errors say it (``xcorr align``: ``out``).
    in_place : path, optional
        The NWB input file that the aligned movie is written into (``format="nwb"``,
        ``--in-place``) instead of the folder: renamed onto it by the one commit of the outputs.

    On entering, the guards of :class:`~xcorr_app.io.OutputRun` (outputs apart from the
    inputs, existing ones kept without ``force``, one writer at a time); with ``force`` the
    outputs of an earlier run that this one does not write (:func:`stale_outputs`: the aligned
    stack with ``aligned=False`` or in another format, ``quality.png`` without quality, a
    motion field without patches...) are removed by the same commit (they would no longer
    match ``shifts.csv``), and a file of such a name that is not an earlier run's
    (:func:`beside_a_run`) is refused, ``force`` or not: it is someone's file, not a stale
    output.
    """

    def __init__(self, folder, *, aligned=True, format="tiff", plots=True, quality=True,
                 patches=False, force=False, inputs=(), name="folder", in_place=None):
        # (``name``: the argument that gave the folder, as the messages say it)
        if isinstance(folder, str) and not folder.strip():
            raise InputError(f"{name} is empty: name the folder for shifts.csv, shifts.json, "
                             "drift.png and aligned.tif")
        folder = Path(folder)
        if folder.suffix.lower() in (".csv", ".json", ".png", ".tif", ".tiff") \
                or folder.is_file():
            raise InputError(f"{name} is the folder align writes shifts.csv, shifts.json, "
                             f"drift.png and aligned.tif into, not a file: {folder}")
        self.folder, self.plots, self.force = folder, plots, force
        self.paths = {k: folder / v for k, v in output_names(
            aligned=aligned and in_place is None, format=format, plots=plots, quality=quality,
            patches=patches).items()}
        self.in_place = in_place is not None and aligned
        # (the aligned stack: in the folder, or the NWB input itself)
        # (a link's own file replaced, not the link)
        self.aligned_path = Path(in_place).resolve() if self.in_place \
            else self.paths.get(aligned_name(format))
        self.stale = []  # (found on entering: :func:`stale_outputs`)
        self.inputs = list(inputs)
        self.removed = []
        self.document = None  # (shifts.json's, once written)
        self._aligned = contextlib.ExitStack()
        self._by_run = False
        self._sink = None  # (the run's :meth:`aligned_sink`)
        self._run = None

    def __enter__(self):
        from ...io import OutputRun

        self.stale = stale_outputs(self.folder, self.paths.values(), self.inputs)
        check_stale(self.stale)
        self._run = OutputRun(self.paths.values(), self.inputs, self.force,
                              lock=self.folder / ".xcorr.lock", remove=self.stale,
                              replaced=[self.aligned_path] if self.in_place else ())
        self._run.__enter__()
        return self

    def __exit__(self, *exc):
        try:  # (the exception too: a writer that failed with the run checks nothing more)
            self._aligned.__exit__(*exc)
        finally:
            self._run.__exit__(*exc)

    @property
    def late_signal(self):
        """A stop signal that came while the outputs were renamed (they are kept)."""
        return self._run.late_signal

    def aligned_sink(self, out_shape, n, aligned=None):
        """An :class:`AlignedSink` the run fills as it goes (``align(out=)``): the aligned
        stack is then written by the run, not by :meth:`write`."""
        self._by_run = True
        self._sink = self._aligned.enter_context(
            aligned_file(out_shape, n, self.aligned_path, aligned))
        return self._sink

    def write(self, res, *, frames=None, resample="bilinear", crop=False, fill=0.0,
              aligned=None, progress=None):
        """Write every output of ``res`` and commit them; returns ``{name: path}``.

        ``frames``: ``(parts, frame_shape, channels)``, the aligned stack's chunks
        (:func:`~xcorr_app.alignment._apply.aligned_channels`, or a Dask cluster's blocks)
        where the run did not write it (:meth:`aligned_sink`); ``resample``, ``crop``,
        ``fill``: how they were made (recorded in ``shifts.json``); ``aligned``:
        :func:`aligned_as`; ``progress(k)`` as frames are written."""
        from ._motion_field import plot_motion_field, write_motion_field
        from ._plots import plot_drift, plot_quality
        from ...io import write_text

        paths, name = self.paths, _title_name(res.source)
        if self.aligned_path is not None and not self._by_run and frames is None:
            raise ValueError("RunOutputs.write: the aligned stack's frames are needed")
        write_text(paths["shifts.csv"], res.csv_text())
        stack, dataset = self.aligned_path, (aligned or {}).get("dataset")
        self.document = doc = result_document(
            res, resample=resample, crop=crop, fill=fill,
            aligned=stack and (str(stack) if self.in_place else stack.name) +
            (f":{dataset}" if dataset else ""))
        write_text(paths["shifts.json"], json_text(doc, "frames"))
        if self.plots:
            plot_drift(paths["drift.png"], res,
                       title=f"{name}: reference {res.settings['reference']}")
        if res.quality is not None and "quality.png" in paths:
            q = res.quality
            plot_quality(paths["quality.png"], q.before, q.after, q.residual, q.flagged,
                         (q.sharpness_before, q.sharpness_after),
                         title=f"{name}: quality of the alignment",
                         patch_after=q.patch_after, patch_flagged=q.patch_flagged)
        if "motion_field.npz" in paths:
            write_motion_field(paths["motion_field.npz"], res)
        if "motion_field.png" in paths:
            plot_motion_field(paths["motion_field.png"], res, title=f"{name}: motion field")
        # the aligned stack last (an NWB input written in place: renamed onto by the commit)
        record = nwb_record(res, doc) if out_format(stack or "") == "nwb" else None
        if stack is not None and not self._by_run:
            parts, shape, channels = frames
            write_chunks(parts, shape, res.n_frames, stack, aligned, channels, progress,
                         record)
        elif record is not None and self._sink is not None:
            self._sink.writer.record(*record)
        self._aligned.close()  # (the aligned stack's last chunks written, its writer finished)
        self.removed = [p for p in self.stale if p.exists() or p.is_symlink()]
        self._run.commit()
        return {**paths, **({stack.name: stack} if self.in_place else {})}


def nwb_record(res, doc) -> tuple:
    """The arguments of an NWB writer's ``record``: ``res``'s shifts, the corrected series'
    description (xcorr's version, the input) and comments (shifts.json's ``settings``,
    ``doc``'s, as JSON text)."""
    from ..._version import __version__

    return (np.asarray(res.shifts, np.float64).reshape(-1, 2),
            f"{__version__} from {doc['input']} (shifts.json's settings in comments)",
            json.dumps(doc["settings"]))


def channel_metadata(aligned, channels, measured=None):
    """``aligned`` (:func:`aligned_as`) with the channel names of ``channels`` alone (a
    hyperstack of those channels), or without ``channels`` of the ``measured`` channel alone
    (the one written; None: the input has no channels)."""
    if channels is None and measured is not None:
        channels = [measured]
    if channels is None or not aligned or "metadata" not in aligned:
        return aligned
    names = aligned["metadata"].get("channel_names") or []
    return dict(aligned, metadata={**aligned["metadata"], "channel_names":
                                   [names[c] for c in channels] if len(names) > max(channels)
                                   else []})


def _check_fill_fits(fill, dtype) -> None:
    """InputError where the kept integer pixel type ``dtype`` cannot hold ``fill`` (NaN, an
    infinity, a number past its range: rounding made them 0 or its largest value, a real
    pixel value, without a word)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        return
    info = np.iinfo(dtype)
    if not info.min <= fill <= info.max:  # (NaN compares False)
        raise InputError(f"fill {fill} cannot be stored in {dtype} pixels (keep_dtype=True): "
                         f"give a fill from {info.min} to {info.max}, or leave keep_dtype out "
                         "(float32 pixels)")


def aligned_of(source, channel, keep_dtype, format=None, dataset=None, force=False,
               fill=0.0) -> dict:
    """:func:`aligned_as` of a run's input ``source`` (a path: opened again for its pixel type
    and metadata; an array: its pixel type)."""
    if hasattr(source, "dtype"):
        from types import SimpleNamespace

        return aligned_as(SimpleNamespace(dtype=np.dtype(source.dtype)), source, keep_dtype,
                          format, dataset, force, fill)
    from ...io import open_stack

    with open_stack(source, channel=channel) as src:
        return aligned_as(src, source, keep_dtype, format, dataset, force, fill)


def channels_of(source, channel) -> int:
    """How many channels the run's input ``source`` has (1 for a stack of frames)."""
    from ...io import open_source

    with open_source(source, channel) as src:
        return int(getattr(src, "n_channels", 1))
