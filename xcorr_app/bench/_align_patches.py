"""``xcorr bench align --patches GYxGX``: piecewise-rigid registration, warm (in process).

A synthetic non-rigid uint16 stack (:func:`~xcorr_app.bench._align_data.nonrigid_stack`: a
smooth random scene, rigid drift up to 10 px, a smooth deformation up to 3 px, peak SNR 20;
:data:`DISTINCT` distinct frames repeated to the stack's length) is aligned with
``patches=(gy, gx)``, ``max_deviation`` :data:`MAX_DEVIATION`, ``verify=False``, and timed after
an untimed first call (its time is the *first call* column: kernel compilation, plans), the
median of ``repeat`` (at least 3) runs:

* **xcorr --patches, host in/out**: :func:`xcorr_app.align` on the uint16 NumPy stack with
  ``out=`` one fresh float32 NumPy array: every frame warped by its field into it (the last
  patch pass warps each chunk while it is on the GPU; wall clock: what a user of the Python
  API waits for);
* **xcorr --patches, on the GPU**: the same with the stack already on the GPU (CuPy) and the
  warped frames left there (``out=`` a CuPy array; CUDA events);
* **rigid only, host in/out** and **rigid only, on the GPU**: the same without patches (the
  frames shifted by their rigid shifts), the cost of the patch pass by difference;
* each of those four again with ``quality=False`` (**..., quality off**): the quality report's
  cost by difference (:data:`TARGET_QUALITY_COST`);
* **per-patch CuPy FFT loop** (on :data:`LOOP_FRAMES` frames): what a user would write without
  batching (:func:`fft_patch_loop`): for every frame and every patch, ``cupy.fft`` phase
  correlation of the template's patch with the frame's patch, argmax, the shift to the host;
* **one-shot xcorr align --patches** (:func:`oneshot_rows`): the stack written to a TIFF and
  aligned by whole ``xcorr align STACK --patches GYxGX`` processes, as a user runs them (start,
  imports, compiling, reading, both passes, writing the outputs: wall clock), with cold caches
  (empty CuPy kernel and xcorr tuning caches) then warm, ``--no-aligned``; then warm with the
  aligned frames written (``aligned.tif``, float32); the field read back from
  ``motion_field.npz``.  ``--oneshot-frames``-sized: :data:`ONESHOT_FRAMES` at most.

Each row: frames/s, the ratio to the FFT loop, and the RMS error (px, per axis) of its field at
the patch centres against the synthetic truth (rigid rows: the rigid shift everywhere).
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import InputError, XcorrError
from ._align_data import nonrigid_stack, truth_at
from ._common import free_gpu_memory, parse_size, reason, timed

#: frames, frame shape, distinct deformed frames (the rest repeats them)
DEFAULT_FRAMES, QUICK_FRAMES = 4096, 64
DEFAULT_SIZE = (512, 512)
DISTINCT = 64
#: the search: rigid drift 10 + deformation 3 + 1; the patches' bound
MAX_SHIFT = 14
MAX_DEVIATION = 4
#: peak photons (peak SNR 20) and the fixed-point steps of the exact inverse map
PEAK = 400.0
ITERATIONS = 10
#: frames of the per-patch FFT loop
LOOP_FRAMES = 32
#: the most frames of the one-shot rows' stack (the first frames of the bench's stack; a TIFF of
#: 1024 frames of 512x512 uint16 is 0.5 GiB, its aligned.tif 1 GiB)
ONESHOT_FRAMES = 1024
MIN_RUNS = 3
#: the issue's targets (frames/s at 512x512, field error)
TARGET_END_TO_END = 5000.0
TARGET_ON_GPU = 30000.0
TARGET_VS_LOOP = 10.0
TARGET_FIELD_PX = 0.1
#: the largest cost of the quality report (issue 72): quality on over quality off, less 1
TARGET_QUALITY_COST = 0.10
#: the name of a row's twin without the quality report
NO_QUALITY = ", quality off"


def make_stack(n, shape, seed=0):
    """``(uint16 (n, H, W), params of each frame)``: :data:`DISTINCT` deformed frames of a
    random scene, repeated."""
    rng = np.random.default_rng([seed, 27])
    k = min(n, DISTINCT)
    frames, params = nonrigid_stack(rng, k, tuple(shape), peak=PEAK, image=None,
                                    iterations=ITERATIONS)
    idx = np.arange(n) % k
    return frames[idx], [params[i] for i in idx]


def field_rms(field, params, centres) -> float:
    """RMS (px, per axis) of ``field`` ``(N, gy, gx, 2)`` against the truth at ``centres``."""
    return float(np.sqrt(np.nanmean(np.square(field - truth_at(params, centres)))))


def fft_patch_loop(frames, template, starts_y, starts_x, size, xp=None):
    """``(N, gy, gx, 2)`` integer shifts (align's sign) of every patch of every frame by
    phase correlation, one patch at a time (``xp``: CuPy by default, NumPy for tests)."""
    if xp is None:
        import cupy as xp
    ph, pw = size
    t = xp.asarray(template, xp.float32)
    out = np.zeros((len(frames), len(starts_y), len(starts_x), 2))
    for n in range(len(frames)):
        f = xp.asarray(frames[n]).astype(xp.float32)
        for i, y0 in enumerate(starts_y):
            for j, x0 in enumerate(starts_x):
                a = xp.fft.fft2(t[y0:y0 + ph, x0:x0 + pw])
                b = xp.fft.fft2(f[y0:y0 + ph, x0:x0 + pw])
                r = a * xp.conj(b)
                r /= xp.abs(r) + 1e-12
                k = int(xp.argmax(xp.fft.ifft2(r).real))
                dy, dx = divmod(k, pw)
                out[n, i, j] = (dy - ph if dy > ph // 2 else dy, dx - pw if dx > pw // 2 else dx)
    return out


def _row(name, n, first, runs, field_err, note=""):
    med = float(np.median(runs))
    return {"name": name, "frames": n, "first_s": first, "seconds": med, "runs": runs,
            "fps": n / med if med > 0 else float("inf"), "field_rms_px": field_err,
            "note": note, "error": ""}


def _timed_row(name, n, work, field_of, repeat, gpu_events):
    """First call (wall), then the median of the runs: CUDA events (``gpu_events``) or wall."""
    try:
        free_gpu_memory()
        first, out = timed(work)
        if gpu_events:
            import cupy as cp

            runs = []
            for _ in range(max(MIN_RUNS, repeat)):
                start, stop = cp.cuda.Event(), cp.cuda.Event()
                start.record()
                work()
                stop.record()
                stop.synchronize()
                runs.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
        else:
            runs = [timed(work)[0] for _ in range(max(MIN_RUNS, repeat))]
        return _row(name, n, first, runs, field_of(out))
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: a table entry, not fatal
        return {"name": name, "frames": n, "first_s": None, "seconds": None, "runs": [],
                "fps": None, "field_rms_px": None, "note": "", "error": reason(exc)}


def run(stack, params, patches, repeat=1, echo=print, oneshot=True) -> list:
    """The rows (dicts) of the benchmark on ``stack`` (uint16 host) with truth ``params``
    (``oneshot``: with the one-shot process rows)."""
    import cupy as cp

    from ..alignment import align

    n, h, w = stack.shape
    kw = dict(max_shift=MAX_SHIFT, device="gpu", verify=False)
    pk = dict(kw, patches=patches, max_deviation=MAX_DEVIATION)
    gstack = cp.asarray(stack)

    def host_run(options):  # uint16 in, aligned float32 frames out on the host: the
        # documented way to one array, align(out=) (the chunks from the GPU straight into it)
        return align(stack, out=np.empty((n, h, w), np.float32), **options)

    def host_patches():
        return host_run(pk)

    def gpu_patches():
        out = cp.empty((n, h, w), cp.float32)
        return align(gstack, out=out, **pk), out

    def host_rigid():
        return host_run(kw)

    def gpu_rigid():
        out = cp.empty((n, h, w), cp.float32)
        return align(gstack, out=out, **kw), out

    # the grid (the same for the whole stack: the repeated frames have the same rigid
    # shifts), for the rigid rows' error and the FFT loop's patches
    probe = align(stack[:min(n, DISTINCT)], **pk)
    centres, size = probe.patch_centres, tuple(probe.settings["patches"]["size"])

    def patch_err(res):
        return field_rms(res.motion_field, params, res.patch_centres)

    def rigid_err(res):
        return field_rms(np.broadcast_to(res.shifts[:, None, None, :],
                                         (n, *centres.shape[:2], 2)), params, centres)

    def without_quality(work):  # (the same run with quality=False: the report's cost)
        def run_it():
            pk["quality"] = kw["quality"] = False
            try:
                return work()
            finally:
                del pk["quality"], kw["quality"]
        return run_it

    rows = []
    for name, work, err, events in (
            ("xcorr --patches, host in/out", host_patches, patch_err, False),
            ("xcorr --patches, on the GPU", gpu_patches, lambda o: patch_err(o[0]), True),
            ("rigid only, host in/out", host_rigid, rigid_err, False),
            ("rigid only, on the GPU", gpu_rigid, lambda o: rigid_err(o[0]), True)):
        rows.append(_timed_row(name, n, work, err, repeat, events))
        echo(f"  {name}: {_seconds(rows[-1])}")
        rows.append(_timed_row(f"{name}{NO_QUALITY}", n, without_quality(work), err, repeat,
                               events))
        echo(f"  {rows[-1]['name']}: {_seconds(rows[-1])}")
    sy = np.round(centres[:, 0, 0] - (size[0] - 1) / 2).astype(int)
    sx = np.round(centres[0, :, 1] - (size[1] - 1) / 2).astype(int)
    k = min(n, LOOP_FRAMES)
    rows.append(_timed_row(f"per-patch CuPy FFT loop, {k} frames", k,
                           lambda: fft_patch_loop(stack[:k], stack[0], sy, sx, size),
                           lambda o: field_rms(o, params[:k], centres), repeat, False))
    echo(f"  {rows[-1]['name']}: {_seconds(rows[-1])}")
    loop_fps = rows[-1]["fps"]
    if oneshot:
        rows.extend(oneshot_rows(stack, params, patches, centres, echo))
    for r in rows:
        r["vs_loop"] = r["fps"] / loop_fps if r["fps"] and loop_fps else None
    return rows


def oneshot_rows(stack, params, grid, centres, echo=print) -> list:
    """The one-shot rows (module docstring) of the first :data:`ONESHOT_FRAMES` frames of
    ``stack`` (truth ``params``; the bench's ``grid`` and patch ``centres``)."""
    import tempfile
    from pathlib import Path

    import tifffile

    from ._oneshot import Caches, run_process, xcorr_argv

    k = min(len(stack), ONESHOT_FRAMES)
    caches, rows = Caches(), []
    free_gpu_memory()  # this process's pools: the children need the GPU's memory
    try:
        with tempfile.TemporaryDirectory(prefix="xcorr-bench-patches-") as tmp:
            path = Path(tmp) / "stack.tif"
            tifffile.imwrite(path, stack[:k])
            for label, args, state in (("", ["--no-aligned"], "cold"),
                                       ("", ["--no-aligned"], "warm"),
                                       (", aligned.tif written", [], "warm")):
                out = Path(tmp) / f"out{len(rows)}"
                r = run_process(xcorr_argv("align", path, "--out", out, "--patches",
                                           f"{grid[0]}x{grid[1]}", "--max-shift", MAX_SHIFT,
                                           "--max-deviation", MAX_DEVIATION, "--no-verify",
                                           "-q", *args), env=caches.env(state))
                name = f"one-shot xcorr align --patches{label} ({state} caches)"
                field = out / "motion_field.npz"
                if r["returncode"] != 0 or not field.exists():
                    rows.append({"name": name, "frames": k, "first_s": None, "seconds": None,
                                 "runs": [], "fps": None, "field_rms_px": None, "note": "",
                                 "error": r["stderr"] or f"exit status {r['returncode']}"})
                else:
                    with np.load(field) as z:
                        err = field_rms(z["field"], params[:k], centres)
                    peak = "" if r["peak_bytes"] is None else \
                        f"peak host memory {r['peak_bytes'] / 1e9:.2f} GB"
                    rows.append(_row(name, k, None, [r["seconds"]], err, note=peak))
                echo(f"  {name}: {_seconds(rows[-1])}")
    finally:
        caches.close()
    return rows


def _seconds(row):
    return "failed: " + row["error"] if row["error"] else f"{row['seconds']:.3f} s"


def format_table(rows) -> list:
    """The table's lines (markdown)."""
    lines = ["| path | frames | first call s | warm s (median) | frames/s | vs FFT loop | "
             "field RMS px |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r["error"]:
            lines.append(f"| {r['name']} | {r['frames']} | ERROR: {r['error']} | | | | |")
            continue
        vs = f"{r['vs_loop']:.1f}x" if r.get("vs_loop") else "-"
        first = "-" if r["first_s"] is None else f"{r['first_s']:.2f}"
        lines.append(f"| {r['name']} | {r['frames']} | {first} | {r['seconds']:.3f} "
                     f"| {r['fps']:.0f} | {vs} | {r['field_rms_px']:.3f} |")
    return lines


def target_lines(rows) -> list:
    """The issue's targets against the rows of the patch pass."""
    by = {r["name"]: r for r in rows}
    host, gpu = by.get("xcorr --patches, host in/out"), by.get("xcorr --patches, on the GPU")
    out = []
    for label, row, target in (("end to end (host in/out)", host, TARGET_END_TO_END),
                               ("frames on the GPU", gpu, TARGET_ON_GPU)):
        if row is None or row["error"]:
            out.append(f"target {label}: no result")
            continue
        ok = row["fps"] >= target
        out.append(f"target {label} >= {target:.0f} frames/s: {row['fps']:.0f} "
                   f"({'met' if ok else 'missed'}); >= {TARGET_VS_LOOP:g}x the FFT loop: "
                   f"{(row.get('vs_loop') or 0):.1f}x "
                   f"({'met' if (row.get('vs_loop') or 0) >= TARGET_VS_LOOP else 'missed'}); "
                   f"field {row['field_rms_px']:.3f} px RMS <= {TARGET_FIELD_PX} "
                   f"({'met' if row['field_rms_px'] <= TARGET_FIELD_PX else 'missed'})")
    for name, row in by.items():  # the report's cost: each run against its twin without it
        off = by.get(name + NO_QUALITY)
        if name.endswith(NO_QUALITY) or off is None or row["error"] or off["error"]:
            continue
        cost = row["seconds"] / off["seconds"] - 1
        out.append(f"quality report's cost, {name}: {100 * cost:.0f}% <= "
                   f"{100 * TARGET_QUALITY_COST:.0f}% "
                   f"({'met' if cost <= TARGET_QUALITY_COST else 'missed'})")
    return out


def main(patches, *, quick=False, frames=None, size=None, repeat=1, seed=0, json_path=None,
         force=False, echo=print) -> int:
    """``xcorr bench align --patches``: make the stack, run, print; 1 when a patch row failed
    or its field is off the truth by more than :data:`TARGET_FIELD_PX` px RMS."""
    from .. import backend
    from .._cuda import device_name
    from ..alignment import parse_patches
    from ..io import prepare_outputs, write_text
    from ._common import utc_now

    grid = parse_patches(patches)
    h, w = DEFAULT_SIZE if size is None else parse_size(size)
    n = (QUICK_FRAMES if quick else DEFAULT_FRAMES) if frames is None else int(frames)
    if n < 2:
        raise InputError(f"--frames must be at least 2, got {n}")
    if min(h, w) < 2 * (MAX_SHIFT + MAX_DEVIATION + 8):
        raise InputError(f"--size must be at least {2 * (MAX_SHIFT + MAX_DEVIATION + 8)} px per "
                         f"side with --patches, got {h}x{w}")
    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench align --patches needs a GPU: "
                         f"{backend.gpu_unavailable_reason()}")
    if json_path is not None:
        prepare_outputs([json_path], force)
    t, (stack, params) = timed(lambda: make_stack(n, (h, w), seed))
    header = [f"xcorr bench align --patches {grid[0]}x{grid[1]}: in process and one-shot, "
              f"{device_name()}, {utc_now()}",
              f"stack: {n} frames of {h}x{w} uint16 ({min(n, DISTINCT)} distinct, made in "
              f"{t:.1f} s): rigid drift <= 10 px, deformation <= 3 px, peak SNR 20; "
              f"max_shift {MAX_SHIFT}, max_deviation {MAX_DEVIATION}, verify off",
              f"times: in process, the first call (compiles, plans), then the median of "
              f"{max(MIN_RUNS, int(repeat))} runs (host rows: wall clock; GPU rows: CUDA "
              f"events); one-shot rows: one whole xcorr process each (wall clock), cold then "
              f"warm caches, on the first {min(n, ONESHOT_FRAMES)} frames"]
    for line in header:
        echo(line)
    echo("measuring:")
    rows = run(stack, params, grid, int(repeat), echo)
    table, targets = format_table(rows), target_lines(rows)
    echo("")
    for line in table + targets:
        echo(line)
    if json_path is not None:
        write_text(json_path, json.dumps({"header": header, "rows": rows, "targets": targets},
                                         indent=1, default=float))
    bad = [r for r in rows if "--patches" in r["name"]
           and (r["error"] or r["field_rms_px"] > TARGET_FIELD_PX)]
    return 1 if bad else 0
