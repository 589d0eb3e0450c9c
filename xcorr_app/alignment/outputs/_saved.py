"""Reading back what a run saved (:mod:`._save` writes it): the shifts of ``shifts.csv`` or
``shifts.json`` matched to frames by their ``frame`` numbers, or a ``--patches`` run's
``motion_field.npz`` (:func:`load_saved`), and the check that they fit a stack
(:func:`check_fits`): what ``xcorr apply`` and napari's saved shifts read."""

from __future__ import annotations

import csv
import io
import json
import zipfile
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ...errors import InputError

__all__ = ["TABLE", "load_saved", "check_fits"]


#: what a shift table that ``xcorr apply`` reads is, in its error lines
TABLE = "a shift table of xcorr align (columns dy, dx)"


def _number(value, where) -> float:
    """A shift of a table: NaN for a blank or null (no shift measured); ValueError naming
    ``where`` for anything but a number (a boolean, a list, a word)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return float("nan")
    if not isinstance(value, bool) and isinstance(value, (int, float, str)):
        try:
            return float(value)
        except (ValueError, OverflowError):
            pass
    raise ValueError(f"{where} is {value!r}, not a number")


def _frame_number(value, where) -> int:
    """A frame number of a table (an integer >= 0), or ValueError naming ``where``."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if not isinstance(value, bool) and isinstance(value, (int, float)) and value >= 0 \
            and float(value).is_integer():
        return int(value)
    raise ValueError(f"{where}: frame {value!r} is not a frame number (0, 1, 2, ...)")


def _frame_shape(value, where):
    """``(H, W)`` of a ``frame_shape`` a run recorded, or InputError naming ``where``."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return tuple(value)
    raise InputError(f"{where}: its frame_shape {value!r} is not [height, width] in pixels; "
                     "the file is damaged (write it again with xcorr align)")


def _frame_shape_beside(path: Path):
    """The frame shape recorded in the ``shifts.json`` of the run folder of ``path``, if any
    (an unreadable one, or one without it: None; a damaged ``frame_shape``: InputError)."""
    doc = _doc_beside(path)
    if not isinstance(doc, dict) or "frame_shape" not in doc:
        return None
    return _frame_shape(doc["frame_shape"], f"{path.with_name('shifts.json')} (the run's, "
                        f"beside {path.name})")


def _doc_beside(path: Path):
    """The ``shifts.json`` of the run folder of ``path`` (None where unreadable)."""
    try:
        return json.loads(path.with_name("shifts.json").read_bytes())
    except (OSError, ValueError):
        return None


def _volumes_table(path):
    return InputError(f"{path} holds the (dz, dy, dx) shifts of volumes (xcorr align "
                      "--volumes); xcorr apply applies the (dy, dx) shifts of 2-D frames (align "
                      "--volumes writes its aligned volumes itself)")


def _text(raw: bytes) -> str:
    """A table's text: UTF-8 (with or without a byte-order mark), else Latin-1 (a table saved
    by a spreadsheet; only the source column may hold other characters)."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _shown(text, most=60) -> str:
    """``text`` as a message quotes it: characters that do not print as ``?``, at most
    ``most`` of them (a file that is not a table has no header worth a screen)."""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= most else text[:most] + "..."


def _csv_rows(path) -> list:
    """The rows of a CSV table as dicts (lines starting with ``#`` left out, spaces after the
    commas too: a table edited by hand); ValueError for a row of another field count.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "s.csv"
    >>> _ = p.write_text("# drift, corrected by hand\\nframe, dy, dx\\n0, 0.5, -1\\n")
    >>> _csv_rows(p)
    [{'frame': '0', 'dy': '0.5', 'dx': '-1'}]
    """
    raw = path.read_bytes()
    if b"\0" in raw[:4096]:  # (an image, an archive: its bytes are no line of a message)
        raise ValueError("a binary file, not a text table")
    lines = [ln for ln in _text(raw).splitlines(keepends=True)
             if not ln.lstrip().startswith("#")]
    reader = csv.DictReader(lines, skipinitialspace=True)
    rows = list(reader)
    header = reader.fieldnames or []
    if any(name != name.strip() for name in header):  # (spaces before a comma: "dy ,dx")
        rows = [{k.strip() if isinstance(k, str) else k: v for k, v in r.items()} for r in rows]
        header = [name.strip() for name in header]
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:  # (a row's dict keeps the last: its other column would go unread)
        raise ValueError(f"its header names {_shown(', '.join(twice))} more than once")
    for i, row in enumerate(rows):
        if None in row or None in row.values():
            raise ValueError(f"row {i + 1} has {'more' if None in row else 'fewer'} fields "
                             f"than its header ({_shown(', '.join(header))})")
    return rows


def _json_rows(path, saved) -> list:
    """The frame records of a ``shifts.json`` (its ``frame_shape`` into ``saved``)."""
    raw = path.read_bytes()
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError:
        doc = json.loads(raw.decode("latin-1"))
    if isinstance(doc, dict) and "volumes" in doc and "frames" not in doc:
        raise _volumes_table(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("frames"), list) or \
            not all(isinstance(r, dict) for r in doc["frames"]):
        raise ValueError("no list of frame records under \"frames\"")
    if "frame_shape" in doc:
        saved.frame_shape = _frame_shape(doc["frame_shape"], path)
    saved.bidi = _bidi(doc, path)
    return doc["frames"]


