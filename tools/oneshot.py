"""One-shot ``xcorr align`` processes, cold and warm, beside a one-shot plain read.

What it measures: the wall time of whole ``python3 -m xcorr_app.cli align STACK --out DIR
--force -q [OPTIONS]`` processes, as a user who runs the command once gets it (interpreter
start, imports, CUDA start, compilation or loading of kernels, reading, measuring, writing the
outputs).  Per stack:

* ``--cold``: the first run with empty caches (CuPy's kernel cache, xcorr's cache and the CUDA
  driver's JIT cache: ``CUPY_CACHE_DIR``, ``XCORR_CACHE_DIR`` and ``CUDA_CACHE_PATH`` pointed at
  a fresh folder), as on a fresh machine; without it one untimed run warms the caches first;
* ``--runs N`` warm runs (default 2);
* ``--read``: as many one-shot ``python3 -c "tifffile.imread(STACK)"`` processes (the floor a
  Python process that reads the file meets);
* ``--tree DIR``: the same runs again with another tree first on ``PYTHONPATH`` (``git worktree
  add /tmp/old REV``), and whether each tree's ``shifts.csv`` are byte for byte the same as this
  one's.

Everything after ``--`` goes to ``xcorr align`` (``-- --max-shift 16 --no-aligned``).  Prints a
table (stack, tree, run, seconds), then the median of each tree's warm runs; exit status 1
where a run failed or the trees' ``shifts.csv`` differ.

Usage::

    python3 tools/oneshot.py STACK [STACK ...] [--cold] [--runs 2] [--read] [--tree DIR] \\
        [-- XCORR ALIGN OPTIONS]

The samples: ``sample_data/*_drift.tif``; the benchmark's 4 GiB stack: ``xcorr bench align
--keep --workdir DIR``.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd, env, cwd):
    """``(seconds, returncode, last line of stderr)`` of one process."""
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    lines = proc.stderr.strip().splitlines()
    return time.perf_counter() - t, proc.returncode, lines[-1] if lines else ""


def environment(tree, caches):
    """The child's environment: ``tree`` first on ``PYTHONPATH``, ``caches`` (a folder, or
    ``None``: the user's) for every cache a first run fills."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH")) if p)
    if caches is not None:
        env.update(CUPY_CACHE_DIR=str(caches / "cupy"), XCORR_CACHE_DIR=str(caches / "xcorr"),
                   CUDA_CACHE_PATH=str(caches / "cuda"))
    return env


def runs_of(stack, tree, label, args, options, work):
    """The rows ``(label, run, seconds)`` of one stack and tree; ``None`` seconds: it failed."""
    caches = Path(tempfile.mkdtemp(prefix="caches-", dir=work)) if args.cold else None
    env = environment(tree, caches)
    out = work / f"{label}-{Path(stack).stem}"
    cmd = [sys.executable, "-m", "xcorr_app.cli", "align", stack, "--out", str(out),
           "--force", "-q", *options]
    rows = []
    names = (["cold"] if args.cold else []) + [f"warm {k + 1}" for k in range(args.runs)]
    if not args.cold:
        timed(cmd, env, work)  # fills the caches, untimed
    for name in names:
        seconds, rc, last = timed(cmd, env, work)
        if rc != 0:
            print(f"{label} {stack} {name}: exit status {rc}: {last}", file=sys.stderr)
        rows.append((label, name, seconds if rc == 0 else None))
    return rows, out / "shifts.csv"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    options = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stacks", nargs="+", metavar="STACK")
    ap.add_argument("--cold", action="store_true", help="first run with empty caches")
    ap.add_argument("--runs", type=int, default=2, help="warm runs (default 2)")
    ap.add_argument("--read", action="store_true", help="one-shot tifffile.imread processes")
    ap.add_argument("--tree", type=Path, help="another tree to run and compare")
    args = ap.parse_args(argv)
    if args.runs < 0 or (args.runs == 0 and not args.cold):
        ap.exit(2, "error: --runs must be at least 1 (or 0 with --cold)\n")
    missing = [s for s in args.stacks if not Path(s).exists()]
    if missing or (args.tree is not None and not (args.tree / "xcorr_app").is_dir()):
        what = f"no such stack: {missing[0]}" if missing else f"no xcorr_app in {args.tree}"
        ap.exit(2, f"error: {what}\n")

    import xcorr_app  # "this" tree: the one this Python imports; runs start in a scratch folder

    here = Path(xcorr_app.__file__).resolve().parents[1]
    print(f"this tree: {here}" + (f"; tree: {args.tree.resolve()}" if args.tree else ""))
    print("| stack | tree | run | seconds |\n| --- | --- | --- | --- |")
    failed, notes = False, []
    with tempfile.TemporaryDirectory(prefix="oneshot-") as tmp:
        work = Path(tmp)
        for stack in map(os.path.abspath, args.stacks):
            rows = []
            if args.read:
                read = [sys.executable, "-c", f"import tifffile; tifffile.imread({stack!r})"]
                for k in range(max(args.runs, 1)):
                    seconds, rc, _ = timed(read, dict(os.environ), work)
                    rows.append(("tifffile.imread", f"read {k + 1}", seconds if rc == 0 else None))
            mine, csv = runs_of(stack, here, "this", args, options, work)
            rows += mine
            if args.tree is not None:
                theirs, other = runs_of(stack, args.tree.resolve(), "tree", args, options, work)
                rows += theirs
                both = csv.exists() and other.exists()
                same = both and filecmp.cmp(csv, other, shallow=False)
                verdict = "identical" if same else "DIFFER" if both else "not compared (a run failed)"
                notes.append(f"{Path(stack).name}: shifts.csv of the two trees {verdict}")
                failed |= not same
            for label, name, seconds in rows:
                shown = "failed" if seconds is None else f"{seconds:.2f}"
                print(f"| {Path(stack).name} | {label} | {name} | {shown} |", flush=True)
                failed |= seconds is None
            for label in dict.fromkeys(r[0] for r in rows):
                warm = [s for lab, name, s in rows if lab == label and s is not None
                        and not name.startswith("cold")]
                if warm:
                    notes.append(f"{Path(stack).name}, {label}: median of {len(warm)} "
                                 f"{statistics.median(warm):.2f} s")
    print("\n".join(["", *notes]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
