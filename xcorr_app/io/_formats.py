"""Stacks in other formats than TIFF: how a path names one (file, dataset, plane), which format
it is, the optional library that reads it, and :class:`ArrayFrames`, the frame source over any
N-D array read by slicing (a Zarr array, an HDF5 dataset), chunk by chunk.

A source path is ``FILE``, ``FILE:/DATASET`` (an HDF5 dataset, a Zarr array in a group, an NWB
series) and may end in ``?z=K`` (one Z plane of a stack with a Z axis), ``?axes=TZYX`` (the
file's axes, as the caller names them: :mod:`._axes`) or both (``?z=K&axes=TZYX``);
:func:`source_path` writes one, :func:`source_parts` reads it.  Frames are all the axes other
than Y, X, the channel axis (``C``, picked by ``channel``) and a picked Z, flattened in file
order.

Examples
--------
>>> split_source("sample_data/cell_drift.tif")
(PosixPath('sample_data/cell_drift.tif'), None, None)
>>> source_path("movie.h5", dataset="/data", z=2)
'movie.h5:/data?z=2'
>>> src = ArrayFrames(lambda: (np.arange(24, dtype=np.uint16).reshape(2, 3, 2, 2), None),
...                   "TCYX", "mem", channel=1)
>>> src.n_frames, src.frame_shape, src.read(0, 2)[:, 0, 0].tolist()
(2, (2, 2), [4, 16])
"""

from __future__ import annotations

import contextlib
import importlib
import math
import re
from pathlib import Path

import numpy as np

from ..errors import InputError, XcorrError
from ._axes import ChannelsNeeded, given_axes, parse_axes
from ._tiff import SUPPORTED_DTYPES, HoldsVolumes, missing_decoder, one_line_errors, plural

__all__ = ["ArrayFrames", "split_source", "source_parts", "source_path", "with_axes", "format_of",
           "need", "FORMAT_EXTRAS", "SUFFIXES", "library_errors", "document_frames"]

#: the optional libraries of each format: format -> (module, extra of pyproject.toml, name)
FORMAT_EXTRAS = {"zarr": ("zarr", "zarr", "Zarr and OME-Zarr"), "hdf5": ("h5py", "hdf5", "HDF5"),
          "nwb": ("h5py", "nwb", "NWB"), "czi": ("pylibCZIrw.czi", "czi", "Zeiss CZI"),
          "nd2": ("nd2", "nd2", "Nikon ND2")}

#: file name endings of each format (a folder holding Zarr metadata is Zarr whatever its name)
SUFFIXES = {"zarr": (".zarr",), "hdf5": (".h5", ".hdf5", ".hdf", ".he5"), "nwb": (".nwb",),
            "nd2": (".nd2",), "czi": (".czi",), "npy": (".npy",), "tiff": (".tif", ".tiff")}

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_ZARR_MARKERS = ("zarr.json", ".zarray", ".zgroup", ".zattrs")
#: seconds in a time unit as its formats name it: OME-TIFF's ``TimeIncrementUnit``, ImageJ's
#: ``tunit``, OME-NGFF's axis units
SECONDS = {"s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0, "ms": 1e-3, "msec": 1e-3,
           "millisecond": 1e-3, "µs": 1e-6, "us": 1e-6, "usec": 1e-6, "microsecond": 1e-6,
           "nanosecond": 1e-9, "min": 60.0, "minute": 60.0, "h": 3600.0, "hr": 3600.0,
           "hour": 3600.0}
#: micrometers in a length unit, by its OME-NGFF name (the names :func:`length_unit` gives)
MICROMETERS = {"kilometer": 1e9, "meter": 1e6, "decimeter": 1e5, "centimeter": 1e4,
               "millimeter": 1e3, "micrometer": 1.0, "nanometer": 1e-3, "angstrom": 1e-4,
               "picometer": 1e-6, "inch": 25400.0, "foot": 304800.0}
