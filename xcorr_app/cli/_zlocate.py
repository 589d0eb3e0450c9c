"""``xcorr zlocate``: the depth of each frame of a movie in a reference z-stack (writes
zlocate.csv and zlocate.png)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..errors import InputError
from ._options import DEVICE, FORCE, QUIET, default_out, note_device

__all__ = ["zlocate_cmd", "parse_xy_bound", "plot_depth"]

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


def plot_depth(path, result, title=""):
    """zlocate.png: each frame's depth (planes) and, below, its score, drawn with Pillow
    (no matplotlib start-up); frames at the z-stack's first or last plane marked red."""
    import numpy as np
    from PIL import Image, ImageDraw

    from ..io import atomic_path

    width, height, left, right = 880, 520, 70, 860
    panels = {"depth": (50, 330), "score": (370, 490)}
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.text((left, 15), title, fill=(30, 30, 30))
    n = len(result.depth)
    xs = left + (np.arange(n) + 0.5) * (right - left) / max(n, 1)
    nz = result.profile.shape[1]
    for name, values, lo, hi in (("depth", result.depth, -0.5, nz - 0.5),
                                 ("score", result.score, min(0.0, float(result.score.min())),
                                  1.0)):
        top, bottom = panels[name]
        draw.rectangle((left, top, right, bottom), outline=(60, 60, 60))
        for v in (lo, (lo + hi) / 2, hi):
            y = bottom - (v - lo) / (hi - lo) * (bottom - top)
            draw.text((8, y - 6), f"{v:.1f}", fill=(30, 30, 30))
        draw.text((left + 5, top + 4), "depth (plane)" if name == "depth" else "score",
                  fill=(30, 30, 30))
        ys = bottom - (np.clip(values, lo, hi) - lo) / (hi - lo) * (bottom - top)
        points = list(zip(xs.tolist(), ys.tolist()))
        if len(points) > 1:
            draw.line(points, fill=(31, 119, 180), width=2)
        for (x, y), edge in zip(points, result.at_edge):
            r = 3 if n <= 150 else 1
            draw.ellipse((x - r, y - r, x + r, y + r),
                         fill=(214, 39, 40) if edge else (31, 119, 180))
    draw.text((left, height - 22), f"frame (0..{n - 1})", fill=(30, 30, 30))
    with atomic_path(Path(path)) as tmp:
        img.save(tmp, format="PNG")


@click.command(name="zlocate")
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
def zlocate_cmd(movie, zstack, out_dir, max_shift, upsample, subplane, device, force, quiet):
    """Find the depth of each frame of MOVIE in a z-stack (zlocate.csv, zlocate.png).

    Each frame (a (N, Y, X) .tif, .npy or .zarr) is correlated with every plane of --zstack
    after its x/y alignment; the best plane, the depth between planes, the frame's (dy, dx),
    its score and confidence go to zlocate.csv, the depth against frame to zlocate.png.
    """
    from ..alignment.volume import zlocate
    from ..io import OutputRun, write_text

    bound = parse_xy_bound(max_shift)
    if out_dir is not None and not out_dir.strip():
        raise InputError("--out is empty: name the folder for zlocate.csv and zlocate.png")
    out = Path(out_dir) if out_dir is not None else default_out(movie, "_zlocate")
    if out.suffix.lower() in (".csv", ".png", ".tif", ".tiff") or out.is_file():
        raise InputError(f"--out is the folder zlocate writes zlocate.csv and zlocate.png "
                         f"into, not a file: {out}")
    for what, p in (("MOVIE", movie), ("--zstack", zstack)):
        if not p.exists():
            raise InputError(f"{what} {p}: no such file or folder")
    outputs = [out / name for name in OUTPUTS]
    dev = note_device(device, quiet)
    with OutputRun(outputs, [movie, zstack], force, lock=out / ".xcorr.lock") as run:
        t0 = time.perf_counter()
        result = zlocate(movie, zstack, max_shift=bound, upsample=upsample,
                         subplane=subplane, device=dev)
        write_text(outputs[0], result.to_csv())
        plot_depth(outputs[1], result, title=f"{movie.name} in {zstack.name}")
        run.commit()
    if not quiet:
        n, nz = result.profile.shape
        click.echo(f"xcorr zlocate: {n} frames against {nz} planes on {dev.upper()} in "
                   f"{time.perf_counter() - t0:.2f} s; wrote {outputs[0]} and {outputs[1]}")
        for note in result.notes[1:]:
            click.echo(f"note: {note}", err=True)
