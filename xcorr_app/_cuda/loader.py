"""The one loader of CUDA kernels.

The sources live in the repository's top-level ``kernels/``: one folder per kernel family (named
by the subpackage that launches it: ``kernels/correlate/*.cu``, ``kernels/alignment/*.cu``, ...)
and ``kernels/include/`` for the headers several families share.  A wheel carries a copy in
``xcorr_app/kernels/`` (``setup.py`` puts it there); a source checkout and an editable install
read the checkout's ``kernels/``.  ``$XCORR_KERNEL_DIR`` replaces them with another folder, laid
out the same way or flat (every ``*.cu`` and ``*.cuh`` in it), for kernel development.

Each templated kernel is described once by a :class:`KernelFamily` (source file, kernel name,
the template instantiations the code can launch).  :meth:`KernelFamily.get` compiles one
instantiation through ``cupy.RawModule`` with a name expression and caches the compiled
function per (source, template arguments, device), in the spirit of ``cupyx.scipy.ndimage``.
The kernels' one manifest, ``kernels/manifest.json`` (:func:`manifest`), lists every source
with its kernels and the modules that declare their families, and the shared headers: the
loader imports those modules (:func:`family_modules`), the CI compile check
(:mod:`xcorr_app._cuda.compile_check`) checks exactly the instantiations they can launch, and
``setup.py`` copies the listed files into the wheel; ``tests/_cuda/test_kernels_build.py`` holds
it against the sources on disk and the families the package declares.

Examples
--------
>>> fam = KernelFamily("overlap_xcorr.cu", "overlap_xcorr", [(0,), (1,)])
>>> fam.expression(1)
'overlap_xcorr<1>'
>>> source_path("overlap_xcorr.cu").relative_to(kernels_dir().parent).as_posix()
'kernels/correlate/overlap_xcorr.cu'
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
from pathlib import Path

import numpy as np

from .._config import KERNEL_DIR as KERNEL_DIR_ENV
from ..errors import XcorrError
from .shipped import ENV, BUILT_DIR, load_index, shipped_functions, source_digest, usable_arch

PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: the kernel sources a wheel carries (copied from the checkout's ``kernels/`` by ``setup.py``)
INSTALLED_KERNELS = PACKAGE_DIR / "kernels"
#: the kernel sources of a source checkout (and of an editable install of one)
CHECKOUT_KERNELS = PACKAGE_DIR.parent / "kernels"
#: the folder of shared headers inside a kernels folder
INCLUDE = "include"
#: the kernels' manifest, in a kernels folder (:func:`manifest`)
MANIFEST = "manifest.json"
COMPILE_OPTIONS = ("-std=c++17",)
#: the pixel types the frame kernels read as they are (NumPy dtype -> C type); others are
#: converted to float32 first (:func:`kernel_pixels`)
PIXEL_C_TYPES = {np.dtype(np.uint8): "unsigned char", np.dtype(np.uint16): "unsigned short",
                 np.dtype(np.int16): "short", np.dtype(np.float32): "float",
                 np.dtype(np.float64): "double"}

_FAMILIES: list["KernelFamily"] = []
_COMPILED: dict = {}


def kernels_dir() -> Path:
    """The folder the kernel sources are read from: ``$XCORR_KERNEL_DIR``, else the copy an
    installed wheel carries, else the source checkout's ``kernels/``."""
    env = os.environ.get(KERNEL_DIR_ENV)
    if env:
        return Path(env)
    return INSTALLED_KERNELS if INSTALLED_KERNELS.is_dir() else CHECKOUT_KERNELS


def kernel_tree(root) -> tuple:
    """``(source folders, include folder)`` of a kernels folder: its family folders that hold
    ``*.cu`` (and itself where it holds some: a flat folder), and its ``include/`` (itself
    where it has none)."""
    return _kernel_tree(str(root))


@functools.lru_cache(maxsize=8)
def _kernel_tree(root: str) -> tuple:
    """:func:`kernel_tree`, looked for once per process and folder (every compile asks)."""
    top = Path(root)
    found = [top] if any(top.glob("*.cu")) else []
    if top.is_dir():
        found += sorted(d for d in top.iterdir() if d.is_dir() and any(d.glob("*.cu")))
    include = top / INCLUDE
    return tuple(found), include if include.is_dir() else top


