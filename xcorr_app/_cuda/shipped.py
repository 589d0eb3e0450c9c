"""Kernels that ship built: cubins compiled by ``nvcc`` when the package was built.

A first run on a fresh machine otherwise compiles every kernel it launches with NVRTC (0.15-0.5
s each).  CI's compile check (:mod:`xcorr_app._cuda.compile_check`) compiles every registered
instantiation with ``nvcc -cubin`` anyway; with ``--keep DIR`` it keeps those cubins and writes
:data:`INDEX` (for each source: the digest of the text it compiled, and for each instantiation
its cubin and mangled name), and the wheel carries them in ``xcorr_app/_cuda/built/``: every
kernel for ``sm_90``, and those the correlation planner and the alignment pipeline launch in
fatbins for the other architectures of :data:`WHEEL_ARCHS` (SASS for ``sm_80``, ``sm_86`` and
``sm_89``: A100, RTX 30 and 40, L4, L40; PTX of ``compute_80`` that the driver compiles on
newer GPUs at first load).  Where
nvcc is installed, ``python -m xcorr_app._cuda.compile_check --keep`` builds them in place for a
source checkout (the "install time" build).

:func:`shipped_functions` is what :func:`xcorr_app._cuda.loader.compile_together` asks first:
a kernel is loaded from a shipped cubin when the index lists it for an architecture the GPU can
run (the same major version, a minor version no higher than the GPU's: a ``sm_90`` cubin runs
on every compute capability 9.x; else PTX of a ``compute_XY`` no higher than the GPU's) and the
source text it was built from is the text the package
holds now (an edited source or ``$XCORR_KERNEL_DIR`` falls back to NVRTC).  Set
``XCORR_SHIPPED_KERNELS=0`` to compile everything with NVRTC instead.

Examples
--------
>>> usable_arch(["sm_80", "sm_90"], (9, 0)), usable_arch(["sm_80"], (8, 9)), usable_arch(["sm_90"], (8, 6))
('sm_90', 'sm_80', None)
>>> usable_arch(["sm_80", "sm_90", "compute_80"], (12, 0)), usable_arch(["compute_80"], (7, 5))
('compute_80', None)
>>> normalized("zncc_peaks<false, true, 256>")
'zncc_peaks<false,true,256>'
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path

#: where the built kernels live inside the package
BUILT_DIR = Path(__file__).resolve().parent / "built"
INDEX = "index.json"
ENV = "XCORR_SHIPPED_KERNELS"
#: what CI's wheel ships: every kernel for sm_90 (the compile check's architecture) and the
#: portable sources' (compile_check.PORTABLE_DIRS) for :data:`PORTABLE_CODES` too
WHEEL_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "compute_80")
#: the codes of the portable build (``compile_check --portable``): SASS of each 8.x generation
#: and compute_80's PTX, from one front-end pass
PORTABLE_CODES = ("sm_80", "sm_86", "sm_89", "compute_80")
_UNSIGNED = re.compile(r"\b(\d+)u\b")

_MODULES: dict = {}


def source_digest(text: str, options) -> str:
    """What a cubin was built from: the source text (headers' digest included, as
    :func:`~xcorr_app._cuda.loader.read_source` returns it) and the compiler options."""
    return hashlib.sha256((text + "\0" + " ".join(options)).encode()).hexdigest()[:24]


def normalized(expression: str) -> str:
    """The index's key of a name expression: without spaces or ``u`` suffixes."""
    return _UNSIGNED.sub(r"\1", expression.replace(" ", ""))


#: Itanium ABI codes of the template arguments the families use
_TYPE_CODES = {"float": "f", "double": "d", "bool": "b", "short": "s", "int": "i",
               "unsigned char": "h", "unsigned short": "t", "unsigned int": "j", "long long": "x",
               "unsigned long long": "y", "float2": "6float2", "double2": "7double2"}


def mangled_pattern(expression: str):
    """A regular expression that the mangled name of ``expression``'s kernel matches (and no
    other instantiation's): the name and template arguments of the Itanium ABI, the parameters
    left open.  Integer arguments match any integer type (the template's declared type is not
    in the expression).  So the index needs no demangler (the device machines have none).

    >>> bool(mangled_pattern("zncc_peaks<false, true, 256>").match("_Z10zncc_peaksILb0ELb1ELi256EEvPKfi"))
    True
    """
    m = re.fullmatch(r"\s*(\w+)\s*(?:<(.*)>)?\s*", expression)
    if m is None:
        raise ValueError(f"cannot mangle {expression!r}")
    name, args = m.group(1), m.group(2)
    head = re.escape(f"_Z{len(name)}{name}")
    if args is None:  # a plain function (C++ linkage), or an extern "C" one
        return re.compile(f"(?:{head}(?!I).*|{re.escape(name)})$")
    codes = []
    for a in (t.strip() for t in args.split(",")):
        if a in ("true", "false"):
            codes.append(f"Lb{int(a == 'true')}E")
        elif re.fullmatch(r"-?\d+", a):
            codes.append(f"L[ijlmxysth]{a.replace('-', 'n')}E")
        elif a in _TYPE_CODES:
            codes.append(re.escape(_TYPE_CODES[a]))
        else:
            raise ValueError(f"cannot mangle the template argument {a!r} of {expression!r}")
    return re.compile(f"{head}I{''.join(codes)}E.*$")


