"""The dock widget's 3-D run, without Qt: a layer with T and Z axes registered as whole volumes
(:func:`xcorr_app.alignment.align_volumes`: one rigid (dz, dy, dx) a time point), then every
channel of it (and of the layers it is applied to) moved by those shifts
(:func:`xcorr_app.alignment.volume.shift_volumes`, a volume at a time).

The volumes are measured :data:`VOLUMES_PER_STEP` at a time, each step against the same
reference volume (put first in the step), so that the progress bar moves and the cancel
button is checked between steps; each volume's shift is measured against the reference alone,
so the steps give the shifts one call over the whole stack gives.

Examples
--------
>>> import numpy as np
>>> vol = np.random.default_rng(0).random((6, 16, 16)).astype(np.float32)
>>> data = np.stack([vol, np.roll(vol, (1, -2, 3), axis=(0, 1, 2))])
>>> done = run_volumes(Job(data=data, axes="TZYX", plane=VOLUMES,
...                        options={"device": "cpu"}))
>>> np.round(done.result.shifts[1]).tolist(), done.aligned["aligned"].shape
([-1.0, 2.0, -3.0], (2, 6, 16, 16))
"""

from __future__ import annotations

import json
import threading

import numpy as np

from ..alignment import VolumeOptions, VolumeResult, align_volumes
from ..alignment.volume import decide_boundary, shift_volumes
from ..errors import InputError
from ..io import strict_json
from ._layers import VOLUMES, as_dask, check_axes
from ._run import Job, Output, Watch, check_targets, warp_layers

__all__ = ["VOLUME_KEYS", "VOLUMES_PER_STEP", "can_register_volumes",
           "check_volume_targets", "fill_volumes", "measure_volumes", "run_volumes",
           "volume_options", "volume_table_text", "volumes_in", "volumes_of",
           "warp_volume_layers"]

#: volumes measured per step (the cancel button is checked, the progress bar moved, between)
VOLUMES_PER_STEP = 8
#: the form's options a run of volumes uses (one set to anything else is refused, not dropped)
VOLUME_KEYS = ("reference", "max_shift", "device", "boundary")


def volume_options(options: dict) -> VolumeOptions:
    """The :class:`~xcorr_app.alignment.VolumeOptions` of the form's keywords
    (:func:`~._form.form_options`): ``reference`` (first, mean or a volume's index),
    ``max_shift`` (voxels, on each of z, y, x), ``device`` and ``boundary``; InputError for
    an option a run of volumes does not take (``refined``, patches, a window...), as
    ``xcorr align --volumes`` refuses it.

    >>> volume_options({"reference": "mean", "max_shift": 3, "device": "cpu"}).max_shift
    (3, 3, 3)
    """
    if isinstance(options, VolumeOptions):
        return options
    unused = sorted(k for k in options if k not in VOLUME_KEYS)
    if unused:
        raise InputError(f"{', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not "
                         "apply to 3-D volumes: set the form back to its default, or measure "
                         "a plane")
    if options.get("reference") == "refined":
        raise InputError("reference 'refined' does not apply to 3-D volumes: use first, mean "
                         "or frame")
    return VolumeOptions(reference=options.get("reference", "first"),
                         max_shift=options.get("max_shift"),
                         device=options.get("device", "auto"),
                         boundary=options.get("boundary", "auto"))


def can_register_volumes(shape, axes: str) -> bool:
    """True for a layer of ``shape`` and ``axes`` whose volumes can be registered in 3-D: a T
    and a Z axis of 2 or more each, no colours (S)."""
    axes = axes.upper()
    return ("Z" in axes and "T" in axes and "S" not in axes and len(axes) == len(shape)
            and shape[axes.index("Z")] >= 2 and shape[axes.index("T")] >= 2)


def check_volume_targets(targets: dict) -> None:
    """InputError unless every target ``(data, axes)`` has volumes to move (a Z axis, no
    colours)."""
    for name, (data, ax) in targets.items():
        ax = ax.upper()
        if "Z" not in ax or "S" in ax:
            raise InputError(f"{name} ({ax}): 3-D shifts move layers with a Z axis and no "
                             "colours")


def volumes_of(data, axes: str, channel=None):
    """The ``(T, Z, Y, X)`` volumes of ``channel`` of a layer's ``data`` (a view, or dask for
    Zarr and Dask data); ``channel`` is required where ``axes`` has C."""
    axes = check_axes(axes, data.shape)
    if type(data).__module__.startswith("zarr"):  # (indexing a Zarr array reads it)
        data = as_dask(data)
    if "C" in axes:
        n = data.shape[axes.index("C")]
        if channel is None or not 0 <= int(channel) < n:
            raise InputError(f"channel {channel}: the layer has {n} channels")
        data = data[tuple(int(channel) if a == "C" else slice(None) for a in axes)]
        axes = axes.replace("C", "")
    return np.moveaxis(data, [axes.index("T"), axes.index("Z")], [0, 1])


def _reference(volumes, options, watch):
    """``(volume, its description)``: the first, the mean (summed a step at a time) or
    that of an index (``options.reference``)."""
    t = volumes.shape[0]
    if options.from_first:
        return np.asarray(volumes[0]), "the first volume"
    if options.from_mean:
        total = 0.0
        for a in range(0, t, VOLUMES_PER_STEP):
            watch(0)
            total = total + np.asarray(volumes[a:a + VOLUMES_PER_STEP]).sum(0, dtype=np.float64)
        return total / t, f"the mean of the {t} volumes"
    i = options.reference_index(t)
    return np.asarray(volumes[i]), f"volume {i}"


