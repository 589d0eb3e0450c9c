"""The drift plot: dy, dx (and the FFT reference) and confidence against frame, low-confidence
frames marked.

Drawn with Pillow (a dependency of xcorr) and the DejaVu Sans font file that matplotlib ships,
opened by its path, where matplotlib is installed (else Pillow's own font).  Why not matplotlib itself:
on a fresh machine its first figure builds a font cache, and every figure spends most of a
second importing and laying out text (docs/how-align-works.md, measurements); this plot is a few
lines, bands and labels, drawn in milliseconds in a fresh process with nothing cached.

Examples
--------
>>> import tempfile
>>> from types import SimpleNamespace
>>> shifts = np.c_[np.linspace(0, 3, 10), np.linspace(0, -2, 10)]
>>> res = SimpleNamespace(shifts=shifts, fft_shifts=shifts, confidence=np.full(10, 5.0),
...                       low_confidence=np.arange(10) == 4, settings={})
>>> path = Path(tempfile.mkdtemp()) / "drift.png"
>>> plot_drift(path, res, title="demo")
>>> path.read_bytes()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import functools
import importlib.util
import math
from pathlib import Path

import numpy as np

__all__ = ["plot_drift", "plot_quality", "nice_ticks", "PLOT_SIZE", "PANELS", "COLORS", "SUPERSAMPLE", "Panel",
           "curve", "font", "frame_and_labels", "grid_lines", "PNG_LEVEL"]

#: zlib level of the PNGs: 1 encodes an 880x605 plot in 10-16 ms against 15-27 ms at 6, for
#: files 30% larger (30 KB); part of every one-shot run
PNG_LEVEL = 1

#: ``(width, height)`` of ``drift.png`` in pixels
PLOT_SIZE = (880, 605)
#: the colours of the plot (matplotlib's default cycle, so it reads as before)
COLORS = {"dy": (31, 119, 180), "dx": (255, 127, 14), "confidence": (44, 160, 44),
          "low": (255, 205, 205), "threshold": (214, 39, 40), "grid": (228, 228, 228),
          "axes": (60, 60, 60), "text": (30, 30, 30)}
SUPERSAMPLE = 2  # curves are drawn at twice the size and reduced: antialiased lines for ~5 ms
#: ``(x0, y0, x1, y1)`` in pixels of the two panels (their frames included)
PANELS = {"shifts": (72, 58, 864, 352), "confidence": (72, 376, 864, 540)}
_MARKERS_UP_TO = 150  # frames: above, lines only (markers would merge)


def nice_ticks(lo: float, hi: float, n: int = 6, integer: bool = False) -> np.ndarray:
    """About ``n`` round tick values (steps of 1, 2, 2.5 or 5 times a power of ten) in
    ``[lo, hi]``.

    Examples
    --------
    >>> nice_ticks(0, 199).tolist()
    [0.0, 50.0, 100.0, 150.0]
    >>> nice_ticks(-0.3, 0.7).tolist()
    [-0.2, 0.0, 0.2, 0.4, 0.6]
    """
    span = max(hi - lo, 1e-12)
    raw = span / max(n - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9) * step
    ticks = first + step * np.arange(int(math.floor((hi - first) / step + 1e-9)) + 1)
    ticks = np.round(ticks, max(0, 2 - math.floor(math.log10(step))))  # 0.4, not 0.4000...01
    return np.where(np.abs(ticks) < step * 1e-9, 0.0, ticks)


def _tick_labels(ticks) -> list:
    if len(ticks) < 2:
        return [f"{t:g}" for t in ticks]
    step = abs(ticks[1] - ticks[0])
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step else 0
    if step and abs(round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6:
        decimals += 1  # a step of 2.5, 0.25...
    return [f"{t:.{decimals}f}" for t in ticks]


@functools.lru_cache(maxsize=None)
def font(size: int):
    """DejaVu Sans from matplotlib's package folder (found without importing matplotlib), or
    Pillow's own default font."""
    from PIL import ImageFont

    spec = importlib.util.find_spec("matplotlib")
    if spec is not None and spec.origin:
        ttf = Path(spec.origin).parent / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
        try:
            return ImageFont.truetype(str(ttf), size)
        except OSError:
            pass
    try:
        return ImageFont.load_default(size)
    except TypeError:  # Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


