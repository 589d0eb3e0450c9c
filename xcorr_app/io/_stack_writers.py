"""The aligned stack in the format asked (``--out-format tiff|ome-tiff|ome-zarr|hdf5|nwb``, or
``hdf5:/NAME`` naming the HDF5 dataset: :func:`parse_out_format`; NWB: :mod:`._nwb_out`):
writers with the interface of :class:`~xcorr_app.io._writer.TiffStackWriter` (``write(chunk)``,
``close()``, ``abort()``), each written under a hidden temporary name and renamed by the run's one commit
(:class:`~xcorr_app.io._writer.AtomicTarget`: an OME-Zarr store is a folder), chunked, with the
input's pixel size and channel names; :func:`as_dtype` for ``--keep-dtype``.

Examples
--------
>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "aligned.h5"
>>> with stack_writer(path, (4, 5), 3, keep=np.dtype("uint16")) as w:
...     w.write(np.full((3, 4, 5), 2.6, np.float32))
>>> import h5py
>>> with h5py.File(path) as f:
...     f["aligned"].dtype, int(f["aligned"][0, 0, 0]), f["aligned"].attrs["axes"]
(dtype('uint16'), 3, 'TYX')
"""

from __future__ import annotations

import contextlib
import math
import queue
import shutil
import threading
from pathlib import Path

import numpy as np

import tifffile

from ..backend import array_module_of, to_numpy
from ..errors import InputError, OutputError
from ._formats import length_unit, micrometers, need
from ._nwb_out import NwbCopy
from ._writer import AtomicTarget, TiffStackWriter, os_errors

__all__ = ["OUT_FORMATS", "aligned_name", "as_dtype", "stack_writer", "ZarrStackWriter",
           "Hdf5StackWriter", "OmeTiffStackWriter", "imagej_calibration", "usable_pixel_size",
           "check_keep", "out_format", "KEEP_DTYPES", "HDF5_DATASET", "parse_out_format",
           "parse_out_path", "NwbStackWriter"]

#: ``--out-format``: the name of the aligned stack in each
OUT_FORMATS = {"tiff": "aligned.tif", "ome-tiff": "aligned.ome.tif", "ome-zarr": "aligned.ome.zarr",
               "hdf5": "aligned.h5", "nwb": "aligned.nwb"}

#: the dataset of an HDF5 aligned stack where ``hdf5:/NAME`` names none
HDF5_DATASET = "/aligned"


def parse_out_format(spec) -> tuple:
    """``(format, dataset)`` of ``--out-format``/``format=`` ``spec``: a name of
    :data:`OUT_FORMATS`, or ``hdf5:/NAME`` naming the HDF5 dataset (``/a/b/data``: in groups);
    ``dataset``: the HDF5 output's (:data:`HDF5_DATASET` by default), else None.

    >>> parse_out_format("hdf5:/data"), parse_out_format("hdf5"), parse_out_format("tiff")
    (('hdf5', '/data'), ('hdf5', '/aligned'), ('tiff', None))
    >>> parse_out_format("hdf5:/scan/")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: format='hdf5:/scan/': the dataset '/scan/' names a group (it \
ends in /), not a dataset; write hdf5:/NAME, e.g. hdf5:/data
    """
    name, colon, dataset = spec.strip().partition(":") if isinstance(spec, str) else \
        (spec, "", "")
    if not isinstance(name, str) or name not in OUT_FORMATS:
        raise InputError(f"format={spec!r} is no format of the aligned stack; use one of "
                         f"{', '.join(OUT_FORMATS)} (hdf5:/NAME names the HDF5 dataset)")
    if not colon:
        return name, (HDF5_DATASET if name == "hdf5" else None)
    if name != "hdf5":
        raise InputError(f"format={spec!r}: only an HDF5 output holds a named dataset "
                         f"(hdf5:/NAME); write format={name}")
    return name, _dataset_name(dataset, f"format={spec!r}", "hdf5:/NAME, e.g. hdf5:/data")