def include_dir() -> Path:
    """The folder of the shared ``*.cuh`` headers."""
    return kernel_tree(kernels_dir())[1]


def source_dirs() -> list[Path]:
    """The folders of the ``*.cu`` sources (one per kernel family)."""
    return list(kernel_tree(kernels_dir())[0])


def kernel_sources() -> list[Path]:
    """Every CUDA source file (``*.cu`` and ``*.cuh``) that was found, family by family."""
    found = {p for d in source_dirs() for p in d.glob("*.cu")} | set(include_dir().glob("*.cuh"))
    return sorted(found)


def source_path(name: str) -> Path:
    """The path of the source file ``name`` (a ``*.cu`` of some kernel family)."""
    for d in source_dirs():
        if (d / name).is_file():
            return d / name
    raise XcorrError(f"CUDA source {name} not found under {kernels_dir()}; reinstall xcorr-app "
                     f"or set {KERNEL_DIR_ENV} to a folder of the kernel sources")


def include_options(path: Path) -> tuple:
    """Compiler options that find a source's headers."""
    return (f"-I{include_dir()}", f"-I{path.parent}")


def read_source(name: str) -> str:
    return source_path(name).read_text() + f"\n// headers {headers_digest(str(include_dir()))}\n"


@functools.lru_cache(maxsize=8)
def headers_digest(folder: str) -> str:
    """A digest of the folder's ``*.cuh`` headers, appended to every source: CuPy's compile
    cache keys on the source text and options only, so without it a changed header would
    reuse kernels compiled from the old one."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).glob("*.cuh")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


class KernelFamily:
    """One templated ``__global__`` function and the instantiations the code may launch.

    Parameters
    ----------
    source : str
        File name of a ``*.cu`` in a subpackage's ``cuda/`` folder.
    name : str
        Kernel (template) name.
    instantiations : iterable of tuple
        Template argument tuples the code can launch; :meth:`get` refuses others so that the
        compile check covers everything that runs.
    """

    def __init__(self, source: str, name: str, instantiations):
        self.source = source
        self.name = name
        self.instantiations = [tuple(t) for t in instantiations]
        self._registered = set(self.instantiations)  # the check of every launch, a hash lookup
        _FAMILIES.append(self)

    def expression(self, *args) -> str:
        """The C++ name expression, e.g. ``overlap_xcorr<1, 4>``."""
        if not args:
            return self.name
        return f"{self.name}<{', '.join(_cpp(a) for a in args)}>"

    def expressions(self) -> list[str]:
        return [self.expression(*t) for t in self.instantiations]

    def get(self, *args, together=()):
        """The compiled ``cupy.RawKernel``-like function for these template arguments.

        On its first use on a device it is compiled (or loaded, where it ships built) with the
        ``(family, args)`` requests of ``together`` (kernels of the same source launched with
        it: one NVRTC call for all); later calls are a dictionary lookup.
        """
        if tuple(args) not in self._registered:
            raise ValueError(f"{self.expression(*args)} is not a registered instantiation")
        import cupy

        fn = _COMPILED.get((self.source, self.name, tuple(args), cupy.cuda.Device().id))
        if fn is None:
            request = (self, tuple(args))
            group = [(fam, tuple(a)) for fam, a in together]
            if request not in group:
                group.append(request)
            fn = compile_together(group)[group.index(request)]
        return fn


def compile_together(requests) -> list:
    """The compiled functions of several instantiations of one source, compiled in one NVRTC call
    (those that ship built are loaded from their cubins instead: :mod:`~xcorr_app._cuda.shipped`).

    ``requests`` is a sequence of ``(family, args)`` whose families share a source file; those
    not compiled yet on this device are compiled together (one ``cupy.RawModule`` with all their
    name expressions).  A first run pays NVRTC's fixed cost per compilation (about 0.15-0.3 s,
    mostly the front end), so kernels launched together are cheaper compiled together.
    """
    import cupy

    dev = cupy.cuda.Device().id
    requests = [(fam, tuple(args)) for fam, args in requests]
    missing = []
    for fam, args in requests:
        if args not in fam._registered:
            raise ValueError(f"{fam.expression(*args)} is not a registered instantiation")
        if (fam.source, fam.name, args, dev) not in _COMPILED and (fam, args) not in missing:
            missing.append((fam, args))
    if missing:
        sources = {fam.source for fam, _ in missing}
        if len(sources) != 1:
            raise ValueError(f"compile_together takes one source's kernels, got {sorted(sources)}")
        source = sources.pop()
        exprs = [fam.expression(*args) for fam, args in missing]
        text = read_source(source)
        # built when the package was (shipped.py), else compiled here by NVRTC
        cc = cupy.cuda.Device().compute_capability  # e.g. "90"
        found = shipped_functions(source, text, COMPILE_OPTIONS, exprs,
                                  (int(cc[:-1]), int(cc[-1])), dev)
        rest = [e for e in exprs if e not in found]
        if rest:
            mod = cupy.RawModule(code=text,
                                 options=COMPILE_OPTIONS + include_options(source_path(source)),
                                 name_expressions=rest)
            found |= {e: mod.get_function(e) for e in rest}
        for (fam, args), expr in zip(missing, exprs):
            _COMPILED[(fam.source, fam.name, args, dev)] = found[expr]
    return [_COMPILED[(fam.source, fam.name, args, dev)] for fam, args in requests]


def shipped_kernels_usable(capability) -> bool:
    """Whether every kernel source ships built (:mod:`~xcorr_app._cuda.shipped`) for a GPU of
    compute capability ``(major, minor)``, from the sources as they are now: then a first run
    compiles none of xcorr's own kernels."""
    if os.environ.get(ENV, "1") == "0":
        return False
    entries = load_index(str(BUILT_DIR)).get("sources", {})
    # the sources as files (every one a family's: tests/_cuda/test_kernels_build.py), not the
    # families, whose modules the manifest names and importing them costs a GPU run
    names = {p.name for p in kernel_sources() if p.suffix == ".cu"}
    return bool(names) and all(
        name in entries and usable_arch(entries[name].get("kernels", {}), capability)
        and entries[name].get("digest") == _source_digest_now(name) for name in names)


