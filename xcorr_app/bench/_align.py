"""The ``xcorr bench align`` benchmark: end-to-end alignment of a TIFF file against its peers.

One uint16 stack (512 frames of 2048x2048, 4 GiB, unless told otherwise; ``--quick``: 32 frames
of 512x512) is made of a smooth random scene that drifts by a known random walk (integer and
subpixel steps, within +-12 px of the first frame) under Poisson noise
(:class:`~xcorr_app.bench._align_data.SyntheticStack`),
and written uncompressed and contiguous (memory-mappable) to a TIFF file on local disk.  The
file was just written, so it is in the page cache: every row reads it from memory, none from
the disk.  Then, timed by wall clock (``time.perf_counter``) over the whole file, each after an
untimed warm-up (kernel compilation, the planner's measurements, cuFFT plans, imports):

* **tifffile.imread**: ``tifffile.imread(path)``, the whole file into a new array,
* **tifffile.memmap**: ``tifffile.memmap(path)`` copied out chunk by chunk into one reused
  buffer (the way :mod:`xcorr_app.io._reader` reads);
  the faster of these two is the *plain read* baseline,
* **xcorr align --max-shift 16**, **xcorr align (unbounded)** and **xcorr align --max-shift 16
  --no-verify**: :func:`xcorr_app.align` on the path, in process, ``device="gpu"``, default
  settings otherwise (``verify=True`` includes the FFT reference measurement of every frame),
* **per-pair CuPy FFT loop**: what a loop over cuCIM's ``phase_cross_correlation(reference,
  frame)`` does, one pair at a time (:func:`cupy_pair_shift`): read the frame, upload it, FFT the
  reference and the frame, normalized cross-power spectrum, inverse FFT, argmax, shift to the
  host; ``upsample_factor=1``,
* **skimage (CPU)**: ``skimage.registration.phase_cross_correlation(reference, frame)`` on the
  first 32 frames only.

Each row gives seconds, frames/s, GB/s (1e9 bytes/s of the uint16 pixels), its share of the plain
read throughput, its speed-up over the per-pair loop, and the RMS error (px, Euclidean) of the
shifts it measured against the known drift.  The issue's targets, checked for the two
``xcorr align`` rows with verification: at least :data:`TARGET_VS_READ` of the plain read
throughput and at least :data:`TARGET_VS_LOOP` times the per-pair loop.

Run it as ``xcorr bench align [--quick] [--frames N] [--size HxW] [--workdir DIR] [--keep]``
(in Python: :func:`main`; ``repeat=N`` times every row N times and reports the median).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ..errors import InputError, XcorrError
from ._align_data import MAX_DRIFT, MIN_SIDE, SyntheticStack, default_workers, work_folder
from ._align_peers import READ_CHUNK, cupy_pair_loop, read_imread, read_memmap_chunks, skimage_loop
from ._align_table import (ALIGN_ROWS, LOOP, MAX_SHIFT, READ_IMREAD, READ_MEMMAP, SKIMAGE,
                           format_table, header_lines, make_row, seconds_text, summarise,
                           target_lines)
from ._align_cpu import CPU_QUICK_SHAPE, CPU_SHAPE, format_rows, rows_for
from ._align_cpu import target_lines as cpu_target_lines
from ._common import free_gpu_memory, parse_size, reason, timed

#: the full run and the ``--quick`` smoke run: (frames, height, width)
DEFAULT_SHAPE = (512, 2048, 2048)
QUICK_SHAPE = (32, 512, 512)
#: frames of the scikit-image row (CPU, slow)
SKIMAGE_FRAMES = 32
#: frames of the warm-up of the per-pair loops and of the read rows
WARMUP_FRAMES = 4


def _align_kwargs(extra, max_memory):
    """``align()`` keywords: the row's, plus ``max_memory`` where ``align`` takes it."""
    from ..alignment import align

    kw = {"device": "gpu", **extra}
    if max_memory is not None and "max_memory" in inspect.signature(align).parameters:
        kw["max_memory"] = max_memory
    return kw


def _align_chunk_limit(frame_shape, device):
    """The most frames of a chunk ``align()`` picks by default for frames of ``frame_shape``
    on ``device`` (auto: as on the GPU, the larger), or None where its default is unknown."""
    from ..alignment import align
    from ..streaming import auto_chunk_frames

    p = inspect.signature(align).parameters.get("chunk_frames")
    if p is not None and p.default is None:
        return auto_chunk_frames(frame_shape, "cpu" if device == "cpu" else "gpu")
    return p.default if p is not None and isinstance(p.default, int) else None


