"""One run of the dock widget, without Qt: measure a layer's stack, then warp it (and other
layers) into new arrays; cancellable between any two chunks.

:func:`run_job` is what the widget's worker thread calls; tests call it directly too.  The
aligned arrays are in memory, or written to a file (``.tif`` or ``.npy``) and opened again
memory-mapped (napari then reads only the frames it shows); the file appears only when the
run succeeds (:func:`xcorr_app.io.atomic_path`).

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> base = ndi.gaussian_filter(np.random.default_rng(0).random((40, 48)), 2)
>>> data = np.stack([base, np.roll(base, (1, -2), axis=(0, 1))]).astype(np.float32)
>>> job = Job(data=data, axes="TYX", options={"max_shift": 4, "device": "cpu"})
>>> done = run_job(job)
>>> np.round(done.result.shifts).tolist(), done.aligned["aligned"].shape
([[0.0, 0.0], [-1.0, 2.0]], (2, 40, 48))
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from pathlib import Path

import numpy as np

from ..alignment import align, apply_field, apply_shifts
from ..alignment.warp import rigid_body_field
from ..errors import InputError
from ..io import SUPPORTED_DTYPES, atomic_path
from ._layers import (LUMINANCE, MAX_PROJECTION, Cancelled, check_axes, frames_in, is_lazy,
                      measure_stack, planes)

#: frames read, warped and written per step of the warp (the cancel button is checked between)
APPLY_FRAMES = 64
#: file types the aligned stack can be written to (opened again memory-mapped)
OUT_SUFFIXES = (".tif", ".tiff", ".npy")


@dataclasses.dataclass
class Job:
    """What one run does.

    Attributes
    ----------
    data : array
        The selected layer's data (NumPy, Dask or Zarr), of axes ``axes``.
    axes : str
        One letter per dimension from T, C, Z, ending in YX, or YXS for an RGB(A) layer
        (:func:`~._layers.check_axes`).
    channel, plane : int
        The channel (C axis) and the plane (Z axis; ``"max"``: their maximum) measured.
    colour : int or str
        The colour of an RGB(A) layer measured (S axis: an index, ``"red"``...; or
        ``"luminance"``); every colour is aligned.
    options : dict
        Keywords of :func:`xcorr_app.align` (:class:`~xcorr_app.alignment.AlignOptions`).
    apply_to : dict
        name -> ``(data, axes)`` of other layers warped by the same shifts (the same number of
        frames).
    out_path : path, optional
        Write the aligned layer here (``.tif``, ``.tiff`` or ``.npy``), opened again lazily;
        required for a Dask or Zarr layer (streamed, never loaded whole).
    name : str
        The key of the selected layer's aligned array in :attr:`Output.aligned`.
    """

    data: object
    axes: str
    channel: int = 0
    plane: object = MAX_PROJECTION
    colour: object = LUMINANCE
    options: dict = dataclasses.field(default_factory=dict)
    apply_to: dict = dataclasses.field(default_factory=dict)
    out_path: object = None
    name: str = "aligned"


@dataclasses.dataclass
class Output:
    """A finished run: the :class:`~xcorr_app.alignment.AlignResult` and name -> aligned array
    (float32, the shape of its layer; a read-only memory map where written to a file)."""

    result: object
    aligned: dict


class Watch:
    """The progress callback of a run: counts frames towards ``total`` for ``report(done,
    total)`` and raises :class:`~._layers.Cancelled` once ``cancel`` is set."""

    def __init__(self, total, report=None, cancel=None):
        self.total, self.done = int(total), 0
        self.report, self.cancel = report, cancel

    def __call__(self, frames: int = 0) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("cancelled")
        self.done = min(self.total, self.done + int(frames))
        if self.report is not None:
            self.report(self.done, self.total)


def _measure(job, stack, watch, out=None):
    options = dict(job.options)
    if not is_lazy(stack):
        return align(np.asarray(stack), progress=watch, out=out, **options)
    from dask.callbacks import Callback

    from ..dask import align as dask_align

    caller = threading.get_ident()

    def posttask(key, result, dsk, state, worker_id):
        # the local schedulers call it on the computing thread; napari's own slicing elsewhere
        if threading.get_ident() == caller:
            watch(0)

    with Callback(posttask=posttask):
        result = dask_align(stack, scheduler="threads", **options)
    watch(len(result.shifts))
    return result


def _warp(result, frames, start, device):
    """The frames ``start...`` of a plane aligned as :meth:`AlignResult.apply` aligns them: by
    the result's motion field, its rotations and shifts (rigid-body), or its shifts after the
    line offset the run removed (bidi)."""
    frames = np.asarray(frames)
    if frames.dtype not in SUPPORTED_DTYPES:
        frames = frames.astype(np.float32)
    stop = start + len(frames)
    if result.motion_field is not None:
        chunks = apply_field(frames, result.motion_field[start:stop], result.patch_centres,
                             chunk_frames=len(frames), device=device)
    elif result.rotation_deg is not None:
        if tuple(frames.shape[1:]) != tuple(result.frame_shape):  # (as AlignResult.apply)
            raise InputError(f"a rigid-body run rotates frames of {result.frame_shape[0]}x"
                             f"{result.frame_shape[1]} about their centre; these frames are "
                             f"{frames.shape[1]}x{frames.shape[2]}")
        field, centres = rigid_body_field(result.shifts[start:stop],
                                          result.rotation_deg[start:stop], result.frame_shape)
        chunks = apply_field(frames, field, centres, chunk_frames=len(frames), device=device)
    else:
        chunks = apply_shifts(frames, result.shifts[start:stop], chunk_frames=len(frames),
                              device=device, bidi=result.settings.get("bidi") or 0.0)
    return np.concatenate([c for _, c in chunks]) if len(frames) else frames


def _new_array(shape, path, rgb=False):
    """A float32 array to fill: in memory, or a file's memory map (``.npy`` or TIFF: pages of
    one grey frame, or of one RGB(A) frame with ``rgb``)."""
    if path is None:
        return np.empty(shape, np.float32)
    if Path(path).suffix.lower() == ".npy":
        return np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    import tifffile

    big = np.prod(shape, dtype=np.int64) * 4 > 2**32 - 2**25  # classic TIFF ends at 4 GiB
    # (tifffile would take a stack of 3 or 4 frames for the colours of one picture)
    return tifffile.memmap(path, shape=shape, dtype=np.float32, bigtiff=bool(big),
                           photometric="rgb" if rgb else "minisblack")


def open_aligned(path):
    """The aligned stack written by a run, memory-mapped read-only (napari reads what it
    shows)."""
    if Path(path).suffix.lower() == ".npy":
        return np.load(path, mmap_mode="r")
    import tifffile

    return tifffile.memmap(path, mode="r")


def check_out_path(path):
    """``path`` as a Path, or ValueError for a type the aligned stack cannot be written as."""
    path = Path(path)
    if path.suffix.lower() not in OUT_SUFFIXES:
        raise ValueError(f"the aligned stack is written as {', '.join(OUT_SUFFIXES)}; "
                         f"{path.name} is none of them")
    return path


def _fill(result, data, axes, out, watch, device):
    for index, stack in planes(data, axes):
        view = out[index]
        for a in range(0, stack.shape[0], APPLY_FRAMES):
            watch(0)
            view[a:a + APPLY_FRAMES] = _warp(result, stack[a:a + APPLY_FRAMES], a, device)
            watch(min(APPLY_FRAMES, stack.shape[0] - a))


def check_targets(targets: dict, n: int, out_path) -> dict:
    """name -> ``(data, axes)`` checked: the axes fit, every stack has ``n`` frames, and lazy
    data has a file to go to (ValueError otherwise)."""
    checked = {}
    for name, (data, ax) in targets.items():
        ax = check_axes(ax, data.shape)
        if data.shape[ax.index("T")] != n:
            raise ValueError(f"{name} has {data.shape[ax.index('T')]} frames and the shifts "
                             f"{n}: they apply to stacks of as many frames")
        checked[name] = (data, ax)
    if out_path is None and any(is_lazy(d) for d, _ in checked.values()):
        raise ValueError("a Dask or Zarr layer is aligned into a file: choose one for the "
                         "aligned stack (.tif or .npy)")
    if out_path is not None:
        check_out_path(out_path)
    return checked


def frames_of(targets) -> int:
    """The frames of the targets ``(data, axes)``, every channel and plane counted."""
    return sum(frames_in(d.shape, ax) for d, ax in targets.values())


def warp_layers(result, targets: dict, out_path=None, watch=None, main=None, fill=None,
                device=None) -> dict:
    """name -> the aligned array of every target ``(data, axes)``: warped by ``result``'s
    shifts (its motion field with patches), every channel and plane, :data:`APPLY_FRAMES` at a
    time; with ``out_path`` written to it (``main``'s array) and beside it (the others:
    ``<stem>_<name><suffix>``), all the files appearing together once all are done.  ``fill``
    (``fill(result, data, axes, out, watch, device)``) fills each target's array instead (3-D
    shifts: :func:`~._volumes.fill_volumes`); ``device``: the run's, by default."""
    watch = watch or Watch(frames_of(targets))
    device = device or result.settings.get("device", "auto")
    fill = fill or _fill
    paths = {}
    with contextlib.ExitStack() as files:  # every file appears together, only on success
        for name, (data, ax) in targets.items():
            tmp = None
            if out_path is not None:
                base = Path(out_path)
                paths[name] = base if name == main else \
                    base.with_name(f"{base.stem}_{name}{base.suffix}")
                tmp = files.enter_context(atomic_path(paths[name]))
            out = _new_array(data.shape, tmp, rgb=ax.endswith("S"))
            fill(result, data, ax, out, watch, device)
            if tmp is None:
                paths[name] = out
            else:
                out.flush()
                del out  # (closes the map before the rename)
    return {k: v if isinstance(v, np.ndarray) else open_aligned(v) for k, v in paths.items()}