#: the OME-NGFF name of a length unit as the formats spell it: OME-TIFF's
#: ``PhysicalSize*Unit``, ImageJ's ``unit`` (Fiji writes the micro sign escaped, ``\u00B5m``),
#: OME-NGFF's axis units, NWB's ``grid_spacing`` unit (``meters``), HDF5's ``element_size_um``;
#: matched as given, then in lower case
_SPELLINGS = {"m": "meter", "meters": "meter", "cm": "centimeter", "centimeters": "centimeter",
              "mm": "millimeter", "millimeters": "millimeter", "\u00b5m": "micrometer",
              "\u03bcm": "micrometer", r"\u00b5m": "micrometer", r"\u03bcm": "micrometer",
              "um": "micrometer", "micron": "micrometer", "microns": "micrometer",
              "micrometers": "micrometer", "nm": "nanometer", "nanometers": "nanometer",
              "in": "inch", "inches": "inch", "km": "kilometer", "dm": "decimeter",
              "pm": "picometer", "\u00c5": "angstrom", "\u212b": "angstrom", "ft": "foot"}


def length_unit(unit) -> str | None:
    """The OME-NGFF name of a length unit however a file spells it, or None (not a length xcorr
    knows: ``pixel``, a blank).

    >>> length_unit("µm"), length_unit("\\u00B5m"), length_unit("Microns"), length_unit("pixel")
    ('micrometer', 'micrometer', 'micrometer', None)
    """
    text = str(unit or "").strip()
    for key in (text, text.lower()):
        if key in MICROMETERS:
            return key
        if key in _SPELLINGS:
            return _SPELLINGS[key]
    return None


def micrometers(value, unit) -> float | None:
    """``value`` in ``unit`` (any spelling :func:`length_unit` knows) in micrometers, or None.

    >>> micrometers(250, "nm"), micrometers(0.5, "mm"), micrometers(3, "pixel")
    (0.25, 500.0, None)
    """
    name = length_unit(unit)
    return None if name is None else float(value) * MICROMETERS[name]