def warm_align(path, n, kwargs) -> str:
    """Run ``align`` untimed on the chunk shapes of the timed run: on the first chunk's worth of
    frames in memory (which tells the chunk size ``align`` picks), then on the last, partial
    chunk's; on the whole file when the chunking cannot be known.  Returns the note."""
    import tifffile

    from ..alignment import align

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    limit = _align_chunk_limit(mm.shape[-2:], kwargs.get("device", "auto")) \
        if "chunk_frames" not in kwargs else kwargs["chunk_frames"]
    if limit is None:
        del mm
        free_gpu_memory()
        align(path, **kwargs)
        return "one untimed pass over the whole file"
    first = min(limit, n)
    free_gpu_memory()
    res = align(np.array(mm[:first]), **kwargs)
    chunk = res.settings.get("chunk_frames")
    chunk = int(chunk) if isinstance(chunk, (int, np.integer)) and chunk >= 1 else limit
    sizes = [first]
    tail = n % chunk
    if tail and tail != first % chunk:
        free_gpu_memory()
        align(np.array(mm[:tail]), **kwargs)
        sizes.append(tail)
    del mm
    free_gpu_memory()
    return (f"align on the first {' and '.join(map(str, sizes))} frames in memory, "
            f"chunks of {chunk} (untimed)")


def _measure(name, kind, n, frame_bytes, warm, work, truth=None, repeat=1):
    """Warm up, time ``repeat`` times (the row has the median, ``runs`` all of them), and build
    the row; a failure becomes an ``ERROR`` row."""
    try:
        note = warm() or ""
        runs, shifts = [], None
        for _ in range(max(1, int(repeat))):
            seconds, out = timed(work)
            runs.append(seconds)
            shifts = out if isinstance(out, np.ndarray) else None
        row = make_row(name, kind, n, frame_bytes, float(np.median(runs)), shifts, truth,
                       warmup=note)
        row["runs"] = runs
        if len(runs) > 1:
            row["note"] = (f"median of {len(runs)} runs ({seconds_text(min(runs))} to "
                           f"{seconds_text(max(runs))} s)")
        return row
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: a table entry, not fatal
        return make_row(name, kind, n, frame_bytes, None, error=reason(exc))


def _report(row, echo):
    """Print the progress line of a finished row."""
    took = "failed" if row["error"] else f"{seconds_text(row['seconds'])} s"
    warm = f"; warm-up: {row['warmup']}" if row["warmup"] else ""
    echo(f"  {row['name']}: {took}{warm}")
    if row["error"]:
        echo(f"    {row['error']}")
    return row


def read_rows(path, n, frame_bytes, echo=print, repeat=1) -> list:
    """The two plain-read rows (CPU only): :data:`READ_IMREAD` and :data:`READ_MEMMAP`."""
    few = min(WARMUP_FRAMES, n)
    note = f"read frames 0-{few - 1} (untimed)"

    def warm_imread():
        read_imread(path, range(few))
        return note

    def warm_memmap():
        read_memmap_chunks(path, READ_CHUNK, few)
        return note

    return [_report(_measure(READ_IMREAD, "read", n, frame_bytes, warm_imread,
                             lambda: read_imread(path).shape, repeat=repeat), echo),
            _report(_measure(READ_MEMMAP, "read", n, frame_bytes, warm_memmap,
                             lambda: read_memmap_chunks(path, READ_CHUNK), repeat=repeat),
                    echo)]


def skimage_row(path, n, frame_bytes, truth, echo=print, repeat=1) -> dict:
    """The scikit-image row (CPU only) on the first :data:`SKIMAGE_FRAMES` frames."""
    k = min(SKIMAGE_FRAMES, n)
    name = f"{SKIMAGE}, {k} frames"
    try:
        importlib.import_module("skimage.registration")
    except Exception as exc:  # noqa: BLE001
        return _report(make_row(name, "peer", k, frame_bytes, None,
                                error=f"scikit-image not importable ({type(exc).__name__})"), echo)

    def warm():
        skimage_loop(path, 1)
        return "1 pair (untimed)"

    return _report(_measure(name, "peer", k, frame_bytes, warm, lambda: skimage_loop(path, k),
                            truth, repeat), echo)


