"""Which reader opens a source path of another format than TIFF (:func:`open_format`).

Examples
--------
>>> open_format("nd2", Path("scan.nd2"), None, None, None)
Traceback (most recent call last):
xcorr_app.errors.InputError: scan.nd2: Nikon ND2 files are not read by this version of xcorr; convert the file to OME-TIFF, OME-Zarr or HDF5 (e.g. with Fiji or bioformats2raw)
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ._formats import UNREAD

__all__ = ["open_format"]


def open_format(fmt: str, file: Path, dataset, channel, z):
    """The frame source of a file of format ``fmt`` (not TIFF: :func:`open_stack` reads those)."""
    if fmt == "zarr":
        from ._zarr import open_zarr

        return open_zarr(file, dataset, channel, z)
    if fmt == "hdf5":
        from ._hdf5 import open_hdf5

        return open_hdf5(file, dataset, channel, z)
    if fmt == "nwb":
        from ._hdf5 import open_nwb

        return open_nwb(file, dataset, channel, z)
    if fmt == "czi":
        from ._czi import open_czi

        return open_czi(file, dataset, channel, z)
    raise InputError(f"{file}: {UNREAD[fmt]} files are not read by this version of xcorr; "
                     "convert the file to OME-TIFF, OME-Zarr or HDF5 (e.g. with Fiji or "
                     "bioformats2raw)")