def z_step(value, unit, xy_unit) -> float | None:
    """The distance between Z planes ``value`` in ``unit`` as a number in the pixel size's
    ``xy_unit`` (where both are the same, or both known lengths: :func:`length_unit`), else None (no
    positive finite number: the file says no Z step xcorr can carry).

    >>> z_step(1.5, "µm", "micrometer"), z_step(500, "nm", "µm"), z_step(2, "", "um")
    (1.5, 0.5, 2.0)
    >>> z_step(0, "µm", "µm"), z_step(1, "furlong", "µm")
    (None, None)
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    unit, xy_unit = str(unit or "").strip(), str(xy_unit or "").strip()
    if unit and unit != xy_unit:
        a, b = length_unit(unit), length_unit(xy_unit)
        if a is None or b is None:
            return None
        v *= MICROMETERS[a] / MICROMETERS[b]
    return v if math.isfinite(v) and v > 0 else None


#: what a source path may end in: ``?z=K``, ``?axes=TZYX`` or both (``?z=K&axes=TZYX``)
_QUERY = re.compile(r"^(.*)\?((?:z=-?\d+|axes=[^?&=]*)(?:&(?:z=-?\d+|axes=[^?&=]*))*)$")


def source_parts(path):
    """``(file, dataset or None, z or None, axes or None)`` of a source path (see the module's
    doc; ``axes`` checked by :func:`~._axes.parse_axes`); a path that exists is a file whatever
    its name holds.

    >>> source_parts("movie.zarr?z=1&axes=tzyx")
    (PosixPath('movie.zarr'), None, 1, 'TZYX')
    """
    text = str(path)
    if Path(text).exists():
        return Path(text), None, None, None
    query = {}
    match = _QUERY.match(text)
    if match:
        text = match.group(1)
        for part in match.group(2).split("&"):
            key, value = part.split("=", 1)
            if key in query:
                raise InputError(f"{path} names {key} twice; name it once")
            query[key] = value
    z = int(query["z"]) if "z" in query else None
    axes = parse_axes(query["axes"]) if "axes" in query else None
    if Path(text).exists():
        return Path(text), None, z, axes
    for at in [i for i, ch in enumerate(text) if ch == ":"]:
        if at and Path(text[:at]).exists():
            return Path(text[:at]), text[at + 1:] or None, z, axes
    return Path(text), None, z, axes


def split_source(path):
    """``(file, dataset or None, z or None)`` of a source path (:func:`source_parts`)."""
    return source_parts(path)[:3]


def source_path(file, dataset=None, z=None, axes=None) -> str:
    """A source path naming ``dataset`` in ``file``, plane ``z`` and the file's ``axes`` (see
    :func:`source_parts`).

    Examples
    --------
    >>> source_path("stack.ome.tif", z=0), source_path("m.h5", "/data", axes="TZYX")
    ('stack.ome.tif?z=0', 'm.h5:/data?axes=TZYX')
    """
    text = str(file)
    if dataset:
        text += ":" + (dataset if dataset.startswith("/") else "/" + dataset)
    query = ([f"z={int(z)}"] if z is not None else []) + ([f"axes={axes}"] if axes else [])
    return text + ("?" + "&".join(query) if query else "")


def with_axes(stack_or_path, axes):
    """The source ``stack_or_path`` read with ``axes`` (:func:`~._axes.parse_axes`'s, or
    None: as it is): a path naming them (``PATH?axes=TZYX``), so that every reader of the run
    opens it alike; an array in memory is refused (its axes are the caller's to arrange).

    >>> with_axes("m.nwb:/acquisition/TwoPhotonSeries", "TYX")
    'm.nwb:/acquisition/TwoPhotonSeries?axes=TYX'
    """
    if axes is None:
        return stack_or_path
    if not isinstance(stack_or_path, (str, Path)):
        raise InputError(f"axes={axes} names the axes of a file; an array in memory is "
                         "arranged by its caller: (N, H, W) frames, or (T, Z, Y, X) volumes")
    file, dataset, z, named = source_parts(stack_or_path)
    if named is not None and named != axes:
        raise InputError(f"{stack_or_path} names its axes already ({named}); drop axes={axes}")
    return source_path(file, dataset, z, axes)


def format_of(file: Path) -> str:
    """``"zarr"``, ``"hdf5"``, ``"nwb"``, ``"nd2"``, ``"czi"``, ``"npy"``, ``"tiff"`` (a TIFF file or a
    folder of them) by the name, a folder's Zarr metadata, or an HDF5 file's first bytes."""
    name = file.name.lower()
    if file.is_dir():
        if name.endswith(".zarr") or any((file / m).exists() for m in _ZARR_MARKERS):
            return "zarr"
        return "tiff"
    for fmt, suffixes in SUFFIXES.items():
        if name.endswith(suffixes):
            return fmt
    with contextlib.suppress(OSError):
        with open(file, "rb") as fh:
            if fh.read(8) == _HDF5_MAGIC:
                return "hdf5"
    return "tiff"


def need(fmt: str):
    """The module reading ``fmt``, or an :class:`InputError` naming the pip command (HDF5:
    the compression filters of ``hdf5plugin`` registered with it where that is installed)."""
    module, extra, name = FORMAT_EXTRAS[fmt]
    try:
        found = importlib.import_module(module)
    except ImportError:
        package = module.split(".")[0]
        raise InputError(f"reading {name} files needs the {package} package: pip install "
                         f"'xcorr-app[{extra}]'") from None
    if module == "h5py":
        try:  # (its import registers Zstd, LZ4, Blosc, bitshuffle... with HDF5)
            importlib.import_module("hdf5plugin")
        except Exception:  # (not installed, or its libraries not loadable: HDF5 as it is)
            pass
    return found


def library_errors(path, what="read"):
    """A reading library's failure as one-line :class:`InputError` naming ``path`` (an HDF5
    file another program holds open for writing said so, not called damaged).

    >>> with library_errors("m.h5", "open"):  # doctest: +ELLIPSIS
    ...     raise BlockingIOError(11, "Unable to synchronously open file (unable to lock file, "
    ...                           "errno = 11, error message = 'Resource temporarily unavailable')")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: cannot open m.h5: another program holds it open for writing ...
    """
    def message(exc, reason):
        text = str(exc).lower()
        if "unable to lock file" in text:  # (HDF5's file locking: a writer has it open)
            return (f"cannot {what} {path}: another program holds it open for writing (the "
                    "file is locked); close that program, or set HDF5_USE_FILE_LOCKING=FALSE "
                    "to read it anyway (frames it is still writing may be incomplete)")
        if "already open for write" in text:  # (the superblock's mark of an open writer)
            return (f"cannot {what} {path}: it is marked open for writing by another program, "
                    "or by one that stopped without closing it; close that program, or clear "
                    f"the mark with h5clear -s {path} once no program writes it")
        return (f"cannot {what} {path} ({type(exc).__name__}: {reason}); check that it is a "
                "complete, uncorrupted file")
    return one_line_errors(path, message)


def document_frames(file, dataset, channel, z, *, fmt, open_document, planes, metadata,
                    axes=None):
    """An :class:`ArrayFrames` over a file of a format that holds one image and no datasets
    (CZI; ND2 once its position is picked): ``open_document()`` opens the file (an object with ``close``), ``planes(doc,
    file)`` views it as an array with ``axes`` (and ``notes``, if any), ``metadata(doc)``
    gives ``(pixel size, channel names)``; opened once now to check it, and again whenever the
    frames are read.  ``axes``: the caller's names of the view's axes (:mod:`._axes`)."""
    if dataset:
        raise InputError(f"{file} is {fmt}: a dataset ({dataset}) names an array inside an "
                         "HDF5, Zarr or NWB file; leave it out")
    with library_errors(file, "open"), contextlib.closing(open_document()) as doc:
        size, names = metadata(doc)
        view = planes(doc, file)  # (the file's pixel types and layout checked now)
        axes, notes = given_axes(view.axes, axes, file, view.shape), getattr(view, "notes", ())

    def opener():
        doc = open_document()
        try:
            return planes(doc, file), doc.close
        except BaseException:
            doc.close()
            raise

    return ArrayFrames(opener, axes, file, channel=channel, z=z, pixel_size=size,
                       channel_names=names, fmt=fmt, paths=[file], notes=notes)


def frame_ranges(flags, most=6) -> str:
    """The frames set in ``flags`` (bool, one a frame) as ranges, the first ``most`` of them.

    >>> frame_ranges(np.array([0, 1, 1, 1, 0, 1], bool)), frame_ranges(np.ones(9, bool), 1)
    ('frames 1-3, 5', 'frames 0-8')
    >>> frame_ranges(np.arange(20) % 3 == 0, 2)
    'frames 0, 3 and 5 more'
    """
    at = np.flatnonzero(flags)
    if not len(at):
        return "no frame"
    cuts = np.flatnonzero(np.diff(at) > 1) + 1
    runs = [(int(r[0]), int(r[-1])) for r in np.split(at, cuts)]
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:most])
    word = "frame" if len(at) == 1 else "frames"
    return f"{word} {text}" + (f" and {len(runs) - most} more" if len(runs) > most else "")


class ArrayFrames:
    """The 2-D frames of an N-D array read by slicing (frames ``start:stop`` are one slice of
    the frame axis per run of it), with the interface of the TIFF frame sources.

    Parameters
    ----------
    opener : callable
        ``opener() -> (array, close)``: the array (sliced with integers and slices) and a
        function closing its file (or None); called again to reopen after :meth:`close`.
    axes : str
        One letter per axis of the array: ``Y`` and ``X``, optionally ``C`` (or ``S``, colour
        samples) and ``Z``; any other letter is a frame axis (``T``, ...).
    name : str
        The path named in messages.
    channel, z : int, optional
        The channel and Z plane to read; ``channel`` is required for several channels.
    pixel_size : tuple, optional
        ``(y, x, unit)`` of one pixel, as the file gives it.
    channel_names : list of str, optional
    fmt : str
        The format's name (``xcorr info``).
    stored : callable, optional
        ``stored(array) -> StoredArray | None`` (:mod:`._pread`): where the array's bytes lie
        uncompressed in files, runs of frames are read from them by ``os.preadv`` straight
        into the caller's buffer, from several threads at once (HDF5 serializes its calls;
        Zarr reads into a new buffer first); the library reads the rest.
    absent : callable, optional
        ``absent(array) -> (missing, block, fill) | None``: which stored blocks (chunks,
        shards) of the array were never written (``missing``, bool over the grid of blocks of
        shape ``block``), which read as ``fill``; the frames they hold are named in a note
        (:attr:`frames_absent`: those frames, wholly or in part).

    Examples
    --------
    >>> src = ArrayFrames(lambda: (np.zeros((2, 3, 4, 5), np.float32), None), "TZYX", "mem", z=2)
    >>> src.n_frames, src.frame_shape, src.read(0, 2).shape
    (2, (4, 5), (2, 4, 5))
    """

    memory_mapped = False
    volumes = None  # a T x Z stack's HoldsVolumes (its planes read as frames), else None

    def __init__(self, opener, axes, name, *, channel=None, z=None, pixel_size=None,
                 channel_names=(), fmt="array", paths=(), notes=(), stored=None, absent=None):
        self._opener, self.name, self.format, self._store_of = opener, str(name), fmt, stored
        self._stored = None
        self.paths = [Path(p) for p in paths]
        self._notes = list(notes)
        self._absent, self._frames_absent = absent, None
        self._array, self._closer = None, None
        array = self._open()
        try:
            self._layout(array, axes.upper(), channel, z)
        except BaseException:
            self.close()
            raise
        self.pixel_size = pixel_size
        self.frame_interval = None  # (seconds, where the format says: OME-Zarr's time axis)
        self.z_step = None  # (between Z planes, in the pixel size's unit: OME-Zarr's z axis)
        names = list(channel_names or ())
        self.channel_names = names if len(names) == self.n_channels else []

    def _open(self):
        if self._array is None:
            with library_errors(self.name, "open"):
                self._array, self._closer = self._opener()
            if self._store_of is not None:
                try:
                    self._stored = self._store_of(self._array)
                except Exception:  # noqa: BLE001 (a speed-up only: the library reads it)
                    self._stored = None
            self.memory_mapped = isinstance(self._array, np.ndarray)
        return self._array

    @property
    def concurrent_reads(self) -> bool:
        """Whether several threads may read at once and gain by it: a memory map copied out
        (as a TIFF's), or stored bytes read by pread straight into the buffers (h5py
        serializes its calls; a second thread gains nothing from it)."""
        return self.memory_mapped or (self._stored is not None and self._direct)

    def _layout(self, array, axes, channel, z):
        shape = tuple(int(n) for n in array.shape)
        self.shape, self.axes = shape, axes
        chunks = getattr(array, "chunks", None)
        self.chunks = tuple(int(c) for c in chunks) if chunks else None
        if len(axes) != len(shape) or "Y" not in axes or "X" not in axes \
                or len(set(axes)) != len(axes):
            raise InputError(f"cannot interpret {self.name} as a stack of 2-D frames (axes "
                             f"{axes or '?'}, shape {shape}); it needs one Y and one X axis")
        dtype = np.dtype(array.dtype)
        if dtype.newbyteorder("=") not in SUPPORTED_DTYPES:
            raise InputError(f"{self.name} has pixel type {dtype}, which xcorr cannot read; "
                             f"convert it to one of {', '.join(map(str, SUPPORTED_DTYPES))}")
        self.dtype = dtype.newbyteorder("=")
        if 0 in shape:
            raise InputError(f"{self.name} holds a zero-size image (shape {shape}); give a "
                             "file with image data")
        colour = [a for a in axes if a in "CS"]
        if len(colour) > 1:
            raise InputError(f"{self.name} has both channels and color samples (axes {axes}); "
                             "save one channel as a separate file")
        self.n_channels = shape[axes.index(colour[0])] if colour else 1
        if channel is None and self.n_channels > 1:
            raise ChannelsNeeded(f"{self.name} has {self.n_channels} channels (axes {axes}); "
                                 f"pass --channel with a number from 0 to "
                                 f"{self.n_channels - 1} to pick one")
        if channel is not None and not 0 <= channel < self.n_channels:
            valid = (f"0 to {self.n_channels - 1}" if self.n_channels > 1
                     else "0 or leave --channel out")
            raise InputError(f"--channel {channel} is out of range: {self.name} has "
                             f"{plural(self.n_channels, 'channel')}; use {valid}")
        fixed = {}
        if colour:
            fixed[axes.index(colour[0])] = channel or 0
        if z is not None:
            if "Z" not in axes:
                raise InputError(f"--z {z}: {self.name} has no Z axis (axes {axes}); leave "
                                 "--z out")
            nz = shape[axes.index("Z")]
            if not 0 <= z < nz:
                raise InputError(f"--z {z} is out of range: {self.name} has "
                                 f"{plural(nz, 'Z plane')}; use 0 to {nz - 1}")
            fixed[axes.index("Z")] = z
        self._fixed = fixed
        self._frame_axes = [i for i, a in enumerate(axes) if a not in "YX" and i not in fixed]
        self._frame_shape_lead = tuple(shape[i] for i in self._frame_axes) or (1,)
        self.frame_axes = "".join(axes[i] for i in self._frame_axes)
        # (letter, size) of each frame axis, in the order frames are numbered
        self.frame_layout = tuple(zip(self.frame_axes, self._frame_shape_lead))
        self.n_frames = math.prod(self._frame_shape_lead)
        self._note_planes(axes, shape, z)
        self.frame_shape = (shape[axes.index("Y")], shape[axes.index("X")])
        # the order of the axes a slice keeps (the last frame axis, Y, X in file order)
        kept = [i for i in range(len(axes)) if i not in fixed
                and (axes[i] in "YX" or (self._frame_axes and i == self._frame_axes[-1]))]
        want = ([self._frame_axes[-1]] if self._frame_axes else []) + [axes.index("Y"),
                                                                       axes.index("X")]
        self._order = [kept.index(i) for i in want]
        # frames a slice gives as they lie: read straight into a caller's buffer (_read_into)
        self._direct = bool(self._frame_axes) and self._order == list(range(len(self._order)))

    @property
    def short_name(self) -> str:
        """The source's name in notes: ``FILE.h5:/dataset`` as the file's name and dataset."""
        file = str(self.paths[0]) if self.paths else ""
        return Path(file).name + self.name[len(file):] if self.name.startswith(file) and file \
            else Path(self.name).name

    def _note_planes(self, axes, shape, z):
        """Z planes read as frames: said in a note; a T x Z stack's are volumes
        (:attr:`volumes`, what :func:`~._tiff.check_planes` refuses where frames are
        registered)."""
        planes = shape[axes.index("Z")] if "Z" in axes and z is None else 1
        if planes < 2:
            return
        name = self.short_name
        times = shape[axes.index("T")] if "T" in axes else 1
        if times < 2:
            self._notes.append(f"{name}: every Z plane is a frame (axes {axes}); pass --z to "
                               "align one plane")
            return
        self.volumes = HoldsVolumes(self.name, times, planes, axes)
        first, then = ("T", "Z") if axes.index("T") < axes.index("Z") else ("Z", "T")
        self._notes.append(f"{name} holds {plural(times, 'volume')} of "
                           f"{plural(planes, 'Z plane')}: read plane by plane, {first} then "
                           f"{then}")

    @property
    def notes(self) -> list:
        """What the reader noticed (a list of lines), the frames of chunks never stored among
        them (found at the first look: a task that only reads its frames pays nothing)."""
        self._find_absent()
        return self._notes

    @notes.setter
    def notes(self, value):
        self._notes = list(value)

    @property
    def frames_absent(self) -> np.ndarray:
        """(N,) bool: the frames some of whose stored chunks are missing (they read as the fill
        value, wholly or in part)."""
        self._find_absent()
        return self._frames_absent

    def _find_absent(self):
        if self._frames_absent is not None:
            return
        self._frames_absent = np.zeros(self.n_frames, bool)
        if self._absent is None:
            return
        was_open = self._array is not None
        try:
            self._note_absent(self._absent, self._open())
        finally:
            if not was_open:  # (a look after close: the file closed again)
                self.close()

    def _note_absent(self, absent, array):
        """:attr:`frames_absent` and a note naming them, from ``absent(array)`` (see the
        class's parameters); nothing where the format cannot tell (a diagnosis only)."""
        try:
            found = absent(array)
        except Exception:  # noqa: BLE001 (a store that cannot list its chunks: read as it is)
            found = None
        if found is None or not np.asarray(found[0]).any():
            return
        missing, block, fill = found
        missing = np.asarray(missing, bool)
        yx = (self.axes.index("Y"), self.axes.index("X"))
        wholly = missing.all(axis=yx)
        partly = missing.any(axis=yx)
        index = []  # the block of every frame along the axes left (the frame axes: open grids)
        lead = [i for i in range(len(self.axes)) if i not in yx]
        for i in lead:
            if i in self._fixed:
                index.append(self._fixed[i] // block[i])
            else:
                k = self._frame_axes.index(i)
                shape = [1] * len(self._frame_axes)
                shape[k] = self.shape[i]
                index.append((np.arange(self.shape[i]) // block[i]).reshape(shape))
        wholly, partly = (np.broadcast_to(np.asarray(m[tuple(index)]),
                                          self._frame_shape_lead).reshape(-1)
                          for m in (wholly, partly))
        self._frames_absent = partly.copy()
        name = self.short_name
        try:
            fill = f"{float(0 if fill is None else fill):g}"
        except (TypeError, ValueError):
            fill = repr(fill)
        if wholly.any():
            self._notes.append(
                f"{name}: no data stored for {frame_ranges(wholly)} ({int(wholly.sum())} of "
                f"{self.n_frames} frames; chunks never written, or lost): read as the fill "
                f"value {fill}, not measured")
        some = partly & ~wholly
        if some.any():  # (a note only: a writer may leave out chunks of the fill value)
            self._notes.append(
                f"{name}: part of {frame_ranges(some)} is not stored (chunks never written, or "
                f"lost) and reads as the fill value {fill} (a writer may leave out chunks of "
                "the fill value alone: where those parts were blank, nothing is lost)")

    def source_name(self, i):
        return Path(self.name).name

    def source_names(self):
        return [Path(self.name).name] * self.n_frames

    def _key(self, lead, count):
        """The array's index of frames ``lead`` (an index over the frame axes) and the
        ``count - 1`` after it along the last frame axis."""
        key = []
        for i, a in enumerate(self.axes):
            if i in self._fixed:
                key.append(self._fixed[i])
            elif a in "YX":
                key.append(slice(None))
            else:
                k = self._frame_axes.index(i)
                last = k == len(self._frame_axes) - 1
                key.append(slice(lead[k], lead[k] + count) if last else lead[k])
        return tuple(key)

    def _slice(self, array, lead, count):
        """Frames ``lead`` and the ``count - 1`` after it (:meth:`_key`): ``(count, H, W)``."""
        block = np.asarray(array[self._key(lead, count)])
        block = np.transpose(block, self._order)
        return block if self._frame_axes else block[None]

    def _read_into(self, array, lead, dest) -> bool:
        """Read ``len(dest)`` frames from ``lead`` straight into ``dest`` (its stored bytes by
        ``os.preadv``, h5py's ``read_direct``, zarr's ``out=``) where the file's axes need no
        transpose; False
        where it cannot.  A block read into a new array first costs its allocation's page
        faults and a second copy, which more than doubled a one-shot run's reading of an HDF5
        stack."""
        if not self._direct or not dest.flags.c_contiguous:
            return False
        key = self._key(lead, len(dest))
        stored = self._stored
        if stored is not None and stored.dtype == dest.dtype:
            try:
                if stored.read(dest, key):
                    return True
            except EOFError as exc:
                raise InputError(f"{self.name} ended while it was read ({exc}); copy it "
                                 "again from the source") from None
        if hasattr(array, "read_direct") and hasattr(array, "id"):  # an h5py Dataset
            array.read_direct(dest, source_sel=key)
            return True
        if type(array).__module__.startswith("zarr") and np.dtype(array.dtype) == dest.dtype:
            try:  # zarr 3: an NDBuffer over dest (the CPU one: zarr's GPU mode would copy)
                from zarr.core.buffer.cpu import NDBuffer
            except ImportError:  # zarr 2 (Python 3.10): the array itself
                array.get_basic_selection(key, out=dest)
            else:
                array.get_basic_selection(key, out=NDBuffer.from_numpy_array(dest))
            return True
        return False

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Frames ``start`` to ``stop - 1``: ``(stop - start, H, W)`` of :attr:`dtype` (or
        written into ``out``), read one slice per run of the last frame axis."""
        if not 0 <= start <= stop <= self.n_frames:
            raise IndexError(f"frames {start}:{stop} are out of range for a stack of "
                             f"{self.n_frames} frames")
        if out is not None and out.shape != (stop - start, *self.frame_shape):
            raise InputError(f"out of shape {out.shape} cannot hold frames {start}:{stop}")
        result = out if out is not None else np.empty((stop - start, *self.frame_shape),
                                                      self.dtype)
        array = self._open()
        run = self._frame_shape_lead[-1]
        at = start
        while at < stop:
            lead = np.unravel_index(at, self._frame_shape_lead)
            count = min(stop - at, run - int(lead[-1]))
            dest, lead = result[at - start:at - start + count], [int(v) for v in lead]
            try:
                if not self._read_into(array, lead, dest):
                    dest[...] = self._slice(array, lead, count)
            except (XcorrError, MemoryError):
                raise
            except Exception as exc:
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                what = f"frame {at}" if count == 1 else f"frames {at} to {at + count - 1}"
                hint = missing_decoder(exc)
                raise InputError(f"cannot read {what} (counted from 0) of {self.name}: {hint}"
                                 if hint else
                                 f"cannot read {what} (counted from 0) of {self.name} "
                                 f"({type(exc).__name__}: {reason}); check that it is a "
                                 "complete, uncorrupted file") from exc
            at += count
        return result

    def close(self) -> None:
        """Close the file (reading again reopens it)."""
        closer, self._array, self._closer = self._closer, None, None
        stored, self._stored = self._stored, None
        if stored is not None:
            stored.close()
        if closer is not None:
            closer()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __len__(self) -> int:
        return self.n_frames

    def __repr__(self) -> str:
        return (f"<ArrayFrames {self.name}: {self.n_frames} frames of {self.frame_shape[0]}x"
                f"{self.frame_shape[1]} {self.dtype} (axes {self.axes})>")
