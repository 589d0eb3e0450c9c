"""The axes of a TIFF file (OME-TIFF, ImageJ hyperstacks): what it holds (axes, pixel size,
channel names, from tifffile's OME and ImageJ metadata) and :class:`PlaneFrames`, one Z plane
of a stack whose frames are T x Z (``--z``).

Examples
--------
>>> tiff_metadata(Path("sample_data/cell_drift.tif"))["axes"]
'TYX'
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import tifffile

from ..errors import InputError
from ._formats import SECONDS, length_unit, z_step
from ._frame_order import FrameOrder
from ._tiff import plural, series_index, tiff_errors

__all__ = ["tiff_metadata", "says_calibration", "PlaneFrames"]


def _ome_image(tif, index=0) -> dict:
    """The OME-XML ``Image`` of an OME-TIFF's series ``index`` (an empty dict where it has
    none)."""
    image = tifffile.xml2dict(tif.ome_metadata).get("OME", {}).get("Image", {})
    return (image[index] if index < len(image) else {}) if isinstance(image, list) else image


def _ome_pixels(tif, index=0):
    """``(pixel size, channel names, Z step)`` of an OME-TIFF's image ``index`` (its series;
    the Z step in the pixel size's unit: :func:`~._formats.z_step`)."""
    pixels = _ome_image(tif, index).get("Pixels", {})
    size = None
    if "PhysicalSizeX" in pixels and "PhysicalSizeY" in pixels:
        size = (float(pixels["PhysicalSizeY"]), float(pixels["PhysicalSizeX"]),
                str(pixels.get("PhysicalSizeXUnit", "µm")))
    channels = pixels.get("Channel", [])
    channels = channels if isinstance(channels, list) else [channels]
    names = [str(c.get("Name", "")) for c in channels if isinstance(c, dict)]
    z = None
    if size and "PhysicalSizeZ" in pixels:
        z = z_step(pixels["PhysicalSizeZ"], pixels.get("PhysicalSizeZUnit", "µm"), size[2])
    return size, names if any(names) else [], z


def _frame_interval(tif, index=0) -> float | None:
    """Seconds between frames as an ImageJ (``finterval`` in ``tunit``, seconds without it) or
    OME-TIFF (``TimeIncrement`` in ``TimeIncrementUnit``, of its image ``index``) file says,
    else None (an unknown unit, too)."""
    try:
        if tif.is_ome and tif.ome_metadata:
            pixels = _ome_image(tif, index).get("Pixels", {})
            value, unit = pixels.get("TimeIncrement"), pixels.get("TimeIncrementUnit", "s")
        else:
            meta = (tif.imagej_metadata or {}) if tif.is_imagej else {}
            value, unit = meta.get("finterval"), meta.get("tunit", "sec")
        scale = SECONDS.get(str(unit).strip())
        value = None if value is None or scale is None else float(value) * scale
    except (TypeError, ValueError, AttributeError):  # (an unusable value: not carried)
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def _imagej_unit(unit) -> str:
    """ImageJ's ``unit`` as it reads: Fiji writes the micro sign escaped (``\\u00B5m``)."""
    text = str(unit or "")
    return "µm" if length_unit(text) == "micrometer" and "\\u" in text.lower() else text


#: µm a centimeter: the TIFF ResolutionUnit a plain TIFF's calibration is read in (an inch's,
#: 72 or 300 a unit, is a print setting far more often than a microscope's)
CENTIMETER_UM = 1e4


def _resolution(page):
    """``(y, x)`` pixels' size in the resolution tags' unit, or None (no tags, 1 a unit)."""
    xres, yres = page.tags.get("XResolution"), page.tags.get("YResolution")
    if xres is None or yres is None:
        return None
    (xn, xd), (yn, yd) = xres.value, yres.value
    return (yd / yn, xd / xn) if xn and yn and (xn, xd) != (1, 1) else None


def _centimeter_pixels(page):
    """A page's pixel size ``(y, x, "µm")`` where its resolution is per centimeter (TIFF's
    ResolutionUnit 3, as tifffile writes ``resolutionunit="CENTIMETER"``), else None."""
    tag = page.tags.get("ResolutionUnit")
    size = _resolution(page)
    if size is None or tag is None or int(tag.value) != 3:
        return None
    return (size[0] * CENTIMETER_UM, size[1] * CENTIMETER_UM, "µm")


def _imagej_pixels(tif):
    """``(pixel size, channel names, Z step)`` of an ImageJ TIFF (resolution tags, its
    ``unit``, or where it names none the tags' own centimeters, as ImageJ reads them;
    ``spacing``, the Z step in that unit)."""
    page, meta = tif.pages.first, tif.imagej_metadata or {}
    size = _resolution(page)
    if size is not None:
        unit = _imagej_unit(meta.get("unit", ""))
        size = (*size, unit) if unit else (_centimeter_pixels(page) or (*size, ""))
    labels = meta.get("Labels")
    labels = list(labels) if isinstance(labels, (list, tuple)) else []
    # (a label a page, channels first: a hyperstack's channels are its first labels)
    channels = meta.get("channels")
    if isinstance(channels, int) and 1 < channels <= len(labels):
        labels = labels[:channels]
    elif not (isinstance(channels, int) and channels > 1):
        # (one channel: its name is the label of every page; labels that differ name slices)
        labels = labels[:1] if labels and len(set(labels)) == 1 else []
    z = z_step(meta.get("spacing"), "", "") if size and meta.get("slices") else None
    return size, labels, z


