"""The aligned movie as NWB (``--out-format nwb``, the ``nwb`` extra: pynwb): a copy of the NWB
input (``aligned.nwb``, a new identifier) or, with ``--in-place``, the input itself, holding in
``processing["ophys"]`` a ``MotionCorrection`` with one ``CorrectedImageStack`` named after the
input series: ``corrected`` (a series of the input's type, (frames, x, y) as NWB orders them,
``dimension`` saying so), ``original`` (a link to the input series) and ``xy_translation`` (the
shifts, x then y).

Either way the whole input file is copied to a hidden temporary name beside the target, the
additions are written into the copy (pynwb's append mode; the frames chunk by chunk into an
empty dataset made by pynwb), and the copy is renamed onto the target when it is complete: a
failure leaves the input and the target as they were (``--in-place`` needs room for a second
copy of the input meanwhile).
"""

from __future__ import annotations

import importlib
import os
import shutil
import uuid
from pathlib import Path

import numpy as np

from ..errors import InputError
from ._formats import format_of, library_errors, need, source_parts

__all__ = ["NwbCopy", "check_nwb_out", "need_pynwb", "XCORR_MARK", "NWB_TYPES"]

#: the NWB types of the input series (those the reader reads)
NWB_TYPES = ("ImageSeries", "TwoPhotonSeries", "OnePhotonSeries")

#: how the ``description`` of a ``corrected`` series xcorr wrote begins (what ``--force``
#: may replace)
XCORR_MARK = "aligned by xcorr"
#: where the additions go
MODULE, INTERFACE = "ophys", "MotionCorrection"


def need_pynwb():
    """pynwb, or an :class:`InputError` naming the pip command."""
    try:
        return importlib.import_module("pynwb")
    except ImportError:
        raise InputError("writing NWB files needs the pynwb package: pip install "
                         "'xcorr-app[nwb]'") from None


def _input_series(h5py, source):
    """``(file, series path)`` of the NWB input ``source`` (``FILE.nwb`` or
    ``FILE.nwb:/NAME``), picked as the reader picks it; an :class:`InputError` where
    ``source`` is no NWB series."""
    if not isinstance(source, (str, Path)):
        raise InputError("an NWB output needs an NWB input (a file, not an array): its "
                         "aligned movie is written beside the input series it corrects")
    file, dataset = source_parts(source)[:2]
    if format_of(file) != "nwb":
        raise InputError(f"an NWB output needs an NWB input ({Path(file).name} is none): its "
                         "aligned movie is written beside the input series it corrects; "
                         "choose another format")
    with _opened(h5py, file) as f:
        series = _series(f)
        key = "/" + dataset.strip("/") if dataset else None
        match = [p for p in series if key is None or p == key or
                 p.rsplit("/", 1)[-1] == key[1:]]
    if len(match) != 1:
        raise InputError(f"{file} holds {'no' if not match else 'several'} image series "
                         f"{'named ' + dataset if dataset else ''}; name one as {file}:NAME")
    return Path(file), match[0]


def _opened(h5py, file):
    with library_errors(file, "open"):
        return h5py.File(file, "r")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _series(f) -> list:
    """The HDF5 paths of the NWB image series of ``f`` (as the reader finds them)."""
    found = []

    def visit(name, item):
        if _text(item.attrs.get("neurodata_type", "")) in NWB_TYPES and "data" in item \
                and hasattr(item["data"], "dtype"):
            found.append("/" + name)
    f.visititems(visit)
    return found


def _earlier(f, series_path):
    """The HDF5 path of the ``CorrectedImageStack`` of ``series_path`` in ``f`` and whether
    xcorr wrote it; ``(path, None)`` where there is none."""
    name = series_path.rsplit("/", 1)[-1]
    path = f"/processing/{MODULE}/{INTERFACE}/{name}"
    if path not in f:
        return path, None
    description = f[path].get("corrected")
    text = description.attrs.get("description", "") if description is not None else ""
    return path, _text(text).startswith(XCORR_MARK)


def check_nwb_out(source, force=False):
    """Check before a run that ``source`` can be written as NWB (:class:`NwbStackWriter`):
    pynwb installed, ``source`` an NWB series, no corrected stack of it in the file unless an
    earlier xcorr run's and ``force``."""
    h5py = need("nwb")
    need_pynwb()
    file, series_path = _input_series(h5py, source)
    with _opened(h5py, file) as f:
        _refuse_earlier(f, file, series_path, force)


def _refuse_earlier(f, file, series_path, force):
    path, ours = _earlier(f, series_path)
    if ours is None or (ours and force):
        return path if ours else None
    if ours:
        raise InputError(f"{file} already holds xcorr's corrected movie of {series_path} "
                         f"({path}); force=True replaces it")
    raise InputError(f"{file} already holds a corrected movie of {series_path} ({path}) that "
                     "xcorr did not write; it is kept and nothing was written")


