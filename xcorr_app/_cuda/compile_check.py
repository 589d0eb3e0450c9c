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
``--portable CODES`` (with ``--keep``; CI's wheel: :data:`~xcorr_app._cuda.shipped.PORTABLE_CODES`)
also builds the sources of :data:`PORTABLE_DIRS` (the kernels the correlation planner and the
alignment pipeline launch; the filters' and convolutions' families, most of the
instantiations, compile at first use elsewhere) for other GPUs: one fatbin per translation unit
with SASS for each ``sm_XY`` of CODES and the PTX of its ``compute_XY`` (newer GPUs), from one
front-end pass (``-gencode arch=compute_80,code=[sm_80,sm_86,sm_89,compute_80]``); their spills are
listed, not failures (the check holds the main architecture to no spills; another's code is
what NVRTC would build there).

Usage::

    python -m xcorr_app._cuda.compile_check [--arch sm_90] [--verbose] [--keep [DIR]]
        [--portable sm_80,sm_86,sm_89,compute_80]
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
from .shipped import (BUILT_DIR, INDEX, PORTABLE_CODES, mangled_pattern, normalized,
                      source_digest, write_index)

CHUNK = 48  # instantiations per translation unit
#: the kernel folders whose sources ``--portable`` builds for other GPUs too
PORTABLE_DIRS = ("correlate", "alignment", "registration")
_FUNC = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Compiling entry function '(\S+)'.*?\n.*?Used (\d+) registers", re.S)


def parse_resource_usage(text: str) -> dict:
    """``{mangled name: (stack, spill_stores, spill_loads)}`` from ptxas ``--resource-usage``
    (the largest figures of a kernel compiled for several architectures)."""
    usage, current = {}, None
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            current = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and current:
            got = tuple(int(v) for v in m.groups())
            usage[current] = tuple(map(max, usage.get(current, got), got))
            current = None
    return usage


def gencode(codes) -> str:
    """nvcc's ``-gencode`` of ``codes`` (``sm_XY`` SASS, ``compute_XY`` PTX) from one virtual
    architecture (the PTX's, else the lowest SASS's).

    >>> gencode(["sm_80", "sm_86", "compute_80"])
    '-gencode=arch=compute_80,code=[sm_80,sm_86,compute_80]'
    """
    virtual = next((c for c in codes if c.startswith("compute_")), None) or \
        "compute_" + min((c[3:] for c in codes), key=int)
    return f"-gencode=arch={virtual},code=[{','.join(codes)}]"


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
          keep=None, portable=()) -> int:
    """Compile every source (those of the kernels folder ``kdir`` if given, else the package's)
    with the instantiations of ``families``; 0 when clean.  ``keep``: a folder where the package's
    cubins and their index are written (:mod:`~xcorr_app._cuda.shipped`); ``portable``: the
    codes its :data:`PORTABLE_DIRS` sources are built for too (fatbins; with ``keep``)."""
    if keep is not None and kdir is not None:
        raise ValueError("keep builds the package's kernels; it takes no kdir")
    if portable and keep is None:
        raise ValueError("portable builds kernels to keep: give keep")
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
    jobs = [(source, exprs[i:i + CHUNK] if exprs else [], None)
            for source, exprs in by_source.items()
            for i in range(0, max(len(exprs), 1), CHUNK)]
    # the portable builds first: the longest jobs start first, the pool's tail stays short
    jobs[:0] = [(source, exprs, tuple(portable)) for source, exprs, _ in jobs
                if exprs and paths[source].parent.name in PORTABLE_DIRS] if portable else []
    failures, n_kernels, n_portable, spilled = [], 0, 0, []
    kept: dict[str, dict] = {}
    if keep is not None:
        keep = Path(keep)
        keep.mkdir(parents=True, exist_ok=True)
        (keep / INDEX).unlink(missing_ok=True)  # no index pointing at cubins being replaced
        for old in (*keep.glob("*.cubin"), *keep.glob("*.fatbin")):
            old.unlink()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        def compile_one(k, source, exprs, codes):
            tu = Path(tmp) / f"check{k}_{source}"
            tu.write_text(translation_unit(source, exprs))
            inc = [f"-I{d}" for d in (include, paths[source].parent)]
            kind = ["-cubin", f"-arch={arch}"] if codes is None else ["-fatbin", gencode(codes)]
            cmd = [nvcc, *kind, "--resource-usage", *COMPILE_OPTIONS, *inc, "-o",
                   str(Path(tmp) / f"out{k}.{kind[0][1:]}"), str(tu)]
            return subprocess.run(cmd, capture_output=True, text=True)

        results = pool.map(lambda job: compile_one(job[0], *job[1]), enumerate(jobs))
        for k, ((source, exprs, codes), res) in enumerate(zip(jobs, results)):
            text = res.stdout + res.stderr
            if res.returncode != 0:
                failures.append(f"{source}: nvcc failed:\n{text}")
                continue
            usage = parse_resource_usage(text)
            names = demangle(list(usage))
            if len(usage) < len(exprs):
                failures.append(f"{source}: expected {len(exprs)} kernels, ptxas reported {len(usage)}")
            if keep is not None and exprs:
                built = Path(tmp) / f"out{k}.{'cubin' if codes is None else 'fatbin'}"
                failures += _keep(keep, kept, codes or (arch,), k, source, exprs, list(usage),
                                  built)
            for mangled, (stack, st, ld) in sorted(usage.items()):
                if codes is not None:  # (listed, not failed: NVRTC would build the same there)
                    n_portable += 1
                    if stack or st or ld:
                        spilled.append(f"{source}: {names[mangled]} ({', '.join(codes)}): "
                                       f"stack {stack} B, spill stores {st} B, spill loads "
                                       f"{ld} B")
                    continue
                n_kernels += 1
                line = f"{names[mangled]}: stack {stack} B, spill stores {st} B, spill loads {ld} B"
                if stack or st or ld:
                    failures.append(f"{source}: {line}")
                elif verbose:
                    print(f"ok  {source}: {line}")
    if spilled:
        print(f"note: {len(spilled)} kernels spill on the portable architectures (shipped as "
              "they are):", *spilled, sep="\n  ")
    if failures:
        print("compile check FAILED:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    if keep is not None:
        index = write_index(keep, kept)
        size = sum(p.stat().st_size for p in (*keep.glob("*.cubin"), *keep.glob("*.fatbin")))
        counts = {a: sum(len(e["kernels"].get(a, {})) for e in kept.values())
                  for a in (arch, *portable)}
        print(f"kept {', '.join(f'{n} for {a}' for a, n in counts.items())} built kernels "
              f"({size / 2 ** 20:.1f} MiB of cubins and fatbins) with their index {index}")
    also = f"; {n_portable} of them also for {', '.join(portable)}" if portable else ""
    print(f"compile check: {n_kernels} kernel instantiations in {len(by_source)} sources, "
          f"0-byte stack frames, no spills ({arch}{also}); sources in {root}")
    return 0


def _keep(folder, kept, archs, k, source, exprs, mangled_names, built) -> list:
    """Keep one translation unit's cubin (one architecture) or fatbin (several) and index its
    kernels by name expression for each of ``archs`` (matched by their mangled names:
    :func:`~xcorr_app._cuda.shipped.mangled_pattern`); the failures (an instantiation whose
    kernel is not found in the file, or not once)."""
    name = f"{Path(source).stem}.{k}.{archs[0] if len(archs) == 1 else 'portable'}{built.suffix}"
    shutil.copyfile(built, folder / name)
    entry = kept.setdefault(source, {"digest": source_digest(read_source(source),
                                                             COMPILE_OPTIONS), "kernels": {}})
    missing = []
    for e in exprs:
        pattern = mangled_pattern(e)
        found = [m for m in mangled_names if pattern.match(m)]
        if len(found) != 1:
            missing.append(f"{source}: {e} matches {len(found)} kernels of its {built.suffix[1:]}"
                           f" ({', '.join(found[:3]) or 'none'})")
            continue
        for a in archs:
            entry["kernels"].setdefault(a, {})[normalized(e)] = [name, found[0]]
    return missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--keep", nargs="?", const=str(BUILT_DIR), default=None, metavar="DIR",
                    help="keep the cubins and their index in DIR (default: the package's "
                         "_cuda/built, the kernels that ship built)")
    ap.add_argument("--portable", default="", metavar="CODES",
                    help="with --keep: build the correlation and alignment kernels for these "
                         "too, SASS (sm_XY) and PTX (compute_XY), comma-separated (the wheel's: "
                         f"{','.join(PORTABLE_CODES)})")
    args = ap.parse_args(argv)
    portable = tuple(c for c in args.portable.split(",") if c)
    if portable and args.keep is None:
        ap.error("--portable builds kernels to keep: give --keep")
    return check(args.arch, args.verbose, keep=args.keep, portable=portable)


if __name__ == "__main__":
    sys.exit(main())
