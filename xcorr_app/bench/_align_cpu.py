"""``xcorr bench align --device cpu``: the CPU path against a scikit-image loop.

The stack of :class:`~xcorr_app.bench._align_data.SyntheticStack` (default 300 frames of
1024x1024 uint16, 629 MB: the issue's case) is written to local disk and stays in the page
cache.  Rows, each timed by wall clock:

* **tifffile.imread**: the plain read of the whole file;
* **skimage loop, upsample 20**: ``skimage.registration.phase_cross_correlation(frame0,
  frame, upsample_factor=20)`` over every frame, in process (scikit-image is imported first);
* **xcorr align (CPU)** and **xcorr align --max-shift 16 (CPU)**: :func:`xcorr_app.align`
  in process (``device="cpu"``, default settings: the FFT reference check included), after an
  untimed warm-up on a few frames;
* the same two as **one-shot processes** (``xcorr align PATH --device cpu --no-aligned``: the
  shifts, the CSV/JSON and the plot, like-for-like with the loop, which writes no stack), each
  run twice: *first* and *again* (on the CPU no kernel or plan cache exists: the difference is
  the operating system's caches of Python's files), with the process's peak memory, and the
  skimage loop as a one-shot process too.

Every row gives frames/s, its speed against the in-process skimage loop and the RMS error of
its shifts against the known drift.  The targets of the issue: the default one-shot run at
least as fast as the skimage loop within :data:`TARGET_PEAK_BYTES` of peak memory, and
``--max-shift 16`` at least :data:`TARGET_BOUNDED` times as fast.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from ._align_table import make_row
from ._common import timed
from ._oneshot import python_argv, run_process, xcorr_argv

#: the issue's stack for the CPU: (frames, height, width); --quick
CPU_SHAPE = (300, 1024, 1024)
CPU_QUICK_SHAPE = (24, 256, 256)
UPSAMPLE = 20
MAX_SHIFT = 16
TARGET_PEAK_BYTES = 1.5e9
TARGET_BOUNDED = 2.0
WARMUP_FRAMES = 4

SKIMAGE_CHILD = ("import sys; from xcorr_app.bench._align_peers import skimage_loop; "
                 "skimage_loop(sys.argv[1], 10**9, {u})")


def _row(name, kind, n, frame_bytes, seconds, shifts=None, truth=None, peak=None, error=""):
    """:func:`~xcorr_app.bench._align_table.make_row` with the process's peak memory."""
    row = make_row(name, kind, n, frame_bytes, seconds, shifts, truth, error=error)
    row["peak_bytes"] = peak
    return row


def rows_for(path, stack, echo=print) -> list:
    """Time every row on ``path`` (the written ``stack``); print a line per row."""
    import tifffile

    from ..alignment import align
    from ._align_peers import skimage_loop

    n, truth = stack.n_frames, stack.shifts
    fb = stack.shape[0] * stack.shape[1] * 2  # uint16
    rows = []

    def add(row):
        took = "failed: " + row["error"] if row["error"] else f"{row['seconds']:.2f} s"
        echo(f"  {row['name']}: {took}")
        rows.append(row)

    add(_row("tifffile.imread (whole file)", "read", n, fb,
             timed(lambda: tifffile.imread(path).shape)[0]))
    skimage_loop(path, 2, UPSAMPLE)  # imports and first calls, untimed
    sec, shifts = timed(lambda: skimage_loop(path, n, UPSAMPLE))
    add(_row(f"skimage loop, upsample {UPSAMPLE} (in process)", "peer", n, fb, sec, shifts,
             truth))
    mm = tifffile.memmap(path, mode="r")
    few = np.array(mm[:WARMUP_FRAMES])
    del mm
    configs = [("xcorr align (CPU)", {}, []),
               (f"xcorr align --max-shift {MAX_SHIFT} (CPU)", {"max_shift": MAX_SHIFT},
                ["--max-shift", MAX_SHIFT])]
    for name, kw, _ in configs:
        align(few, device="cpu", **kw)  # imports, untimed
        sec, res = timed(lambda: align(path, device="cpu", **kw))
        add(_row(f"{name}, in process", "xcorr", n, fb, sec, np.asarray(res.shifts), truth))
    with tempfile.TemporaryDirectory(prefix="xcorr-bench-cpu-") as tmp:
        for name, _, args in configs:
            for run in ("first", "again"):
                out = Path(tmp) / f"out-{len(rows)}"
                r = run_process(xcorr_argv("align", path, "--out", out, "--device", "cpu",
                                           "--no-aligned", "-q", *args), out=out)
                add(_row(f"{name}, one-shot process, {run}", "xcorr", n, fb, r["seconds"],
                         r["shifts"], truth, r["peak_bytes"],
                         error="" if r["returncode"] == 0 else r["stderr"]))
        r = run_process(python_argv("-c", SKIMAGE_CHILD.format(u=UPSAMPLE), path))
        add(_row(f"skimage loop, upsample {UPSAMPLE}, one-shot process", "peer", n, fb,
                 r["seconds"], peak=r["peak_bytes"],
                 error="" if r["returncode"] == 0 else r["stderr"]))
    return rows


def format_rows(rows) -> list:
    """The Markdown table: one line per row, speed relative to the in-process skimage loop."""
    loop = next((r["fps"] for r in rows if r["kind"] == "peer" and r["fps"]), None)
    lines = ["| path | frames | seconds | frames/s | vs skimage loop | peak memory | "
             "RMS error px | notes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vs = f"{r['fps'] / loop:.2f}x" if r["fps"] and loop else "n/a"
        peak = f"{r['peak_bytes'] / 1e9:.2f} GB" if r["peak_bytes"] else ""
        rms = "" if r["rms_px"] is None else f"{r['rms_px']:.4f}"
        sec = "n/a" if r["seconds"] is None else f"{r['seconds']:.2f}"
        fps = "n/a" if r["fps"] is None else f"{r['fps']:.1f}"
        lines.append(f"| {r['name']} | {r['frames']} | {sec} | {fps} | {vs} | {peak} | {rms} | "
                     f"{r['error'] or r['note']} |")
    return lines


def target_lines(rows) -> list:
    """The issue's targets for the one-shot rows run *again* (and *first*)."""
    loop = next((r["fps"] for r in rows if r["kind"] == "peer" and r["fps"]), None)
    out = []
    for r in rows:
        if "one-shot" not in r["name"] or r["kind"] != "xcorr" or not r["fps"] or not loop:
            continue
        bounded = f"--max-shift {MAX_SHIFT}" in r["name"]
        need = TARGET_BOUNDED if bounded else 1.0
        ok = r["fps"] / loop >= need
        mem = ""
        if not bounded and r["peak_bytes"]:
            mem = (f"; peak {r['peak_bytes'] / 1e9:.2f} GB <= {TARGET_PEAK_BYTES / 1e9:g} GB: "
                   f"{'yes' if r['peak_bytes'] <= TARGET_PEAK_BYTES else 'no'}")
        out.append(f"{r['name']}: >= {need:g}x the skimage loop: {'yes' if ok else 'no'} "
                   f"({r['fps'] / loop:.2f}x){mem}")
    return out
