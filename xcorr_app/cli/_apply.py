"""``xcorr apply SHIFTS PATH``: the shifts of an earlier run (``shifts.csv``, ``shifts.json``,
or a ``--patches`` run's ``motion_field.npz``) applied to another stack, channel or recording,
streamed chunk by chunk into one aligned stack (TIFF, OME-Zarr or HDF5 by its name) by
:func:`xcorr_app.alignment.outputs.write_chunks`, as ``align --apply-to`` writes it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

import click
import numpy as np

from ..errors import InputError
from ._input import input_options, input_path
from ._main import DeviceCommand
from ._options import (RESAMPLE_ANY, default_out, note_device, print_notes, progress_bar,
                       readable_frames_of, stack_command)

__all__ = ["apply_cmd", "load_saved"]

#: the names ``--out`` may end in, and the format of each (the first that matches)
OUT_SUFFIXES = {".ome.tif": "ome-tiff", ".ome.tiff": "ome-tiff", ".tif": "tiff", ".tiff": "tiff",
                ".zarr": "ome-zarr", ".h5": "hdf5", ".hdf5": "hdf5"}


def _number(value) -> float:
    return float("nan") if value in (None, "") else float(value)


def _frame_shape_beside(path: Path):
    """The frame shape recorded in the ``shifts.json`` of the run folder of ``path``, if any."""
    beside = path.with_name("shifts.json")
    try:
        return tuple(json.loads(beside.read_text())["frame_shape"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_saved(path) -> SimpleNamespace:
    """An earlier run's shifts: ``shifts`` ``(N, 2)`` (``dy, dx``; blank or null: NaN), and for
    ``motion_field.npz`` also ``field`` ``(N, gy, gx, 2)`` and ``centres``; ``frame_shape``
    where the run recorded it (``shifts.json``, its own or beside the file), else None.

    Raises
    ------
    InputError
        A missing or unreadable file, or one that is not a table of ``dy, dx`` (or a motion
        field), in one line.

    Examples
    --------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "shifts.csv"
    >>> _ = p.write_text("frame,dy,dx\\n0,0.0,0.0\\n1,1.25,-0.5\\n")
    >>> load_saved(p).shifts.tolist()
    [[0.0, 0.0], [1.25, -0.5]]
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} does not exist or is not a file; give shifts.csv, "
                         "shifts.json or motion_field.npz of an xcorr align run")
    kind = path.suffix.lower()
    saved = SimpleNamespace(field=None, centres=None, frame_shape=_frame_shape_beside(path))
    try:
        if kind == ".npz":
            with np.load(path) as npz:
                saved.field = np.asarray(npz["field"], np.float64)
                saved.centres = np.asarray(npz["centres"], np.float64)
                saved.shifts = np.asarray(npz["rigid"], np.float64)
            if saved.field.ndim != 4 or saved.field.shape[-1] != 2:
                raise ValueError(f"its field has shape {saved.field.shape}")
        elif kind == ".json":
            doc = json.loads(path.read_text())
            saved.frame_shape = tuple(doc["frame_shape"]) if "frame_shape" in doc \
                else saved.frame_shape
            saved.shifts = np.array([[_number(r["dy"]), _number(r["dx"])]
                                     for r in doc["frames"]], np.float64).reshape(-1, 2)
        else:
            rows = list(csv.DictReader(io.StringIO(path.read_text())))
            saved.shifts = np.array([[_number(r["dy"]), _number(r["dx"])] for r in rows],
                                    np.float64).reshape(-1, 2)
    except PermissionError:
        raise InputError(f"{path}: permission denied; xcorr needs to read it") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError,
            UnicodeDecodeError) as exc:
        what = f"{type(exc).__name__}: {exc}" if not isinstance(exc, KeyError) \
            else f"no {exc} column or key"
        raise InputError(f"{path} is not a shift table of xcorr align (columns dy, dx) or a "
                         f"motion_field.npz ({what})") from None
    if not len(saved.shifts):
        raise InputError(f"{path} holds no frame's shift")
    return saved


