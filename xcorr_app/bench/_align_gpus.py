"""``xcorr bench align --gpus LIST|all``: whole ``xcorr align`` processes on one GPU and on
several, as a user with a stack too large for one GPU's time runs them.

One uint16 stack (default 4096 frames of 2048x2048, 32 GiB) with a known drift
(:class:`~xcorr_app.bench._align_data.SyntheticStack`) is written to local disk; it was just
written, so every row reads it from the page cache.  For every GPU count ``k`` (1, 2, 4, 8, ...
and all of ``gpus``), each a one-shot process (:mod:`._oneshot`) timed by wall clock, shifts
and the quality report written (``--no-aligned``), warm caches (every command ran untimed
first on the stack's first :data:`WARM_FRAMES` frames):

* **read**: ``tifffile.memmap`` copied out by ``k`` threads, each its own contiguous range (in
  this process, :func:`~._align_peers.read_memmap_parallel`): what ``k`` readers can get;
* **rigid**: ``xcorr align STACK --device gpu`` on one GPU (``k`` = 1, the first named), ``--gpus
  0`` (the executor of several GPUs on one), ``--gpus ids[:k]`` (``--gpus all`` for every GPU);
* **patches**: the same with ``--patches GYxGX`` (default 8x8);
* **Dask**: ``--workers k`` (a local cluster started by the run, one worker process per GPU,
  shown the first ``k`` named) and ``--scheduler`` (the same cluster started before the timed
  process, as a lab's cluster is, its workers' first run untimed), rigid and patches, for
  ``k`` >= 2, where ``distributed`` is installed.

Below :data:`~xcorr_app.streaming.SCALE_OUT_MIN_BYTES` (16 GiB) ``xcorr align`` runs ``--gpus
all`` and ``--workers N`` on one GPU: then ``--gpus`` lists the GPUs and no ``--workers`` run is
timed.

Each row: seconds (the median of ``repeat``), GB/s of the uint16 pixels, the speed-up over the
one-GPU run of its kind, its share of the ``k``-reader read, the largest difference of its
shifts (and motion field) from the one-GPU run's, and the RMS error against the known drift.
Targets (issue 73): :data:`TARGET_SPEEDUP` over one GPU, or the ``k``-reader read reached
(:data:`TARGET_VS_READ`); Dask within :data:`TARGET_DASK` of ``--gpus``; results within
:data:`EQUAL_PX` of one GPU's.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..errors import XcorrError
from ..streaming import SCALE_OUT_MIN_BYTES
from ._align_data import SyntheticStack, default_workers, rms_error, stack_shape, work_folder
from ._align_peers import read_memmap_parallel
from ._common import report, timed, utc_now, versions_line
from ._oneshot import Caches, bytecode_line, run_process, xcorr_argv

__all__ = ["DEFAULT_STACK", "TARGET_SPEEDUP", "TARGET_DASK", "EQUAL_PX", "gpu_counts",
           "runs_of", "summarise", "target_lines", "format_table", "main"]

#: the stack: (frames, height, width): 32 GiB of uint16
DEFAULT_STACK = (4096, 2048, 2048)
#: frames of the warm-up stack (the stack's first frames): every command runs on it untimed
WARM_FRAMES = 256
#: whole-process speed-up over one GPU, by GPU count (issue 73)
TARGET_SPEEDUP = {2: 1.85, 4: 3.5}
#: where the speed-up is missed: at least this share of the read by as many threads
TARGET_VS_READ = 0.90
#: Dask (one worker per GPU) at most this many times ``--gpus``' seconds
TARGET_DASK = 1.15
#: the largest difference (px) of shifts and motion fields from one GPU's that counts equal
EQUAL_PX = 1e-4
#: stands for the address of the cluster a ``--scheduler`` row runs on (started untimed)
SCHEDULER = "{scheduler}"


def gpu_counts(n) -> list:
    """The GPU counts timed on ``n`` GPUs: 1, 2, 4, ... below ``n``, and ``n``.

    >>> gpu_counts(1), gpu_counts(4), gpu_counts(6)
    ([1], [1, 2, 4], [1, 2, 4, 6])
    """
    counts, k = [], 1
    while k < n:
        counts.append(k)
        k *= 2
    return counts + [n]


def runs_of(gpus, grid, dask=True, shared=True) -> list:
    """The one-shot runs, in order: ``(name, kind, k, extra argv, visible)`` (``kind``:
    ``rigid`` or ``patches``; ``k``: the GPUs it uses; ``visible``: the GPUs its process is
    shown, or None: all).  ``shared``: the stack is large enough for ``--gpus all`` and
    ``--workers N`` to share it out (:data:`~xcorr_app.streaming.SCALE_OUT_MIN_BYTES`);
    below, a list names every GPU, and there are no ``--workers`` runs (one GPU's).

    >>> [r[0] for r in runs_of((0, 1), (8, 8))][:3]
    ['xcorr align (one GPU)', 'xcorr align --gpus 0', 'xcorr align --gpus all']
    >>> [r[0] for r in runs_of((0, 1), (8, 8))][-2:]
    ['xcorr align --patches 8x8 --workers 2', 'xcorr align --patches 8x8 --scheduler (2 workers)']
    >>> runs_of((0, 1), (8, 8))[-2][2:]
    (2, ['--patches', '8x8', '--workers', '2'], (0, 1))
    >>> [r[0] for r in runs_of((0, 1), (8, 8), shared=False)][2:4]
    ['xcorr align --gpus 0,1', 'xcorr align --patches 8x8 (one GPU)']
    """
    counts = gpu_counts(len(gpus))
    patches = f"{grid[0]}x{grid[1]}"
    runs = []
    for kind, extra in (("rigid", []), ("patches", ["--patches", patches])):
        label = "xcorr align" + ("" if kind == "rigid" else f" --patches {patches}")
        # (one GPU and Dask's workers on the GPUs named: worker k takes the k-th it is shown)
        runs.append((f"{label} (one GPU)", kind, 1, [*extra, "--device", "gpu"],
                     tuple(gpus[:1])))
        for k in counts:
            spec = "all" if shared and k == len(gpus) and list(gpus) == list(range(k)) \
                and k > 1 else ",".join(map(str, gpus[:k]))
            runs.append((f"{label} --gpus {spec}", kind, k, [*extra, "--gpus", spec], None))
        if dask and shared:
            runs += [(f"{label} --workers {k}", kind, k, [*extra, "--workers", str(k)],
                      tuple(gpus[:k])) for k in counts if k >= 2]
            # a cluster already running (as a lab's): the run without the cluster's start
            runs += [(f"{label} --scheduler ({k} workers)", kind, k,
                      [*extra, "--scheduler", SCHEDULER], tuple(gpus[:k]))
                     for k in counts if k >= 2]
    return runs


def _shown(env, visible):
    """``env`` with ``CUDA_VISIBLE_DEVICES`` showing only ``visible`` (this process's numbers,
    through its own ``CUDA_VISIBLE_DEVICES`` where set)."""
    if visible is None:
        return env
    mine = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [n.strip() for n in mine.split(",")] if mine else None
    return {**env, "CUDA_VISIBLE_DEVICES": ",".join(names[i] if names else str(i)
                                                    for i in visible)}


@contextlib.contextmanager
def _cluster(k, env):
    """The address of a local Dask cluster of ``k`` worker processes (``xcorr align --workers
    k``'s: worker ``i`` on GPU ``i`` of those ``env`` shows), started before and closed after
    the row's runs."""
    from ..distributed import local_client

    before = dict(os.environ)
    os.environ.update(env)  # (what its worker processes inherit: the caches, the GPUs shown)
    try:
        with local_client(k) as client:
            os.environ.clear()
            os.environ.update(before)
            yield client.scheduler.address
    finally:
        os.environ.clear()
        os.environ.update(before)


def _read_result(out):
    """``(shifts (N, 2), motion field or None)`` an ``xcorr align`` process wrote in ``out``."""
    doc = json.loads((Path(out) / "shifts.json").read_text())
    shifts = np.array([[f["dy"], f["dx"]] for f in doc["frames"]], dtype=np.float64)
    npz = Path(out) / "motion_field.npz"
    field = None
    if npz.exists():
        with np.load(npz) as z:
            field = np.array(z["field"])
    return shifts, field


def _largest_difference(a, b) -> float:
    """The largest |a - b| (NaN where both are NaN counts as equal; NaN on one side: inf)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    both = np.isnan(a) & np.isnan(b)
    if (np.isnan(a) ^ np.isnan(b)).any():
        return float("inf")
    d = np.abs(np.where(both, 0, a - b))
    return float(d.max()) if d.size else 0.0


def summarise(rows) -> list:
    """Add ``speedup`` (over the one-GPU run of the row's kind), ``vs_read`` (frames/s over the
    read by the row's GPU count of threads), ``vs_gpus`` (a Dask row's seconds over ``--gpus``'
    of the same kind and count) and ``status`` to every row; returns ``rows``.

    >>> rows = [{"name": "r", "kind": "read", "k": 2, "seconds": 1.0},
    ...         {"name": "a", "kind": "rigid", "k": 1, "seconds": 4.0, "one": True},
    ...         {"name": "b", "kind": "rigid", "k": 2, "seconds": 2.0, "diff": 0.0},
    ...         {"name": "c", "kind": "rigid", "k": 2, "seconds": 2.2, "dask": True,
    ...          "diff": 1e-5}]
    >>> [(r["speedup"], r["vs_read"], r.get("vs_gpus")) for r in summarise(rows)[1:]]
    [(1.0, None, None), (2.0, 0.5, None), (1.8181818181818181, 0.45454545454545453, 1.1)]
    """
    reads = {r["k"]: r["seconds"] for r in rows if r["kind"] == "read" and r.get("seconds")}
    ones = {r["kind"]: r["seconds"] for r in rows if r.get("one") and r.get("seconds")}
    gpus = {(r["kind"], r["k"]): r["seconds"] for r in rows
            if r["kind"] != "read" and not r.get("one") and not r.get("dask")
            and r.get("seconds")}
    for r in rows:
        s = r.get("seconds")
        r["speedup"] = ones[r["kind"]] / s if s and r["kind"] in ones else None
        r["vs_read"] = reads[r["k"]] / s if s and r["k"] in reads and r["kind"] != "read" \
            else None
        if r.get("dask") and s and (r["kind"], r["k"]) in gpus:
            r["vs_gpus"] = s / gpus[r["kind"], r["k"]]
        diff = r.get("diff")
        r["status"] = "ERROR" if r.get("error") or not s else "-" if r["kind"] == "read" \
            else "ok" if diff is None or diff <= EQUAL_PX else "DIFFERS"
    return rows


def target_lines(rows) -> list:
    """The issue's targets: the speed-up on 2 and 4 GPUs (or the read reached), Dask against
    ``--gpus``, the results against one GPU's.

    >>> rows = summarise([
    ...     {"name": "read 2", "kind": "read", "k": 2, "seconds": 1.0},
    ...     {"name": "one", "kind": "rigid", "k": 1, "seconds": 4.0, "one": True},
    ...     {"name": "g2", "kind": "rigid", "k": 2, "seconds": 2.0, "diff": 0.0},
    ...     {"name": "w2", "kind": "rigid", "k": 2, "seconds": 2.5, "dask": True,
    ...      "diff": 0.0}])
    >>> for line in target_lines(rows):
    ...     print(line)
    g2: 2.00x one GPU (target >= 1.85x: yes)
    w2: 1.25x --gpus' time (target <= 1.15x: no)
    results: every run within 0.0001 px of one GPU's: yes (largest 0 px)
    """
    lines = []
    for r in rows:
        if r["kind"] == "read" or r.get("one") or not r.get("seconds"):
            continue
        if r.get("dask"):
            if r.get("vs_gpus") is not None:
                lines.append(f"{r['name']}: {r['vs_gpus']:.2f}x --gpus' time (target <= "
                             f"{TARGET_DASK:g}x: {'yes' if r['vs_gpus'] <= TARGET_DASK else 'no'})")
            continue
        want = TARGET_SPEEDUP.get(r["k"])
        if want is None or r.get("speedup") is None:
            continue
        met = r["speedup"] >= want
        read = r.get("vs_read")
        tail = "" if met or read is None else \
            (f"; {100 * read:.0f}% of the {r['k']}-thread read (the read reached >= "
             f"{100 * TARGET_VS_READ:.0f}%: {'yes' if read >= TARGET_VS_READ else 'no'})")
        lines.append(f"{r['name']}: {r['speedup']:.2f}x one GPU (target >= {want:g}x: "
                     f"{'yes' if met else 'no'}){tail}")
    diffs = [r["diff"] for r in rows if r.get("diff") is not None]
    if diffs:
        worst = max(diffs)
        lines.append(f"results: every run within {EQUAL_PX:g} px of one GPU's: "
                     f"{'yes' if worst <= EQUAL_PX else 'no'} (largest {worst:.3g} px)")
    return lines


def _cell(value, fmt) -> str:
    return "" if value is None else format(value, fmt)


def format_table(rows) -> list:
    """The Markdown table of summarised rows (a list of lines)."""
    lines = ["| run | GPUs | s | GB/s | vs one GPU | vs the read of as many threads | "
             "max diff vs one GPU px | RMS error px | check |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        s, read = r.get("seconds"), r.get("vs_read")
        speedup = "" if r.get("speedup") is None else f"{r['speedup']:.2f}x"
        lines.append(f"| {r['name']} | {r['k']} | {_cell(s, '.2f') if s else 'failed'} | "
                     f"{_cell(r['bytes'] / s / 1e9 if s else None, '.2f')} | {speedup} | "
                     f"{'' if read is None else f'{100 * read:.0f}%'} | "
                     f"{_cell(r.get('diff'), '.2g')} | {_cell(r.get('rms_px'), '.3f')} | "
                     f"{r['status']} |")
    return lines


def _timed_process(row, argv, env, out, truth, repeat, echo):
    """Run ``argv`` ``repeat`` times into ``out``: the row's ``seconds`` (median), ``runs``,
    ``peak_bytes``, its result and RMS error; a failure is the row's ``error``."""
    for _ in range(repeat):
        r = run_process(argv, env=env)
        if r["returncode"] != 0:
            row["error"] = r["stderr"] or f"exit status {r['returncode']}"
            break
        row["runs"].append(r["seconds"])
        row["peak_bytes"] = max(row.get("peak_bytes") or 0, r["peak_bytes"] or 0) or None
    if row["runs"]:
        row["seconds"] = float(np.median(row["runs"]))
        row["result"] = _read_result(out)
        row["rms_px"] = rms_error(row["result"][0], truth[:len(row["result"][0])])
    took = "failed: " + row["error"] if row["error"] else \
        ", ".join(f"{s:.2f}" for s in row["runs"]) + " s"
    echo(f"  {row['name']}: {took}")
    return row


def main(gpus="all", *, frames=None, size=None, patches=(8, 8), repeat=1, workdir=None,
         keep=False, json_path=None, force=False, echo=print, seed=0) -> int:
    """What ``xcorr bench align --gpus`` does; returns 1 when a process failed or a result
    differs from one GPU's by more than :data:`EQUAL_PX` (a missed speed target is reported,
    not an error).  ``keep``: the stack file is kept (its path printed), the rest removed.

    Raises
    ------
    XcorrError
        For a bad option, no usable GPU, too little disk space, or an existing ``json_path``
        without ``force``.
    """
    from .. import backend
    from .._cuda import device_name
    from ..io import prepare_outputs
    from ..streaming import parse_gpus

    n, h, w = stack_shape(DEFAULT_STACK, frames, size, repeat)
    if not backend.gpu_available():
        raise XcorrError("xcorr bench align --gpus needs a GPU: "
                         f"{backend.gpu_unavailable_reason()}")
    ids = parse_gpus(gpus)
    if json_path is not None:
        prepare_outputs([json_path], force)
    repeat = int(repeat)
    dask = importlib.util.find_spec("distributed") is not None
    shared = n * h * w * 2 >= SCALE_OUT_MIN_BYTES
    runs = runs_of(ids, tuple(patches), dask, shared)
    warm_n = min(WARM_FRAMES, n)
    stack = SyntheticStack(n, (h, w), seed=seed)
    folder = work_folder(workdir, stack.nbytes + warm_n * h * w * 2, "gpus")
    header = [f"xcorr bench align --gpus on {len(ids)} x {device_name()} (GPUs "
              f"{','.join(map(str, ids))}), {utc_now()}",
              f"versions: {versions_line(('numpy', 'tifffile', 'cupy', 'dask', 'distributed'))}",
              bytecode_line(),
              f"stack: {n} frames of {h}x{w} uint16 ({stack.nbytes / 2**30:.2f} GiB) in "
              f"{folder}, just written (in the page cache)",
              "one-shot processes (--no-aligned: shifts, the quality report and plots written), "
              f"wall clock, warm caches (each command but --workers ran untimed on the first "
              f"{warm_n} frames"
              f"{'' if not dask else '; --workers runs: their kernels from the same caches'})"
              f"{'' if repeat == 1 else f', the median of {repeat} runs'}"
              + ("" if dask else "; no --workers rows: distributed is not installed")
              + ("" if shared or not dask else
                 f"; below {SCALE_OUT_MIN_BYTES // 2**30} GiB: --gpus names each GPU, no "
                 "--workers rows (xcorr align runs them on one GPU)")]
    for line in header:
        echo(line)
    caches = Caches()
    rows = []
    path, warm_path = folder / "stack.tif", folder / "warm.tif"
    try:
        written, _ = timed(lambda: stack.write(path))
        SyntheticStack(warm_n, (h, w), seed=seed).write(warm_path)
        echo(f"written in {written:.1f} s ({default_workers()} threads); warming up:")
        env = caches.env("warm")
        outs = Path(tempfile.mkdtemp(prefix="out-", dir=folder))
        for name, _, _, extra, visible in runs:
            if "--workers" in extra or "--scheduler" in extra:  # (Dask's: warmed below)
                continue
            r = run_process(xcorr_argv("align", warm_path, "--out", outs / "warm", "--force",
                                       "--no-aligned", "-q", *extra), env=_shown(env, visible))
            if r["returncode"] != 0:
                raise XcorrError(f"the warm-up of {name} failed: {r['stderr']}")
        echo("measuring:")
        for k in gpu_counts(len(ids)):
            row = {"name": f"tifffile.memmap, {k} reader thread{'s' if k > 1 else ''}",
                   "kind": "read", "k": k, "bytes": stack.nbytes, "runs": [], "error": ""}
            read_memmap_parallel(path, k)  # (untimed: as every process runs after a warm one)
            row["runs"] = [timed(lambda: read_memmap_parallel(path, k))[0]
                           for _ in range(repeat)]
            row["seconds"] = float(np.median(row["runs"]))
            echo(f"  {row['name']}: " + ", ".join(f"{s:.2f}" for s in row["runs"]) + " s")
            rows.append(row)
        ones = {}
        for j, (name, kind, k, extra, visible) in enumerate(runs):
            out = outs / f"o{j}"
            cluster = "--scheduler" in extra
            row = {"name": name, "kind": kind, "k": k, "bytes": stack.nbytes, "runs": [],
                   "error": "", "one": "--device" in extra,
                   "dask": "--workers" in extra or cluster}
            with (_cluster(k, _shown(env, visible)) if cluster
                  else contextlib.nullcontext(None)) as address:
                extra = [address if a == SCHEDULER else a for a in extra]
                if cluster:  # (its workers' first run, untimed, as the other rows had theirs)
                    run_process(xcorr_argv("align", warm_path, "--out", outs / "warm",
                                           "--force", "--no-aligned", "-q", *extra), env=env)
                argv = xcorr_argv("align", path, "--out", out, "--force", "--no-aligned", "-q",
                                  *extra)
                _timed_process(row, argv, _shown(env, visible), out, stack.shifts, repeat,
                               echo)
            result = row.pop("result", None)
            if row["one"] and result is not None:
                ones[kind] = result
            elif result is not None and kind in ones:
                row["diff"] = max(_largest_difference(a, b) for a, b in zip(result, ones[kind])
                                  if a is not None or b is not None)
            rows.append(row)
    finally:
        caches.close()
        if keep and path.exists():
            kept = folder.parent / f"{folder.name}.tif"
            path.rename(kept)
            echo(f"stack kept: {kept}")
        shutil.rmtree(folder, ignore_errors=True)
    summarise(rows)
    report(echo, *(format_table(rows), target_lines(rows)), json_path,
           {"header": header, "stack": [n, h, w], "rows": rows})
    return 1 if any(r["status"] in ("ERROR", "DIFFERS") for r in rows) else 0
