"""``xcorr align --volumes``: rigid (or with ``--patches GZxGYxGX`` piecewise-rigid) 3-D
registration of a (T, Z, Y, X) stack (:func:`~xcorr_app.alignment.align_volumes`), writing
shifts.csv (with dz), shifts.json (with the motion field), drift.png and aligned.tif;
and the ``--max-shift`` and ``--patches`` types that take a third (z) value for it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ..errors import InputError
from ._flags import as_flags, note_later, say_later
from ._options import MaxShiftType, PatchesType, default_out, note_device

__all__ = ["GRID_TEXT", "MAX_SHIFT_ZYX", "PATCHES_ZYX", "VOLUME_OPTIONS", "VOLUME_USES",
           "align_volumes_cli", "check_volume_options", "given_options", "grid_parts",
           "ignored_by_volumes", "parse_voxel_size_text", "unused_by_volumes"]

OUTPUTS = ("shifts.csv", "shifts.json", "drift.png", "aligned.tif")


class MaxShiftZYXType(MaxShiftType):
    """``N``, ``SY,SX`` or (for ``--volumes``) ``SZ,SY,SX`` -> int or tuple.

    >>> MAX_SHIFT_ZYX.convert("2,8,8", None, None), MAX_SHIFT_ZYX.convert("3", None, None)
    ((2, 8, 8), 3)
    """

    def get_metavar(self, param, ctx=None):
        return "N|SY,SX|SZ,SY,SX"

    def convert(self, value, param, ctx):
        parts = str(value).split(",") if isinstance(value, str) else []
        if len(parts) == 3:
            try:
                values = tuple(int(v) for v in parts)
            except ValueError:
                values = (-1,)
            if min(values) < 0:
                raise InputError(f"--max-shift takes N or SY,SX (SZ,SY,SX with --volumes; "
                                 f"non-negative integers), got {value!r}")
            return values
        return super().convert(value, param, ctx)


MAX_SHIFT_ZYX = MaxShiftZYXType()


class PatchesZYXType(PatchesType):
    """``GYxGX`` (or ``N``) -> ``(gy, gx)``, or (for ``--volumes``) ``GZxGYxGX`` ->
    ``(gz, gy, gx)``: ``xcorr bench``'s (its runs are built of the grid).

    >>> PATCHES_ZYX.convert("1x4x4", None, None), PATCHES_ZYX.convert("3", None, None)
    ((1, 4, 4), (3, 3))
    """

    def get_metavar(self, param, ctx=None):
        return "GYxGX|GZxGYxGX"

    def convert(self, value, param, ctx):
        from ..alignment.piecewise import parse_patches

        if isinstance(value, str) and len(grid_parts(value)) == 3:
            return parse_patches(value, ndim=3)
        return super().convert(value, param, ctx)


PATCHES_ZYX = PatchesZYXType()


class GridText(click.ParamType):
    """``xcorr align --patches`` as given (``GYxGX``, ``N``; ``GZxGYxGX`` with ``--volumes``):
    the run's options parse it, once (:class:`~xcorr_app.alignment.AlignOptions`,
    :class:`~xcorr_app.alignment.VolumeOptions`)."""

    name = "patches"

    def get_metavar(self, param, ctx=None):
        return "GYxGX|GZxGYxGX"

    def convert(self, value, param, ctx):
        return value if value is None else str(value).strip()


GRID_TEXT = GridText()


def grid_parts(text) -> list:
    """The counts of a ``--patches`` text (``"2x4x4"`` -> three), not checked."""
    return str(text).lower().replace(",", "x").split("x")

#: the options ``xcorr align`` adds for volumes
VOLUME_OPTIONS = (
    click.option("--volumes", is_flag=True,
                 help="PATH is a (T, Z, Y, X) stack (.tif hyperstack, .npy, Zarr, HDF5, NWB; "
                      "--axes names its T and Z; of a TCZYX or TZCYX file --channel K is "
                      "measured, --apply-to writes more channels): register "
                      "whole volumes in 3-D; writes shifts.csv (t, dz, dy, dx, ...) and "
                      "shifts.json (docs/volumes.md)."),
    click.option("--voxel-size", default=None, metavar="Z,Y,X",
                 help="With --volumes: voxel size in micrometres; adds the dz_um, dy_um, "
                      "dx_um columns (the search bounds stay in voxels)."),
)


def parse_voxel_size_text(text):
    """``Z,Y,X`` (positive numbers) -> a tuple of three floats; None for None.

    >>> parse_voxel_size_text("2,0.5,0.5")
    (2.0, 0.5, 0.5)
    """
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or not all(v > 0 and v != float("inf") for v in values):
        raise InputError(f"--voxel-size takes Z,Y,X (three positive sizes), got {text!r}")
    return values


def write_aligned(path, source, shifts, fill, device, channel=None, channels=None,
                  field=None):
    """aligned.tif: the volumes (of ``channel``) moved by their shifts (trilinear; ``field``, a
    piecewise-rigid :class:`~xcorr_app.alignment.VolumeResult`: warped by its motion field),
    streamed one volume at a time into an ImageJ hyperstack (T, Z, Y, X) float32, written
    atomically;
    with ``channels`` (``--apply-to``) those channels, each moved by the same shifts, into one
    (T, Z, C, Y, X) hyperstack; with the input's pixel size, frame interval and the names of
    the channels written, as 2-D align's aligned.tif."""
    import numpy as np
    import tifffile

    from ..alignment.outputs import channel_metadata
    from ..alignment.volume import open_volumes, shift_volumes, warp_volumes
    from ..io import atomic_path, imagej_calibration, split_source

    shape = open_volumes(source, channel=channel).shape
    # a constant volume (shift NaN) left unshifted, as 2-D align leaves a constant frame
    shifts = np.nan_to_num(np.asarray(shifts, np.float64), nan=0.0)
    if field is not None and field.motion_field is not None:
        def move(c):  # (warp_volumes leaves a volume of NaN field as it is)
            return warp_volumes(source, field.motion_field, field.patch_centres, fill=fill,
                                device=device, channel=c)
    else:
        def move(c):
            return shift_volumes(source, shifts, fill=fill, device=device, channel=c)
    if channels is None:
        pages = (page for vol in move(channel) for page in vol)  # tifffile: a page at a time
        shape, axes = tuple(shape), "TZYX"
    else:  # (a volume of each channel at a time: ImageJ's pages run C fastest, then Z)
        moved = [move(c) for c in channels]
        depth, n = shape[1], len(channels)
        pages = (vols[c][z] for vols in zip(*moved) for z in range(depth) for c in range(n))
        shape, axes = (shape[0], depth, n, *shape[2:]), "TZCYX"
    written = channels if channels is not None else None if channel is None else [channel]
    meta = {} if split_source(source)[0].suffix.lower() == ".npy" else \
        channel_metadata(_aligned_of_volumes(source, channel), written)["metadata"]
    said = imagej_calibration(meta, int(np.prod(shape[:-2])), len(written or [0]))
    if meta.get("z_step") and "unit" in said.get("metadata", {}):  # (Fiji's voxel depth)
        said["metadata"]["spacing"] = float(meta["z_step"])
    with atomic_path(Path(path)) as tmp:
        with tifffile.TiffWriter(tmp, imagej=True, bigtiff=False) as tw:
            tw.write(pages, shape=shape, dtype=np.float32, resolution=said.get("resolution"),
                     metadata={**said.get("metadata", {}), "axes": axes})


