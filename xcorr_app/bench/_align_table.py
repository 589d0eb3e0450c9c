"""The rows and the table of ``xcorr bench align``: the rows' names, their numbers (frames/s,
GB/s, shares of the plain read and of the per-pair loop, error against the known drift), the
issue's targets, and the Markdown table and header."""

from __future__ import annotations

import numpy as np

from ._align_data import MAX_DRIFT, filesystem_of, rms_error
from ._align_peers import READ_CHUNK
from ._common import cell, markdown_header, utc_now, versions_line

#: the libraries whose versions the header gives
VERSIONS = ("cupy", "torch", "numpy", "tifffile", "skimage")
#: the bound of the bounded ``xcorr align`` rows (the issue's ``--max-shift 16``)
MAX_SHIFT = 16
#: RMS error (px) against the known drift above which an ``xcorr align`` row is INACCURATE
ACCURACY_PX = 0.25
#: the issue's targets for the end-to-end rows
TARGET_VS_READ = 0.80
TARGET_VS_LOOP = 5.0

READ_IMREAD = "tifffile.imread (whole file)"
READ_MEMMAP = f"tifffile.memmap, copied in {READ_CHUNK}-frame chunks"
ALIGN_BOUNDED = f"xcorr align --max-shift {MAX_SHIFT}"
ALIGN_FULL = "xcorr align (unbounded)"
ALIGN_NO_VERIFY = f"xcorr align --max-shift {MAX_SHIFT} --no-verify"
LOOP = "per-pair CuPy FFT loop"
SKIMAGE = "skimage phase_cross_correlation (CPU)"
#: the rows the issue's targets apply to
TARGET_ROWS = (ALIGN_BOUNDED, ALIGN_FULL)
#: ``align()`` keyword arguments of the three xcorr rows
ALIGN_ROWS = {ALIGN_BOUNDED: {"max_shift": MAX_SHIFT},
              ALIGN_FULL: {"max_shift": None},
              ALIGN_NO_VERIFY: {"max_shift": MAX_SHIFT, "verify": False}}


def make_row(name, kind, frames, frame_bytes, seconds, shifts=None, truth=None, note="",
             warmup="", error="") -> dict:
    """A row of the table: ``name``, ``kind`` (``read``, ``xcorr`` or ``peer``), ``frames``,
    ``seconds``, ``bytes``, ``fps``, ``gbps``, ``rms_px``, ``max_err_px``, ``note``, ``warmup``
    and ``error`` (why it failed; then ``seconds`` is None).  :func:`summarise` adds the ratios."""
    ok = seconds is not None and seconds > 0
    row = {"name": name, "kind": kind, "frames": int(frames), "seconds": seconds,
           "bytes": int(frames) * int(frame_bytes),
           "fps": frames / seconds if ok else None,
           "gbps": frames * frame_bytes / seconds / 1e9 if ok else None,
           "rms_px": None, "max_err_px": None, "note": note, "warmup": warmup, "error": error}
    if shifts is not None and truth is not None:
        truth = np.asarray(truth)[:len(shifts)]
        row["rms_px"] = rms_error(shifts, truth)
        row["max_err_px"] = float(np.nanmax(np.abs(np.asarray(shifts) - truth)))
    return row


def _status(row) -> str:
    if row["error"] or row["seconds"] is None:
        return "ERROR"
    if row["kind"] != "xcorr":
        return "-"
    rms = row["rms_px"]
    return "ok" if rms is not None and rms <= ACCURACY_PX else "INACCURATE"


def summarise(rows) -> list:
    """Add ``vs_read`` (frames/s over the fastest plain read's), ``vs_loop`` (over the per-pair
    loop's) and ``status`` (``ok``, ``INACCURATE`` or ``ERROR`` for the xcorr rows, ``-`` for
    the others, ``ERROR`` for any failed row) to every row; returns ``rows``."""
    reads = [r["fps"] for r in rows if r["kind"] == "read" and r["fps"]]
    base = max(reads) if reads else None
    loop = next((r["fps"] for r in rows if r["name"] == LOOP and r["fps"]), None)
    for r in rows:
        r["vs_read"] = r["fps"] / base if r["fps"] and base else None
        r["vs_loop"] = r["fps"] / loop if r["fps"] and loop else None
        r["status"] = _status(r)
    return rows


