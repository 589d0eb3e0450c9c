"""What a source holds (:func:`describe`, for ``xcorr info PATH``), in every format read.

Examples
--------
>>> d = describe("sample_data/cell_drift.tif")
>>> d["format"], d["axes"], d["frames"], d["frame_shape"]
('ImageJ TIFF', 'TYX', 12, (120, 160))
"""

from __future__ import annotations

from ._axes import ChannelsNeeded
from ._formats import format_of, source_parts, split_source
from ._ome import says_calibration, tiff_metadata
from ._reader import open_stack

__all__ = ["describe", "calibration"]


def describe(path, channel=None) -> dict:
    """What the source ``path`` holds: ``format``, ``shape``, ``axes``, ``dtype``, ``chunks``,
    ``channels`` (count), ``channel_names``, ``pixel_size`` ``(y, x, unit)`` or None,
    ``frame_interval`` (seconds, where the file says: ImageJ, OME-TIFF, OME-Zarr, an HDF5
    dataset's ``fr``, an NWB series' rate or regular timestamps) or None, ``z_step`` (between
    Z planes, in the pixel size's unit: ImageJ's ``spacing``, OME's ``PhysicalSizeZ``, an
    OME-Zarr z scale) or None, ``ngff_version``
    (an OME-Zarr image's OME-NGFF version, e.g. ``"0.5"``) or None, and as read: ``frames``,
    ``frame_shape``, ``notes``.

    Raises
    ------
    InputError
        What :func:`~xcorr_app.io.open_stack` raises (a bad path, file or layout), except that
        several channels need no ``channel`` here.
    """
    file, dataset, z, named = source_parts(path)
    fmt = format_of(file) if file.exists() else None
    try:  # (as a run reads it: an array whose file names no axes says so, as align does)
        opened = open_stack(path, channel=channel)
    except ChannelsNeeded:  # (several channels: describe the first)
        if channel is not None:
            raise
        opened = open_stack(path, channel=0)
    with opened as src:
        several = getattr(src, "n_channels", 1) > 1  # (3-D: measured on the channel picked)
        on = " (--channel K: measured on channel K)" if several else ""
        held = getattr(src, "volumes", None)
        notes = [] if held is None else [
            f"xcorr align registers these volumes in 3-D{on}; {held.one_plane} picks one plane"]
        info = {"frames": src.n_frames, "frame_shape": tuple(src.frame_shape),
                "dtype": str(src.dtype), "notes": list(src.notes) + notes,
                "channels": getattr(src, "n_channels", 1), "frame_interval": None,
                "z_step": None,
                "ngff_version": getattr(src, "ngff_version", None)}
        if fmt == "tiff" and file.is_file():
            meta = tiff_metadata(file, dataset or None)  # (FILE:N: that series')
            if len(meta["shape"]) == len(meta["chunks"]) and src.n_frames > 1:
                # (a series a page, written one by one: its frames as they are read)
                lead = getattr(src, "frame_layout", None) or (("T", src.n_frames),)
                meta.update(shape=(*(n for _, n in lead), *meta["shape"]),
                            axes="".join(a for a, _ in lead) + meta["axes"])
            info.update(format=meta["format"], shape=meta["shape"], axes=named or meta["axes"],
                        chunks=meta["chunks"], pixel_size=meta["pixel_size"],
                        channel_names=meta["channel_names"],
                        frame_interval=meta["frame_interval"], z_step=meta["z_step"])
        elif fmt == "tiff":
            # (a folder of Z stacks: T x Z; its calibration its first file's, one acquisition's
            # files, not each one read: folders hold thousands)
            lead = getattr(src, "frame_layout", None) or (("T", src.n_frames),)
            first = tiff_metadata(src.paths[0]) if src.paths and \
                says_calibration(src.paths[0]) else dict(UNCALIBRATED)
            volumes = getattr(src, "volumes", None) is not None
            info.update(format=f"folder of {len(src.paths)} TIFF files",
                        shape=(*(n for _, n in lead), *src.frame_shape),
                        axes="".join(a for a, _ in lead) + "YX",
                        chunks=(*(1 for _ in lead), *src.frame_shape),
                        pixel_size=first["pixel_size"], channel_names=[],
                        z_step=first["z_step"] if volumes else None)
            if first["pixel_size"]:
                info["notes"].append(f"pixel size of its first file, {src.paths[0].name}")
        else:
            info.update(format=src.format, shape=src.shape, axes=src.axes, chunks=src.chunks,
                        pixel_size=src.pixel_size, channel_names=list(src.channel_names),
                        name=src.name, frame_interval=getattr(src, "frame_interval", None),
                        z_step=getattr(src, "z_step", None))
    return info


#: a source that says nothing of its calibration (nor of its OME-NGFF version)
UNCALIBRATED = {"pixel_size": None, "channel_names": [], "frame_interval": None,
                "ngff_version": None, "z_step": None}


def calibration(path) -> dict:
    """What an output of the source ``path`` carries of it: ``pixel_size`` ``(y, x, unit)``,
    ``channel_names``, ``frame_interval``, ``z_step`` and ``ngff_version`` (an OME-Zarr output keeps its
    OME-Zarr input's; None and ``[]`` where it says none), as
    :func:`describe` reads them; a TIFF file that is neither ImageJ nor OME-TIFF is read no
    further than its first page (it holds none: a generic multipage TIFF's series would be
    walked again)."""
    file, _, _ = split_source(path)
    if file.is_file() and format_of(file) == "tiff" and not says_calibration(file):
        return dict(UNCALIBRATED)
    d = describe(path)
    return {key: d.get(key, empty) for key, empty in UNCALIBRATED.items()}
