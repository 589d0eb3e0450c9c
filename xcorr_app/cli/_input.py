"""The options naming what to read inside an input (``--dataset``, ``--z``) and how (``--axes``),
and the source path they make (``FILE:/DATASET?z=K&axes=TZYX``, :func:`xcorr_app.io.source_path`),
which every reader of the command opens."""

from __future__ import annotations

from pathlib import Path  # noqa: F401

import click

from ..errors import InputError

__all__ = ["input_options", "input_path"]

#: ``--dataset``, ``--z`` and ``--axes``: the array inside an HDF5, Zarr or NWB file, one Z
#: plane, and the input's axes
INPUT_OPTIONS = (
    click.option("--dataset", default=None, metavar="PATH",
                 help="The dataset to read inside an HDF5 or Zarr file (e.g. /acquisition/data), "
                      "an NWB image series by name, an ND2 position (P0, P1, ...) or a TIFF "
                      "file's image series (its index or OME name); also written "
                      "PATH:/DATASET."),
    click.option("--z", "z", type=int, default=None, metavar="K",
                 help="Read Z plane K (0-based) of a stack with a Z axis (OME-TIFF, ImageJ, "
                      "OME-Zarr, HDF5 with axes); without it every plane is a frame."),
    click.option("--axes", default=None, metavar="AXES",
                 help="The input's axes, one letter each in its order from T Z C S Y X (e.g. "
                      "TYX, TZYX, TCYX, TZCYX), instead of those its metadata say: an NWB "
                      "series stored (frames, rows, cols) is TYX; a Zarr or HDF5 array without "
                      "axes TZYX or TCYX.  Also written PATH?axes=TZYX."),
)


def input_options(fn):
    """Add :data:`INPUT_OPTIONS` to a command."""
    for option in reversed(INPUT_OPTIONS):
        fn = option(fn)
    return fn


def input_path(path, dataset, z, axes=None):
    """The source path of ``path`` with ``--dataset``, ``--z`` and ``--axes`` (checked here,
    once: :func:`xcorr_app.io.parse_axes`), ``path`` as given without them.

    Examples
    --------
    >>> input_path("movie.h5", "/data", None)
    'movie.h5:/data'
    >>> input_path(Path("movie.tif"), None, None), input_path("m.nwb", None, None, "tyx")
    (PosixPath('movie.tif'), 'm.nwb?axes=TYX')
    """
    from ..io import parse_axes, source_parts, source_path

    if dataset is not None and not dataset.strip("/ "):
        raise InputError("--dataset is empty: name the dataset, e.g. --dataset /data")
    if z is not None and z < 0:
        raise InputError(f"--z {z} is negative: Z planes count from 0")
    axes = parse_axes(axes)
    if dataset is None and z is None and axes is None:
        return path
    file, inside, plane, named = source_parts(path)
    if dataset is not None and inside:
        raise InputError(f"{path} names its dataset already; drop --dataset {dataset}")
    if z is not None and plane is not None:
        raise InputError(f"{path} names its Z plane already; drop --z {z}")
    if axes is not None and named is not None:
        raise InputError(f"{path} names its axes already; drop --axes {axes}")
    return source_path(file, dataset or inside, plane if z is None else z, named or axes)


def apply_channels(apply_to, channel, src, no_aligned):
    """The channels ``--apply-to`` names (``all`` or ``0,2``) of ``src``, checked against its
    channels, ``--channel`` (the one measured, required) and ``--no-aligned``; None without it.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> apply_channels("all", 1, SimpleNamespace(n_channels=3), False)
    [0, 1, 2]
    >>> apply_channels("2,0", 0, SimpleNamespace(n_channels=3), False)
    [2, 0]
    """
    if apply_to is None:
        return None
    if no_aligned:
        raise InputError("--apply-to writes the aligned channels, which --no-aligned does not "
                         "write: drop one or the other")
    if channel is None:
        raise InputError("--apply-to needs --channel K, the channel the shifts are measured on")
    n = getattr(src, "n_channels", 1)
    if apply_to.strip().lower() == "all":
        return list(range(n))
    try:
        listed = [int(v) for v in apply_to.split(",")]
    except ValueError:
        raise InputError(f"--apply-to {apply_to}: give all or channel numbers such as 0,2") \
            from None
    bad = [c for c in listed if not 0 <= c < n]
    if bad or not listed or len(set(listed)) != len(listed):
        why = f"{bad[0]} is not one of its channels 0 to {n - 1}" if bad else \
            "a channel is named twice"
        raise InputError(f"--apply-to {apply_to}: {why}")
    return listed