def run_job(job: Job, report=None, cancel: threading.Event | None = None) -> Output:
    """Measure ``job``'s stack, then warp its layer and ``job.apply_to``
    (:func:`warp_layers`); a ``TYX`` layer in memory is warped by the run itself
    (:func:`xcorr_app.align`'s ``out``: each chunk while it is on the device).

    Parameters
    ----------
    job : Job
    report : callable(done, total), optional
        Called with the frames measured and warped so far (on the calling thread).
    cancel : threading.Event, optional
        Once set, the run stops at its next chunk with :class:`~._layers.Cancelled`; nothing
        is returned and no file is left behind.

    Returns
    -------
    Output
    """
    axes = check_axes(job.axes, job.data.shape)
    n = job.data.shape[axes.index("T")]
    targets = check_targets({job.name: (job.data, axes), **job.apply_to}, n, job.out_path)
    out = None
    if axes == "TYX" and job.out_path is None and not is_lazy(job.data) \
            and job.options.get("gpus") is None:  # the run warps the stack while it has it
        out = np.empty(job.data.shape, np.float32)
        del targets[job.name]
    watch = Watch(n + frames_of(targets), report, cancel)
    stack = measure_stack(job.data, axes, job.channel, job.plane, job.colour)
    result = _measure(job, stack, watch, out)
    aligned = warp_layers(result, targets, job.out_path, watch, main=job.name)
    return Output(result, aligned if out is None else {job.name: out, **aligned})


