"""``xcorr apply SHIFTS PATH``: the shifts of an earlier run (``shifts.csv``, ``shifts.json``,
or a ``--patches`` run's ``motion_field.npz``) applied to another stack, channel or recording,
streamed chunk by chunk into one aligned stack (TIFF, OME-Zarr or HDF5 by its name) by
:func:`xcorr_app.alignment.outputs.write_chunks`, as ``align --apply-to`` writes it."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from ..errors import InputError
from ._input import input_options, input_path
from ._main import DeviceCommand
from ._options import (RESAMPLE_ANY, default_out, note_device, print_notes, progress_bar,
                       readable_frames_of, stack_command)

__all__ = ["apply_cmd"]

#: the names ``--out`` may end in (the format by :func:`xcorr_app.io.out_format`)
OUT_SUFFIXES = (".tif", ".tiff", ".zarr", ".h5", ".hdf5", ".nwb")


@click.command("apply", cls=DeviceCommand)
@click.argument("shifts", type=click.Path(path_type=Path))
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=str, default=None,
              help="The aligned stack: NAME.tif, NAME.ome.tif, NAME.ome.zarr, NAME.h5 or, "
                   "for an NWB input, NAME.nwb (a copy of the input with the corrected "
                   "movie and the shifts in processing/ophys) (the format by the name; "
                   "NAME.h5:/DATA names its dataset, default /aligned) "
                   "[default: STEM_applied.tif in the current folder].")
@click.option("--resample", type=click.Choice(RESAMPLE_ANY), default="bilinear",
              show_default=True,
              help="Resampling at subpixel shifts (fourier: rigid only; cubic: a motion field "
                   "only).")
@click.option("--crop", is_flag=True, help="Crop to the area every shifted frame covers.")
@click.option("--fill", type=float, default=0.0, show_default=True,
              help="Value for pixels shifted in from outside the frame (without --crop).")
@click.option("--keep-dtype", is_flag=True,
              help="Write the input's pixel type (integers rounded and clipped), not float32.")
@stack_command
@input_options
def apply_cmd(shifts, path, out_path, resample, crop, fill, keep_dtype, quiet, force,
              readable_frames, chunk_frames, device, channel, dataset, z, axes):
    """Apply the shifts of an earlier run to PATH and write the aligned stack.

    SHIFTS is shifts.csv or shifts.json of xcorr align (rigid shifts; with --model rigid-body
    their rotation_deg too: each frame rotated and shifted), or motion_field.npz of an align
    --patches run; PATH any stack xcorr reads (another channel, another recording of
    the same frames), streamed. Rows are matched to frames by their frame column; the stack's
    frame count (and frame size, where the run recorded it) must match the shifts'. The line
    offset of a run with --bidi (its shifts.json, or the one beside shifts.csv) is removed
    from the frames first.
    """
    with readable_frames_of(path, readable_frames, None, None):
        _apply(shifts, input_path(path, dataset, z, axes), out_path, resample, crop, fill,
               keep_dtype, quiet, force, chunk_frames, device, channel)


def _apply(shifts, path, out_path, resample, crop, fill, keep_dtype, quiet, force,
           chunk_frames, device, channel):
    from ..alignment import FIELD_RESAMPLE, RESAMPLE, check_fill
    from ..alignment import aligned_channels
    from ..alignment.outputs import (aligned_as, channel_metadata, check_fits, load_saved,
                                     write_chunks)
    from ..io import OutputRun, open_stack, out_format, parse_out_path, split_source

    if out_path is not None and not out_path.strip():
        raise InputError("--out is empty: name the aligned stack, e.g. --out aligned.tif")
    out, dataset = parse_out_path(out_path) if out_path else \
        (default_out(path, "_applied.tif"), None)
    if not out.name.lower().endswith(OUT_SUFFIXES):
        raise InputError(f"--out {out}: name the aligned stack NAME.tif, NAME.ome.tif, "
                         "NAME.ome.zarr, NAME.h5 or NAME.nwb (the format is chosen by the "
                         "name)")
    fmt = out_format(out)
    saved = load_saved(shifts)
    rigid = saved.field is None and saved.rotation is None
    allowed = RESAMPLE if rigid else FIELD_RESAMPLE
    if resample not in allowed:
        what = "rigid shifts" if rigid else "a motion field" if saved.field is not None \
            else "rotations (a rigid-body run)"
        raise InputError(f"--resample {resample} does not apply to {what} "
                         f"(use {' or '.join(allowed)})")
    fill = check_fill(fill)
    with open_stack(path, channel=channel) as src:
        slices = _planes_of(src, path, fmt, out)
        if slices > 1 and _each_plane(saved, src.volumes.times, slices) and not quiet:
            click.echo(f"note: the shifts of {src.volumes.times} time points applied to each "
                       f"of their {slices} Z planes", err=True)
        unshifted = check_fits(saved, shifts, src, path)
        aligned = channel_metadata(aligned_as(src, path, keep_dtype, fmt, dataset,
                                              force, fill),  # (notes said too)
                                   None, channel)  # (--channel K: that channel's name)
        print_notes(src, quiet)
        frame_shape = src.frame_shape
    if unshifted:  # (said even with --quiet: those frames are written as they were)
        one = unshifted == 1
        click.echo(f"note: {unshifted} of {src.n_frames} frames {'has' if one else 'have'} no "
                   f"shift in {shifts} (blank or NaN: none was measured) and "
                   f"{'is' if one else 'are'} written unshifted", err=True)
    dev = "cpu" if device == "cpu" else note_device(device, quiet)
    inputs = [split_source(path)[0], Path(shifts)]
    with OutputRun([out], inputs, force, lock=out.parent / ".xcorr.lock") as run:
        parts, shape = aligned_channels(path, saved.shifts, [channel], frame_shape,
                                        field=saved.field, centres=saved.centres, fill=fill,
                                        resample=resample, crop=crop,
                                        chunk_frames=chunk_frames or 64, device=dev,
                                        bidi=saved.bidi if saved.field is None else 0.0)
        record = _nwb_record(saved, shifts, path, resample, crop, fill) \
            if fmt == "nwb" else None
        with progress_bar(len(saved.shifts), f"writing {out.name}", quiet) as bar:
            write_chunks(parts, shape, len(saved.shifts), out, aligned, 1, bar.update, record,
                         slices=slices)
        run.commit()
    if not quiet:
        bidi = f" (the run's line offset {saved.bidi:g} px removed first)" \
            if saved.bidi and saved.field is None else ""
        click.echo(f"xcorr apply: {len(saved.shifts)} frames of {path} aligned by {shifts}"
                   f"{bidi}; wrote {out}")


def _planes_of(src, path, fmt, out) -> int:
    """The Z planes a time point of ``src`` holds where its frames are the planes of volumes
    (read T then Z: written back as a TIFF hyperstack of them, its Z step kept), else 1; an
    :class:`InputError` where they are stored Z then T or ``out`` is no TIFF."""
    from ..io import z_first

    volumes = getattr(src, "volumes", None)
    if volumes is None:
        return 1
    if z_first(volumes.axes):
        raise InputError(f"{path} stores its volumes' planes Z then T (axes "
                         f"{volumes.axes}): xcorr apply applies shifts to the planes of volumes "
                         "stored T then Z (ImageJ hyperstacks); pick one plane with --z K")
    if fmt != "tiff":
        raise InputError(f"--out {out.name}: the planes of volumes are written back as a "
                         "TIFF hyperstack (T and Z apart); name it NAME.tif")
    return volumes.planes


def _each_plane(saved, times, planes) -> bool:
    """``saved`` (:func:`~xcorr_app.alignment.outputs.load_saved`) made a shift a plane where
    it holds one a time point of a T x Z stack (measured on one plane, ``--z K``: every plane
    of a time point moves with it): True where it did."""
    if len(saved.shifts) != times or (saved.frames is not None
                                      and (saved.frames != np.arange(times)).any()):
        return False
    for name in ("shifts", "field", "rotation"):
        value = getattr(saved, name)
        if value is not None:
            setattr(saved, name, np.repeat(value, planes, axis=0))
    saved.frames = None
    return True


def _nwb_record(saved, shifts, path, resample, crop, fill) -> tuple:
    """An NWB output's record (:func:`xcorr_app.alignment.outputs.nwb_record`'s form): the
    rigid shifts applied (a motion field's run: its rigid part), what was applied, and how."""
    import json

    from .._version import __version__

    how = {"applied": str(shifts), "resample": resample, "crop": crop, "fill": fill,
           **({"motion_field": True} if saved.field is not None and saved.rotation is None
              else {}),
           **({"rotation_deg": saved.rotation.tolist()} if saved.rotation is not None else {}),
           **({"bidi": saved.bidi} if saved.bidi else {})}
    return (saved.shifts, f"{__version__} from {path} (xcorr apply of {Path(shifts).name}; "
            "settings in comments)", json.dumps(how))