def _aligned_of_volumes(source, channel):
    """:func:`~xcorr_app.alignment.outputs.aligned_of` of a volumes' file: one whose 4-D
    array names no axes is read as the volumes' reader reads it, TZYX."""
    from ..alignment.outputs import aligned_of
    from ..io import AxesUnknown, with_axes

    try:
        return aligned_of(source, channel, False)
    except AxesUnknown:
        return aligned_of(with_axes(source, "TZYX"), channel, False)


def plot_drift3d(path, result, title=""):
    """drift.png of ``align --volumes``: dz, dy, dx (voxels) and the confidence against time
    point; volumes whose peak lies on the --max-shift border marked red."""
    from ._zlocate import plot_series

    s = result.shifts
    plot_series(path, [("shift (voxels)", {"dz": s[:, 0], "dy": s[:, 1], "dx": s[:, 2]}, None),
                       ("confidence", {"confidence": result.confidence}, (0.0, 1.0))],
                len(s), title, marked=result.at_bound, xlabel="time point")


def check_volume_options(options):
    """InputError where a volumes-only option (``--max-shift SZ,SY,SX``, ``--patches
    GZxGYxGX``, ``--voxel-size``) is given without ``--volumes`` (before the input is
    opened)."""
    if options.get("volumes"):
        return
    grid = options.get("patches")
    if grid is not None and len(grid_parts(grid)) == 3:
        raise InputError(f"--patches takes GYxGX (GZxGYxGX with --volumes), got {grid!r}")
    bound = options.get("max_shift")
    if isinstance(bound, tuple) and len(bound) == 3:
        raise InputError(f"--max-shift takes N or SY,SX (SZ,SY,SX with --volumes), got "
                         f"'{','.join(map(str, bound))}'")
    if options.get("voxel_size") is not None:
        raise InputError("--voxel-size is for --volumes (a (T, Z, Y, X) stack)")


