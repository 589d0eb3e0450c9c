"""``xcorr bench align --first-runs``: whole ``xcorr align`` processes as a user first runs them,
against what the same machine does anyway.

One-shot processes (:mod:`._oneshot`), wall clock, each command's default outputs written
(``shifts.csv``, ``shifts.json``, ``aligned.tif``, ``drift.png``, ``quality.png``):

* **the cell sample** (``cell_drift.tif``, the installed package's or the checkout's, or
  ``sample=PATH``): on the CPU (``--device cpu``, the median of ``repeat`` runs after an
  untimed one); on the GPU (``--device gpu``) and with the default device (auto) each first
  with fresh caches (CuPy's kernel cache, xcorr's cache and the CUDA driver's JIT cache in
  empty folders: a fresh machine's first run; CuPy's libraries in the OS's file cache, as
  after their install), then warm.  Target: the first GPU run at most the CPU's time.
* **a stack of** ``frames`` **of** ``size`` (default 64 of 2048x2048 uint16, written to
  ``workdir``, in the page cache): ``xcorr align STACK`` warm (``aligned.tif`` float32) and
  with ``--keep-dtype`` (uint16), against a one-shot process that reads it and writes it again
  with tifffile (``imread`` + ``imwrite``; also as float32, the bytes of the default
  ``aligned.tif``) and one that starts CUDA (``import cupy`` and a first allocation), each
  the median of ``repeat``.  Every run writes into a new output folder (a copy, a new file),
  as a first run of a stack does; one more row times the default align with ``--force`` over
  the previous run's outputs (the filesystem then writes the replaced file's data out at the
  rename: ext4's ``auto_da_alloc``).  **The serial floor**: a run needs the CUDA start before
  it measures and the shifts before it writes, so it takes at least the CUDA start, the
  measurement (``xcorr_app.align`` of the stack in memory with the defaults, warm, in a process
  of its own: the median of ``repeat`` calls after two untimed ones) and the copy of the bytes it
  writes (float32 for the default ``aligned.tif``, uint16 with ``--keep-dtype``), one after the
  other, all three measured in the same call.  Target: the default align at most
  :data:`TARGET_VS_START` times that floor.

Run it as ``xcorr bench align --first-runs [--frames N] [--size HxW] [--repeat K] [--workdir
DIR] [--json FILE]``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import InputError, XcorrError
from ._align_data import SyntheticStack, default_workers, stack_shape, work_folder
from ._common import report, utc_now, versions_line
from ._oneshot import Caches, bytecode_line, python_argv, run_process, xcorr_argv

__all__ = ["TARGET_VS_START", "DEFAULT_STACK", "sample_path", "main"]

#: the one-shot align of the stack, at most this many times the serial floor (CUDA start +
#: the measurement + read and write of the bytes it writes)
TARGET_VS_START = 1.2
#: the stack: (frames, height, width)
DEFAULT_STACK = (64, 2048, 2048)
#: the one-shot peers, as ``python -c`` source (``{src}``, ``{dst}``: the files)
READ_WRITE = ("import tifffile\n"
              "tifffile.imwrite({dst!r}, tifffile.imread({src!r}))\n")
READ_WRITE_FLOAT32 = ("import numpy, tifffile\n"
                      "tifffile.imwrite({dst!r}, tifffile.imread({src!r}).astype(numpy.float32))\n")
#: the stack's rows: the two aligns, the two copies, the CUDA start, the align over its
#: previous outputs
STACK_ROWS = ("stack, xcorr align", "stack, xcorr align --keep-dtype",
              "stack, tifffile read + write", "stack, tifffile read + write as float32",
              "CUDA start (import cupy, first allocation)",
              "stack, xcorr align --force over the previous run's outputs")
CUDA_START = ("import cupy\n"
              "cupy.empty(8, dtype=cupy.float32)\n"
              "cupy.cuda.Device().synchronize()\n")
#: the measurement alone: the default align of the stack in memory on the GPU, warm (``{runs}``
#: timed calls after two untimed ones: a process's second GPU run makes the static check's
#: estimate on the GPU, its first on the host), its seconds written as JSON to ``{dst}``
MEASURE_ROW = "the measurement (xcorr_app.align of the stack in memory, warm, in process)"
MEASURE = ("import json, time, tifffile, xcorr_app\n"
           "stack = tifffile.imread({src!r})\n"
           "for _ in range(2):\n"
           "    xcorr_app.align(stack, device='gpu')\n"
           "runs = []\n"
           "for _ in range({runs}):\n"
           "    t = time.perf_counter()\n"
           "    xcorr_app.align(stack, device='gpu')\n"
           "    runs.append(time.perf_counter() - t)\n"
           "open({dst!r}, 'w').write(json.dumps(runs))\n")


def sample_path() -> Path:
    """The cell sample: the installed package's, else the checkout's
    (:func:`xcorr_app._samples.sample_path`; InputError where neither has it)."""
    from .._samples import sample_path as bundled

    return bundled("cell")


def _median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None


def _runs(name, argv, env, out, repeat, echo, first=None, written=None):
    """``{name, first, runs, seconds, error}``: with ``first`` (an environment of fresh
    caches) one timed first run, then ``repeat`` timed warm runs after an untimed one;
    ``written``: the file or folder the process writes, deleted before each run (untimed)."""
    row = {"name": name, "first": None, "runs": [], "seconds": None, "error": ""}
    plan = ([("first", first)] if first is not None else []) + \
        ([("untimed", env)] if first is None else []) + [("warm", env)] * repeat
    for state, environ in plan:
        if written is not None and Path(written).is_dir():
            shutil.rmtree(written)
        elif written is not None:
            Path(written).unlink(missing_ok=True)
        r = run_process(argv, env=environ, out=out)
        if r["returncode"] != 0:
            row["error"] = r["stderr"] or f"exit status {r['returncode']}"
            break
        if state == "first":
            row["first"] = r["seconds"]
        elif state == "warm":
            row["runs"].append(r["seconds"])
    return _shown(row, echo)


def _shown(row, echo):
    row["seconds"] = _median(row["runs"])
    shown = (f"first {row['first']:.2f} s, " if row["first"] is not None else "") + \
        "warm " + ", ".join(f"{s:.2f}" for s in row["runs"]) + " s"
    echo(f"  {row['name']}: " + (shown if not row["error"] else f"failed: {row['error']}"))
    return row


def _measured(stack_path, folder, repeat, echo, env=None):
    """The :data:`MEASURE_ROW` row: ``repeat`` in-process calls timed by the process that
    makes them (:data:`MEASURE`)."""
    import json

    row = {"name": MEASURE_ROW, "first": None, "runs": [], "seconds": None, "error": ""}
    times = Path(folder) / "measured.json"
    r = run_process(python_argv("-c", MEASURE.format(src=str(stack_path), dst=str(times),
                                                      runs=int(repeat))), env=env)
    if r["returncode"] != 0:
        row["error"] = r["stderr"] or f"exit status {r['returncode']}"
    else:
        row["runs"] = [float(v) for v in json.loads(times.read_text())]
    return _shown(row, echo)


def _cell(v):
    return "" if v is None else f"{v:.2f}"


def main(*, frames=None, size=None, repeat=3, workdir=None, sample=None, json_path=None,
         force=False, echo=print, seed=0) -> int:
    """What ``xcorr bench align --first-runs`` does; returns 1 when a process failed (a missed
    target is reported, not an error).

    Raises
    ------
    XcorrError
        For a bad option, no usable GPU, no sample file, too little disk space, or an existing
        ``json_path`` without ``force``.
    """
    from .. import backend
    from .._cuda import device_name
    from ..io import prepare_outputs

    n, h, w = stack_shape(DEFAULT_STACK, frames, size, repeat)
    sample = Path(sample) if sample is not None else sample_path()
    if not sample.is_file():
        raise InputError(f"the cell sample {sample} is not there: pass the sample's path")
    if not backend.gpu_available():
        raise XcorrError("xcorr bench align --first-runs needs a GPU: "
                         f"{backend.gpu_unavailable_reason()}")
    if json_path is not None:
        prepare_outputs([json_path], force)
    repeat = int(repeat)
    header = [f"xcorr bench align --first-runs on {device_name()}, {utc_now()}",
              f"versions: {versions_line(('numpy', 'tifffile', 'cupy'))}", bytecode_line(),
              "one-shot processes, wall clock, default outputs written; 'first': CuPy's, "
              "xcorr's and the CUDA driver's caches in empty folders (a fresh machine); warm: "
              f"the median of {repeat} after an untimed run; the stack's runs write into a "
              "new output folder (a copy, a new file) unless --force is named"]
    for line in header:
        echo(line)
    folder = work_folder(workdir, 4 * n * h * w * 2 + 3 * n * h * w * 4, "first-runs")
    caches = Caches()
    rows = []
    try:
        def fresh():
            return caches.env("cold")

        warm = caches.env("warm")
        outs = Path(tempfile.mkdtemp(prefix="out-", dir=folder))

        def out(k):
            return outs / f"o{k}"

        echo(f"the cell sample ({sample}):")
        # (CuPy's libraries read into the OS's file cache, as the CPU row's untimed run does
        # NumPy's and as pip leaves them after an install: 'first' is of xcorr's, CuPy's and
        # the driver's caches, not of the disk)
        warmed = run_process(python_argv("-c", CUDA_START), env=fresh())
        if warmed["returncode"] != 0:
            echo(f"  (CuPy's import before the cold rows failed: {warmed['stderr']})")
        common = ["--out", None, "--force", "-q"]
        for k, (name, extra) in enumerate([("cell, --device cpu", ["--device", "cpu"]),
                                            ("cell, --device gpu", ["--device", "gpu"]),
                                            ("cell, default device (auto)", [])]):
            argv = xcorr_argv("align", sample, *[out(k) if a is None else a for a in common],
                              *extra)
            first = None if k == 0 else fresh()
            rows.append(_runs(name, argv, warm, out(k), repeat, echo, first))
        stack_path = folder / "stack.tif"
        echo(f"a stack of {n} frames of {h}x{w} uint16 ({n * h * w * 2 / 2**30:.2f} GiB), "
             f"written to {stack_path} ({default_workers()} threads):")
        SyntheticStack(n, (h, w), seed=seed).write(stack_path)
        align, keep, copy, copy32, start, again = STACK_ROWS
        for k, name, extra in ((3, align, []), (4, keep, ["--keep-dtype"])):
            argv = xcorr_argv("align", stack_path, "--out", out(k), "-q", *extra)
            rows.append(_runs(name, argv, warm, out(k), repeat, echo, written=out(k)))
        copied = folder / "copy.tif"
        for name, source in ((copy, READ_WRITE), (copy32, READ_WRITE_FLOAT32)):
            rw = python_argv("-c", source.format(src=str(stack_path), dst=str(copied)))
            rows.append(_runs(name, rw, None, None, repeat, echo, written=copied))
        copied.unlink(missing_ok=True)
        rows.append(_runs(start, python_argv("-c", CUDA_START), warm, None, repeat, echo))
        rows.append(_measured(stack_path, folder, repeat, echo, warm))
        argv = xcorr_argv("align", stack_path, "--out", out(5), "--force", "-q")
        rows.append(_runs(again, argv, warm, out(5), repeat, echo))
    finally:
        caches.close()
        shutil.rmtree(folder, ignore_errors=True)
    report(echo, *(_table(rows), _targets(rows)), json_path,
           {"header": header, "stack": [n, h, w], "rows": rows})
    return 1 if any(r["error"] for r in rows) else 0


def _table(rows) -> list:
    lines = ["| process | first run s | warm s (median) |", "| --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['name']} | {_cell(r['first'])} | "
                     f"{_cell(r['seconds']) if not r['error'] else 'failed'} |")
    return lines


def _targets(rows) -> list:
    by = {r["name"]: r for r in rows}
    cpu, gpu, auto = (by.get(k, {}) for k in ("cell, --device cpu", "cell, --device gpu",
                                               "cell, default device (auto)"))
    out = []
    if cpu.get("seconds") and gpu.get("first"):
        met = gpu["first"] <= cpu["seconds"]
        out.append(f"the cell sample's first GPU run {gpu['first']:.2f} s vs the CPU's "
                   f"{cpu['seconds']:.2f} s: {gpu['first'] / cpu['seconds']:.2f}x (target "
                   f"<= 1.0x: {'yes' if met else 'no'})")
    if cpu.get("seconds") and auto.get("first"):
        out.append(f"its first run with the default device {auto['first']:.2f} s: "
                   f"{auto['first'] / cpu['seconds']:.2f}x the CPU's")
    align, keep, rw, rw32, start, again = (by.get(k, {}) for k in STACK_ROWS)
    measure = by.get(MEASURE_ROW, {})
    if align.get("seconds") and rw32.get("seconds") and start.get("seconds") \
            and measure.get("seconds"):
        floor = start["seconds"] + measure["seconds"] + rw32["seconds"]
        ratio = align["seconds"] / floor
        out.append(f"the stack's warm one-shot align {align['seconds']:.2f} s vs the serial "
                   f"floor: CUDA start {start['seconds']:.2f} + the measurement "
                   f"{measure['seconds']:.2f} + read + write as float32 {rw32['seconds']:.2f} "
                   f"(the bytes it writes) = {floor:.2f} s: {ratio:.2f}x (target <= "
                   f"{TARGET_VS_START}x: {'yes' if ratio <= TARGET_VS_START else 'no'})")
        if keep.get("seconds") and rw.get("seconds"):
            floor16 = start["seconds"] + measure["seconds"] + rw["seconds"]
            out.append(f"with --keep-dtype (uint16 written) {keep['seconds']:.2f} s vs its "
                       f"serial floor {floor16:.2f} s (the uint16 copy "
                       f"{rw['seconds']:.2f}): {keep['seconds'] / floor16:.2f}x")
    if align.get("seconds") and rw.get("seconds") and start.get("seconds"):
        floor = max(rw["seconds"], start["seconds"])
        out.append(f"the stack's warm one-shot align vs max(read + write {rw['seconds']:.2f}, "
                   f"CUDA start {start['seconds']:.2f}) = {floor:.2f} s: "
                   f"{align['seconds'] / floor:.2f}x (what overlaps could reach)")
        if again.get("seconds"):
            out.append(f"the default align over its previous outputs (--force) "
                       f"{again['seconds']:.2f} s: {again['seconds'] / floor:.2f}x that max")
    return out
