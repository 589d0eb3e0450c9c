"""``xcorr zlocate``: the depth of each frame of a movie in a reference z-stack (writes
zlocate.csv and zlocate.png)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..errors import InputError
from ._input import input_options, input_path
from ._main import DeviceCommand
from ._options import DEVICE, FORCE, QUIET, default_out, note_device, progress_bar

__all__ = ["zlocate_cmd", "parse_xy_bound", "plot_depth", "plot_series"]

OUTPUTS = ("zlocate.csv", "zlocate.png")


def parse_xy_bound(text):
    """``--max-shift``: ``N`` or ``DY,DX`` whole pixels, or None.

    >>> parse_xy_bound("4"), parse_xy_bound("2,6"), parse_xy_bound(None)
    (4, (2, 6), None)
    """
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) not in (1, 2) or not all(p.isdigit() for p in parts):
        raise InputError(f"--max-shift {text!r}: give N or DY,DX (whole pixels >= 0)")
    values = tuple(int(p) for p in parts)
    return values[0] if len(values) == 1 else values


#: the curves' colours (matplotlib's default cycle, as drift.png's)
COLORS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189))
TEXT, MARK = (30, 30, 30), (214, 39, 40)


def plot_series(path, panels, n, title="", marked=None, xlabel="frame"):
    """A PNG of curves against frame (0..n-1), drawn with Pillow (no matplotlib start-up):
    ``panels`` is a list of ``(label, {name: values}, (lo, hi) or None)``, one panel each
    (the range None: the values' own); points of ``marked`` frames are red; ``xlabel``
    names the horizontal axis.  NaN values (a frame or volume with nothing to measure) are
    left out: the curve breaks there.

    >>> import tempfile, numpy as np
    >>> p = Path(tempfile.mkdtemp()) / "p.png"
    >>> plot_series(p, [("x", {"a": np.arange(3.0)}, None)], 3)
    >>> p.read_bytes()[:4] == b"\\x89PNG"
    True
    """
    import numpy as np
    from PIL import Image, ImageDraw

    from ..alignment.outputs import PNG_LEVEL
    from ..io import atomic_path

    width, left, right, top = 880, 70, 860, 40
    tall = 280 if len(panels) > 1 else 420
    heights = [tall] + [130] * (len(panels) - 1)
    height = top + sum(h + 30 for h in heights) + 20
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.text((left, 12), title, fill=TEXT)
    xs = left + (np.arange(n) + 0.5) * (right - left) / max(n, 1)
    marked = np.zeros(n, bool) if marked is None else np.asarray(marked, bool)
    y0 = top
    for (label, curves, span), h in zip(panels, heights):
        values = np.concatenate([np.asarray(v, float).ravel() for v in curves.values()])
        values = values[np.isfinite(values)]
        lo, hi = span if span is not None else ((float(values.min()), float(values.max()))
                                                if values.size else (0.0, 1.0))
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        bottom = y0 + h
        draw.rectangle((left, y0, right, bottom), outline=(60, 60, 60))
        for v in (lo, (lo + hi) / 2, hi):
            draw.text((6, bottom - (v - lo) / (hi - lo) * h - 6), f"{v:.2f}", fill=TEXT)
        legend = left + 5
        for (name, v), colour in zip(curves.items(), COLORS):
            v = np.asarray(v, float)
            ys = bottom - (np.clip(v, lo, hi) - lo) / (hi - lo) * h
            known = np.isfinite(v)
            points = list(zip(xs.tolist(), ys.tolist()))
            # runs of finite points, a line each (a NaN breaks the curve)
            edges = np.flatnonzero(np.diff(np.r_[0, known.astype(int), 0]))
            for a, b in zip(edges[::2], edges[1::2]):
                if b - a > 1:
                    draw.line(points[a:b], fill=colour, width=2)
            r = 3 if n <= 150 else 1
            for (x, y), m, ok in zip(points, marked, known):
                if ok:
                    draw.ellipse((x - r, y - r, x + r, y + r), fill=MARK if m else colour)
            draw.text((legend, y0 + 4), name, fill=colour)
            legend += 8 * len(name) + 16
        draw.text((right - 8 * len(label), y0 + 4), label, fill=TEXT)
        y0 = bottom + 30
    draw.text((left, height - 22), f"{xlabel} (0..{n - 1})", fill=TEXT)
    with atomic_path(Path(path)) as tmp:
        img.save(tmp, format="PNG", compress_level=PNG_LEVEL)


def plot_depth(path, result, title=""):
    """zlocate.png: each frame's depth (planes) and its score; frames at the z-stack's
    first or last plane marked red."""
    import numpy as np

    nz = result.profile.shape[1]
    known = result.score[np.isfinite(result.score)]  # (a constant frame's: NaN)
    low = min(0.0, float(known.min())) if known.size else 0.0
    plot_series(path, [("depth (plane)", {"depth": result.depth}, (-0.5, nz - 0.5)),
                       ("score", {"score": result.score}, (low, 1.0))],
                len(result.depth), title, marked=result.at_edge)


@click.command(name="zlocate", cls=DeviceCommand)
@click.argument("movie", type=click.Path(path_type=Path))
@click.option("--zstack", type=click.Path(path_type=Path), required=True,
              help="The reference z-stack (Z, Y, X): .tif, .npy or .zarr, planes in order.")
@click.option("--out", "out_dir", type=str, default=None,
              help="Output folder [default: STEM_zlocate in the current folder].")
@click.option("--max-shift", default=None, metavar="N|DY,DX",
              help="Largest (dy, dx) of a frame against the planes, px [default: half the "
                   "frame].")
@click.option("--upsample", type=float, default=20.0, show_default=True,
              help="Subpixel refinement of each frame's (dy, dx) (1: whole pixels).")
@click.option("--subplane", type=click.Choice(("projection", "parabola")),
              default="projection", show_default=True,
              help="How the depth is placed between planes.")
@DEVICE
@FORCE
@QUIET
@input_options
def zlocate_cmd(movie, zstack, out_dir, max_shift, upsample, subplane, device, force, quiet,
                dataset, z, axes):
    """Find the depth of each frame of MOVIE in a z-stack (zlocate.csv, zlocate.png).

    Each frame (a (N, Y, X) .tif, .npy or .zarr) is correlated with every plane of --zstack
    after its x/y alignment; the best plane, the depth between planes, the frame's (dy, dx),
    its score and confidence go to zlocate.csv, the depth against frame to zlocate.png.
    --dataset, --z and --axes name what to read of MOVIE (the z-stack's: --zstack
    FILE:/DATASET?axes=ZYX).
    """
    from ..alignment.volume import parse_upsample, zlocate
    from ..io import OutputRun, split_source, write_text

    source = input_path(movie, dataset, z, axes)  # (MOVIE's FILE:/DATASET?z=K&axes=A)
    movie, zfile = split_source(source)[0], split_source(zstack)[0]

    bound = parse_xy_bound(max_shift)
    upsample = parse_upsample(upsample)  # (before anything is written: the API's check)
    if out_dir is not None and not out_dir.strip():
        raise InputError("--out is empty: name the folder for zlocate.csv and zlocate.png")
    out = Path(out_dir) if out_dir is not None else default_out(movie, "_zlocate")
    if out.suffix.lower() in (".csv", ".png", ".tif", ".tiff") or out.is_file():
        raise InputError(f"--out is the folder zlocate writes zlocate.csv and zlocate.png "
                         f"into, not a file: {out}")
    for what, p in (("MOVIE", movie), ("--zstack", zfile)):
        if not p.exists():
            raise InputError(f"{what} {p}: no such file or folder")
    outputs = [out / name for name in OUTPUTS]
    dev = note_device(device, quiet)
    with OutputRun(outputs, [movie, zfile], force, lock=out / ".xcorr.lock") as run:
        t0 = time.perf_counter()
        try:
            with progress_bar(None, "zlocate", quiet) as bar:  # (its frames: counted)
                result = zlocate(source, str(zstack), max_shift=bound, upsample=upsample,
                                 subplane=subplane, device=dev, progress=bar.update)
        except MemoryError as exc:  # (the command's own options: no --max-memory here)
            raise InputError(f"out of memory{f' ({exc})' if str(exc) else ''}: lower "
                             "--upsample or --max-shift, or crop or bin the movie and the "
                             "z-stack") from None
        write_text(outputs[0], result.to_csv())
        plot_depth(outputs[1], result, title=f"{movie.name} in {zfile.name}")
        run.commit()
    if not quiet:
        n, nz = result.profile.shape
        click.echo(f"xcorr zlocate: {n} frames against {nz} planes on {dev.upper()} in "
                   f"{time.perf_counter() - t0:.2f} s; wrote {outputs[0]} and {outputs[1]}")
        for note in result.notes[1:]:
            click.echo(f"note: {note}", err=True)