def _bidi(doc, where) -> float:
    """The line offset a run removed from its frames (``settings["bidi"]`` of its
    ``shifts.json``; 0.0 where it has none); InputError for one that is no such offset."""
    from ..rigid import parse_bidi

    settings = doc.get("settings") if isinstance(doc, dict) else None
    value = settings.get("bidi") if isinstance(settings, dict) else None
    if value is None:
        return 0.0
    try:
        value = parse_bidi(value)
    except InputError:
        value = None
    if not isinstance(value, float):
        raise InputError(f"{where}: settings.bidi is {settings.get('bidi')!r}, not a line "
                         "offset in pixels")
    return value


def _table(rows, path, saved) -> None:
    """``saved.shifts`` ``(N, 2)`` of the table's rows, in the order of their ``frame``
    numbers where it has them (``saved.frames``); InputError for a frame given twice."""
    if rows and "dz" in rows[0]:
        raise _volumes_table(path)
    numbered = bool(rows) and "frame" in rows[0]
    shifts = np.array([[_number(r["dy"], f"the dy of row {i + 1}"),
                        _number(r["dx"], f"the dx of row {i + 1}")] for i, r in enumerate(rows)],
                      np.float64).reshape(-1, 2)
    # (a rigid-body run's angles: every row has one; blank or null counts as 0)
    rotation = np.array([_number(r["rotation_deg"], f"the rotation_deg of row {i + 1}")
                         for i, r in enumerate(rows)], np.float64) \
        if rows and "rotation_deg" in rows[0] else None
    if numbered:
        frames = np.array([_frame_number(r.get("frame"), f"row {i + 1}")
                           for i, r in enumerate(rows)], np.int64)
        order = np.argsort(frames, kind="stable")
        frames, shifts = frames[order], shifts[order]
        rotation = None if rotation is None else rotation[order]
        twice = frames[1:][frames[1:] == frames[:-1]]
        if len(twice):
            raise InputError(f"{path} gives frame {twice[0]} more than one shift; a table "
                             "gives each frame's once")
        saved.frames = frames
    saved.shifts = shifts
    saved.rotation = rotation