def parse_out_path(spec) -> tuple:
    """``(path, dataset)`` of ``xcorr apply --out`` ``spec``: ``NAME.h5:/DATA`` names the
    HDF5 dataset (as the readers read ``FILE.h5:/DATA``); ``dataset``: the HDF5 output's
    (:data:`HDF5_DATASET` by default), else None.

    >>> parse_out_path("out/day2.h5:/scan/data"), parse_out_path("day2.tif")
    ((PosixPath('out/day2.h5'), '/scan/data'), (PosixPath('day2.tif'), None))
    """
    text = str(spec)
    lower = text.lower()
    for suffix in (".h5:", ".hdf5:", ".tif:", ".tiff:", ".zarr:"):
        at = lower.rfind(suffix)
        if at > 0:
            path, dataset = Path(text[:at + len(suffix) - 1]), text[at + len(suffix):]
            if suffix not in (".h5:", ".hdf5:"):
                raise InputError(f"--out {spec}: only an HDF5 output holds a named dataset "
                                 f"(NAME.h5:/DATA); write --out {path}")
            return path, _dataset_name(dataset, f"--out {spec}", f"{path}:/NAME, e.g. "
                                       f"{path}:/data")
    path = Path(text)
    return path, (HDF5_DATASET if out_format(path) == "hdf5" else None)


def _dataset_name(name, given, form) -> str:
    """``name`` (an HDF5 dataset's path) as ``/a/b`` where it names a dataset that a new file
    can hold, else an :class:`InputError` saying ``given`` and the ``form`` to write."""
    if not name.strip():
        raise InputError(f"{given} names no dataset: write {form}")
    path = name if name.startswith("/") else "/" + name
    parts = path[1:].split("/")
    why = ("names a group (it ends in /), not a dataset" if path.endswith("/") else
           "has an empty group name (//)" if "" in parts else
           "has a . or .. group name" if {".", ".."} & set(parts) else
           "holds a control character" if any(ord(c) < 32 or ord(c) == 127 for c in path)
           else None)
    if why:
        raise InputError(f"{given}: the dataset {name!r} {why}; write {form}")
    return path


#: frames in one chunk of a Zarr or HDF5 output (a few MiB for usual frames)
CHUNK_FRAMES = 16


def aligned_name(out_format: str) -> str:
    """The file name of the aligned stack in ``out_format`` (see :data:`OUT_FORMATS`)."""
    return OUT_FORMATS[out_format]


def as_dtype(frames, dtype):
    """``frames`` in ``dtype``: an integer type rounded to nearest (ties to even) and clipped to
    its range (NaN as 0); floats as they are.  A CuPy array stays on its device, anything else
    comes back as NumPy; frames already of ``dtype`` come back as they are (not copied).

    Examples
    --------
    >>> as_dtype(np.array([-3.0, 2.5, 3.5, 70000.0, np.nan]), np.dtype("uint16")).tolist()
    [0, 2, 4, 65535, 0]
    >>> as_dtype(np.array([-3, 7, 70000]), np.dtype("uint16")).tolist()
    [0, 7, 65535]
    """
    dtype = np.dtype(dtype)
    xp = array_module_of(frames)
    if xp is np:
        frames = np.asarray(to_numpy(frames))
    if frames.dtype == dtype:
        return frames
    if dtype.kind not in "iu":
        return frames.astype(dtype, copy=False)
    info = np.iinfo(dtype)
    if frames.dtype.kind not in "fc":  # (integers and booleans: nothing to round)
        return xp.clip(frames, info.min, info.max).astype(dtype)
    frames = frames.real if frames.dtype.kind == "c" else frames
    # float32 holds the bounds of 8- and 16-bit types exactly (float16 does not); wider ones
    # in float64, below 2**63 or 2**64 for 64-bit types (the nearest float64 rounds up)
    work = np.dtype(np.float64 if info.bits > 16 else np.promote_types(frames.dtype, np.float32))
    lo, hi = work.type(info.min), work.type(info.max)
    past = int(hi) > info.max  # (64-bit types: their largest value rounds up to a power of 2)
    if past:
        hi = np.nextafter(hi, work.type(0))
    # one new array, the rest in place; fmax takes the bound for NaN, which is NaN's 0 for
    # unsigned types: 7x faster than nan_to_num's passes (0.5 GiB: 2.8 -> 0.4 s, 2 cores)
    out = xp.fmax(frames.astype(work, copy=False), lo)
    if info.min != 0:
        xp.copyto(out, work.type(0), where=xp.isnan(frames))
    xp.fmin(out, hi, out=out)
    xp.rint(out, out=out)
    result = out.astype(dtype)
    if past:
        xp.copyto(result, dtype.type(info.max), where=frames >= work.type(info.max))
    return result