COLUMNS = ("path", "frames", "seconds", "frames/s", "GB/s", "vs plain read", "vs per-pair loop",
           "RMS error px", "check", "notes")


def _num(value, fmt) -> str:
    return "n/a" if value is None or not np.isfinite(value) else format(value, fmt)


def seconds_text(value) -> str:
    """Seconds to 3 decimals below 10 s, to 1 above (``n/a`` for a failed row)."""
    return _num(value, ".3f" if value is not None and value < 10 else ".1f")


def format_row(row) -> str:
    """One Markdown table line of a row."""
    notes = [n for n in (row.get("note"), row.get("error")) if n]
    cells = [row["name"], row["frames"], seconds_text(row["seconds"]), _num(row["fps"], ".1f"),
             _num(row["gbps"], ".2f"),
             "n/a" if row.get("vs_read") is None else f"{100 * row['vs_read']:.0f}%",
             "n/a" if row.get("vs_loop") is None else f"{row['vs_loop']:.1f}x",
             _num(row["rms_px"], ".3f") if row["kind"] != "read" else "",
             row.get("status", ""), "; ".join(notes)]
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def table_header() -> str:
    """The two Markdown header lines of the table."""
    return markdown_header(COLUMNS)


def format_table(rows, header=()) -> str:
    """The ``header`` lines, then a Markdown table of summarised rows.

    Examples
    --------
    >>> rows = summarise([make_row(READ_IMREAD, "read", 10, 100, 1.0),
    ...                   make_row(LOOP, "peer", 10, 100, 5.0)])
    >>> print(format_table(rows).splitlines()[3])
    | per-pair CuPy FFT loop | 10 | 5.000 | 2.0 | 0.00 | 20% | 1.0x | n/a | - |  |
    """
    return "\n".join(list(header) + [table_header()] + [format_row(r) for r in rows])


def target_lines(rows) -> list:
    """The issue's two targets for each row of :data:`TARGET_ROWS`: ``yes``/``no`` and the value.

    >>> rows = summarise([make_row(READ_IMREAD, "read", 10, 100, 1.0),
    ...                   make_row(ALIGN_BOUNDED, "xcorr", 10, 100, 1.1),
    ...                   make_row(LOOP, "peer", 10, 100, 6.0)])
    >>> for part in target_lines(rows)[0].split("; "):
    ...     print(part)
    xcorr align --max-shift 16: end-to-end >= 80% of plain read: yes (91%)
    >= 5x the per-pair CuPy loop: yes (5.5x)
    """
    lines = []
    by_name = {r["name"]: r for r in rows}
    for name in TARGET_ROWS:
        r = by_name.get(name)
        if r is None:
            continue
        vr, vl = r.get("vs_read"), r.get("vs_loop")
        read = "n/a" if vr is None else (f"{'yes' if vr >= TARGET_VS_READ else 'no'} "
                                         f"({100 * vr:.0f}%)")
        loop = "n/a" if vl is None else f"{'yes' if vl >= TARGET_VS_LOOP else 'no'} ({vl:.1f}x)"
        lines.append(f"{name}: end-to-end >= {100 * TARGET_VS_READ:.0f}% of plain read: {read}; "
                     f">= {TARGET_VS_LOOP:g}x the per-pair CuPy loop: {loop}")
    return lines


def header_lines(device, stack, path, written_s, workers, repeat=1) -> list:
    """Device, date, versions, stack and file lines printed above the table."""
    h, w = stack.shape
    return [f"xcorr bench align on {device}, {utc_now()}",
            f"versions: {versions_line(VERSIONS)}",
            f"stack: {stack.n_frames} frames of {h}x{w} uint16 ({stack.nbytes / 2**30:.2f} GiB), "
            f"random-walk drift within +-{MAX_DRIFT:g} px (subpixel, bilinear), Poisson noise; "
            f"made and written in {written_s:.1f} s ({workers} threads)",
            f"file: {path} ({filesystem_of(path)}; uncompressed, contiguous, memory-mappable), "
            "in the page cache (just written, not dropped)",
            "timing: wall clock (time.perf_counter) over the whole file after an untimed "
            f"warm-up{'' if repeat == 1 else f', median of {repeat} runs'}; align rows call "
            "xcorr_app.align(path, device='gpu') in process"]
