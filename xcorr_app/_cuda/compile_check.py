"""Compile-check every kernel instantiation the code can launch (run by CI, needs no GPU).

For each ``*.cu`` of the kernels folder (``kernels/<family>/``:
:func:`~xcorr_app._cuda.loader.kernels_dir`) this writes a small translation unit that includes
the source and takes the address of every instantiation that the families of the package
register (their modules found by :func:`~xcorr_app._cuda.loader.family_modules`), compiles it
with ``nvcc -cubin -arch=sm_90 --resource-usage`` and reads ptxas's report.  Any spill or a
non-zero stack frame fails the check: register arrays must stay in registers (the papers'
central point).  Sources that no family registers are compiled too, so syntax errors are caught;
a family whose source is not in the kernels folder fails the check.

With ``--keep [DIR]`` the cubins are kept with an index of their kernels (default DIR: the
package's ``_cuda/built``), the kernels that ship built (:mod:`xcorr_app._cuda.shipped`).

Usage::

    python -m xcorr_app._cuda.compile_check [--arch sm_90] [--verbose] [--keep [DIR]]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .loader import COMPILE_OPTIONS, all_families, kernel_tree, kernels_dir, read_source
from .shipped import BUILT_DIR, INDEX, mangled_pattern, normalized, source_digest, write_index

CHUNK = 48  # instantiations per translation unit
_FUNC = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Compiling entry function '(\S+)'.*?\n.*?Used (\d+) registers", re.S)


def parse_resource_usage(text: str) -> dict:
    """``{mangled name: (stack, spill_stores, spill_loads)}`` from ptxas ``--resource-usage``."""
    usage, current = {}, None
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            current = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and current:
            usage[current] = tuple(int(v) for v in m.groups())
            current = None
    return usage


def demangle(names):
    """``{mangled: demangled}``: by ``cu++filt`` (beside nvcc or on the PATH), ``c++filt``, or
    libstdc++'s ``__cxa_demangle`` (a toolkit without cu++filt on a host without binutils);
    names none of them can read stay as they are."""
    if not names:
        return {}
    nvcc = shutil.which("nvcc")
    beside = Path(nvcc).resolve().parent / "cu++filt" if nvcc else None
    tool = (str(beside) if beside is not None and beside.is_file() else None) \
        or shutil.which("cu++filt") or shutil.which("c++filt")
    if tool:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True,
                             text=True).stdout.splitlines()
        if len(out) == len(names):
            return dict(zip(names, out))
    return {n: _cxa_demangle(n) for n in names}


def _cxa_demangle(name: str) -> str:
    import ctypes
    import ctypes.util

    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return name
    fn.restype = ctypes.c_void_p
    status = ctypes.c_int()
    ptr = fn(name.encode(), None, None, ctypes.byref(status))
    if not ptr or status.value != 0:
        return name
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))


def translation_unit(source: str, expressions) -> str:
    refs = ",\n  ".join(f"(const void*)&{e}" for e in expressions)
    body = f"static const void* xcorr_instantiations[] = {{\n  {refs}\n}};\n" if refs else ""
    return f'#include "{source}"\n{body}'


def check(arch: str = "sm_90", verbose: bool = False, kdir=None, families=None,
          keep=None) -> int:
    """Compile every source (those of the kernels folder ``kdir`` if given, else the package's)
    with the instantiations of ``families``; 0 when clean.  ``keep``: a folder where the package's
    cubins and their index are written (:mod:`~xcorr_app._cuda.shipped`)."""
    if keep is not None and kdir is not None:
        raise ValueError("keep builds the package's kernels; it takes no kdir")
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("compile check: nvcc not found on PATH; install the CUDA toolkit", file=sys.stderr)
        return 2
    root = Path(kdir) if kdir is not None else kernels_dir()
    dirs, include = kernel_tree(root)
    families = all_families() if families is None else families
    paths = {p.name: p for d in dirs for p in sorted(d.glob("*.cu"))}
    by_source: dict[str, list[str]] = {name: [] for name in paths}
    for fam in families:
        by_source.setdefault(fam.source, []).extend(fam.expressions())
    lost = sorted(set(by_source) - set(paths))
    if lost:
        print(f"compile check: sources registered by kernel families but not found under "
              f"{root}: {', '.join(lost)}", file=sys.stderr)
        return 1
    # Large sources are cut into translation units of CHUNK instantiations compiled in parallel.
    jobs = [(source, exprs[i:i + CHUNK] if exprs else [])
            for source, exprs in by_source.items()
            for i in range(0, max(len(exprs), 1), CHUNK)]
    failures, n_kernels = [], 0
    kept: dict[str, dict] = {}
    if keep is not None:
        keep = Path(keep)
        keep.mkdir(parents=True, exist_ok=True)
        (keep / INDEX).unlink(missing_ok=True)  # no index pointing at cubins being replaced
        for old in keep.glob("*.cubin"):
            old.unlink()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        def compile_one(k, source, exprs):
            tu = Path(tmp) / f"check{k}_{source}"
            tu.write_text(translation_unit(source, exprs))
            inc = [f"-I{d}" for d in (include, paths[source].parent)]
            cmd = [nvcc, "-cubin", f"-arch={arch}", "--resource-usage", *COMPILE_OPTIONS,
                   *inc, "-o", str(Path(tmp) / f"out{k}.cubin"), str(tu)]
            return subprocess.run(cmd, capture_output=True, text=True)

        results = pool.map(lambda job: compile_one(job[0], *job[1]), enumerate(jobs))
        for k, ((source, exprs), res) in enumerate(zip(jobs, results)):
            text = res.stdout + res.stderr
            if res.returncode != 0:
                failures.append(f"{source}: nvcc failed:\n{text}")
                continue
            usage = parse_resource_usage(text)
            names = demangle(list(usage))
            if len(usage) < len(exprs):
                failures.append(f"{source}: expected {len(exprs)} kernels, ptxas reported {len(usage)}")
            if keep is not None and exprs:
                failures += _keep(keep, kept, arch, k, source, exprs, list(usage),
                                  Path(tmp) / f"out{k}.cubin")
            for mangled, (stack, st, ld) in sorted(usage.items()):
                n_kernels += 1
                line = f"{names[mangled]}: stack {stack} B, spill stores {st} B, spill loads {ld} B"
                if stack or st or ld:
                    failures.append(f"{source}: {line}")
                elif verbose:
                    print(f"ok  {source}: {line}")
    if failures:
        print("compile check FAILED:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    if keep is not None:
        index = write_index(keep, kept)
        size = sum(p.stat().st_size for p in keep.glob("*.cubin")) / 2 ** 20
        print(f"kept {sum(len(e['kernels'][arch]) for e in kept.values())} built kernels "
              f"({size:.1f} MiB of cubins) with their index {index}")
    print(f"compile check: {n_kernels} kernel instantiations in {len(by_source)} sources, "
          f"0-byte stack frames, no spills ({arch}); sources in {root}")
    return 0


def _keep(folder, kept, arch, k, source, exprs, mangled_names, cubin) -> list:
    """Keep one translation unit's cubin and index its kernels by name expression (matched by
    their mangled names: :func:`~xcorr_app._cuda.shipped.mangled_pattern`); the failures (an
    instantiation whose kernel is not found in the cubin, or not once)."""
    name = f"{Path(source).stem}.{k}.{arch}.cubin"
    shutil.copyfile(cubin, folder / name)
    entry = kept.setdefault(source, {"digest": source_digest(read_source(source),
                                                             COMPILE_OPTIONS),
                                     "kernels": {arch: {}}})
    missing = []
    for e in exprs:
        pattern = mangled_pattern(e)
        found = [m for m in mangled_names if pattern.match(m)]
        if len(found) != 1:
            missing.append(f"{source}: {e} matches {len(found)} kernels of its cubin "
                           f"({', '.join(found[:3]) or 'none'})")
        else:
            entry["kernels"][arch][normalized(e)] = [name, found[0]]
    return missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--keep", nargs="?", const=str(BUILT_DIR), default=None, metavar="DIR",
                    help="keep the cubins and their index in DIR (default: the package's "
                         "_cuda/built, the kernels that ship built)")
    args = ap.parse_args(argv)
    return check(args.arch, args.verbose, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