def check_fits(saved, shifts_path, src, path) -> None:
    """Refuse ``saved`` shifts for a stack of another frame count or frame size, in one line."""
    n = len(saved.shifts)
    if n != src.n_frames:
        raise InputError(f"{shifts_path} holds the shifts of {n} frames but {path} has "
                         f"{src.n_frames}; give the stack those shifts were measured for (or "
                         "one of as many frames)")
    if saved.frame_shape is not None and tuple(saved.frame_shape) != tuple(src.frame_shape):
        h, w = saved.frame_shape
        raise InputError(f"{shifts_path} was measured on frames of {h}x{w} pixels but {path} "
                         f"has {src.frame_shape[0]}x{src.frame_shape[1]}; give a stack of "
                         "that frame size")


@click.command("apply", cls=DeviceCommand)
@click.argument("shifts", type=click.Path(path_type=Path))
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=str, default=None,
              help="The aligned stack: NAME.tif, NAME.ome.tif, NAME.ome.zarr or NAME.h5 (the "
                   "format by the name) [default: STEM_applied.tif in the current folder].")
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
              readable_frames, chunk_frames, device, channel, dataset, z):
    """Apply the shifts of an earlier run to PATH and write the aligned stack.

    SHIFTS is shifts.csv or shifts.json of xcorr align (rigid shifts), or motion_field.npz of
    an align --patches run; PATH any stack xcorr reads (another channel, another recording of
    the same frames), streamed. Its frame count (and frame size, where the run recorded it)
    must match the shifts'.
    """
    with readable_frames_of(path, readable_frames, None, None):
        _apply(shifts, input_path(path, dataset, z), out_path, resample, crop, fill,
               keep_dtype, quiet, force, chunk_frames, device, channel)


def _apply(shifts, path, out_path, resample, crop, fill, keep_dtype, quiet, force,
           chunk_frames, device, channel):
    from ..alignment import FIELD_RESAMPLE, RESAMPLE, check_fill
    from ..alignment import aligned_channels
    from ..alignment.outputs import aligned_as, write_chunks
    from ..io import OutputRun, open_stack, split_source

    if out_path is not None and not out_path.strip():
        raise InputError("--out is empty: name the aligned stack, e.g. --out aligned.tif")
    out = Path(out_path) if out_path else default_out(path, "_applied.tif")
    fmt = next((f for s, f in OUT_SUFFIXES.items() if out.name.lower().endswith(s)), None)
    if fmt is None:
        raise InputError(f"--out {out}: name the aligned stack NAME.tif, NAME.ome.tif, "
                         "NAME.ome.zarr or NAME.h5 (the format is chosen by the name)")
    saved = load_saved(shifts)
    allowed = RESAMPLE if saved.field is None else FIELD_RESAMPLE
    if resample not in allowed:
        raise InputError(f"--resample {resample} does not apply to "
                         f"{'rigid shifts' if saved.field is None else 'a motion field'} "
                         f"(use {' or '.join(allowed)})")
    fill = check_fill(fill)
    with open_stack(path, channel=channel) as src:
        check_fits(saved, shifts, src, path)
        print_notes(src, quiet)
        aligned = aligned_as(src, path, keep_dtype)
        frame_shape = src.frame_shape
    dev = "cpu" if device == "cpu" else note_device(device, quiet)
    inputs = [split_source(path)[0], Path(shifts)]
    with OutputRun([out], inputs, force, lock=out.parent / ".xcorr.lock") as run:
        parts, shape = aligned_channels(path, saved.shifts, [channel], frame_shape,
                                        field=saved.field, centres=saved.centres, fill=fill,
                                        resample=resample, crop=crop,
                                        chunk_frames=chunk_frames or 64, device=dev)
        with progress_bar(len(saved.shifts), f"writing {out.name}", quiet) as bar:
            write_chunks(parts, shape, len(saved.shifts), out, aligned, 1, bar.update)
        run.commit()
    if not quiet:
        click.echo(f"xcorr apply: {len(saved.shifts)} frames of {path} aligned by {shifts}; "
                   f"wrote {out}")