def usable_arch(archs, capability) -> str | None:
    """The architecture among ``archs`` (``"sm_XY"``, ``"compute_XY"``) whose code runs on a
    GPU of compute capability ``(major, minor)``: SASS of the same major, the highest minor not
    above the GPU's; else the highest PTX not above the GPU's (compiled by the driver)."""
    major, minor = capability
    fits = [a for a in archs if a.startswith("sm_") and a[3:].isdigit()
            and int(a[3:]) // 10 == major and int(a[3:]) % 10 <= minor]
    ptx = [a for a in archs if a.startswith("compute_") and a[8:].isdigit()
           and int(a[8:]) <= 10 * major + minor]
    return max(fits, key=lambda a: int(a[3:]), default=None) or \
        max(ptx, key=lambda a: int(a[8:]), default=None)


@functools.lru_cache(maxsize=1)
def load_index(folder: str = str(BUILT_DIR)) -> dict:
    """The index of the built kernels in ``folder`` (empty when none ship)."""
    try:
        return json.loads((Path(folder) / INDEX).read_text())
    except (OSError, ValueError):
        return {}


@functools.lru_cache(maxsize=64)
def _digest_now(source: str, text: str, options: tuple) -> str:
    return source_digest(text, options)


def shipped_functions(source: str, text: str, options, expressions, capability, device_id,
                      folder: Path = BUILT_DIR) -> dict:
    """``{expression: function}`` for those of ``expressions`` (of the source ``source``, whose
    text and options are ``text``/``options`` now) that ship built for this GPU; empty when none
    do, or when ``XCORR_SHIPPED_KERNELS=0``."""
    if os.environ.get(ENV, "1") == "0":
        return {}
    entry = load_index(str(folder)).get("sources", {}).get(source)
    if not entry or entry.get("digest") != _digest_now(source, text, tuple(options)):
        return {}
    arch = usable_arch(entry.get("kernels", {}), capability)
    if arch is None:
        return {}
    table = entry["kernels"][arch]
    found = {}
    for expr in expressions:
        hit = table.get(normalized(expr))
        if hit is None:
            continue
        cubin, mangled = hit
        try:
            found[expr] = _module(folder / cubin, device_id).get_function(mangled)
        except Exception:  # noqa: BLE001 - a missing or unloadable cubin (a build cut short, a
            # driver older than the toolkit that built it): NVRTC compiles this one instead
            continue
    return found


def _module(path: Path, device_id):
    key = (str(path), device_id)
    mod = _MODULES.get(key)
    if mod is None:
        if not path.is_file():
            raise FileNotFoundError(path)
        import cupy

        mod = _MODULES[key] = cupy.RawModule(path=str(path))
    return mod


def write_index(folder: Path, sources: dict) -> Path:
    """Write :data:`INDEX` into ``folder`` (through a temporary name): ``sources`` maps a
    source name to ``{"digest": ..., "kernels": {arch: {expression: [cubin, mangled]}}}``."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (INDEX + ".tmp")
    tmp.write_text(json.dumps({"version": 1, "sources": sources}, indent=1, sort_keys=True))
    os.replace(tmp, folder / INDEX)
    load_index.cache_clear()
    return folder / INDEX


def summary(folder: Path = BUILT_DIR) -> tuple:
    """``(kernels, architectures, bytes)`` of the kernels that ship built in ``folder``
    (kernels counted once per architecture; the architectures as :func:`arch_order` sorts)."""
    counts = arch_counts(folder)
    size = sum(p.stat().st_size for pattern in ("*.cubin", "*.fatbin")
               for p in Path(folder).glob(pattern)) if counts else 0
    return sum(counts.values()), arch_order(counts), size


def arch_counts(folder: Path = BUILT_DIR) -> dict:
    """``{architecture: kernels}`` that ship built in ``folder``."""
    counts: dict = {}
    for entry in load_index(str(folder)).get("sources", {}).values():
        for arch, table in entry.get("kernels", {}).items():
            counts[arch] = counts.get(arch, 0) + len(table)
    return counts


def arch_order(archs) -> list:
    """SASS architectures by number, then PTX ones.

    >>> arch_order(["compute_80", "sm_90", "sm_80"])
    ['sm_80', 'sm_90', 'compute_80']
    """
    return sorted(archs, key=lambda a: (a.startswith("compute_"), int(re.sub(r"\D", "", a) or 0)))


def describe(folder: Path = BUILT_DIR) -> list:
    """The lines ``xcorr info`` prints of the kernels that ship built in ``folder`` (empty when
    none do): the kernels per architecture (those of equal counts together) and the list of
    architectures."""
    counts = arch_counts(folder)
    if not counts:
        return []
    _, archs, size = summary(folder)
    groups: dict = {}
    for arch in archs:
        groups.setdefault((arch.startswith("compute_"), counts[arch]), []).append(arch)
    parts = [f"{n} as PTX of {', '.join(a)} (newer GPUs: the driver compiles it at first load)"
             if ptx else f"{n} for {', '.join(a)}"
             for (ptx, n), a in sorted(groups.items(), key=lambda g: (g[0][0], -g[0][1]))]
    return [f"kernels shipped built: {'; '.join(parts)} ({size / 2**20:.1f} MiB; other kernels "
            "and GPUs compile them at first use)",
            f"architectures shipped: {', '.join(archs)}"]