class Panel:
    """One panel's box in pixels and its data ranges."""

    def __init__(self, box, xlim, ylim):
        self.box, self.xlim, self.ylim = box, xlim, ylim

    def px(self, x, scale=1):
        x0, _, x1, _ = self.box
        return (x0 + (np.asarray(x, float) - self.xlim[0]) / (self.xlim[1] - self.xlim[0])
                * (x1 - x0)) * scale

    def py(self, y, scale=1):
        _, y0, _, y1 = self.box
        return (y1 - (np.asarray(y, float) - self.ylim[0]) / (self.ylim[1] - self.ylim[0])
                * (y1 - y0)) * scale


def _limits(*arrays):
    values = np.concatenate([np.ravel(np.asarray(a, float)) for a in arrays])
    values = values[np.isfinite(values)]
    if not values.size:
        return -1.0, 1.0
    lo, hi = float(values.min()), float(values.max())
    pad = 0.06 * (hi - lo) if hi > lo else max(1.0, abs(hi) * 0.1)
    return lo - pad, hi + pad


def _runs(mask):
    """``(start, stop)`` of every run of true values of a 1-D boolean array."""
    edges = np.flatnonzero(np.diff(np.r_[0, mask.astype(np.int8), 0]))
    return zip(edges[::2], edges[1::2])


def _envelope(px, py):
    """Many points per pixel column (of the plot; ``px`` supersampled): each column's lowest
    and highest point, in turn, at the column's centre (a polyline through them draws the same
    envelope, once the plot is reduced, at the cost of the plot's width; Pillow inks a thin
    line from the integer part of its x, so the centre inks the column's supersampled pixels
    as the points did)."""
    col = np.floor(px / SUPERSAMPLE).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
    with np.errstate(invalid="ignore"):
        lo = np.fmin.reduceat(py, starts)
        hi = np.fmax.reduceat(py, starts)
    x = np.repeat(col[starts] * SUPERSAMPLE + (SUPERSAMPLE - 1) / 2, 2)
    y = np.c_[lo, hi].ravel()
    return x, y


def curve(draw, panel, x, y, color, width, marker=None):
    """A polyline through the finite points (broken at NaN), with markers for few points;
    more points than the plot's pixel columns are drawn as their envelope (:func:`_envelope`:
    the same picture, and a million frames draw as fast as a thousand)."""
    px, py = panel.px(x, SUPERSAMPLE), panel.py(y, SUPERSAMPLE)
    if len(px) > 2 * (panel.box[2] - panel.box[0]):  # (the envelope: two points a column)
        px, py = _envelope(px, py)
    for a, b in _runs(np.isfinite(py)):
        points = np.c_[px[a:b], py[a:b]].ravel().tolist()
        if b - a == 1:
            points += points  # a lone point: a dot
        draw.line(points, fill=color, width=width * SUPERSAMPLE)
        if marker and len(x) <= _MARKERS_UP_TO:
            r = (3 if width > 1 else 2) * SUPERSAMPLE
            for cx, cy in zip(px[a:b], py[a:b]):
                shape = draw.ellipse if marker == "o" else draw.rectangle
                shape((cx - r, cy - r, cx + r, cy + r), fill=color)


