"""NumPy ``.npy`` files as frame sources: memory-mapped and read a chunk at a time, as the
other array formats are (:class:`~._formats.ArrayFrames`).  A ``.npy`` names no axes: a 3-D
array is ``TYX``, a 4-D one names them with ``axes=`` (``TZYX`` where the caller reads volumes:
:func:`~._reader.open_array`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError
from ._axes import given_axes, guessed_axes
from ._formats import ArrayFrames


def open_npy(file: Path, dataset, channel, z, axes=None) -> ArrayFrames:
    """A ``.npy`` file as an :class:`ArrayFrames` (its pixels memory-mapped, never copied whole).

    Examples
    --------
    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "m.npy"
    >>> np.save(p, np.zeros((5, 8, 9), np.uint16))
    >>> src = open_npy(p, None, None, None)
    >>> src.n_frames, src.frame_shape, src.axes
    (5, (8, 9), 'TYX')
    """
    if dataset:
        raise InputError(f"{file} is a .npy array: a dataset ({dataset}) names an array inside an "
                         "HDF5, Zarr or NWB file; leave it out")

    def opener():
        try:
            array = np.load(file, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:  # (a damaged header, objects, empty)
            raise InputError(f"cannot read {file} as a NumPy .npy array ({exc or 'empty'}); "
                             "save it again with numpy.save") from None
        if not isinstance(array, np.ndarray):  # (an .npz archive under a .npy name)
            array.close()
            raise InputError(f"{file} is an .npz archive, not a .npy array; give one of its "
                             "arrays saved with numpy.save")
        return array, None

    array = opener()[0]
    notes = []
    if axes is not None:
        axes = given_axes(None, axes, file.name, array.shape, notes)
    else:
        axes = guessed_axes(array.ndim, str(file), array.shape, channel, z)
        if array.ndim > 3:  # (3-D: TYX is no guess; as the HDF5 and Zarr readers say it)
            notes.append(f"{file.name}: a .npy names no axes; read as {axes} (axes=... names "
                         "them otherwise)")
    del array
    return ArrayFrames(opener, axes, str(file), channel=channel, z=z, fmt="NumPy .npy",
                       paths=[file], notes=notes)
