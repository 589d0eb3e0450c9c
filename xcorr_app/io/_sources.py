"""Which reader opens a source path of another format than TIFF (:func:`open_format`)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["open_format"]


def open_format(fmt: str, file: Path, dataset, channel, z, axes=None):
    """The frame source of a file of format ``fmt`` (not TIFF: :func:`open_stack` reads those);
    ``axes``: the file's axes as the caller names them (:mod:`._axes`), else its own."""
    if fmt == "zarr":
        from ._zarr import open_zarr

        return open_zarr(file, dataset, channel, z, axes)
    if fmt == "hdf5":
        from ._hdf5 import open_hdf5

        return open_hdf5(file, dataset, channel, z, axes)
    if fmt == "nwb":
        from ._hdf5 import open_nwb

        return open_nwb(file, dataset, channel, z, axes)
    if fmt == "czi":
        from ._czi import open_czi

        return open_czi(file, dataset, channel, z, axes)
    if fmt == "nd2":
        from ._nd2 import open_nd2

        return open_nd2(file, dataset, channel, z, axes)
    if fmt == "npy":
        from ._npy import open_npy

        return open_npy(file, dataset, channel, z, axes)
    raise ValueError(f"no reader of format {fmt!r}")  # (format_of names only the above)