def shipped_here() -> bool:
    """:func:`shipped_kernels_usable` for the current CUDA device (CuPy's)."""
    import cupy

    cc = cupy.cuda.Device().compute_capability
    return shipped_kernels_usable((int(cc[:-1]), int(cc[-1])))


@functools.lru_cache(maxsize=None)
def _source_digest_now(name: str) -> str:
    """The digest of source ``name`` as :func:`read_source` gives it, read once a process:
    every GPU run asks :func:`shipped_kernels_usable`, and reading and hashing every source
    each time would keep the GPU idle for milliseconds of a warm run."""
    return source_digest(read_source(name), COMPILE_OPTIONS)


def _cpp(a) -> str:
    if isinstance(a, bool):
        return "true" if a else "false"
    return str(a)


def kernel_pixels(frames):
    """``(frames, c_type)``: a CuPy array C-contiguous, its pixels as they are where a frame
    kernel reads their type (:data:`PIXEL_C_TYPES`), else converted to float32."""
    import cupy as cp

    c_type = PIXEL_C_TYPES.get(np.dtype(frames.dtype))
    if c_type is None:
        frames, c_type = frames.astype(cp.float32), "float"
    return cp.ascontiguousarray(frames), c_type


@functools.lru_cache(maxsize=1)
def manifest() -> dict:
    """The kernels' manifest: ``{"families": {source: {"kernels": [...], "modules": [...]}},
    "headers": [...]}``, sources and headers relative to the kernels folder; the wheel's copy,
    else the checkout's (not ``$XCORR_KERNEL_DIR``'s: a development folder of sources)."""
    import json

    folder = INSTALLED_KERNELS if (INSTALLED_KERNELS / MANIFEST).is_file() else CHECKOUT_KERNELS
    return json.loads((folder / MANIFEST).read_text())


@functools.lru_cache(maxsize=1)
def family_modules() -> tuple:
    """The modules of the package that declare kernel families, as the manifest lists them."""
    return tuple(sorted({m for entry in manifest()["families"].values()
                         for m in entry["modules"]}))


def all_families() -> list[KernelFamily]:
    """Every kernel family of the package (imports the modules that declare them)."""
    for mod in family_modules():
        importlib.import_module(mod)
    return list(_FAMILIES)