class NwbCopy:
    """The NWB input ``source`` (``FILE.nwb[:/NAME]``) copied to ``tmp`` (the hidden name of
    ``target``: a new file, or the input itself) with the additions of the module's doc: the
    ``corrected`` series' frames ``(n_frames, *frame_shape)`` of ``dtype`` put by :meth:`put`
    into an empty dataset (``chunk_frames`` frames a chunk), the shifts and the provenance by
    :meth:`finish`; ``replace``: an earlier xcorr run's corrected movie of the series is
    replaced (else refused)."""

    def __init__(self, tmp, target, source, frame_shape, n_frames, dtype, chunk_frames=16,
                 replace=False):
        h5py, pynwb = need("nwb"), need_pynwb()
        file, series_path = _input_series(h5py, source)
        self.frame_shape, self.n_frames, self.dtype = tuple(frame_shape), int(n_frames), dtype
        self.in_place = Path(target).resolve() == file.resolve()
        self._io = None
        if self.in_place and not os.access(file, os.W_OK):
            raise InputError(f"{file} is not writable: in_place=True (--in-place) writes into "
                             "it; write a new file beside it instead (leave in_place out)")
        shutil.copyfile(file, tmp)
        if self.in_place:  # (the input keeps its permissions)
            shutil.copymode(file, tmp)
        with h5py.File(tmp, "r+") as f:
            earlier = _refuse_earlier(f, file, series_path, replace)
            if earlier:  # (the space it held stays in the file)
                del f[earlier]
            object_id = f[series_path].attrs["object_id"]
            if not self.in_place:  # (a new file: a new identifier)
                f["identifier"][()] = str(uuid.uuid4())
        self._io = pynwb.NWBHDF5IO(str(tmp), "a")
        try:
            self._build(self._io.read(), object_id, chunk_frames)
        except BaseException:
            self.finish(None)
            raise

    def _build(self, nwb, object_id, chunk_frames):
        from hdmf.backends.hdf5 import H5DataIO
        from pynwb.base import TimeSeries
        from pynwb.ophys import CorrectedImageStack, MotionCorrection

        original = nwb.objects[object_id]
        h, w = self.frame_shape
        data = H5DataIO(shape=(self.n_frames, w, h), dtype=self.dtype,
                        chunks=(min(chunk_frames, self.n_frames), w, h))
        xy = H5DataIO(shape=(self.n_frames, 2), dtype=np.float64)
        timing = {"timestamps": original} if original.timestamps is not None else \
            {"rate": original.rate, "starting_time": original.starting_time}
        plane = {"imaging_plane": original.imaging_plane} \
            if hasattr(original, "imaging_plane") else {}
        corrected = type(original)(
            name="corrected", data=data, unit=original.unit, conversion=original.conversion,
            offset=original.offset, resolution=original.resolution, dimension=[w, h],
            description=f"{XCORR_MARK} (being written)", **plane, **timing)
        translation = TimeSeries(
            name="xy_translation", data=xy, unit="pixels", **timing,
            description="x, y (columns): the translation in pixels applied to each frame of "
                        "original to align it with the reference (xcorr's dx, dy: +x moves "
                        "the image towards higher x, +y towards higher y)")
        module = nwb.processing.get(MODULE)  # (an empty module is falsy: not "or")
        if module is None:
            module = nwb.create_processing_module(MODULE, "optical physiology processed data")
        motion = module.data_interfaces.get(INTERFACE)
        if motion is None:
            motion = MotionCorrection(name=INTERFACE)
            module.add(motion)
        motion.add_corrected_image_stack(CorrectedImageStack(
            name=original.name, corrected=corrected, original=original,
            xy_translation=translation))
        self._io.write(nwb)
        self._store, self._xy = data.dataset, xy.dataset

    def put(self, at, chunk) -> None:
        """Frames ``at:at + len(chunk)`` of ``chunk`` ``(k, H, W)`` (already of ``dtype``)."""
        self._store[at:at + len(chunk)] = np.asarray(chunk).transpose(0, 2, 1)  # (frames, x, y)

    def finish(self, record) -> None:
        """Write ``record`` (``(shifts, description, comments)``: the run's (dy, dx) a frame,
        the corrected series' description after :data:`XCORR_MARK`, the settings) and close
        the file; ``record`` None: close it only (the copy is discarded)."""
        io, self._io = self._io, None
        if io is None:
            return
        try:
            if record is not None:
                shifts, description, comments = record
                shifts = np.asarray(shifts, np.float64).reshape(-1, 2)
                if len(shifts) != self.n_frames:
                    raise ValueError(f"{len(shifts)} shifts for {self.n_frames} frames")
                self._xy[:] = shifts[:, ::-1]  # (x, y)
                attrs = self._store.parent.attrs
                attrs["description"] = f"{XCORR_MARK} {description}"
                attrs["comments"] = str(comments)
        finally:
            io.close()
