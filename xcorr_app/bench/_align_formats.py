"""``xcorr bench align --formats``: a one-shot ``xcorr align`` of an OME-Zarr store and of an
HDF5 file against each library's own plain read (issue 50).

The synthetic stack of :class:`~xcorr_app.bench._align_data.SyntheticStack` (default 512
frames of 2048x2048 uint16, 4 GiB; ``--quick`` 32 frames of 512x512) is written once as each
format on local disk, one frame per chunk, no compression (:func:`write_stores`):

* **OME-Zarr**: OME-NGFF 0.5 on Zarr v3 (zarr 3; OME-NGFF 0.4 on Zarr v2 with zarr 2), one
  image of one level, array ``0`` with axes ``t, y, x``;
* **HDF5**: the dataset ``/data`` (attribute ``axes = "TYX"``), chunked ``(1, H, W)``.

The files were just written, so they are in the page cache (dropping it needs root): every row
reads memory, none the disk.  Timed by wall clock (``time.perf_counter``), for each format:

* **plain read, in process**: the whole stack through the library, each way of
  :data:`READ_WAYS` (one chunk per call, blocks of :data:`BLOCK` frames, the whole array in
  one call) after an untimed read of a few frames; the fastest way is the baseline;
* **plain read, one-shot**: that fastest way as a fresh ``python -c`` process (start, imports,
  the read), one untimed run first: what a user's own reading script costs;
* **xcorr align, one-shot**: ``xcorr align PATH --no-aligned -q --out DIR`` processes as a
  user runs them (no ``--device``: ``auto`` picks the GPU for a stack this size; each run's
  shifts.json must say it computed there; ``--device cpu`` with the CPU bench), one untimed run
  first (it fills CuPy's kernel cache and xcorr's tuning cache, kept for the timed runs), the
  shifts checked against the known drift; and the same with ``--no-quality`` (no quality
  report: one streaming pass over the stack fewer).

GB/s are 1e9 bytes of uint16 pixels per second.  The issue's target: the one-shot align at
least :data:`TARGET_VS_READ` of the one-shot plain read (like for like: both pay Python's
start and imports), for the default command; its share of the in-process read is printed
too.

Run it as ``xcorr bench align --formats [--quick] [--frames N] [--size HxW] [--repeat K]
[--device gpu|cpu] [--workdir DIR] [--keep] [--json FILE]``.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import shutil
import time
from pathlib import Path

import numpy as np

from ..errors import InputError, XcorrError
from ._align_data import (MAX_DRIFT, MIN_SIDE, WRITE_CHUNK, SyntheticStack, work_folder,
                          default_workers, filesystem_of, rms_error)
from ._align_table import ACCURACY_PX
from ._common import cell, markdown_header, parse_size, reason, utc_now, versions_line
from ._oneshot import Caches, bytecode_line, python_argv, run_process, xcorr_argv

__all__ = ["FORMATS", "READ_WAYS", "TARGET_VS_READ", "write_stores", "read_way", "format_rows",
           "format_table", "main"]

#: the default stack (frames, height, width), ``--quick``'s and ``--device cpu``'s
DEFAULT_SHAPE = (512, 2048, 2048)
QUICK_SHAPE = (32, 512, 512)
CPU_SHAPE = (64, 1024, 1024)
#: the issue's target: the one-shot align's share of the one-shot plain read
TARGET_VS_READ = 0.60
#: frames per call of the block read
BLOCK = 32
#: frames read by the untimed warm-up of an in-process read
WARMUP_FRAMES = 4
#: the file of each format in the work folder, and the array read in it
FORMATS = {"OME-Zarr": "stack.ome.zarr", "HDF5": "stack.h5"}
ZARR_ARRAY, HDF5_DATASET = "0", "data"

#: each way of reading, as source defining ``read(path, stop=None) -> frames read``: run in
#: process (exec) and as the one-shot process alike, importing only the library and NumPy
_ZARR_OPEN = ("import zarr\n"
              "def _open(path):\n"
              f"    return zarr.open_group(path, mode='r')[{ZARR_ARRAY!r}]\n")
_HDF5_OPEN = ("import h5py\n"
              "def _open(path):\n"
              "    f = h5py.File(path, 'r')\n"
              f"    return f, f[{HDF5_DATASET!r}]\n")
READ_WAYS = {
    "OME-Zarr": {
        "a[i], one chunk per call": _ZARR_OPEN + (
            "def read(path, stop=None):\n"
            "    a = _open(path)\n"
            "    n = a.shape[0] if stop is None else min(stop, a.shape[0])\n"
            "    for i in range(n):\n"
            "        a[i]\n"
            "    return n\n"),
        f"a[i:i+{BLOCK}], blocks of {BLOCK} chunks": _ZARR_OPEN + (
            "def read(path, stop=None):\n"
            "    a = _open(path)\n"
            "    n = a.shape[0] if stop is None else min(stop, a.shape[0])\n"
            f"    for i in range(0, n, {BLOCK}):\n"
            f"        a[i:min(i + {BLOCK}, n)]\n"
            "    return n\n"),
        "a[:], the whole array": _ZARR_OPEN + (
            "def read(path, stop=None):\n"
            "    a = _open(path)\n"
            "    return len(a[:stop])\n"),
    },
    "HDF5": {
        "ds[i], one chunk per call": _HDF5_OPEN + (
            "def read(path, stop=None):\n"
            "    f, ds = _open(path)\n"
            "    n = ds.shape[0] if stop is None else min(stop, ds.shape[0])\n"
            "    for i in range(n):\n"
            "        ds[i]\n"
            "    f.close()\n"
            "    return n\n"),
        f"ds.read_direct, blocks of {BLOCK} into one buffer": _HDF5_OPEN + (
            "import numpy as np\n"
            "def read(path, stop=None):\n"
            "    f, ds = _open(path)\n"
            "    n = ds.shape[0] if stop is None else min(stop, ds.shape[0])\n"
            f"    buf = np.empty((min({BLOCK}, n), *ds.shape[1:]), ds.dtype)\n"
            f"    for i in range(0, n, {BLOCK}):\n"
            f"        k = min({BLOCK}, n - i)\n"
            "        ds.read_direct(buf, np.s_[i:i + k], np.s_[:k])\n"
            "    f.close()\n"
            "    return n\n"),
        "ds[:], the whole dataset": _HDF5_OPEN + (
            "def read(path, stop=None):\n"
            "    f, ds = _open(path)\n"
            "    n = len(ds[:stop])\n"
            "    f.close()\n"
            "    return n\n"),
    },
}
#: the one-shot reading process: the way's source, then a read of the file named by argv[1]
_CHILD = "\nimport sys\nread(sys.argv[1])\n"


def read_way(fmt, way):
    """The ``read(path, stop=None)`` function of one way of :data:`READ_WAYS`."""
    scope = {}
    exec(compile(READ_WAYS[fmt][way], f"<read {fmt}: {way}>", "exec"), scope)  # noqa: S102
    return scope["read"]


def _library(fmt):
    """The module writing and reading ``fmt``, or an :class:`XcorrError` naming its extra."""
    from ..io import FORMAT_EXTRAS

    module, extra, _ = FORMAT_EXTRAS["zarr" if fmt == "OME-Zarr" else "hdf5"]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise XcorrError(f"xcorr bench align --formats needs the {module} package: pip install "
                         f"'xcorr-app[{extra}]'") from None


def _zarr_store(path, shape):
    """Create the OME-Zarr image at ``path``: ``(array, description)``; one frame a chunk, no
    compression (OME-NGFF 0.5 on Zarr v3 with zarr 3, 0.4 on Zarr v2 with zarr 2)."""
    zarr = _library("OME-Zarr")
    chunks = (1, *shape[1:])
    axes = [{"name": "t", "type": "time"}, {"name": "y", "type": "space"},
            {"name": "x", "type": "space"}]
    scale = {"path": ZARR_ARRAY,
             "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0, 1.0]}]}
    if int(zarr.__version__.split(".")[0]) >= 3:
        root = zarr.open_group(str(path), mode="w", zarr_format=3)
        array = root.create_array(ZARR_ARRAY, shape=shape, chunks=chunks, dtype=np.uint16,
                                  compressors=None, filters=None, fill_value=0,
                                  dimension_names=("t", "y", "x"))
        root.attrs["ome"] = {"version": "0.5", "multiscales": [
            {"name": "stack", "axes": axes, "datasets": [scale]}]}
        return array, "OME-NGFF 0.5, Zarr v3"
    root = zarr.open_group(str(path), mode="w")
    array = root.create_dataset(ZARR_ARRAY, shape=shape, chunks=chunks, dtype=np.uint16,
                                compressor=None, fill_value=0)
    root.attrs["multiscales"] = [{"version": "0.4", "name": "stack", "axes": axes,
                                  "datasets": [scale]}]
    return array, "OME-NGFF 0.4, Zarr v2"


def write_stores(stack, folder, workers=None) -> dict:
    """Write ``stack`` as OME-Zarr and as HDF5 into ``folder``, chunk by chunk (never more than
    two chunks of :data:`WRITE_CHUNK` frames in memory): ``{format: (path, description)}``."""
    h5py = _library("HDF5")
    workers = default_workers() if workers is None else workers
    folder = Path(folder)
    shape = (stack.n_frames, *stack.shape)
    zpath, hpath = folder / FORMATS["OME-Zarr"], folder / FORMATS["HDF5"]
    zarray, zdesc = _zarr_store(zpath, shape)
    with h5py.File(hpath, "w") as f, concurrent.futures.ThreadPoolExecutor(1) as pool:
        ds = f.create_dataset(HDF5_DATASET, shape=shape, dtype=np.uint16, chunks=(1, *shape[1:]))
        ds.attrs["axes"] = "TYX"
        starts = list(range(0, stack.n_frames, WRITE_CHUNK))
        pending = pool.submit(stack.frames, 0, min(WRITE_CHUNK, stack.n_frames), workers)
        for k, start in enumerate(starts):
            block = pending.result()
            if k + 1 < len(starts):  # the next chunk is made while this one is written
                nxt = starts[k + 1]
                pending = pool.submit(stack.frames, nxt, min(nxt + WRITE_CHUNK, stack.n_frames),
                                      workers)
            zarray[start:start + len(block)] = block
            ds[start:start + len(block)] = block
    chunk = "x".join(map(str, (1, *shape[1:])))
    return {"OME-Zarr": (zpath, f"{zdesc}, chunks {chunk}, uncompressed"),
            "HDF5": (hpath, f"dataset /{HDF5_DATASET}, chunks {chunk}, uncompressed")}


def _gbps(nbytes, seconds):
    return nbytes / seconds / 1e9 if seconds else None


def _median(values):
    return float(np.median(values)) if values else None


def _in_process_reads(fmt, path, n, nbytes, repeat, echo):
    """Every way of :data:`READ_WAYS` for ``fmt``: ``[{way, seconds, gbps, runs, error}]``."""
    out = []
    for way in READ_WAYS[fmt]:
        row = {"way": way, "seconds": None, "gbps": None, "runs": [], "error": ""}
        try:
            read = read_way(fmt, way)
            read(str(path), min(WARMUP_FRAMES, n))
            for _ in range(repeat):
                t = time.perf_counter()
                got = read(str(path))
                row["runs"].append(time.perf_counter() - t)
                if got != n:
                    raise XcorrError(f"read {got} frames of {n}")
            row["seconds"] = _median(row["runs"])
            row["gbps"] = _gbps(nbytes, row["seconds"])
        except Exception as exc:  # noqa: BLE001 - a failing way is a table entry
            row["error"] = reason(exc)
        echo(f"  {fmt} read in process, {way}: "
             + (f"{row['seconds']:.3f} s" if row["seconds"] else f"failed: {row['error']}"))
        out.append(row)
    return out


def _oneshots(name, argvs, nbytes, repeat, echo, truth=None, warm=True):
    """One untimed (with ``warm``), then ``repeat`` timed processes of ``argvs(k)`` (``(argv,
    env, out)``): ``{seconds, gbps, runs, rms_px, peak_bytes, error}``, the median of the
    timed runs."""
    row = {"seconds": None, "gbps": None, "runs": [], "rms_px": None, "peak_bytes": None,
           "error": ""}
    for k in range(0 if warm else 1, 1 + repeat):
        argv, env, out = argvs(k)
        r = run_process(argv, env=env, out=out)
        if r["returncode"] != 0:
            row["error"] = r["stderr"] or f"exit status {r['returncode']}"
            break
        if k:
            row["runs"].append(r["seconds"])
            row["peak_bytes"] = max(row["peak_bytes"] or 0, r["peak_bytes"] or 0) or None
            if truth is not None:
                row["rms_px"] = None if r["shifts"] is None else rms_error(r["shifts"], truth)
    if not row["error"]:
        row["seconds"] = _median(row["runs"])
        row["gbps"] = _gbps(nbytes, row["seconds"])
    runs = ", ".join(f"{s:.2f}" for s in row["runs"])
    echo(f"  {name}: " + (f"{runs} s" + (" (after one untimed run)" if warm else "")
                          if not row["error"] else f"failed: {row['error']}"))
    return row


#: the one-shot ``xcorr align`` commands timed (after ``PATH --no-aligned -q --out DIR``): the
#: default, and without the quality report (one more streaming pass over the stack)
ALIGN_COMMANDS = {"--no-aligned -q": [], "--no-aligned -q --no-quality": ["--no-quality"]}
TARGET_COMMAND = "--no-aligned -q"


def run_format(fmt, path, stack, device, work, caches, repeat=1, echo=print) -> dict:
    """Time one format's rows on its written file ``path``: ``reads`` (in process), the
    fastest (``best_read``, ``read_gbps``), ``read_oneshot`` and ``aligns`` (one dict a
    command of :data:`ALIGN_COMMANDS`, with its shares of both reads and ``status``)."""
    n, nbytes = stack.n_frames, stack.nbytes
    reads = _in_process_reads(fmt, path, n, nbytes, repeat, echo)
    done = [r for r in reads if r["gbps"]]
    best = max(done, key=lambda r: r["gbps"]) if done else None
    row = {"format": fmt, "path": str(path), "reads": reads,
           "best_read": None if best is None else best["way"],
           "read_gbps": None if best is None else best["gbps"], "aligns": []}
    if best is not None:
        source = READ_WAYS[fmt][best["way"]] + _CHILD
        row["read_oneshot"] = _oneshots(f"{fmt} read, one-shot process ({best['way']})",
                                        lambda k: (python_argv("-c", source, path), None, None),
                                        nbytes, repeat, echo)
    else:
        row["read_oneshot"] = {"gbps": None, "runs": [], "error": "no plain read succeeded"}
    # on the GPU as a user runs it: no --device (auto picks the GPU for a stack this size;
    # shifts.json says where each run computed, checked below)
    flag = [] if device == "gpu" else ["--device", device]
    for i, (command, extra) in enumerate(ALIGN_COMMANDS.items()):
        outs = []

        def argv(k, extra=extra, i=i, outs=outs):
            out = Path(work) / f"{fmt.lower()}-out{i}-{k}"
            shutil.rmtree(out, ignore_errors=True)
            outs.append(out)
            return (xcorr_argv("align", path, "--no-aligned", "-q", "--out", out, *flag,
                               *extra), caches.env("warm"), out)

        # (the caches are warm after the first command: its untimed run serves the others)
        one = _oneshots(f"{fmt} xcorr align {command} {' '.join(flag)}".rstrip()
                        + ", one-shot process", argv, nbytes, repeat, echo, truth=stack.shifts,
                        warm=i == 0)
        a, r1, r0 = one["gbps"], row["read_oneshot"]["gbps"], row["read_gbps"]
        one.update(command=command, vs_read_oneshot=a / r1 if a and r1 else None,
                   vs_read_in_process=a / r0 if a and r0 else None)
        rms = one["rms_px"]
        elsewhere = [] if one["error"] else _ran_elsewhere(outs, device)
        one["status"] = ("ERROR" if one["error"] or a is None else
                         f"ERROR (ran on {elsewhere[0]})" if elsewhere else
                         "ok" if rms is not None and rms <= ACCURACY_PX else "INACCURATE")
        row["aligns"].append(one)
    return row


def _ran_elsewhere(outs, device) -> list:
    """Where the runs writing ``outs`` computed (their shifts.json), those not on ``device``."""
    found = []
    for out in outs:
        try:
            where = json.loads((Path(out) / "shifts.json").read_text())["device"]
        except (OSError, ValueError, KeyError):
            where = "an unknown device"
        if not where.startswith(device):
            found.append(where)
    return found


COLUMNS = ("format", "xcorr align FILE ...", "plain read GB/s (one-shot process)",
           "plain read GB/s (in process)", "fastest read", "xcorr align GB/s (one-shot process)",
           f"share of the one-shot read (target >= {100 * TARGET_VS_READ:.0f}%)",
           "share of the in-process read", "RMS error px", "check", "cache")


def _num(value, fmt=".2f"):
    return "n/a" if value is None or not np.isfinite(value) else format(value, fmt)


def _share(value, target=None):
    if value is None:
        return "n/a"
    met = "" if target is None else f" ({'yes' if value >= target else 'no'})"
    return f"{100 * value:.0f}%{met}"


def format_rows(rows) -> list:
    """The Markdown lines of the main table (one line a format and align command)."""
    lines = markdown_header(COLUMNS).splitlines()
    for r in rows:
        for a in r["aligns"]:
            target = TARGET_VS_READ if a["command"] == TARGET_COMMAND else None
            cells = [r["format"], a["command"], _num(r["read_oneshot"]["gbps"]),
                     _num(r["read_gbps"]), r["best_read"] or "n/a", _num(a["gbps"]),
                     _share(a["vs_read_oneshot"], target), _share(a["vs_read_in_process"]),
                     _num(a["rms_px"], ".3f"),
                     a["status"] + (f": {a['error']}" if a["error"] else ""),
                     "page cache warm"]
            lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return lines


def format_table(rows) -> list:
    """The main table, then every way of reading and every timed run."""
    lines = format_rows(rows) + ["", "every timed run (seconds; GB/s of the median):"]
    lines += markdown_header(("format", "row", "seconds", "GB/s")).splitlines()
    for r in rows:
        items = [(f"read in process: {w['way']}", w) for w in r["reads"]]
        items += [("read, one-shot process", r["read_oneshot"])]
        items += [(f"xcorr align {a['command']}, one-shot process", a) for a in r["aligns"]]
        for name, w in items:
            secs = ", ".join(f"{s:.3f}" for s in w.get("runs", [])) or w.get("error", "")
            lines.append("| " + " | ".join(cell(c) for c in (r["format"], name, secs,
                                                            _num(w.get("gbps")))) + " |")
    return lines


def target_lines(rows) -> list:
    """One line a format: the issue's target (:data:`TARGET_COMMAND`), met or not."""
    lines = []
    for r in rows:
        share = next((a["vs_read_oneshot"] for a in r["aligns"]
                      if a["command"] == TARGET_COMMAND), None)
        met = "n/a" if share is None else "yes" if share >= TARGET_VS_READ else "no"
        lines.append(f"{r['format']}: one-shot xcorr align {TARGET_COMMAND} at {_share(share)} "
                     f"of the one-shot plain read (target >= {100 * TARGET_VS_READ:.0f}%: "
                     f"{met})")
    return lines