class _Writer:
    """What the Zarr and HDF5 writers share: the checks of every chunk and the frame count,
    the temporary name and its commit, pages written ``channels`` per time frame."""

    def __init__(self, path, frame_shape, dtype, n_frames, channels=1):
        self.path = Path(path)
        self.frame_shape = tuple(int(n) for n in frame_shape)
        self.dtype, self.n_frames = np.dtype(dtype), int(n_frames)
        self.channels, self.n_written = int(channels), 0
        if self.n_frames % self.channels:
            raise InputError(f"{self.n_frames} pages are no whole time frames of "
                             f"{self.channels} channels")
        self.shape = (self.n_frames // self.channels, *((self.channels,) if self.channels > 1
                                                        else ()), *self.frame_shape)
        self._target = AtomicTarget(self.path)
        self._tmp = self._target.tmp
        self._open = True

    def write(self, chunk) -> None:
        """Append pages: a ``(k, H, W)`` chunk or one ``(H, W)`` frame (``channels`` pages a
        time frame, in order)."""
        if not self._open:
            raise ValueError(f"writer for {self.path} is already closed")
        chunk = np.asarray(to_numpy(chunk))
        chunk = chunk[None] if chunk.ndim == 2 else chunk
        if chunk.shape[1:] != self.frame_shape:
            raise InputError(f"chunk of shape {chunk.shape} does not hold frames of shape "
                             f"{self.frame_shape}")
        if self.n_written + len(chunk) > self.n_frames:
            raise InputError(f"more than the {self.n_frames} announced frames written to "
                             f"{self.path}")
        chunk = as_dtype(chunk, self.dtype)
        with os_errors(self.path):
            self._put(self.n_written, chunk)
        self.n_written += len(chunk)

    def _put(self, at, chunk) -> None:
        """Store pages ``at:at + len(chunk)`` (in order) in :attr:`_store`."""
        c = self.channels
        if at % c == 0 and len(chunk) % c == 0:  # whole time frames: one slice
            self._store[at // c:(at + len(chunk)) // c] = chunk.reshape(
                self._store.shape[:1] and (-1, *self.shape[1:]))
        else:
            for page in range(len(chunk)):
                t, k = divmod(at + page, c)
                self._store[t, k] = chunk[page]

    def close(self) -> None:
        """Finish the output and hand it to the commit (renamed onto :attr:`path`)."""
        if not self._open:
            return
        if self.n_written != self.n_frames:
            self.abort()
            raise InputError(f"{self.n_written} frames written to {self.path}, expected "
                             f"{self.n_frames}")
        try:
            with os_errors(self.path):
                self._finish()
                self._open = False
                self._target.commit()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop writing and delete the temporary output; :attr:`path` is left untouched."""
        if self._open:
            with contextlib.suppress(Exception):
                self._finish()
            self._open = False
        if self._tmp.is_dir():
            shutil.rmtree(self._tmp, ignore_errors=True)
        self._target.discard()

    def _finish(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()


class ZarrStackWriter(_Writer):
    """An OME-Zarr image (OME-NGFF 0.4 on Zarr v2: read by napari, Fiji's N5/MoBIE, ome-zarr-py,
    xcorr; or 0.5 on Zarr v3 where ``metadata["ngff_version"]`` is ``"0.5"``: the input's) of
    one level, ``TYX`` or ``TCYX``, chunks of :data:`CHUNK_FRAMES` frames; the pixel size and
    the frame interval as its axes' scale, several channels with their names, colors and
    display windows (each channel's range of values written)."""

    def __init__(self, path, frame_shape, dtype, n_frames, channels=1, metadata=None):
        zarr = need("zarr")
        super().__init__(path, frame_shape, dtype, n_frames, channels)
        meta = metadata or {}
        axes = [{"name": "t", "type": "time"}]
        if self.channels > 1:
            axes.append({"name": "c", "type": "channel"})
        size = usable_pixel_size(meta.get("pixel_size"))
        unit = length_unit(size[2]) if size and len(size) > 2 else None
        for name in "yx":
            axes.append({"name": name, "type": "space", **({"unit": unit} if unit else {})})
        scale = [1.0] * (len(axes) - 2) + ([float(size[0]), float(size[1])] if size
                                           else [1.0, 1.0])
        if meta.get("frame_interval"):  # (the time axis in seconds: the frame interval)
            axes[0]["unit"], scale[0] = "second", float(meta["frame_interval"])
        chunks = (min(CHUNK_FRAMES, self.shape[0]), *self.shape[1:])
        v3 = int(zarr.__version__.split(".")[0]) >= 3  # (zarr 2 on Python 3.10)
        # (0.5 needs Zarr v3, which zarr 2 neither writes nor reads: its input was no 0.5)
        self.ngff_version = "0.5" if v3 and meta.get("ngff_version") == "0.5" else "0.4"
        try:  # (a store begun and failed: removed)
            with os_errors(self.path):
                level = {"path": "0", "coordinateTransformations": [
                    {"type": "scale", "scale": scale}]}
                image = {"name": self.path.name, "axes": axes, "datasets": [level]}
                if self.ngff_version == "0.5":  # (the version once, under "ome"; named axes)
                    root = zarr.open_group(str(self._tmp), mode="w", zarr_format=3)
                    self._store = root.create_array(
                        "0", shape=self.shape, chunks=chunks, dtype=self.dtype, fill_value=0,
                        dimension_names=[a["name"] for a in axes])
                    attrs = {"ome": {"version": "0.5", "multiscales": [image]}}
                else:
                    root = zarr.open_group(str(self._tmp), mode="w",
                                           **({"zarr_format": 2} if v3 else {}))
                    create = root.create_array if v3 else root.create_dataset
                    self._store = create("0", shape=self.shape, chunks=chunks,
                                         dtype=self.dtype, fill_value=0)
                    attrs = {"multiscales": [{"version": "0.4", **image}]}
                names = meta.get("channel_names") or []
                self._names = names if len(names) == self.channels else \
                    [f"channel {k}" for k in range(self.channels)] if self.channels > 1 else []
                root.attrs.update({**attrs, "xcorr": {"source": str(meta.get("source", ""))}})
        except BaseException:
            self.abort()
            raise
        self._root = root
        self._range = np.full((self.channels, 2), np.nan)  # each channel's (min, max) so far

    def _put(self, at, chunk) -> None:
        super()._put(at, chunk)
        if self._names:  # (the channels' display windows, written at the end)
            which = (at + np.arange(len(chunk))) % self.channels
            for k in range(self.channels):
                pages = chunk[which == k]
                finite = pages[np.isfinite(pages)] if pages.dtype.kind == "f" else pages
                if finite.size:
                    lo, hi = self._range[k]
                    self._range[k] = (np.fmin(lo, finite.min()), np.fmax(hi, finite.max()))

    def _finish(self):
        """The channels' names, colors and display windows (``omero``: napari's OME-Zarr
        reader and the OME-NGFF schema need a color and a window for each)."""
        if not self._names:
            return
        channels = []
        for k, name in enumerate(self._names):
            lo, hi = (float(v) for v in self._range[k])
            lo, hi = (0.0, 1.0) if not np.isfinite([lo, hi]).all() else (lo, max(hi, lo))
            channels.append({"label": str(name), "active": True,
                             "color": CHANNEL_COLORS[k % len(CHANNEL_COLORS)],
                             "window": {"min": lo, "max": hi, "start": lo, "end": hi}})
        omero = {"channels": channels, "rdefs": {"model": "color"}}
        with os_errors(self.path):
            if self.ngff_version == "0.5":
                self._root.attrs["ome"] = {**self._root.attrs["ome"], "omero": omero}
            else:
                self._root.attrs["omero"] = omero


#: the colors of an OME-Zarr output's channels, in turn (green, magenta, cyan, yellow...)
CHANNEL_COLORS = ("00FF00", "FF00FF", "00FFFF", "FFFF00", "FF0000", "0000FF", "FFFFFF")


def imagej_calibration(meta, n_frames=None, channels=1) -> dict:
    """``metadata`` and ``resolution`` of :class:`~xcorr_app.io.TiffStackWriter` carrying
    ``meta``'s pixel size, its unit, the frame interval and the Z step (``z_step``, in the
    pixel size's unit) into an ImageJ TIFF (what Fiji shows as the image's calibration), and
    the channels' names (a label a page; one channel's name
    too, on every page: ImageJ has no other place for it).

    >>> imagej_calibration({"pixel_size": (0.5, 0.25, "micrometer"), "frame_interval": 0.1})
    {'metadata': {'unit': 'um', 'finterval': 0.1, 'tunit': 'sec'}, 'resolution': (4.0, 2.0)}
    >>> imagej_calibration(None)
    {}
    """
    meta = meta or {}
    size, out, found = usable_pixel_size(meta.get("pixel_size")), {}, {}
    if size:
        unit = length_unit(size[2])
        found["unit"] = _IMAGEJ_UNITS.get(unit, str(size[2]) or "pixel")
        out["resolution"] = (1 / float(size[1]), 1 / float(size[0]))
    if meta.get("frame_interval"):
        found.update(finterval=float(meta["frame_interval"]), tunit="sec")
    if meta.get("z_step"):
        found["spacing"] = float(meta["z_step"])
    names = [str(n) for n in meta.get("channel_names") or []]
    if names and len(names) == channels and n_frames:
        found["Labels"] = names * (int(n_frames) // channels)
    return {"metadata": found, **out} if found else {}


#: ImageJ's names of the OME-NGFF length units (``um``: shown as µm)
_IMAGEJ_UNITS = {"micrometer": "um", "nanometer": "nm", "millimeter": "mm", "centimeter": "cm",
                 "meter": "m", "inch": "inch"}


class OmeTiffStackWriter(_Writer):
    """An OME-TIFF (BigTIFF, ``TYX`` or ``TCYX``) with the input's pixel size, frame interval
    and channel names in its OME-XML, written by tifffile's OME writer.  That writer takes a
    series' pages from one iterator in one call (appended pages break its OME-XML), so a
    thread of its own runs the call and :meth:`write` hands it the pages, a few chunks ahead
    at most."""

    def __init__(self, path, frame_shape, dtype, n_frames, channels=1, metadata=None):
        super().__init__(path, frame_shape, dtype, n_frames, channels)
        meta = metadata or {}
        ome = {"axes": "TCYX" if self.channels > 1 else "TYX"}
        size, unit = usable_pixel_size(meta.get("pixel_size")), None
        if size:
            unit = _OME_UNITS.get(length_unit(size[2]))
        if unit:  # (an unknown unit is not said: OME allows only its own)
            ome.update(PhysicalSizeY=float(size[0]), PhysicalSizeX=float(size[1]),
                       PhysicalSizeYUnit=unit, PhysicalSizeXUnit=unit)
        if meta.get("frame_interval"):
            ome.update(TimeIncrement=float(meta["frame_interval"]), TimeIncrementUnit="s")
        names = [str(n) for n in meta.get("channel_names") or []]
        if names and len(names) == self.channels:
            ome["Channel"] = {"Name": names}
        self._pages: queue.Queue = queue.Queue(maxsize=4)  # (chunks waiting: bounded)
        self._error = None
        self._thread = threading.Thread(target=self._run, args=(ome,), daemon=True,
                                        name="xcorr-ome-tiff")
        self._thread.start()

    def _run(self, ome):
        try:
            with tifffile.TiffWriter(self._tmp, bigtiff=True, ome=True) as tw:
                tw.write(self._each_page(), shape=self.shape, dtype=self.dtype,
                         photometric="minisblack", metadata=ome)
        except BaseException as exc:  # (raised by the next write or by close)
            self._error = exc

    def _each_page(self):
        while True:
            chunk = self._pages.get()
            if chunk is None:  # (the end, or an abort: tifffile then misses pages and stops)
                return
            yield from chunk

    def _put(self, at, chunk) -> None:
        if not self._hand(chunk):
            raise self._error or OutputError(f"the writer of {self.path} stopped")

    def _hand(self, item) -> bool:
        """``item`` queued for the thread; False where the thread has ended (its error set)
        instead of waiting for room that never comes."""
        while self._thread.is_alive():
            try:
                self._pages.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _finish(self):
        self._hand(None)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        with contextlib.suppress(queue.Empty):  # (the pages not written yet: dropped)
            while True:
                self._pages.get_nowait()
        super().abort()


#: OME's names of the OME-NGFF length units
_OME_UNITS = {"micrometer": "µm", "nanometer": "nm", "millimeter": "mm", "centimeter": "cm",
              "meter": "m", "inch": "in", "kilometer": "km", "decimeter": "dm",
              "angstrom": "\u00c5", "picometer": "pm", "foot": "ft"}


def usable_pixel_size(size):
    """``size`` ``(y, x, unit)`` where its Y and X sizes are finite positive numbers, else
    None: a NaN, zero or negative size is no calibration, and no output carries it.

    >>> usable_pixel_size((0.5, 0.25, "µm")), usable_pixel_size((float("nan"), 1.0, "µm"))
    ((0.5, 0.25, 'µm'), None)
    >>> usable_pixel_size((0.0, 1.0, "µm")), usable_pixel_size((-1, -1, "µm"))
    (None, None)
    """
    if not size or len(size) < 2:
        return None
    try:
        yx = [float(v) for v in size[:2]]
    except (TypeError, ValueError):
        return None
    return tuple(size) if all(math.isfinite(v) and v > 0 for v in yx) else None


class _Guarded:
    """The temporary file of an HDF5 output as h5py's file object (its ``fileobj`` driver):
    the first failed write (a full disk) is kept in :attr:`error` and every later write is
    dropped, so HDF5 never sees a failure.  Why: after a failed write HDF5 cannot flush its
    caches, so closing the file fails and h5py's clean-up crashes the process later (a
    segmentation fault, at the latest when Python exits); the file is discarded anyway."""

    def __init__(self, path):
        self._file = open(path, "w+b", buffering=0)
        self.error = None

    def _kept(self, exc):
        self.error = self.error or exc

    def write(self, data):
        view = memoryview(data).cast("B")
        if self.error is None:
            try:
                done = 0
                while done < len(view):
                    done += self._file.write(view[done:])
            except BaseException as exc:  # (Ctrl-C too: raised by :meth:`check`)
                self._kept(exc)
        return len(view)

    def truncate(self, size=None):
        if self.error is None:
            try:
                self._file.truncate(size)
            except BaseException as exc:
                self._kept(exc)
        return size

    def flush(self):
        if self.error is None:
            try:
                self._file.flush()
            except BaseException as exc:
                self._kept(exc)

    def seek(self, *args):
        return self._file.seek(*args)

    def tell(self):
        return self._file.tell()

    def readinto(self, buffer):
        return self._file.readinto(buffer)

    def read(self, size=-1):  # (h5py takes an object with read and seek for a file)
        return self._file.read(size)

    def check(self):
        """Raise the failure kept, if any."""
        if self.error is not None:
            raise self.error

    def close(self):
        self._file.close()


class Hdf5StackWriter(_Writer):
    """An HDF5 file with the dataset ``dataset`` (:data:`HDF5_DATASET` by default; its groups
    made; ``TYX`` or ``TCYX``; attributes ``axes``, Fiji/ilastik ``element_size_um`` where the
    pixel size is a length (Fiji's z, y, x in µm: 1, then the pixel size), CaImAn's ``fr`` (frames per second) where the frame interval is known,
    ``channel_names``, ``source``), chunks of :data:`CHUNK_FRAMES` frames.
    A failed write (a full disk) is one :class:`OutputError`; the file is closed on every path
    (:class:`_Guarded`)."""

    def __init__(self, path, frame_shape, dtype, n_frames, channels=1, metadata=None,
                 dataset=HDF5_DATASET):
        h5py = need("hdf5")
        super().__init__(path, frame_shape, dtype, n_frames, channels)
        meta = metadata or {}
        self._guard = self._file = None
        try:
            with os_errors(self.path):
                self._guard = _Guarded(self._tmp)
                self._file = h5py.File(self._guard, "w")
                chunks = (min(CHUNK_FRAMES, self.shape[0]), *self.shape[1:])
                self._store = self._file.create_dataset(dataset.lstrip("/"), shape=self.shape,
                                                        dtype=self.dtype, chunks=chunks)
                attrs = self._store.attrs
                attrs["axes"] = "TCYX" if self.channels > 1 else "TYX"
                size = usable_pixel_size(meta.get("pixel_size"))
                if size and len(size) > 2 and length_unit(size[2]) is not None:
                    # (Fiji reads three sizes, z y x, and opens the frames as its Z: a step
                    # of 1; in micrometers, whatever unit the input gave: nm, mm)
                    attrs["element_size_um"] = [1.0, micrometers(size[0], size[2]),
                                                micrometers(size[1], size[2])]
                interval = meta.get("frame_interval")
                if interval and math.isfinite(interval) and interval > 0:  # (as CaImAn reads it)
                    attrs["fr"] = 1.0 / float(interval)
                names = meta.get("channel_names") or []
                if names and len(names) == self.channels:
                    attrs["channel_names"] = [str(n) for n in names]
                attrs["source"] = str(meta.get("source", ""))
                self._guard.check()
        except BaseException:
            self.abort()
            raise

    def _put(self, at, chunk) -> None:
        super()._put(at, chunk)
        self._guard.check()

    def _finish(self):
        try:
            if self._file is not None:
                self._file.close()  # (whatever failed before: HDF5 saw no failure)
        finally:
            if self._guard is not None:
                self._guard.close()
        if self._guard is not None and self._open:
            self._guard.check()

    def abort(self) -> None:
        self._open = False  # (closed without a check: whatever failed, it is discarded)
        with contextlib.suppress(Exception):
            self._finish()
        super().abort()


class NwbStackWriter(_Writer):
    """The aligned movie into an NWB file (:class:`~._nwb_out.NwbCopy`): ``path`` the NWB input
    file itself (``--in-place``) or a new file (a copy of it, e.g. ``aligned.nwb``);
    ``metadata["source"]`` the input series (``FILE.nwb[:/NAME]``), ``metadata["replace"]``
    whether an earlier xcorr run's corrected movie of it is replaced.  :meth:`record` gives the
    shifts and the provenance before :meth:`close`."""

    def __init__(self, path, frame_shape, dtype, n_frames, channels=1, metadata=None):
        self._nwb, self._record, self._aborting = None, None, False
        super().__init__(path, frame_shape, dtype, n_frames, channels)
        meta = metadata or {}
        try:
            if self.channels > 1:
                raise InputError(f"channels: an NWB output holds the aligned movie of one "
                                 f"channel, not {self.channels}")
            with os_errors(self.path):
                self._nwb = NwbCopy(self._tmp, self.path, meta.get("source"), self.frame_shape,
                                    self.n_frames, self.dtype, CHUNK_FRAMES,
                                    meta.get("replace", False))
        except BaseException:
            self.abort()
            raise

    def record(self, shifts, description, comments) -> None:
        """The run's ``shifts`` ((dy, dx) a frame), the corrected series' ``description`` and
        ``comments`` (the settings), written by :meth:`close`."""
        self._record = shifts, description, comments

    def _put(self, at, chunk) -> None:
        self._nwb.put(at, chunk)

    def _finish(self):
        nwb, self._nwb = self._nwb, None
        if nwb is None:
            return
        if not self._aborting and self._record is None:
            nwb.finish(None)
            raise ValueError("NwbStackWriter.record was not called: no shifts to write")
        nwb.finish(None if self._aborting else self._record)

    def abort(self) -> None:
        self._aborting = True
        super().abort()


#: the pixel types ``--keep-dtype`` writes in each ``--out-format`` (what its writer and the
#: programs that read it take: ImageJ no float16 or float64, tifffile's OME writer no
#: float16); None: any integer or float type
KEEP_DTYPES = {"tiff": ("uint8", "uint16", "int16", "float32"),
               "ome-tiff": ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                            "float64"),
               "ome-zarr": None, "hdf5": None, "nwb": None}

#: the formats' names as the messages say them
FORMAT_NAMES = {"tiff": "ImageJ TIFF", "ome-tiff": "OME-TIFF", "ome-zarr": "OME-Zarr",
                "hdf5": "HDF5", "nwb": "NWB"}


def out_format(path) -> str:
    """The ``--out-format`` of the aligned stack ``path`` by its name (``.ome.zarr``/``.zarr``:
    OME-Zarr, ``.h5``/``.hdf5``: HDF5, ``.ome.tif``: OME-TIFF, ``.nwb``: NWB, else an ImageJ
    TIFF).

    >>> out_format("a/x.OME.TIF"), out_format("aligned.h5"), out_format("y.tif")
    ('ome-tiff', 'hdf5', 'tiff')
    """
    name = Path(path).name.lower()
    return "ome-zarr" if name.endswith(".zarr") else "hdf5" if name.endswith((".h5", ".hdf5")) \
        else "ome-tiff" if name.endswith((".ome.tif", ".ome.tiff")) else \
        "nwb" if name.endswith(".nwb") else "tiff"


def holds(fmt: str, dtype) -> bool:
    """Whether an aligned stack in the format ``fmt`` (:data:`OUT_FORMATS`) holds ``dtype``."""
    dtype, kept = np.dtype(dtype), KEEP_DTYPES[fmt]
    return dtype.kind in "iuf" and (kept is None or dtype.name in kept)


def check_keep(fmt: str, dtype) -> np.dtype:
    """``dtype`` (``--keep-dtype``: the input's pixel type) where the format ``fmt`` holds it,
    else an :class:`InputError` naming the format, the type and the formats that hold it.

    >>> check_keep("tiff", "int16")
    dtype('int16')
    >>> check_keep("tiff", "float64")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: the ImageJ TIFF output cannot hold float64 pixels \
(keep_dtype=True); write it as OME-TIFF, OME-Zarr or HDF5, or leave keep_dtype out (float32 pixels)
    """
    dtype = np.dtype(dtype)
    if holds(fmt, dtype):
        return dtype
    # (NWB: of an NWB input only)
    others = [FORMAT_NAMES[f] for f in OUT_FORMATS if holds(f, dtype) and f != "nwb"]
    where = f"write it as {_either(others)}, or " if others else ""
    raise InputError(f"the {FORMAT_NAMES[fmt]} output cannot hold {dtype} pixels "
                     f"(keep_dtype=True); {where}leave keep_dtype out (float32 pixels)")


def _either(items) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def stack_writer(path, frame_shape, n_frames, keep=None, metadata=None, channels=1,
                 dataset=None, slices=1):
    """The writer of the aligned stack ``path`` by its name (:func:`out_format`): float32
    frames, or ``keep`` (the input's type, ``--keep-dtype``) rounded and clipped, where the
    format holds it (:func:`check_keep`: an :class:`InputError` where not).

    Parameters
    ----------
    metadata : dict, optional
        ``pixel_size`` ``(y, x, unit)``, ``channel_names``, ``frame_interval``, ``source``,
        ``ngff_version`` (an OME-Zarr output's: ``"0.5"`` on Zarr v3, else 0.4 on Zarr v2):
        carried into the output.
    channels : int
        Pages per time frame (a hyperstack of every channel).
    dataset : str, optional
        An HDF5 output's dataset (:func:`parse_out_format`'s, checked there), default
        :data:`HDF5_DATASET`; no other format takes one.
    slices : int
        Z planes per time point of the planes of a T x Z stack written in time order (a
        TIFF hyperstack alone; an :class:`InputError` for another format).
    """
    path = Path(path)
    fmt = out_format(path)
    if dataset is not None and fmt != "hdf5":
        raise ValueError(f"{path.name}: only an HDF5 output holds a named dataset")
    dtype = check_keep(fmt, keep) if keep is not None else np.dtype(np.float32)
    if slices > 1 and fmt != "tiff":
        raise InputError(f"{path.name}: the planes of volumes are written back as a TIFF "
                         "hyperstack (T and Z apart); give an output named .tif")
    if fmt == "ome-zarr":
        return ZarrStackWriter(path, frame_shape, dtype, n_frames, channels, metadata)
    if fmt == "hdf5":
        return Hdf5StackWriter(path, frame_shape, dtype, n_frames, channels, metadata,
                               dataset or HDF5_DATASET)
    if fmt == "nwb":  # (the NWB input's copy, or the input itself: :mod:`._nwb_out`)
        return NwbStackWriter(path, frame_shape, dtype, n_frames, channels, metadata)
    if fmt == "ome-tiff":
        return OmeTiffStackWriter(path, frame_shape, dtype, n_frames, channels, metadata)
    writer = TiffStackWriter(path, frame_shape, dtype, n_frames=n_frames, channels=channels,
                             slices=slices, **imagej_calibration(metadata, n_frames, channels))
    if dtype.kind in "iu":  # round and clip as the other formats do
        write = writer.write
        writer.write = lambda chunk: write(as_dtype(chunk, dtype))
    return writer