def _dashed(image, panel, x, y, color, width):
    """A dashed polyline: drawn solid on a mask, then every other 10-px column band cleared
    (a constant cost, whatever the number of frames)."""
    from PIL import Image, ImageDraw

    box = tuple(int(v) * SUPERSAMPLE for v in panel.box)
    mask = Image.new("L", (box[2] - box[0], box[3] - box[1]), 0)  # (the panel's pixels only)
    x0, y0, x1, y1 = panel.box
    curve(ImageDraw.Draw(mask), Panel((0, 0, x1 - x0, y1 - y0), panel.xlim, panel.ylim), x, y,
          255, width)
    m = np.array(mask)
    m[:, (np.arange(m.shape[1]) // (5 * SUPERSAMPLE)) % 2 == 1] = 0
    rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
    if rows.size:  # paste only where the line is (a flat threshold line: a few rows)
        m = m[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
        image.paste(color, (box[0] + int(cols[0]), box[1] + int(rows[0])),
                    mask=Image.fromarray(m))


def _bands(draw, panel, frames, flagged, scale):
    """Light bands over the frames flagged low confidence (merged per pixel column)."""
    if not flagged.any():
        return
    x0, y0, x1, y1 = panel.box
    half = max(0.5 * (panel.px(1) - panel.px(0)), 1.5)
    centres = panel.px(frames[flagged])
    count = np.zeros(x1 - x0 + 3, np.int64)  # +1 where a band starts, -1 after it ends
    np.add.at(count, np.clip(np.floor(centres - half).astype(int) - x0, 0, x1 - x0), 1)
    np.add.at(count, np.clip(np.ceil(centres + half).astype(int) - x0, 0, x1 - x0) + 1, -1)
    cols = np.cumsum(count)[:-1] > 0
    for a, b in _runs(cols):
        draw.rectangle(((x0 + a) * scale, y0 * scale, (x0 + b - 1) * scale + scale - 1,
                        y1 * scale), fill=COLORS["low"])


def grid_lines(draw, panel, xticks, yticks, scale):
    x0, y0, x1, y1 = panel.box
    for t in panel.px(xticks):
        draw.line((t * scale, y0 * scale, t * scale, y1 * scale), fill=COLORS["grid"],
                  width=scale)
    for t in panel.py(yticks):
        draw.line((x0 * scale, t * scale, x1 * scale, t * scale), fill=COLORS["grid"],
                  width=scale)


def frame_and_labels(image, draw, panel, xticks, yticks, ylabel, xlabel=None):
    """The axes' frame, tick marks, tick labels and labels (1x, crisp)."""
    x0, y0, x1, y1 = panel.box
    small, label = font(12), font(13)
    draw.rectangle((x0, y0, x1, y1), outline=COLORS["axes"], width=1)
    for t, text in zip(panel.py(yticks), _tick_labels(yticks)):
        draw.line((x0 - 4, t, x0, t), fill=COLORS["axes"])
        draw.text((x0 - 7, t), text, fill=COLORS["text"], font=small, anchor="rm")
    for t, text in zip(panel.px(xticks), _tick_labels(xticks)):
        draw.line((t, y1, t, y1 + 4), fill=COLORS["axes"])
        if xlabel is not None:
            draw.text((t, y1 + 7), text, fill=COLORS["text"], font=small, anchor="mt")
    if xlabel is not None:
        draw.text(((x0 + x1) / 2, y1 + 26), xlabel, fill=COLORS["text"], font=label,
                  anchor="mt")
    _vertical_text(image, ylabel, label, 14, (y0 + y1) / 2)


def _vertical_text(image, text, font, x, y_centre):
    from PIL import Image, ImageDraw

    left, top, right, bottom = font.getbbox(text)
    strip = Image.new("L", (right - left + 2, bottom - top + 2), 0)
    ImageDraw.Draw(strip).text((1 - left, 1 - top), text, fill=255, font=font)
    strip = strip.rotate(90, expand=True)
    image.paste(COLORS["text"], (x, int(y_centre - strip.size[1] / 2)), mask=strip)


def _legend(draw, entries, y):
    """Entries ``(label, color, style)`` centred above the shift panel: one row at ``y``, or
    more, 16 px apart around it, where one does not fit the picture's width."""
    small = font(12)
    widths = [34 + small.getlength(label) + 18 for label, _, _ in entries]
    x0, _, x1, _ = PANELS["shifts"]
    rows, room = [[]], 2 * (PLOT_SIZE[0] - (x0 + x1) / 2) - 24  # (centred on the panel)
    for k, w in enumerate(widths):
        if rows[-1] and sum(widths[i] for i in rows[-1]) + w > room:
            rows.append([])
        rows[-1].append(k)
    for r, row in enumerate(rows):  # (the entries a plot has fit in two)
        _legend_row(draw, [entries[i] for i in row], [widths[i] for i in row],
                    y - 8 * (len(rows) - 1) + 16 * r, small)


def _legend_row(draw, entries, widths, y, small):
    x0, _, x1, _ = PANELS["shifts"]
    x = (x0 + x1 - sum(widths)) / 2
    for (label, color, style), w in zip(entries, widths):
        if style == "band":
            draw.rectangle((x, y - 6, x + 26, y + 6), fill=color)
        elif style == "dash":
            for a in range(0, 26, 10):
                draw.line((x + a, y, x + a + 5, y), fill=color, width=2)
        else:
            draw.line((x, y, x + 26, y), fill=color, width=2)
        draw.text((x + 32, y), label, fill=COLORS["text"], font=small, anchor="lm")
        x += w


def _darker(color, f=0.6):
    return tuple(int(c * f) for c in color)


def plot_drift(path, result, title="") -> None:
    """Write ``drift.png`` (:data:`PLOT_SIZE`) for an
    :class:`~xcorr_app.alignment._result.AlignResult`, atomically: dy and dx against frame
    (the FFT reference dashed), the confidence below (the ``min_confidence`` threshold
    dashed; an infinite confidence, no second peak, as a triangle at the panel's top), frames
    flagged low confidence as light red bands.

    Parameters
    ----------
    path : str or os.PathLike
        The PNG file to write.
    result : AlignResult
        Its ``shifts``, ``fft_shifts``, ``confidence``, ``low_confidence`` and ``settings``
        are drawn.
    title : str
        A line above the plot.
    """
    from PIL import ImageDraw

    from ...io import atomic_path

    shifts = np.asarray(result.shifts, float).reshape(-1, 2)
    n = len(shifts)
    fft = np.asarray(result.fft_shifts, float).reshape(-1, 2)
    conf = np.asarray(result.confidence, float)
    rival = np.isposinf(conf)
    rivalless = int(rival.sum())
    conf = np.where(np.isfinite(conf), conf, np.nan)  # inf: a peak without a rival
    flagged = np.asarray(result.low_confidence, bool)
    threshold = (getattr(result, "settings", None) or {}).get("min_confidence")
    # (1: the least a peak over its rival can be; the panel keeps a scale when all are inf)
    lo, hi = _limits(conf, [] if threshold is None else [threshold], [1.0] if rivalless else [])
    hi += 0.12 * (hi - lo) if rivalless else 0.0  # (a row above the values for the triangles)
    frames, top, bottom, xticks, (yticks_top, yticks_bottom), big, draw = _two_panels(
        n, _limits(shifts, fft), (lo, hi), flagged)
    width, height = PLOT_SIZE
    xlim = top.xlim
    curve(draw, top, frames, shifts[:, 0], COLORS["dy"], 2, "o")
    curve(draw, top, frames, shifts[:, 1], COLORS["dx"], 2, "s")
    has_fft = bool(np.isfinite(fft).any())
    if has_fft:
        _dashed(big, top, frames, fft[:, 0], _darker(COLORS["dy"]), 1)
        _dashed(big, top, frames, fft[:, 1], _darker(COLORS["dx"]), 1)
    if threshold is not None:
        _dashed(big, bottom, frames[[0, -1]] if n > 1 else xlim, [threshold] * 2,
                COLORS["threshold"], 1)
    curve(draw, bottom, frames, conf, COLORS["confidence"], 1, "o")
    _capped(draw, bottom, frames[rival], COLORS["confidence"])
    image = big.reduce(SUPERSAMPLE)

    draw = ImageDraw.Draw(image)
    frame_and_labels(image, draw, top, xticks, yticks_top, "shift to align (px)")
    frame_and_labels(image, draw, bottom, xticks, yticks_bottom, "confidence", "frame")
    if rivalless:  # (an empty panel would read as a failure)
        x0, y0, x1, _ = PANELS["confidence"]
        draw.text((x1 - 8, y0 + 14), f"{rivalless} of {n} frames: no other peak (confidence "
                  "inf), triangles at the top", fill=COLORS["text"], font=font(11), anchor="rt")
    if title:
        draw.text((width / 2, 8), title, fill=COLORS["text"], font=font(14), anchor="mt")
    entries = [("dy", COLORS["dy"], "line"), ("dx", COLORS["dx"], "line")]
    if has_fft:
        entries += [("dy, dx (FFT reference)", _darker(COLORS["dy"]), "dash")]
    if flagged.any():
        entries += [(f"low confidence ({int(flagged.sum())} of {n} frames)", COLORS["low"],
                     "band")]
    if threshold is not None:
        entries += [(f"min confidence {threshold:g}", COLORS["threshold"], "dash")]
    _legend(draw, entries, 40)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", compress_level=PNG_LEVEL)


def _capped(draw, panel, frames, color):
    """Upward triangles at the top of ``panel`` over ``frames`` (values off its scale: an
    infinite confidence); one a pixel column however many frames."""
    if not len(frames):
        return
    r = 4 * SUPERSAMPLE
    y = (panel.box[1] + 6) * SUPERSAMPLE
    for x in np.unique(np.round(panel.px(frames, SUPERSAMPLE) / SUPERSAMPLE)) * SUPERSAMPLE:
        draw.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=color)


def _two_panels(n, top_ylim, bottom_ylim, flagged):
    """The supersampled canvas of a plot against frame: its two panels (``PANELS``), the
    ticks, flagged frames' bands and the grid drawn; the curves are the caller's."""
    from PIL import Image, ImageDraw

    frames = np.arange(n)
    xlim = (-0.5, 0.5) if n == 1 else (-0.02 * (n - 1), 1.02 * (n - 1))
    top = Panel(PANELS["shifts"], xlim, top_ylim)
    bottom = Panel(PANELS["confidence"], xlim, bottom_ylim)
    xticks = nice_ticks(max(0.0, xlim[0]), xlim[1], 8, integer=True)
    yticks = (nice_ticks(*top.ylim, 7), nice_ticks(*bottom.ylim, 4))
    width, height = PLOT_SIZE
    big = Image.new("RGB", (width * SUPERSAMPLE, height * SUPERSAMPLE), "white")
    draw = ImageDraw.Draw(big)
    for panel, ticks in zip((top, bottom), yticks):
        _bands(draw, panel, frames, flagged, SUPERSAMPLE)
        grid_lines(draw, panel, xticks, ticks, SUPERSAMPLE)
    return frames, top, bottom, xticks, yticks, big, draw


def plot_quality(path, before, after, residual, flagged, sharpness=None, title="",
                 patch_after=None, patch_flagged=None) -> None:
    """Write ``quality.png`` (:data:`PLOT_SIZE`), atomically: every frame's correlation with the
    template before alignment and after it, the residual shift measured on the aligned frame
    below, frames flagged (worse or poor) as light red bands; ``sharpness`` ``(before,
    after)`` of the mean image in the legend.  A piecewise run's report per patch region
    (``patch_after``, ``patch_flagged``: (N, gy, gx)) adds each frame's worst region after
    alignment, dashed, and how many regions are flagged in how many frames.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "quality.png"
    >>> plot_quality(path, np.linspace(0.5, 0.9, 8), np.full(8, 0.95), np.zeros((8, 2)),
    ...              np.arange(8) == 3, (0.1, 0.2))
    >>> path.read_bytes()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
    True
    """
    from PIL import ImageDraw

    from ...io import atomic_path

    before, after = np.asarray(before, float), np.asarray(after, float)
    residual = np.asarray(residual, float).reshape(-1, 2)
    flagged = np.asarray(flagged, bool)
    n = len(after)
    worst = None
    if patch_after is not None:
        regions = np.asarray(patch_after, float).reshape(n, -1)
        seen = np.isfinite(regions).any(axis=1)
        worst = np.full(n, np.nan)
        worst[seen] = np.nanmin(regions[seen], axis=1)
    frames, top, bottom, xticks, (yticks_top, yticks_bottom), big, draw = _two_panels(
        n, _limits(before, after, *([] if worst is None else [worst])),
        _limits(residual, [0.0]), flagged)
    width, height = PLOT_SIZE
    curve(draw, top, frames, before, COLORS["axes"], 1, "o")
    curve(draw, top, frames, after, COLORS["confidence"], 2, "o")
    if worst is not None:
        _dashed(big, top, frames, worst, COLORS["threshold"], 2)
    curve(draw, bottom, frames, residual[:, 0], COLORS["dy"], 1, "o")
    curve(draw, bottom, frames, residual[:, 1], COLORS["dx"], 1, "s")
    image = big.reduce(SUPERSAMPLE)
    draw = ImageDraw.Draw(image)
    frame_and_labels(image, draw, top, xticks, yticks_top, "correlation with the template")
    frame_and_labels(image, draw, bottom, xticks, yticks_bottom, "residual (px)", "frame")
    if title:
        draw.text((width / 2, 8), title, fill=COLORS["text"], font=font(14), anchor="mt")
    sharp = "" if sharpness is None else \
        f" (mean image sharpness {sharpness[0]:.3g} -> {sharpness[1]:.3g})"
    entries = [("before alignment", COLORS["axes"], "line"),
               ("after" + sharp, COLORS["confidence"], "line"),
               ("residual dy", COLORS["dy"], "line"), ("residual dx", COLORS["dx"], "line")]
    if flagged.any():
        entries += [(f"worse or poor ({int(flagged.sum())} of {n} frames)", COLORS["low"],
                     "band")]
    if worst is not None and np.isfinite(worst).any():
        marked = np.asarray(patch_flagged, bool).reshape(n, -1) if patch_flagged is not None \
            else np.zeros((n, 1), bool)
        k, m = int(marked.sum()), int(marked.any(axis=1).sum())
        entries += [(f"worst patch region after ({k} region{'' if k == 1 else 's'} flagged in "
                     f"{m} frame{'' if m == 1 else 's'})", COLORS["threshold"], "dash")]
    _legend(draw, entries, 40)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", compress_level=PNG_LEVEL)
