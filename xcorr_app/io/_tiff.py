"""One TIFF file as a sequence of 2-D frames: its layout (series, axes, channel), memory-mapped
pixels where the file allows it, page-by-page reads otherwise, and tifffile's failures as one-line
:class:`~xcorr_app.errors.InputError`.

Examples
--------
>>> frames = TiffFrames(Path("sample_data/cell_drift.tif"), None)
>>> frames.n_frames, frames.frame_shape, frames.read(0, 2).shape
(12, (120, 160), (2, 120, 160))
>>> frames.close()
"""

from __future__ import annotations

import collections
import contextlib
import errno
import math
import mmap
import os
from pathlib import Path

import numpy as np
import tifffile

from ..errors import InputError, XcorrError
from ._axes import AxesUnknown, ChannelsNeeded, given_axes
from ._pages import check_page_sizes, whole_pages
from ._pread import PreadFile, preadable

SUPPORTED_DTYPES = tuple(
    np.dtype(t) for t in ("uint8", "uint16", "int16", "float16", "float32", "float64")
)
"""Pixel types xcorr reads (anything else is refused with an :class:`InputError`)."""
#: tifffile's letters of an axis its file does not name (two of them: T x C? T x Z?)
UNNAMED = "QI"


def plural(n: int, word: str) -> str:
    """``"1 file"``, ``"2 files"``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


@contextlib.contextmanager
def one_line_errors(path, message):
    """A reading library's failure as one :class:`InputError` line naming ``path``:
    ``message(exc, reason)`` (the first line of the library's own message) says what failed;
    our own errors and running out of memory pass through."""
    try:
        yield
    except (XcorrError, MemoryError):
        raise
    except PermissionError:
        raise InputError(f"{path}: permission denied; xcorr needs to read it") from None
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(message(exc, reason)) from exc


def tiff_errors(path: Path):
    """Turn a failure of tifffile (or of the memory map) into a one-line :class:`InputError`."""
    return one_line_errors(path, lambda exc, reason: (
        f"cannot read {path} as a TIFF image ({reason}); check that it is a complete, "
        "uncorrupted TIFF file"))


# ------------------------------------------------------------------ whole-file check


def _declared_pages(tif) -> tuple[int | None, int]:
    """``(pages, pages per frame)`` the file's metadata announces (``None``: no count)."""
    with contextlib.suppress(Exception):
        if tif.is_imagej:
            meta = tif.imagej_metadata or {}
            images = int(meta.get("images", 1))
            return images, max(1, int(meta.get("channels", 1)))
        if tif.is_shaped and not tif.is_ome:
            first = tif.pages.first
            per_page = math.prod(first.shape)
            total = sum(math.prod(m["shape"]) for m in tif.shaped_metadata if "shape" in m)
            return (total // per_page if total and per_page else None), 1
    return None, 1


class TruncatedError(InputError):
    """A file whose pages end early: :attr:`readable` frames are whole, of :attr:`total`
    (``None`` when its header announces no count), :attr:`why` it breaks, :attr:`per_frame`
    pages a frame (ImageJ channels), and whether the whole frames' pixels lie in one run after
    the first page (:attr:`contiguous`: their pages' entries are missing)."""

    def __init__(self, message, readable, total, why, per_frame=1, contiguous=False):
        super().__init__(message)
        self.readable, self.total, self.why = readable, total, why
        self.per_frame, self.contiguous = per_frame, contiguous


def missing_decoder(exc) -> str | None:
    """What to install where ``exc`` (a reading library's failure) says the data's
    compression has no decoder here, else None."""
    text = str(exc)
    if "requires the 'imagecodecs' package" in text or (
            isinstance(exc, ModuleNotFoundError)
            and (exc.name or "").split(".")[0] in DECODER_MODULES):
        return "its compression needs a decoder that is not installed: pip install " \
               "'xcorr-app[codecs]' (imagecodecs)"
    if ("plugin" in text and "can't open directory" in text) or (
            "filter" in text and ("not registered" in text or "not available" in text)):
        return "its compression filter is not installed in HDF5: pip install " \
               "'xcorr-app[codecs]' (hdf5plugin)"
    return None


#: modules tifffile decodes a compression with where imagecodecs is not installed
DECODER_MODULES = {"imagecodecs", "compression", "zstandard", "lz4", "blosc", "blosc2",
                   "brotli", "zfpy", "lerc", "lzf"}


class HoldsVolumes(InputError):
    """A file whose frames are volumes (:attr:`times` time points of :attr:`planes` Z planes,
    its :attr:`axes`), given where 2-D frames are read: registering its planes as frames
    would mix depth with drift."""

    def __init__(self, path, times, planes, axes, folder=False):
        #: how one plane is picked: ``--z K`` of a file; of a folder, one file's (``FILE?z=K``)
        self.one_plane = "one file's plane, FILE?z=K" if folder else "--z K, or PATH?z=K"
        super().__init__(
            f"{path} holds volumes: {plural(times, 'time point')} of {plural(planes, 'Z plane')} "
            f"(axes {axes}); register them in 3-D (xcorr align --volumes, or "
            f"xcorr_app.alignment.align_volumes) or pick one plane ({self.one_plane})")
        self.times, self.planes, self.axes = times, planes, axes


def _series_name(series) -> str:
    """A series as listed to pick one: its name where the file gives one, and its shape."""
    name = getattr(series, "name", "") or ""
    shape = "x".join(map(str, series.shape))
    return f"{name} ({shape} {series.axes})" if name and name not in ("Shaped", "Generic") \
        else f"{shape} {series.axes}"


def series_index(named, series_list, path) -> int:
    """The index of the series ``named`` (its index, or its name) of ``series_list``."""
    text = str(named).strip().strip("/")
    names = [getattr(s, "name", "") or "" for s in series_list]
    if text.isdigit() and int(text) < len(series_list):
        return int(text)
    if text in names:
        return names.index(text)
    listed = "; ".join(f"{i}: {_series_name(s)}" for i, s in enumerate(series_list))
    raise InputError(f"{path} has no image series {named!r}; it holds "
                     f"{len(series_list)} ({listed}): name one by its index or name")


def _one_page_each(series_list) -> int:
    """How many of the leading image series are one page of the first's shape, type and axes
    (a frame a series, as a writer called once a frame makes them): every one of them, or
    those before a last run of others (a thumbnail, an odd page appended: left out); 0 where
    there are fewer than two such, or where frames of the first's kind follow others (frames
    of two shapes: no stack)."""
    first = series_list[0]

    def frame(s):
        return len(s.pages) == 1 and s.shape == first.shape and s.dtype == first.dtype \
            and s.axes == first.axes and s.keyframe.shape == s.shape

    kinds = [frame(s) for s in series_list]
    run = kinds.index(False) if False in kinds else len(kinds)
    return run if run >= 2 and not any(kinds[run:]) else 0


def volumes_of(frames, path):
    """:class:`HoldsVolumes` (not raised) where ``frames`` (:class:`TiffFrames`) are the planes
    of a T x Z stack (both longer than 1: a Z stack alone, or a time series of single planes,
    are frames), else None."""
    times, planes = (frames.lead_sizes.get(a, 1) for a in "TZ")
    return HoldsVolumes(path, times, planes, frames.axes) if times > 1 and planes > 1 else None


def check_planes(src) -> None:
    """Raise the source's :class:`HoldsVolumes` where its frames are the planes of volumes
    (:func:`volumes_of`): a run that registers frames (``align``) refuses them; filtering or
    viewing them plane by plane is fine."""
    volumes = getattr(src, "volumes", None)
    if volumes is not None:
        raise volumes


def check_whole(tif, path: Path) -> None:
    """Raise :class:`TruncatedError` (an :class:`InputError`) naming the frame where ``path``
    breaks, when its pages end early or it holds fewer pages than its metadata announces; a
    whole file passes.

    Examples
    --------
    >>> with tifffile.TiffFile("sample_data/moon_drift.tif") as tif:
    ...     check_whole(tif, Path("sample_data/moon_drift.tif"))
    """
    found, why = whole_pages(tif)
    declared, per_frame = _declared_pages(tif)
    contiguous = False
    if declared and found <= 1 < declared:
        # ImageJ (and tifffile) may store a stack's pixels in one run after the first page's
        # entries, the other pages' entries last or (ImageJ over 4 GiB) not at all: count the
        # frames whose pixels the file holds
        first = tif.pages.first
        page_bytes = sum(first.databytecounts)
        if first.is_contiguous and first.compression == 1 and page_bytes:
            in_file = (tif.filehandle.size - first.dataoffsets[0]) // page_bytes
            if why is None and in_file >= declared:
                return
            contiguous = in_file > found
            found = max(found, min(declared, in_file))
            why = why or "the file ends inside its pixel data"
    if why is None and (declared is None or found >= declared):
        return
    if why is None:
        why = f"it holds {plural(found, 'page')} but its header announces {declared}"
    total = declared // per_frame if declared else None
    of = f" of {total}" if total else ""
    readable = found // per_frame
    # (no whole frame before the break: nothing --readable-frames could use)
    before = "" if readable < 1 else (
        ", or use the frames before it (the command line's --readable-frames; in Python, "
        "inside `with xcorr_app.io.readable_frames(path):`)")
    raise TruncatedError(f"{path} is truncated or damaged after frame {readable}{of} ({why}); "
                         f"copy it again from the source{before}", readable, total, why,
                         per_frame, contiguous)


#: files found whole in this process, by (path, size, modification time): every reader of a
#: run opens the file again (a thread per GPU, the pipeline's reopen), and the walk over the
#: pages costs about 9 us a page, so it is done once per file version, not once per open
_WHOLE: set = set()


#: files (or folders) whose readable frames may be used when they are truncated (resolved paths,
#: see :func:`readable_frames`)
_READABLE: set = set()


@contextlib.contextmanager
def readable_frames(path):
    """Inside the block, a truncated TIFF file at ``path`` (or in the folder ``path``) opens
    with its whole frames only, and a note (``notes``, starting ``warning:``) names the file
    and the first frame that cannot be read, where it would otherwise raise
    :class:`TruncatedError`.  Every open of the file in this process is concerned (a reader
    per GPU, the pipeline's reopen, the writer of the aligned stack): ``xcorr align`` and
    ``xcorr filter --readable-frames``.

    Examples
    --------
    >>> with readable_frames("cut.tif"):  # doctest: +SKIP
    ...     src = open_stack("cut.tif")  # the frames before the cut
    """
    key = Path(path).resolve()
    added = key not in _READABLE
    _READABLE.add(key)
    try:
        yield
    finally:
        if added:
            _READABLE.discard(key)


def readable_allowed(path: Path) -> bool:
    """Whether a truncated ``path`` may be read up to its cut (:func:`readable_frames`)."""
    if not _READABLE:
        return False
    key = Path(path).resolve()
    return key in _READABLE or key.parent in _READABLE


def check_whole_once(tif, path: Path) -> None:
    """:func:`check_whole`, skipped for a file this process already found whole (unchanged
    since: same size and modification time)."""
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _WHOLE:
        check_whole(tif, path)
        _WHOLE.add(key)


class TiffFrames:
    """The frames of one image series of one TIFF file: ``series`` (its index or name, as text
    or int), else the first, where no other series holds frames of its shape (a file of
    several positions names the one wanted; a thumbnail's series is left out, with a note).

    Opened once to learn the layout; :meth:`read` reopens it after :meth:`close`.
    """

    def __init__(self, path: Path, channel: int | None, axes: str | None = None,
                 series=None):
        self.path = path
        self._named = series  # the series asked for, else None
        self._series = 0  # the index of the series read
        self.notes: list[str] = []
        self._given = axes  # the caller's names of the series' axes (io._axes), else None
        self._tif = None  # open tifffile.TiffFile (page-by-page reading)
        self._mmap = None  # read-only memory map of the file
        self._pages = None  # (n_pages, *page_shape) view into the memory map
        self._offset = None  # the pixels' file offset, where pread may copy them (_read_into)
        self._file = None  # the file, opened for pread (a PreadFile)
        self._readable = readable_allowed(path)  # a truncated file: use its whole frames
        self._cut = None  # the TruncatedError of such a file
        self._by_page = False  # frames are the file's pages (a series a frame: written one by one)
        try:
            with tiff_errors(path):
                self._tif = tifffile.TiffFile(path)  # opens the file read-only
                try:
                    check_whole_once(self._tif, path)
                except TruncatedError as exc:
                    if not self._readable or exc.readable < 1:
                        raise
                    self._cut = exc
                self._parse(channel)
                self._map()
                if self._pages is None:  # read page by page: no page may be of another size
                    cut = self._cut
                    check_page_sizes(
                        self._tif, self._tif.pages[:self._n_pages] if self._by_page
                        else self._tif.series[self._series] if cut is None
                        else self._tif.pages[:cut.readable * cut.per_frame], path)
                if self._cut is not None:
                    self._keep_readable()
        except BaseException:
            self.close()
            raise
        self.memory_mapped = self._pages is not None

    def _says_z(self) -> bool:
        """Whether the file means its Z axis: not a plain ImageJ stack (Fiji saves a time
        series it was not told is one as ``slices``, which tifffile reads as Z)."""
        with contextlib.suppress(Exception):
            if self._tif.is_imagej:
                return bool((self._tif.imagej_metadata or {}).get("hyperstack"))
        return True

    @property
    def cut(self):
        """The :class:`TruncatedError` of a file read up to its cut (:func:`readable_frames`),
        else None."""
        return self._cut

    def _keep_readable(self):
        """A truncated file under :func:`readable_frames`: say which frames are used."""
        n, total = self.n_frames, self._cut.total
        lost = ("no frame is lost" if total == n else f"frames {n} to {total - 1} cannot be read"
                if total else f"frame {n} and later cannot be read")
        self.notes.append(f"warning: {self.path} is truncated or damaged ({self._cut.why}): "
                          f"{lost}; using frames 0 to {n - 1} (counted from 0; "
                          "readable_frames)")

    def _parse(self, channel):
        """The layout: from the first image series, or for a truncated file (under
        :func:`readable_frames`) from its whole pages (tifffile's series of such a file may
        be wrong or fail)."""
        if self._named is not None and self._cut is not None:
            # (a damaged file's whole pages are read as its first series': another named
            # would be read from them wrong; its series as tifffile lists them may be wrong)
            raise InputError(f"{self.path} is truncated or damaged ({self._cut.why}): its "
                             f"image series {self._named} cannot be read from its whole pages; "
                             "copy it again from the source")
        layout = self._series_layout() if self._cut is None else self._page_layout()
        self._set_layout(channel, *layout)

    def _page_layout(self):
        cut, page = self._cut, self._tif.pages.first
        with contextlib.suppress(Exception):  # (its T and Z as ImageJ declares them)
            meta = self._tif.imagej_metadata or {} if self._tif.is_imagej else {}
            times, planes = int(meta.get("frames", 1)), int(meta.get("slices", 1))
            if times > 1 and planes > 1:
                self._declared_tz = (times, planes)
        shape = (cut.readable, *((cut.per_frame,) if cut.per_frame > 1 else ()), *page.shape)
        axes = ("TC" if cut.per_frame > 1 else "T") + page.axes
        dtype = None if page.dtype is None else np.dtype(page.dtype)
        return shape, axes, tuple(page.shape), page.axes, dtype, cut.readable * cut.per_frame

    def _series_layout(self):
        series_list = self._tif.series
        if self._named is not None and series_list:
            self._series = series_index(self._named, series_list, self.path)
            series_list = [series_list[self._series]]
        if not series_list:
            raise InputError(f"{self.path} contains no image; give a TIFF file with image data")
        n = _one_page_each(series_list) if len(series_list) > 1 else 0
        if n:
            # (tifffile's writer called once a frame, as an acquisition loop does: a stack)
            self._by_page = True
            page = series_list[0].keyframe
            dtype = None if page.dtype is None else np.dtype(page.dtype)
            self._n_pages = n
            left = len(series_list) - n
            self.notes.append(f"{self.path.name} holds {n} image series of one "
                              f"{'x'.join(map(str, page.shape))} page each: read as {n} frames"
                              + (f"; the {left} series after them, of another "
                                 "shape or kind, left out" if left else ""))
            return (n, *page.shape), "T" + page.axes, tuple(page.shape), page.axes, dtype, n
        if len(series_list) > 1:
            shapes = collections.Counter("x".join(map(str, s.shape)) for s in series_list)
            if all(len(s.pages) == 1 for s in series_list) and len(shapes) > 1 \
                    and shapes["x".join(map(str, series_list[0].shape))] > 1:
                # (frames written one by one with one of another shape among them: reading
                # the first alone would align one frame)
                kinds = ", ".join(f"{k} of {shape}" for shape, k in shapes.most_common())
                raise InputError(f"{self.path} holds {len(series_list)} image series of one "
                                 f"page each, not of one shape ({kinds}); xcorr reads a stack "
                                 "of frames of one shape: write the frames of each shape to a "
                                 "file of their own")
            frame = series_list[0].keyframe.shape
            alike = [i for i, s in enumerate(series_list) if s.keyframe.shape == frame]
            if len(alike) > 1:  # (positions of one acquisition: which is meant?)
                listed = "; ".join(f"{i}: {_series_name(series_list[i])}" for i in alike)
                raise InputError(
                    f"{self.path} holds {len(alike)} image series of "
                    f"{'x'.join(map(str, frame))} frames ({listed}); name one: "
                    f"{self.path}:{alike[1]} or --dataset {alike[1]} (its index or name)")
            self.notes.append(
                f"{self.path.name} holds {len(series_list)} image series; read only the first"
                " (the others' frames are of other shapes)")
        series = series_list[0]
        page = series.keyframe
        dtype = None if series.dtype is None else np.dtype(series.dtype)
        return (tuple(series.shape), series.axes, tuple(page.shape), page.axes, dtype,
                len(series))

    def _set_layout(self, channel, shape, axes, page_shape, page_axes, dtype, n_pages):
        if dtype is None or dtype not in SUPPORTED_DTYPES:  # (None == float64 in NumPy)
            raise InputError(
                f"{self.path} has pixel type {dtype or 'unknown'}, which xcorr cannot read; "
                f"convert it to one of {', '.join(map(str, SUPPORTED_DTYPES))}"
            )
        if 0 in shape or 0 in page_shape:
            raise InputError(f"{self.path} holds a zero-size image (shape {shape}); "
                             "give a file with image data")
        n_lead = len(shape) - len(page_shape)
        if self._given is not None:
            said = None if set(axes) & set(UNNAMED) else axes  # (tifffile's Q: no claim)
            axes = given_axes(said, self._given, self.path.name, shape, self.notes)
            if n_lead >= 0 and axes[n_lead:] != page_axes:
                raise InputError(f"axes={axes}: the pages of {self.path} are {page_axes} "
                                 f"(shape {shape}); a TIFF's axes end in its pages' axes")
        elif sum(a in UNNAMED and n > 1 for a, n in zip(axes[:max(n_lead, 0)], shape)) > 1:
            raise AxesUnknown(f"{self.path} holds {len(shape)}-D data (shape {shape}) whose "
                              f"file names no axes ({axes}); name them, e.g. axes=TZYX "
                              "(volumes) or axes=TCYX (channels)", len(shape))
        if (n_lead < 0 or shape[n_lead:] != page_shape or axes[n_lead:] != page_axes
                or math.prod(shape[:n_lead]) != n_pages
                or page_axes.replace("S", "") != "YX"):
            raise InputError(
                f"cannot interpret {self.path} as a stack of 2-D frames (axes {axes}, shape "
                f"{shape}); save it as a stack of 2-D grayscale images"
            )
        channel_axes = [i for i, a in enumerate(axes) if a in "CS"]
        if len(channel_axes) > 1:
            raise InputError(f"{self.path} has both channels and color samples (axes {axes}); "
                             "save one channel as a separate file")
        n_channels = shape[channel_axes[0]] if channel_axes else 1
        if channel is None and n_channels > 1:
            raise ChannelsNeeded(
                f"{self.path} has {n_channels} channels (axes {axes}); pass channel=K with K a "
                f"number from 0 to {n_channels - 1} to pick one"
            )
        if channel is not None and not 0 <= channel < n_channels:
            valid = f"0 to {n_channels - 1}" if n_channels > 1 else "0 or leave channel out"
            raise InputError(f"channel {channel} is out of range: {self.path} has "
                             f"{plural(n_channels, 'channel')}; use {valid}")
        self._channel = channel or 0
        self.n_channels = n_channels
        self.axes = axes
        self.lead_sizes = dict(zip(axes[:n_lead], shape[:n_lead]))  # e.g. {"T": 12, "Z": 32}
        declared = getattr(self, "_declared_tz", None)  # (a truncated file's whole pages)
        if declared is not None and self._given is None:
            self.lead_sizes.update(T=declared[0], Z=declared[1])
            self.axes = "TZ" + axes[n_lead:]
        # Index arithmetic over the page axes; the leading 1 keeps it valid for a single page.
        self._lead_shape = (1, *shape[:n_lead])
        self._lead_c = self._sample_axis = None
        if channel_axes and channel_axes[0] < n_lead:
            self._lead_c = channel_axes[0] + 1
        elif channel_axes:
            self._sample_axis = channel_axes[0] - n_lead  # axis within a page
        self._frame_lead_shape = tuple(
            n for i, n in enumerate(self._lead_shape) if i != self._lead_c)
        # (letter, size) of each frame axis, in the order frames are numbered
        self.frame_layout = tuple((a, n) for i, (a, n) in enumerate(zip(axes, shape[:n_lead]))
                                  if i + 1 != self._lead_c)
        self._page_shape = page_shape
        self.n_frames = math.prod(self._frame_lead_shape)
        # a Z stack the file means as one (a folder of them: a volume a file)
        self.z_stack = [a for a, _ in self.frame_layout] == ["Z"] and self.n_frames > 1 \
            and self._says_z()
        if self.z_stack:
            # (as the other formats say it: a focal series is no time series)
            self.notes.append(f"{self.path.name}: every Z plane is a frame (axes {axes})")
        self.frame_shape = tuple(n for a, n in zip(page_axes, page_shape) if a != "S")
        self.dtype = dtype

    def _map(self):
        """Memory-map the pixels (dropping the TiffFile) when stored uncompressed in one run."""
        page_size = math.prod(self._page_shape)
        if self._by_page:
            return  # read page by page: the series' pages need not lie in one run
        if self._cut is None:
            series = self._tif.series[self._series]
            keyframe, offset, n_pages = series.keyframe, series.dataoffset, series.size // page_size
        elif self._cut.contiguous:  # the whole frames' pixels in one run after the first page
            keyframe = self._tif.pages.first
            offset, n_pages = keyframe.dataoffsets[0], self._cut.readable * self._cut.per_frame
        else:
            return  # read page by page: the pages before the cut are whole
        if offset is None or not keyframe.is_memmappable:
            return
        dtype = np.dtype(self._tif.byteorder + keyframe.dtype.char)
        with open(self.path, "rb") as fh:
            try:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except OSError as exc:
                if exc.errno == errno.ENOMEM:  # no address space for the file (a ulimit -v)
                    return  # read page by page
                raise
            file = PreadFile(os.dup(fh.fileno())) if preadable(dtype) else None
        whole = max(0, len(mm) - offset) // (page_size * dtype.itemsize)
        if whole < n_pages:
            mm.close()
            if file is not None:
                file.close()
            per_frame = self.n_channels if self._lead_c is not None else 1
            why = "the file ends inside its pixel data"
            raise TruncatedError(f"{self.path} is truncated or damaged after frame "
                                 f"{whole // per_frame} of {self.n_frames} ({why}); copy it "
                                 "again from the source", whole // per_frame, self.n_frames, why)
        self._mmap = mm
        self._pages = np.frombuffer(mm, dtype, n_pages * page_size, offset).reshape(
            (-1, *self._page_shape))
        # where whole pages in the machine's byte order are copied into a caller's buffer by
        # pread instead (see _read_into), from the file that was mapped
        self._offset = offset if file is not None else None
        self._file = file
        self._tif.close()
        self._tif = None

    @property
    def stored(self):
        """``(path, byte offset)`` where the frames lie uncompressed in one run, a page each, in
        the machine's byte order (what :class:`~xcorr_app.streaming.DeviceChunks` copies to
        the GPU straight from the file's pages), else None."""
        if self._offset is None or self._lead_c is not None or self._sample_axis is not None:
            return None
        return str(self.path), int(self._offset)

    def read(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        if self._tif is None and self._pages is None:  # closed: reopen
            with tiff_errors(self.path):
                self._tif = tifffile.TiffFile(self.path)
                self._map()
        if (out is not None and self._pages is not None and self._lead_c is None
                and self._sample_axis is None):
            with tiff_errors(self.path):
                if not self._read_into(out, start, stop):
                    np.copyto(out, self._pages[start:stop])  # one copy: memory map -> buffer
            return out
        frames = np.arange(start, stop)
        pages = frames
        if self._lead_c is not None:
            index = list(np.unravel_index(frames, self._frame_lead_shape))
            index.insert(self._lead_c, np.full_like(frames, self._channel))
            pages = np.ravel_multi_index(index, self._lead_shape)
        with tiff_errors(self.path):
            if self._pages is not None:
                data = self._pages[pages]
            else:
                data = self._decode(frames, pages)
        if self._sample_axis is not None:
            data = np.take(data, self._channel, axis=self._sample_axis + 1)
        if out is not None:
            np.copyto(out, data)  # converts to native byte order
            return out
        return data.astype(self.dtype, copy=False)  # native byte order

    def _read_into(self, out, start, stop) -> bool:
        """Copy pages ``start:stop`` into the C-contiguous ``out`` with ``os.preadv``
        (:mod:`._pread`: faster than out of the map in a new process); False where that does
        not apply (byte-swapped pixels, no ``preadv``, another layout of out)."""
        if (self._offset is None or self._file is None or not out.flags.c_contiguous
                or out.dtype != self._pages.dtype):
            return False
        if self._file.read_into(out, self._offset + start * self._pages[0].nbytes) \
                < out.nbytes:  # the file shrank under us
            raise TruncatedError(f"{self.path} ended while frames {start}:{stop} were read; "
                                 "copy it again from the source", start, self.n_frames,
                                 "the file ends inside its pixel data")
        return True

    def _decode(self, frames, pages):
        """Decode ``pages`` (of ``frames``); a page whose data cannot be decoded (a damaged
        compressed strip in a file whose structure is whole) is named by its frame."""
        # a truncated file, or one of a series a frame: its pages
        series = None if self._cut is not None or self._by_page else self._series
        try:
            data = self._tif.asarray(key=pages.tolist(), series=series)
        except (XcorrError, MemoryError, PermissionError):
            raise
        except Exception as exc:
            for frame, page in zip(frames.tolist(), pages.tolist()):  # which one: page by page
                try:
                    self._tif.asarray(key=page, series=series)
                except Exception as one:
                    hint = missing_decoder(one)
                    if hint:  # (a whole file: not damaged)
                        try:  # (its page of the file: a series' pages count apart)
                            kind = self._tif.pages[page].compression.name
                        except Exception:
                            kind = "its"
                        raise InputError(f"cannot read {self.path} ({kind} compression): "
                                         f"{hint}") from one
                    reason = (str(one).strip().splitlines() or [type(one).__name__])[0]
                    raise InputError(
                        f"cannot read frame {frame} (counted from 0) of {self.n_frames} in "
                        f"{self.path}: its data are damaged ({reason}); copy the file again "
                        "from the source") from one
            raise exc
        return data.reshape((len(pages), *self._page_shape))

    def close(self):
        self._pages = None
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._mmap is not None:
            with contextlib.suppress(BufferError):  # a view still alive: the GC closes it
                self._mmap.close()
            self._mmap = None
        if self._tif is not None:
            self._tif.close()
            self._tif = None