def load_saved(path) -> SimpleNamespace:
    """An earlier run's shifts: ``shifts`` ``(N, 2)`` (``dy, dx``; blank or null: NaN), in the
    order of the table's ``frame`` column where it has one (``frames``: its numbers, sorted;
    else None); for ``motion_field.npz`` also ``field`` ``(N, gy, gx, 2)`` and ``centres``;
    ``frame_shape`` where the run recorded it (``shifts.json`` or ``motion_field.npz``, its own
    or beside the file), else None; ``rotation``: a rigid-body run's angles ``(N,)`` (degrees,
    its table's ``rotation_deg``; else None), made the field of its rotations and shifts by
    :func:`check_fits`; ``bidi``: the line offset the run removed from its frames
    (``shifts.json``'s, its own or beside ``shifts.csv``; else 0.0).  :func:`check_fits`
    checks them against a stack.

    Raises
    ------
    InputError
        A missing or unreadable file, one that is not a table of ``dy, dx`` (or a motion
        field), a table of volumes (``dz``), a frame given twice, or a row with only one of
        ``dy, dx``, in one line naming the file.

    Examples
    --------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "shifts.csv"
    >>> _ = p.write_text("frame,dy,dx\\n1,1.25,-0.5\\n0,0.0,0.0\\n")
    >>> load_saved(p).shifts.tolist()
    [[0.0, 0.0], [1.25, -0.5]]
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} does not exist or is not a file; give shifts.csv, "
                         "shifts.json or motion_field.npz of an xcorr align run")
    kind = path.suffix.lower()
    saved = SimpleNamespace(field=None, centres=None, frames=None, rotation=None,
                            frame_shape=_frame_shape_beside(path), bidi=0.0)
    if kind == ".csv":  # (the line offset of the run, beside its table)
        saved.bidi = _bidi(_doc_beside(path),
                           f"{path.with_name('shifts.json')} (the run's, beside {path.name})")
    try:
        if kind == ".npz":
            _load_field(path, saved)
        elif kind == ".json":
            _table(_json_rows(path, saved), path, saved)
        else:
            _table(_csv_rows(path), path, saved)
    except InputError:
        raise
    except PermissionError:
        raise InputError(f"{path}: permission denied; xcorr needs to read it") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, csv.Error) as exc:
        what = str(exc) if isinstance(exc, (ValueError, csv.Error)) and str(exc) \
            else f"no {exc} column or key" if isinstance(exc, KeyError) \
            else f"{type(exc).__name__}: {exc}"
        raise InputError(f"{path} is not {TABLE} or a motion_field.npz ({what})") from None
    if not len(saved.shifts):
        raise InputError(f"{path} holds no frame's shift")
    half = np.isnan(saved.shifts).sum(axis=1) == 1
    if saved.field is None and half.any():
        k = int(np.flatnonzero(half)[0])
        k = k if saved.frames is None else int(saved.frames[k])
        raise InputError(f"{path}: frame {k} has only one of dy, dx (the other blank or NaN); "
                         "a frame with no shift measured has neither")
    return saved


def _load_field(path, saved) -> None:
    """``field``, ``centres``, ``shifts`` (its ``rigid``) and ``frame_shape`` (where it has
    one) of a ``motion_field.npz`` into ``saved``; InputError for a damaged one."""
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("a NumPy array, not an .npz archive")
        with npz:
            arrays = {}
            for key in ("field", "centres", "rigid", "frame_shape"):
                if key not in npz.files:
                    if key == "frame_shape":  # (not in the files of older runs)
                        continue
                    raise InputError(f"{path} is not a motion_field.npz of xcorr align "
                                     f"--patches (no {key!r} array)")
                a = npz[key]
                if a.dtype.kind not in "iuf":
                    raise ValueError(f"its {key} holds {a.dtype}, not numbers")
                arrays[key] = a
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        if isinstance(exc, PermissionError):
            raise
        raise InputError(f"{path} is not a readable motion_field.npz of xcorr align --patches "
                         f"({type(exc).__name__}: {exc}); it may be truncated or damaged") \
            from None
    saved.field = arrays["field"].astype(np.float64)
    saved.centres = arrays["centres"].astype(np.float64)
    saved.shifts = arrays["rigid"].astype(np.float64)
    if "frame_shape" in arrays:
        saved.frame_shape = _frame_shape(arrays["frame_shape"].tolist(), path)
    f, r = saved.field, saved.shifts
    if f.ndim != 4 or f.shape[-1] != 2 or r.shape != (len(f), 2):
        raise InputError(f"{path}: its field {f.shape} and rigid {r.shape} are not (frames, gy, "
                         "gx, 2) and (frames, 2) of as many frames; the file is damaged")
    if saved.centres.shape != (*f.shape[1:3], 2):
        raise InputError(f"{path}: its centres {saved.centres.shape} do not match its field of "
                         f"{f.shape[1]}x{f.shape[2]} patches ({(*f.shape[1:3], 2)}); the file "
                         "is damaged")


def check_fits(saved, shifts_path, src, path) -> int:
    """Refuse ``saved`` shifts (:func:`load_saved`) that do not fit the stack ``src`` in one
    line: another frame count, frame numbers beyond the stack's, another frame size where the
    run recorded it, a motion field whose patch centres lie beyond the frame, shifts infinite
    or moving a frame wholly out of it (:func:`~xcorr_app.alignment.warp.check_shifts`,
    :func:`~xcorr_app.alignment.piecewise.check_field`), an infinite rotation.  A rigid-body
    run's shifts and rotations become ``saved.field`` and ``saved.centres``, the field of
    each frame's rotation and shift at the stack's frame corners
    (:func:`~xcorr_app.alignment.warp.rigid_body_field`).  Returns how many frames have no
    shift (NaN: left unshifted)."""
    from ..piecewise import check_field
    from ..warp import check_rotation, check_shifts, rigid_body_field

    n, count = src.n_frames, len(saved.shifts)
    if count != n:
        raise InputError(f"{shifts_path} holds the shifts of {count} frames but {path} has "
                         f"{n}; give the stack those shifts were measured for (or one of as "
                         "many frames)")
    if saved.frames is not None and (saved.frames != np.arange(n)).any():
        beyond = int(saved.frames[saved.frames >= n][0])  # (numbers unique: one is beyond)
        missing = int(np.setdiff1d(np.arange(n), saved.frames)[0])
        raise InputError(f"{shifts_path} gives a shift for frame {beyond} but {path} has {n} "
                         f"frames (0 to {n - 1}), and none for its frame {missing}")
    if saved.frame_shape is not None and tuple(saved.frame_shape) != tuple(src.frame_shape):
        h, w = saved.frame_shape
        raise InputError(f"{shifts_path} was measured on frames of {h}x{w} pixels but {path} "
                         f"has {src.frame_shape[0]}x{src.frame_shape[1]}; give a stack of "
                         "that frame size")
    try:
        if saved.field is None:
            saved.shifts = check_shifts(saved.shifts, n, src.frame_shape)
            if saved.rotation is not None:  # (rigid-body: one warp of a rotation and a shift)
                saved.rotation = check_rotation(saved.rotation, n)
                saved.field, saved.centres = rigid_body_field(saved.shifts, saved.rotation,
                                                              src.frame_shape)
            return int(np.isnan(saved.shifts).all(axis=1).sum())
        saved.field, saved.centres = check_field(saved.field, saved.centres, n,
                                                 src.frame_shape)
        return int(np.isnan(saved.field).reshape(n, -1).all(axis=1).sum())
    except InputError as exc:
        raise InputError(f"{shifts_path}: {exc}") from None