def measure_volumes(volumes, options: VolumeOptions, watch) -> VolumeResult:
    """The :class:`~xcorr_app.alignment.volume.VolumeResult` of ``volumes`` (T, Z, Y, X),
    measured :data:`VOLUMES_PER_STEP` at a time (``watch`` called between)."""
    t = volumes.shape[0]
    ref, described = _reference(volumes, options, watch)
    import dask.array as da

    first = options._decided(reference=0)  # (each step: the reference, then its volumes)
    dtype = np.result_type(ref, volumes.dtype)
    head = ref[None].astype(dtype)  # (every step's first volume)
    # boundary "auto" decided once, as one call over the stack decides it (every step then
    # measures that way; the reference against itself does not vote)
    with_ref = da.concatenate([da.from_array(head), as_dask(volumes).astype(dtype)])
    first = decide_boundary(with_ref, first, between=lambda: watch(0))
    parts = []
    for a in range(0, t, VOLUMES_PER_STEP):
        watch(0)
        chunk = np.asarray(volumes[a:a + VOLUMES_PER_STEP])
        parts.append(align_volumes(np.concatenate([head, chunk]), options=first))
        watch(len(chunk))
    got = {k: np.concatenate([getattr(p, k)[1:] for p in parts])
           for k in ("shifts", "peak", "confidence", "at_bound", "verified")}
    own = options.own_volume(t)
    if own is not None and np.isfinite(got["shifts"][own]).all():  # (as one call makes it)
        got["shifts"][own] = 0.0
    constant = np.isnan(got["shifts"]).any(axis=1)
    notes = [f"reference: {described}", f"device: {parts[0].device}, "
             f"{min(t, VOLUMES_PER_STEP)} volume(s) a step", parts[0].notes[2]]
    for count, what in ((got["at_bound"].sum(), "peak on the max_shift border: the true shift "
                         "may lie beyond it"),
                        (constant.sum(), "constant: shift undefined (NaN), confidence 0"),
                        ((~got["verified"] & ~constant).sum(), "whose FFT peak the direct sum "
                         "does not confirm")):
        if count:
            notes.append(f"{int(count)} volume(s) {what}")
    return VolumeResult(**got, voxel_size=options.voxel_size, notes=notes,
                        device=parts[0].device, boundary=parts[0].boundary)


def fill_volumes(result, data, axes, out, watch, device):
    """``out`` (the layer's shape) filled with every channel's volumes of ``data`` moved by
    ``result``'s shifts (a constant volume's NaN: left unshifted), a volume at a time."""
    shifts = np.nan_to_num(np.asarray(result.shifts, np.float64), nan=0.0)
    channels = range(data.shape[axes.index("C")]) if "C" in axes else [None]
    for c in channels:
        into = volumes_of(out, axes, c)
        for t, vol in enumerate(shift_volumes(volumes_of(data, axes, c), shifts,
                                              device=device)):
            watch(0)
            into[t] = vol
            watch(1)


def volumes_in(targets) -> int:
    """The volumes of the targets ``(data, axes)``, every channel counted."""
    return sum(d.shape[a.index("T")] * (d.shape[a.index("C")] if "C" in a else 1)
               for d, a in targets.values())


def warp_volume_layers(result, targets: dict, out_path=None, watch=None, main=None) -> dict:
    """name -> the aligned array of every target ``(data, axes)`` (each with a Z axis), every
    channel moved by ``result``'s (dz, dy, dx) (:func:`~._run.warp_layers`: in memory, or
    written to ``out_path`` and beside it)."""
    check_volume_targets(targets)
    watch = watch or Watch(volumes_in(targets))
    return warp_layers(result, targets, out_path, watch, main=main, fill=fill_volumes,
                       device=result.device)


def run_volumes(job: Job, report=None, cancel: threading.Event | None = None) -> Output:
    """Register ``job``'s layer as volumes (its ``channel``), then move every channel of it
    and of ``job.apply_to`` by the shifts; :func:`~._run.run_job`'s arguments and return,
    ``Output.result`` a :class:`~xcorr_app.alignment.volume.VolumeResult`.

    Parameters
    ----------
    job : Job
        ``options``: the form's keywords (:func:`volume_options`) or a VolumeOptions.
    report : callable(done, total), optional
        Called with the volumes measured and moved so far.
    cancel : threading.Event, optional
        Once set, the run stops at its next step with :class:`~._layers.Cancelled`.

    Returns
    -------
    Output
    """
    axes = check_axes(job.axes, job.data.shape)
    if not can_register_volumes(job.data.shape, axes):
        raise InputError(f"a layer of axes {axes} and shape {tuple(job.data.shape)} has no "
                         "volumes to register: it needs 2 or more time points (T) and planes "
                         "(Z), and no colours")
    options = volume_options(job.options)
    n = job.data.shape[axes.index("T")]
    targets = check_targets({job.name: (job.data, axes), **job.apply_to}, n, job.out_path)
    check_volume_targets(targets)
    watch = Watch(n + volumes_in(targets), report, cancel)
    volumes = volumes_of(job.data, axes, job.channel if "C" in axes else None)
    result = measure_volumes(volumes, options, watch)
    return Output(result, warp_volume_layers(result, targets, job.out_path, watch, job.name))


def volume_table_text(result, fmt: str) -> str:
    """The table of a 3-D run as ``csv`` (``xcorr align --volumes``'s shifts.csv) or ``json``
    (its notes and one record per time point; NaN: null)."""
    if fmt == "csv":
        return result.to_csv()
    doc = strict_json({"device": result.device, "notes": result.notes,
                       "volumes": result.rows()})
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"