def run(stack, path, *, max_memory=None, echo=print, repeat=1) -> list:
    """Time every row on the written file ``path`` of ``stack`` (``repeat`` times each, the
    median reported); print progress lines.

    Returns
    -------
    list of dict
        The rows of :func:`make_row`, summarised (:func:`summarise`), in table order.
    """
    from ..alignment import align

    n = stack.n_frames
    frame_bytes = stack.shape[0] * stack.shape[1] * 2
    truth = stack.shifts
    rows = read_rows(path, n, frame_bytes, echo, repeat)
    for name, extra in ALIGN_ROWS.items():
        kw = _align_kwargs(extra, max_memory)
        rows.append(_report(_measure(name, "xcorr", n, frame_bytes,
                                     lambda: warm_align(path, n, kw),
                                     lambda: np.asarray(align(path, **kw).shifts), truth,
                                     repeat), echo))
        free_gpu_memory()
    few = min(WARMUP_FRAMES, n)

    def warm_loop():
        cupy_pair_loop(path, few)
        return f"{few} pairs (untimed)"

    rows.append(_report(_measure(LOOP, "peer", n, frame_bytes, warm_loop,
                                 lambda: cupy_pair_loop(path), truth, repeat), echo))
    free_gpu_memory()
    rows.append(skimage_row(path, n, frame_bytes, truth, echo, repeat))
    rows.extend(oneshot_rows(path, n, frame_bytes, truth, echo))
    return summarise(rows)


def oneshot_rows(path, n, frame_bytes, truth, echo=print) -> list:
    """One-shot ``xcorr align PATH --no-aligned -q`` processes, as a user runs them: unbounded
    and ``--max-shift 16``, each with cold caches (empty CuPy kernel and xcorr tuning caches)
    then warm (the caches the cold run left); and ``--workers 2`` where Dask is installed (warm
    only; several GPUs: :mod:`._align_gpus`).  The whole process is timed: start, imports,
    planning, compiling, reading, measuring and writing the shifts, the CSV/JSON and the plot."""
    from ._oneshot import Caches, run_process, xcorr_argv

    configs = [("", []), (f" --max-shift {MAX_SHIFT}", ["--max-shift", MAX_SHIFT])]
    extra = []
    if importlib.util.find_spec("distributed") is not None:
        extra.append((" --workers 2", ["--workers", 2]))
    caches, rows = Caches(), []
    free_gpu_memory()  # this process's pools: the children need the GPU's memory
    try:
        with tempfile.TemporaryDirectory(prefix="xcorr-bench-oneshot-") as tmp:
            runs = [(label, args, state) for label, args in configs for state in ("cold", "warm")]
            runs += [(label, args, "warm") for label, args in extra]
            for label, args, state in runs:
                out = Path(tmp) / f"out{len(rows)}"
                r = run_process(xcorr_argv("align", path, "--out", out, "--no-aligned", "-q",
                                           *args), env=caches.env(state), out=out)
                name = f"one-shot xcorr align{label} ({state} caches)"
                peak = "" if r["peak_bytes"] is None else \
                    f"peak host memory {r['peak_bytes'] / 1e9:.2f} GB"
                rows.append(_report(make_row(
                    name, "oneshot", n, frame_bytes, r["seconds"], r["shifts"], truth,
                    note=peak,
                    error="" if r["returncode"] == 0 else r["stderr"]), echo))
    finally:
        caches.close()
    return rows