@dataclasses.dataclass
class SavedShifts:
    """Shifts read back from a table (:func:`load_shifts`): what :func:`warp_layers` needs of
    an :class:`~xcorr_app.alignment.AlignResult`, once :meth:`fit` to a layer."""

    shifts: np.ndarray
    settings: dict = dataclasses.field(default_factory=dict)
    motion_field: object = None
    patch_centres: object = None
    saved: object = None  # (:func:`~xcorr_app.alignment.outputs.load_saved`'s)
    path: object = None
    rotation_deg = None  # (a rigid-body run's: made its motion_field by fit)

    def fit(self, n_frames, frame_shape, layer) -> None:
        """Refuse (InputError) shifts that do not fit a layer of ``n_frames`` frames of
        ``frame_shape`` as ``xcorr apply`` refuses them (:func:`~xcorr_app.alignment.outputs.
        check_fits`: the frame count and numbers, the frame size the run recorded, shifts
        infinite or moving a frame wholly out)."""
        from types import SimpleNamespace

        from ..alignment.outputs import check_fits

        check_fits(self.saved, Path(self.path).name,
                   SimpleNamespace(n_frames=n_frames, frame_shape=tuple(frame_shape)), layer)
        self.shifts, self.motion_field = self.saved.shifts, self.saved.field
        self.patch_centres = self.saved.centres


def load_shifts(path) -> SavedShifts:
    """The ``(dy, dx)`` of every frame of a ``shifts.csv`` or ``shifts.json`` (``xcorr
    align``'s, or the widget's :func:`table_text`), or a ``--patches`` run's
    ``motion_field.npz``, matched to frames by their ``frame`` numbers
    (:func:`xcorr_app.alignment.outputs.load_saved`); blank or null: NaN (left unshifted).
    InputError (a ValueError) for a file that is not one."""
    from ..alignment.outputs import load_saved

    saved = load_saved(path)
    return SavedShifts(saved.shifts, {"bidi": saved.bidi}, motion_field=saved.field,
                       patch_centres=saved.centres, saved=saved, path=path)


def table_text(result, fmt: str) -> str:
    """The shift table of a run as ``csv`` (``shifts.csv``) or ``json`` (the summary and one
    record per frame, standard JSON: ``shifts.json``'s keys)."""
    if fmt == "csv":
        return result.csv_text()
    from ..alignment.outputs import result_document
    from ..io import json_text

    return json_text(result_document(result), "frames")
