"""The outputs of piecewise-rigid alignment (``xcorr align --patches``): ``motion_field.npz``
(:func:`write_motion_field`) and the picture ``motion_field.png`` (:func:`plot_motion_field`:
the deviations of one frame's patches from its rigid shift as arrows over the template, and
the mean |deviation| per frame over time), both written atomically.  Drawn with Pillow, as the
drift plot (:mod:`xcorr_app.alignment.outputs._plots` says why not matplotlib).

Examples
--------
>>> import tempfile
>>> from types import SimpleNamespace
>>> n, gy, gx = 5, 2, 3
>>> centres = np.stack(np.meshgrid([10.0, 30.0], [8.0, 24.0, 40.0], indexing="ij"), axis=-1)
>>> field = np.random.default_rng(0).normal(size=(n, gy, gx, 2))
>>> res = SimpleNamespace(shifts=np.zeros((n, 2)), motion_field=field, patch_centres=centres,
...                       patch_confidence=np.ones((n, gy, gx)),
...                       patch_low=np.zeros((n, gy, gx), bool),
...                       patch_template=np.zeros((40, 48), np.float32), settings={})
>>> folder = Path(tempfile.mkdtemp())
>>> write_motion_field(folder / "motion_field.npz", res)
>>> np.load(folder / "motion_field.npz")["field"].shape
(5, 2, 3, 2)
>>> plot_motion_field(folder / "motion_field.png", res)
>>> (folder / "motion_field.png").read_bytes()[:4] == b"\\x89PNG"
True
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._plots import (COLORS, PNG_LEVEL, SUPERSAMPLE, Panel, curve, font, frame_and_labels,
                    grid_lines, nice_ticks)
from ...io import atomic_path

__all__ = ["write_motion_field", "plot_motion_field", "FIELD_PLOT_SIZE"]

#: ``(width, height)`` of ``motion_field.png`` in pixels
FIELD_PLOT_SIZE = (960, 500)
_IMAGE_BOX = (16, 50, 436, 470)        # the template with the arrows (fitted inside)
_TIME_BOX = (520, 60, 944, 430)        # mean |deviation| against frame
_ARROW = (214, 39, 40)
_ARROW_LOW = (255, 190, 0)


def _deviation(result):
    return np.asarray(result.motion_field, float) - \
        np.asarray(result.shifts, float)[:, None, None, :]


def write_motion_field(path, result) -> None:
    """Write ``motion_field.npz`` atomically: ``field`` ``(frames, gy, gx, 2)`` (every patch's
    shift ``(dy, dx)``, align's sign: rigid plus deviation), ``deviation`` (the field minus the
    rigid shift), ``rigid`` ``(frames, 2)``, ``centres`` ``(gy, gx, 2)`` (patch centres
    ``(y, x)`` in pixels), ``confidence`` and ``low`` ``(frames, gy, gx)`` (patches that took
    their neighbours' median), ``patch_size``, ``max_deviation`` and ``frame_shape`` ``(H, W)``
    (where ``result`` has one: ``xcorr apply`` checks a stack against it); with the quality
    report, per patch region ``quality_before``, ``quality_after`` ``(frames, gy, gx)`` (correlation
    with the template), ``quality_residual`` ``(frames, gy, gx, 2)`` px and ``quality_flag``
    (0: fine, 1: worse (poor or not), 2: poor, as ``shifts.json``'s ``quality_flag``)."""
    settings = getattr(result, "settings", None) or {}
    grid = settings.get("patches") or {}
    arrays = {"field": np.asarray(result.motion_field, np.float64),
              "deviation": _deviation(result),
              "rigid": np.asarray(result.shifts, np.float64),
              "centres": np.asarray(result.patch_centres, np.float64),
              "confidence": np.asarray(result.patch_confidence, np.float64),
              "low": np.asarray(result.patch_low, bool),
              "patch_size": np.asarray(grid.get("size", []), np.int64),
              "max_deviation": np.asarray(grid.get("max_deviation", -1), np.int64)}
    if getattr(result, "frame_shape", None) is not None:
        arrays["frame_shape"] = np.asarray(result.frame_shape, np.int64)
    q = getattr(result, "quality", None)
    if q is not None and q.patch_after is not None:
        arrays.update(quality_before=q.patch_before, quality_after=q.patch_after,
                      quality_residual=q.patch_residual,
                      quality_flag=np.where(q.patch_worse, 1, np.where(q.patch_poor, 2, 0)
                                            ).astype(np.int8))
    with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file: savez adds no suffix
        # stored, not deflated: deflate hardly shrinks float fields and was most of the write
        np.savez(f, **arrays)


def _template_image(template, box):
    """The template as an 8-bit image fitted into ``box`` (1st to 99th percentile), its scale
    (image px per frame px) and offset."""
    from PIL import Image

    t = np.asarray(template, np.float64)
    finite = t[np.isfinite(t)]
    lo, hi = (np.percentile(finite, [1, 99]) if finite.size else (0.0, 1.0))
    g = np.clip((np.nan_to_num(t, nan=lo) - lo) / max(hi - lo, 1e-12), 0, 1)
    img = Image.fromarray((g * 255).astype(np.uint8), "L").convert("RGB")
    bw, bh = box[2] - box[0], box[3] - box[1]
    scale = min(bw / t.shape[1], bh / t.shape[0])
    size = (max(1, round(t.shape[1] * scale)), max(1, round(t.shape[0] * scale)))
    img = img.resize(size, Image.BILINEAR)
    offset = (box[0] + (bw - size[0]) // 2, box[1] + (bh - size[1]) // 2)
    return img, scale, offset


def plot_motion_field(path, result, frame=None, title="") -> None:
    """Write ``motion_field.png`` atomically: on the left the template with the deviation of
    every patch of ``frame`` (default: the frame of the largest mean |deviation|) from the
    frame's rigid shift as an arrow from the patch centre (scaled to be seen; the scale is
    written; yellow: a patch that took its neighbours' median), on the right the mean
    |deviation| over the patches of every frame against frame."""
    from PIL import Image, ImageDraw

    dev = _deviation(result)
    n = len(dev)
    mag = np.sqrt((dev ** 2).sum(axis=-1))  # (n, gy, gx)
    flat = mag.reshape(n, -1) if n else np.zeros((0, 1))
    seen = np.isfinite(flat).sum(axis=1)  # (a frame of no field: NaN, not nanmean's warning)
    per_frame = np.where(seen > 0, np.where(np.isfinite(flat), flat, 0.0).sum(axis=1)
                         / np.maximum(seen, 1), np.nan)
    if frame is None:
        finite = np.where(np.isfinite(per_frame), per_frame, -1.0)
        frame = int(finite.argmax()) if n else 0
    width, height = FIELD_PLOT_SIZE
    image = Image.new("RGB", (width, height), "white")
    template = getattr(result, "patch_template", None)
    if template is None:
        template = np.zeros((int(np.ceil(np.nanmax(result.patch_centres[..., 0]))) + 1,
                             int(np.ceil(np.nanmax(result.patch_centres[..., 1]))) + 1))
    tmpl, scale, (ox, oy) = _template_image(template, _IMAGE_BOX)
    image.paste(tmpl, (ox, oy))
    draw = ImageDraw.Draw(image)
    largest = float(np.nanmax(mag[frame])) if n and np.isfinite(mag[frame]).any() else 0.0
    spacing = float(np.min(np.diff(result.patch_centres[..., 1], axis=-1))) * scale \
        if result.patch_centres.shape[1] > 1 else tmpl.size[0] / 2
    if result.patch_centres.shape[0] > 1:
        spacing = min(spacing, float(np.min(np.diff(result.patch_centres[..., 0], axis=0)))
                      * scale)
    gain = 0.45 * spacing / max(largest * scale, 1e-9) if largest > 0 else 1.0  # arrow: x gain
    low = np.asarray(result.patch_low, bool)
    for (cy, cx), (dy, dx), lw in zip(result.patch_centres.reshape(-1, 2),
                                      dev[frame].reshape(-1, 2) if n else [],
                                      low[frame].reshape(-1) if n else []):
        if not (np.isfinite(dy) and np.isfinite(dx)):
            continue
        x0, y0 = ox + cx * scale, oy + cy * scale
        x1, y1 = x0 + dx * scale * gain, y0 + dy * scale * gain
        color = _ARROW_LOW if lw else _ARROW
        draw.line((x0, y0, x1, y1), fill=color, width=2)
        draw.ellipse((x0 - 2, y0 - 2, x0 + 2, y0 + 2), fill=color)
        length = np.hypot(x1 - x0, y1 - y0)
        if length > 3:  # the head
            ux, uy = (x1 - x0) / length, (y1 - y0) / length
            for side in (1, -1):
                draw.line((x1, y1, x1 - 7 * ux + side * 4 * uy, y1 - 7 * uy - side * 4 * ux),
                          fill=color, width=2)
    caption = (f"frame {frame}: patch deviation from its rigid shift, arrows x{gain:.3g} "
               f"(largest {largest:.2f} px)")
    draw.text(((_IMAGE_BOX[0] + _IMAGE_BOX[2]) / 2, _IMAGE_BOX[3] + 8), caption,
              fill=COLORS["text"], font=font(12), anchor="mt")

    xlim = (-0.5, 0.5) if n <= 1 else (-0.02 * (n - 1), 1.02 * (n - 1))
    finite = per_frame[np.isfinite(per_frame)]
    top = max(float(finite.max()) * 1.1, 0.05) if finite.size else 1.0
    panel = Panel(_TIME_BOX, xlim, (0.0, top))
    xticks = nice_ticks(max(0.0, xlim[0]), xlim[1], 7, integer=True)
    yticks = nice_ticks(0.0, top, 6)
    big = Image.new("RGB", (width * SUPERSAMPLE, height * SUPERSAMPLE), "white")
    bdraw = ImageDraw.Draw(big)
    grid_lines(bdraw, panel, xticks, yticks, SUPERSAMPLE)
    curve(bdraw, panel, np.arange(n), per_frame, COLORS["dy"], 2, "o")
    box = tuple(v * SUPERSAMPLE for v in _TIME_BOX)
    small = big.crop(box).reduce(SUPERSAMPLE)
    image.paste(small, (_TIME_BOX[0], _TIME_BOX[1]))
    draw = ImageDraw.Draw(image)
    frame_and_labels(image, draw, panel, xticks, yticks, "", "frame")
    draw.text(((_TIME_BOX[0] + _TIME_BOX[2]) / 2, _TIME_BOX[1] - 10),
              "mean |deviation| from the rigid shift (px)", fill=COLORS["text"], font=font(13),
              anchor="mb")
    if title:
        draw.text((width / 2, 8), title, fill=COLORS["text"], font=font(14), anchor="mt")
    with atomic_path(Path(path)) as tmp:
        image.save(tmp, format="PNG", compress_level=PNG_LEVEL)