def main(*, quick=False, frames=None, size=None, workdir=None, keep=False, json_path=None,
         force=False, echo=print, max_memory=None, repeat=1, seed=0,
         device="gpu", patches=None) -> int:
    """What ``xcorr bench align`` does: check the options, write the stack, run, report.

    Parameters
    ----------
    quick : bool
        32 frames of 512x512 instead of 512 frames of 2048x2048.
    frames : int, optional
    size : str or int, optional
        ``"H"`` or ``"HxW"`` (each side at least :data:`MIN_SIDE`).
    workdir : path, optional
        Folder of the temporary folder holding the stack (default ``$TMPDIR`` or ``/tmp``);
        it must be on local disk with room for the file.
    keep : bool
        Keep the stack file (its path is printed) instead of deleting it.
    json_path : path, optional
        Also write the header and the rows as JSON.
    force : bool
        Overwrite an existing ``json_path``.
    echo : callable
        Receives each printed line.
    max_memory : optional
        Passed on to :func:`xcorr_app.align` when it takes a ``max_memory`` keyword.
    repeat : int
        Timed runs of every row (after one warm-up); the table gives the median.
    seed : int
        Seeds the scene, the drift and the noise.
    device : {"gpu", "cpu"}
        ``"cpu"``: the CPU benchmark of :mod:`xcorr_app.bench._align_cpu` instead (default
        300 frames of 1024x1024; ``--quick`` 24 of 256x256).
    patches : str or (int, int), optional
        ``"GYxGX"``: the piecewise-rigid benchmark of :mod:`xcorr_app.bench._align_patches`
        instead (in process; default 4096 frames of 512x512, ``--quick`` 64).

    Returns
    -------
    int
        0, or 1 when an ``xcorr align`` row failed or is off the known drift by more than
        :data:`ACCURACY_PX` RMS (missed speed targets are reported, not an error).

    Raises
    ------
    XcorrError
        For a bad option, no usable GPU, too little disk space, or an existing ``json_path``
        without ``force``.
    """
    from .. import backend
    from ..io import prepare_outputs, write_text
    from .._cuda import device_name

    if patches is not None:
        if device != "gpu" or max_memory is not None or keep \
                or workdir is not None:
            raise InputError("--patches times the GPU in process: it takes --quick, --frames, "
                             "--size, --repeat and --json only")
        from ._align_patches import main as patches_main

        return patches_main(patches, quick=quick, frames=frames, size=size, repeat=repeat,
                            seed=seed, json_path=json_path, force=force, echo=echo)
    cpu = device == "cpu"
    if device not in ("gpu", "cpu"):
        raise InputError(f"--device must be gpu or cpu, got {device!r}")
    shape = (CPU_QUICK_SHAPE if quick else CPU_SHAPE) if cpu else \
        (QUICK_SHAPE if quick else DEFAULT_SHAPE)
    h, w = shape[1:] if size is None else parse_size(size)
    n = shape[0] if frames is None else int(frames)
    if n < 1:
        raise InputError(f"--frames must be at least 1, got {n}")
    if int(repeat) < 1:
        raise InputError(f"--repeat must be at least 1, got {repeat}")
    if min(h, w) < MIN_SIDE:
        raise InputError(f"--size must be at least {MIN_SIDE} px per side (the drift is up to "
                         f"{MAX_DRIFT:g} px), got {h}x{w}")
    if not cpu and not backend.gpu_available():
        raise XcorrError(f"xcorr bench align needs a GPU ({backend.gpu_unavailable_reason()}); "
                         "--device cpu times the CPU path against scikit-image")
    if json_path is not None:
        prepare_outputs([json_path], force)
    folder = work_folder(workdir, n * h * w * 2, "align")
    try:
        path = folder / "stack.tif"
        workers = default_workers()
        t = time.perf_counter()
        stack = SyntheticStack(n, (h, w), seed=seed)
        stack.write(path, workers=workers)
        written = time.perf_counter() - t
        if cpu:
            return _main_cpu(stack, path, written, workers, echo, json_path, keep)
        header = header_lines(device_name(), stack, path, written, workers, int(repeat))
        if max_memory is not None and "max_memory" not in _align_kwargs({}, max_memory):
            header.append(f"note: max_memory={max_memory!r} ignored (align() does not take it)")
        for line in header:
            echo(line)
        echo("measuring:")
        rows = run(stack, path, max_memory=max_memory, echo=echo, repeat=int(repeat))
        device = device_name()
        for r in rows:
            r["device"] = device
        echo("")
        echo(format_table(rows))
        targets = target_lines(rows)
        for line in targets:
            echo(line)
        if keep:
            echo(f"stack kept: {path}")
        if json_path is not None:
            doc = {"header": header, "shape": [n, h, w], "truth_shifts": stack.shifts.tolist(),
                   "rows": rows, "targets": targets}
            write_text(json_path, json.dumps(doc, indent=1))
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    bad = [r for r in rows if r["kind"] == "xcorr" and r["status"] != "ok"]
    return 1 if bad else 0


def _main_cpu(stack, path, written, workers, echo, json_path, keep) -> int:
    """The CPU benchmark on the written stack: header, rows, table, targets, JSON."""
    import os
    import platform

    from ..io import write_text
    from ._align_table import VERSIONS
    from ._common import utc_now, versions_line

    h, w = stack.shape
    header = [f"xcorr bench align --device cpu on {platform.processor() or platform.machine()}"
              f" ({os.cpu_count()} CPUs), {utc_now()}",
              f"versions: {versions_line(VERSIONS)}",
              f"stack: {stack.n_frames} frames of {h}x{w} uint16 ({stack.nbytes / 1e6:.0f} MB),"
              f" written in {written:.1f} s ({workers} threads), in the page cache"]
    for line in header:
        echo(line)
    echo("measuring:")
    rows = rows_for(path, stack, echo)
    echo("")
    table = format_rows(rows)
    targets = cpu_target_lines(rows)
    for line in table + targets:
        echo(line)
    if keep:
        echo(f"stack kept: {path}")
    if json_path is not None:
        doc = {"header": header, "rows": rows, "targets": targets}
        write_text(json_path, json.dumps(doc, indent=1, default=float))
    return 1 if any(r["error"] for r in rows) else 0
