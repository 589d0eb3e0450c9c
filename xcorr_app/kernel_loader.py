"""The one loader of CUDA kernels.

CUDA sources live in ``kernels/`` of a source checkout; a wheel ships them as the package
``xcorr_app.kernels``.  :func:`kernel_dir` finds them in that order of preference:
``$XCORR_KERNEL_DIR``, the installed package data, the checkout's ``kernels/``.

Each templated kernel is described once by a :class:`KernelFamily` (source file, kernel name,
the template instantiations the code can launch).  :meth:`KernelFamily.get` compiles one
instantiation through ``cupy.RawModule`` with a name expression and caches the compiled
function per (source, template arguments, device), in the spirit of ``cupyx.scipy.ndimage``.
The same list of instantiations drives the CI compile check (:mod:`xcorr_app.compile_check`),
so exactly what can be launched is checked for spills and stack frames.

Examples
--------
>>> fam = KernelFamily("overlap_xcorr.cu", "overlap_xcorr", [(0,), (1,)])
>>> fam.expression(1)
'overlap_xcorr<1>'
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
from pathlib import Path

KERNEL_DIR_ENV = "XCORR_KERNEL_DIR"
#: modules that define kernel families (imported by :func:`all_families`)
FAMILY_MODULES = ("xcorr_app.gpu_overlap", "xcorr_app.gpu_warp_shuffle", "xcorr_app.gpu_tiled",
                  "xcorr_app.gpu_mma", "xcorr_app.gpu_surface",
                  "xcorr_app.gpu_reuse_conv", "xcorr_app.gpu_conv", "xcorr_app.gpu_winograd")
COMPILE_OPTIONS = ("-std=c++17",)

_FAMILIES: list["KernelFamily"] = []
_COMPILED: dict = {}


def kernel_dir() -> Path:
    """Folder holding the ``*.cu`` sources (installed package data or source checkout)."""
    env = os.environ.get(KERNEL_DIR_ENV)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    for cand in (here / "kernels", here.parent / "kernels"):
        if any(cand.glob("*.cu")):
            return cand
    return here / "kernels"


def kernel_sources() -> list[Path]:
    """Every CUDA source file (``*.cu`` and ``*.cuh``) that was found."""
    d = kernel_dir()
    return sorted([*d.glob("*.cu"), *d.glob("*.cuh")])


def read_source(name: str) -> str:
    path = kernel_dir() / name
    if not path.is_file():
        from .errors import XcorrError

        raise XcorrError(f"CUDA source {name} not found in {kernel_dir()}; reinstall xcorr-app "
                         f"or set {KERNEL_DIR_ENV} to the kernels/ folder")
    return path.read_text() + f"\n// headers {_headers_digest(str(kernel_dir()))}\n"


@functools.lru_cache(maxsize=8)
def _headers_digest(folder: str) -> str:
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
        File name in :func:`kernel_dir`.
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
        _FAMILIES.append(self)

    def expression(self, *args) -> str:
        """The C++ name expression, e.g. ``overlap_xcorr<1, 4>``."""
        if not args:
            return self.name
        return f"{self.name}<{', '.join(_cpp(a) for a in args)}>"

    def expressions(self) -> list[str]:
        return [self.expression(*t) for t in self.instantiations]

    def get(self, *args):
        """The compiled ``cupy.RawKernel``-like function for these template arguments."""
        if tuple(args) not in self.instantiations:
            raise ValueError(f"{self.expression(*args)} is not a registered instantiation")
        import cupy

        key = (self.source, self.name, tuple(args), cupy.cuda.Device().id)
        fn = _COMPILED.get(key)
        if fn is None:
            expr = self.expression(*args)
            mod = cupy.RawModule(code=read_source(self.source),
                                 options=COMPILE_OPTIONS + (f"-I{kernel_dir()}",),
                                 name_expressions=[expr])
            fn = _COMPILED[key] = mod.get_function(expr)
        return fn


def _cpp(a) -> str:
    if isinstance(a, bool):
        return "true" if a else "false"
    return str(a)


def all_families() -> list[KernelFamily]:
    """Every kernel family of the package (imports the modules that define them)."""
    for mod in FAMILY_MODULES:
        importlib.import_module(mod)
    return list(_FAMILIES)