def _device_line(device):
    if device == "cpu":
        import os
        import platform

        return f"CPU {platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)"
    from .._cuda import device_name

    return device_name()


def main(*, quick=False, frames=None, size=None, workdir=None, keep=False, repeat=1,
         device="gpu", json_path=None, force=False, echo=print, seed=0) -> int:
    """What ``xcorr bench align --formats`` does: write both files, time, print the tables.

    Returns
    -------
    int
        0, or 1 when an ``xcorr align`` row failed or is off the known drift by more than
        :data:`~xcorr_app.bench._align_table.ACCURACY_PX` RMS (a missed target is reported,
        not an error).

    Raises
    ------
    XcorrError
        For a bad option, no usable GPU (``device="gpu"``), a missing zarr or h5py, too little
        disk space, or an existing ``json_path`` without ``force``.
    """
    from .. import backend
    from ..io import prepare_outputs, write_text

    if device not in ("gpu", "cpu"):
        raise InputError(f"--device must be gpu or cpu, got {device!r}")
    shape = QUICK_SHAPE if quick else CPU_SHAPE if device == "cpu" else DEFAULT_SHAPE
    h, w = shape[1:] if size is None else parse_size(size)
    n = shape[0] if frames is None else int(frames)
    if n < 2 or int(repeat) < 1:
        raise InputError(f"--frames must be at least 2 and --repeat at least 1, got {n} and "
                         f"{repeat}")
    if min(h, w) < MIN_SIDE:
        raise InputError(f"--size must be at least {MIN_SIDE} px per side (the drift is up to "
                         f"{MAX_DRIFT:g} px), got {h}x{w}")
    if device == "gpu" and not backend.gpu_available():
        raise XcorrError(f"xcorr bench align --formats needs a GPU (or --device cpu): "
                         f"{backend.gpu_unavailable_reason()}")
    for fmt in FORMATS:
        _library(fmt)
    if json_path is not None:
        prepare_outputs([json_path], force)
    folder = work_folder(workdir, 2 * n * h * w * 2, "formats")
    caches = Caches()
    try:
        workers = default_workers()
        t = time.perf_counter()
        stack = SyntheticStack(n, (h, w), seed=seed)
        files = write_stores(stack, folder, workers)
        written = time.perf_counter() - t
        header = [f"xcorr bench align --formats on {_device_line(device)}, {utc_now()}",
                  f"versions: {versions_line(('zarr', 'h5py', 'numpy', 'cupy'))}",
                  bytecode_line(),
                  f"stack: {n} frames of {h}x{w} uint16 ({stack.nbytes / 2**30:.2f} GiB), "
                  f"drift within +-{MAX_DRIFT:g} px, Poisson noise; made and written as both "
                  f"files in {written:.1f} s ({workers} threads)"]
        header += [f"{fmt}: {p} ({filesystem_of(p)}; {d})" for fmt, (p, d) in files.items()]
        header.append("page cache warm: the files were just written and not dropped (no root); "
                      "wall clock (time.perf_counter), "
                      + ("one timed run" if repeat == 1 else f"median of {repeat} runs")
                      + " after an untimed one; one-shot align: xcorr align FILE --out DIR "
                        f"--device {device} ..., CuPy's and xcorr's caches warm")
        for line in header:
            echo(line)
        echo("measuring:")
        rows = [run_format(fmt, p, stack, device, folder, caches, int(repeat), echo)
                for fmt, (p, _) in files.items()]
        echo("")
        table = format_table(rows)
        targets = target_lines(rows)
        for line in table + [""] + targets:
            echo(line)
        if keep:
            echo(f"files kept: {folder}")
        if json_path is not None:
            doc = {"header": header, "shape": [n, h, w], "rows": rows, "targets": targets}
            write_text(json_path, json.dumps(doc, indent=1, default=str))
    finally:
        caches.close()
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 1 if any(a["status"] != "ok" for r in rows for a in r["aligns"]) else 0