def _page_chunks(page) -> tuple:
    """A page's stored block over its axes: a tile of a tiled page (a separate sample plane
    counts 1), else the whole page."""
    shape = tuple(page.shape)
    if not page.is_tiled:
        return shape
    tile = tuple(page.chunks)
    return (1,) * (len(shape) - len(tile)) + tile


def says_calibration(path: Path) -> bool:
    """Whether the TIFF file ``path`` is an ImageJ or OME-TIFF file (the kinds whose pixel size,
    frame interval and channel names :func:`tiff_metadata` reads) or one whose resolution is
    per centimeter, from its first page alone."""
    try:
        with tifffile.TiffFile(path) as tif:
            return bool(tif.is_imagej or tif.is_ome or _centimeter_pixels(tif.pages.first))
    except (OSError, ValueError, tifffile.TiffFileError):
        return False


def tiff_metadata(path: Path, series=None) -> dict:
    """What a TIFF file's image series holds (``series``: its index or name, as ``FILE:N``
    names it; default the first): ``shape``, ``axes`` (tifffile's letters: ``T``,
    ``C``, ``Z``, ``Y``, ``X``, ``S`` samples, ``I``/``Q`` unnamed), ``dtype``, ``chunks``
    (over a page's axes: one tile of a tiled page, else the page), ``pixel_size``
    ``(y, x, unit)`` or None, ``channel_names``, ``format``, ``frame_interval`` (seconds) or
    None, ``z_step`` (the distance between Z planes in the pixel size's unit, where the file
    has a Z axis and says it) or None."""
    with tiff_errors(path), tifffile.TiffFile(path) as tif:
        if not tif.series:
            raise InputError(f"{path} contains no image; give a TIFF file with image data")
        index = 0 if series is None else series_index(series, tif.series, path)
        series = tif.series[index]
        size, names, z, fmt = None, [], None, "TIFF"
        if tif.is_ome and tif.ome_metadata:
            size, names, z = _ome_pixels(tif, index)
            fmt = "OME-TIFF"
        elif tif.is_imagej:
            size, names, z = _imagej_pixels(tif)
            fmt = "ImageJ TIFF"
        else:  # (a plain TIFF: its resolution tags, where they are per centimeter)
            size = _centimeter_pixels(tif.pages.first)
        return {"shape": tuple(series.shape), "axes": series.axes,
                "dtype": np.dtype(series.dtype), "chunks": _page_chunks(series.keyframe),
                "pixel_size": size, "channel_names": names, "format": fmt,
                "frame_interval": _frame_interval(tif, index),
                "z_step": z if "Z" in series.axes else None}


class PlaneFrames(FrameOrder):
    """Plane ``z`` of a TIFF source whose frames are every plane of a T x Z stack: frame ``i``
    is the ``i``-th frame of the source with that Z index (same interface as the source).

    Examples
    --------
    >>> import tempfile
    >>> from xcorr_app.io._reader import open_stack
    >>> path = tempfile.mkdtemp() + "/tz.tif"
    >>> tifffile.imwrite(path, np.arange(6, dtype=np.uint8).reshape(3, 2, 1, 1) *
    ...                  np.ones((1, 1, 4, 4), np.uint8), imagej=True, metadata={"axes": "TZYX"})
    >>> with open_stack(path + "?z=1") as src:  # (a PlaneFrames)
    ...     src.n_frames, src.read(0, 3)[:, 0, 0].tolist()
    (3, [1, 3, 5])
    """

    def __init__(self, src, path: Path, z: int, axes=None, series=None):
        self.src = src
        try:
            meta = tiff_metadata(path, series) if axes is None else {"axes": axes,
                                                                     "shape": None}
        except BaseException:
            src.close()
            raise
        axes, shape = meta["axes"], meta["shape"]
        # (the caller's axes: the source's frame axes, as they named them)
        lead = [(a, n) for a, n in zip(axes, shape) if a not in "YXSC"] if shape is not None \
            else list(src.frame_layout)
        if "Z" not in [a for a, _ in lead]:
            src.close()
            raise InputError(f"--z {z}: {path} has no Z axis (axes {axes}); leave --z out")
        nz = dict(lead)["Z"]
        if not 0 <= z < nz:
            src.close()
            raise InputError(f"--z {z} is out of range: {path} has {plural(nz, 'Z plane')}; use "
                             f"0 to {nz - 1}")
        if math.prod(n for _, n in lead) != src.n_frames:
            src.close()
            raise InputError(f"cannot pick a Z plane of {path} (axes {axes}, shape {shape}); "
                             "save it as a T x Z stack")
        index = np.unravel_index(np.arange(src.n_frames), [n for _, n in lead])
        super().__init__(src, np.flatnonzero(index[[a for a, _ in lead].index("Z")] == z))