#: the options of ``xcorr align`` that a run of volumes uses (or that ask it for less)
VOLUME_USES = frozenset({"path", "dataset", "z", "axes", "volumes", "reference", "max_shift",
                         "upsample", "voxel_size", "device", "max_memory", "out_dir", "force",
                         "no_aligned", "fill", "quiet", "as_json", "no_quality", "channel",
                         "apply_to", "patches", "patch_overlap", "max_deviation", "boundary"})


def given_options() -> list:
    """The parameters of the running command named on its command line (click's parameter
    source: a default, however equal to its value, is not given); none outside a command."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return []
    return [n for n in ctx.params
            if ctx.get_parameter_source(n) is click.core.ParameterSource.COMMANDLINE]


def ignored_by_volumes(o, given, uses=VOLUME_USES) -> list:
    """The flags of ``xcorr align`` (``o``; ``given``: the options named on its command line)
    that a run of volumes does not use (``uses``: those it does), as ``--name``, sorted."""
    names = {n for n in given if n not in uses}
    names |= {n for n, unset in _NOT_WITH_VOLUMES if getattr(o, n, unset) != unset}
    # (given with the value that leaves it unset: --out-format tiff, what volumes write)
    names -= {n for n, unset in _NOT_WITH_VOLUMES
              if unset is not None and getattr(o, n, None) == unset}
    return sorted("--" + n.replace("_", "-") for n in names)


def unused_by_volumes(o, given) -> list:
    """The flags of a 2-D ``xcorr align`` (``o``; ``given``: the options named on its command
    line) that a run of volumes would not use: a file that holds volumes
    (:class:`~xcorr_app.io.HoldsVolumes`) is registered in 3-D only where there are none, as
    it would otherwise drop what was asked without a word."""
    names = ignored_by_volumes(o, given)
    try:
        _reference(o.reference)
    except InputError:
        names = sorted(names + ["--reference"])
    return names


def _reference(text):
    if text is None or text in ("first", "mean"):
        return text or "first"
    try:
        return int(text)
    except ValueError:
        raise InputError(f"--reference {text!r} with --volumes: use first, mean or a volume "
                         "INDEX") from None


#: what an explicit --volumes uses: not --z (a plane is no volume)
EXPLICIT_USES = VOLUME_USES - {"z"}
#: options of the 2-D run that --volumes does not take (name, the value that means unset)
_NOT_WITH_VOLUMES = (("gpus", None), ("workers", None), ("scheduler", None),
                     ("features", None), ("crop", False),
                     ("out_format", "tiff"), ("in_place", False),
                     ("keep_dtype", False))


def align_volumes_cli(o, note=None):
    """``xcorr align PATH --volumes`` once its options are parsed (``o``); ``note``: printed
    (unless quiet) once the options and the input pass their checks."""
    from ..alignment import VolumeOptions, align_volumes
    from ..io import OutputRun, strict_json, write_text

    # an option the run would drop is refused, not ignored (given: on the command line)
    ignored = ignored_by_volumes(o, given_options(), EXPLICIT_USES)
    if ignored:
        raise InputError(f"{', '.join(ignored)} {'does' if len(ignored) == 1 else 'do'} not "
                         "apply to --volumes")
    grid = o.patches  # (a 2-D grid: its z count is not to be guessed)
    if grid is not None and len(grid_parts(grid)) == 2:
        gy, gx = grid_parts(grid)
        raise InputError(f"--patches takes GZxGYxGX with volumes (three whole numbers > 0; "
                         f"1x{gy}x{gx}: no division along z), got {grid!r}")
    opts = VolumeOptions(reference=_reference(o.reference), max_shift=o.max_shift,
                         voxel_size=parse_voxel_size_text(o.voxel_size), upsample=o.upsample,
                         device=o.device, memory_limit=o.max_memory,
                         channel=o.channel, patches=o.patches,
                         patch_overlap=o.patch_overlap,
                         max_deviation=o.max_deviation,
                         boundary=o.boundary)  # (checked once)
    if o.out_dir is not None and not o.out_dir.strip():
        raise InputError("--out is empty: name the folder for shifts.csv, shifts.json and "
                         "drift.png")
    from ..io import split_source

    source, path = o.path, split_source(o.path)[0]  # (FILE:/DATASET?axes=TZYX, and its file)
    out = Path(o.out_dir) if o.out_dir is not None else default_out(path, "_xcorr")
    if out.suffix.lower() in (".csv", ".json", ".png", ".tif", ".tiff") or out.is_file():
        raise InputError(f"--out is the folder align writes shifts.csv, shifts.json and "
                         f"drift.png into, not a file: {out}")
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    from ..alignment.volume import open_volumes
    from ._input import apply_channels

    # (before any output: a multi-channel file without --channel, a channel it lacks)
    volumes = open_volumes(source, channel=opts.channel)
    getattr(volumes.data, "close", lambda: None)()  # (a reader's file: opened again below)
    channels = apply_channels(o.apply_to, opts.channel, volumes, o.no_aligned)
    if note and not o.quiet:  # (once the run's checks pass: a refused run is its error line)
        note_later(note)
    names = OUTPUTS[:-1] if o.no_aligned else OUTPUTS
    outputs = [out / name for name in names]
    dev = note_device(o.device, o.quiet)
    # (an earlier run's outputs this one does not write would not match shifts.csv)
    from ..alignment.outputs import check_stale, stale_outputs

    stale = stale_outputs(out, outputs, [path])
    check_stale(stale)  # (a user's file is kept, as 2-D align keeps it)
    with OutputRun(outputs, [path], o.force, lock=out / ".xcorr.lock", remove=stale) as run:
        if not o.no_aligned and dev != "cpu":  # (the aligned volumes' warp built meanwhile)
            from ..alignment.volume import prebuild_volumes

            prebuild_volumes(opts.max_shift, opts.upsample, aligned=True)
        t0 = time.perf_counter()
        try:
            res = align_volumes(source, options=opts)
        except MemoryError as exc:  # (the command's own options: not --chunk-frames)
            raise InputError(f"out of memory{f' ({exc})' if str(exc) else ''}: lower "
                             "--max-memory, --upsample or bound the search with --max-shift, "
                             "or crop or bin the volumes") from None
        seconds = time.perf_counter() - t0
        say_later()  # (measured: the notes kept for a run that passed its checks)
        # (a constant volume's NaN: null, as 2-D align's shifts.json)
        doc = strict_json({"input": str(source), "channel": opts.channel,
                           "aligned_channels": channels, "device": res.device,
                           "seconds": round(seconds, 3), "notes": res.notes,
                           "volumes": res.rows(),
                           **({} if res.motion_field is None
                              else {"patches": res.field_document()})})
        write_text(outputs[0], res.to_csv())
        write_text(outputs[1], json.dumps(doc, indent=1, allow_nan=False) + "\n")
        plot_drift3d(outputs[2], res, title=f"{path.name}: reference {res.notes[0][11:]}")
        if not o.no_aligned:
            write_aligned(outputs[3], source, res.shifts, o.fill, dev, opts.channel, channels,
                          field=res)
        run.commit()
    if o.as_json:
        click.echo(json.dumps(doc, allow_nan=False))
    elif not o.quiet:
        click.echo(f"xcorr align --volumes: {len(res.shifts)} volumes on {res.device.upper()} "
                   f"in {seconds:.2f} s; wrote {', '.join(names)} in {out}")
        for note in res.notes[3:]:
            click.echo(f"note: {as_flags(note)}", err=True)
