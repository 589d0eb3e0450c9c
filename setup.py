"""The compiled parts of xcorr-app: the launch path of correlation plans
(``xcorr_app/_cuda/_fastlaunch*.c``) and the plans' call (``_plancall.c``); and the CUDA
kernel sources, copied from the top-level ``kernels/`` into the package (``xcorr_app/kernels/``)
when a wheel is built.  The metadata lives in ``pyproject.toml``; setuptools reads both.

An editable install (``pip install -e .``) copies no kernels: the loader reads the checkout's
``kernels/`` (:mod:`xcorr_app._cuda.loader`).

Where ``nvcc`` and a GPU (``nvidia-smi``) are found, the build also compiles the kernels ahead
for that GPU (``python -m xcorr_app._cuda.compile_check --arch sm_XY --keep``, into the built
package, or the checkout's for an editable install) unless they ship built for it already;
where that cannot run (the package's requirements not installed yet, say) it prints the one
line that does it after the install.  ``XCORR_BUILD_KERNELS=0`` skips it; without nvcc or a
GPU it is skipped at once.  The kernels that CI builds (``.ci/run``) and their other
architectures' files (``built/*.fatbin``) are copied into the wheel here too, and so are the
three small sample stacks and their true shifts (``sample_data/<name>_drift.tif`` and
``<name>_truth.csv``, into ``xcorr_app/sample_data/``: napari's sample data and ``xcorr bench
align --first-runs`` find them there, :mod:`xcorr_app._samples`).

The extensions are optional: ``pip install .`` builds them where a C compiler and Python's
headers exist and goes on without them otherwise (plans then launch and are called from
Python).  They need nothing of CUDA to build (``_fastlaunch`` loads libcuda.so.1 when
imported).  In a source tree, for development and
on the device: ``python3 setup.py build_ext --inplace``.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.errors import FileError

ROOT = Path(__file__).resolve().parent
KERNELS = ROOT / "kernels"
SAMPLE_DATA = ROOT / "sample_data"
#: the samples copied into the wheel (xcorr_app/_samples.py's SAMPLES)
SAMPLES = ("cell", "moon", "hubble")
BUILT = Path("xcorr_app", "_cuda", "built")

SOURCES = [f"xcorr_app/_cuda/_fastlaunch{part}.c" for part in ("", "_steps", "_graph", "_layout")]

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]


class BuildWithKernels(build_py):
    """``build_py`` that also puts the kernel sources and headers that ``kernels/manifest.json``
    lists, and the manifest, into the built package's ``kernels/`` folder (the wheel's copy)."""

    def kernel_files(self) -> list:
        """``[(source, destination)]`` of the kernel sources the manifest lists
        (``kernels/manifest.json``), and the manifest."""
        listed = KERNELS / "manifest.json"
        if not listed.is_file():
            raise FileError(f"no kernels/manifest.json in {ROOT}: build from a checkout or an "
                            "sdist that carries kernels/")
        doc = json.loads(listed.read_text())
        found = [KERNELS / rel for rel in [*doc["families"], *doc["headers"]]] + [listed]
        target = Path(self.build_lib, "xcorr_app", "kernels")
        return [(str(p), str(target / p.relative_to(KERNELS))) for p in sorted(found)]

    def sample_files(self) -> list:
        """``[(source, destination)]`` of the sample stacks and their true shifts."""
        found = [SAMPLE_DATA / f"{name}_{part}" for name in SAMPLES
                 for part in ("drift.tif", "truth.csv")]
        missing = [p.name for p in found if not p.is_file()]
        if missing:
            raise FileError(f"no sample_data/{missing[0]} in {ROOT}: build from a checkout or "
                            "an sdist that carries sample_data/")
        target = Path(self.build_lib, "xcorr_app", "sample_data")
        return [(str(p), str(target / p.name)) for p in found]

    def fatbin_files(self) -> list:
        """``[(source, destination)]`` of the kernels built for several architectures."""
        return [(str(p), str(Path(self.build_lib, BUILT, p.name)))
                for p in sorted((ROOT / BUILT).glob("*.fatbin"))]

    def run(self):
        super().run()
        if not self.editable_mode:
            # a build folder kept from an earlier build must not ship a source since removed
            shutil.rmtree(Path(self.build_lib, "xcorr_app", "kernels"), ignore_errors=True)
            for src, dst in self.kernel_files() + self.fatbin_files() + self.sample_files():
                self.mkpath(str(Path(dst).parent))
                self.copy_file(src, dst)
        build_kernels_ahead(ROOT / BUILT if self.editable_mode else Path(self.build_lib, BUILT))

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return outputs + [dst for _, dst in
                          self.kernel_files() + self.fatbin_files() + self.sample_files()]


def local_gpu_arch():
    """``sm_XY`` of this machine's first GPU (``nvidia-smi``), or None (no GPU, no driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"sm_{out[0].replace('.', '')}" if out and re.fullmatch(r"\d+\.\d", out[0]) else None


def ships_for(folder: Path, arch: str) -> bool:
    """Whether ``folder``'s index lists kernels for ``arch`` or one whose cubins it runs (the
    same major version, a minor no higher)."""
    try:
        sources = json.loads((folder / "index.json").read_text()).get("sources", {})
    except (OSError, ValueError):
        return False
    major, minor = divmod(int(arch[3:]), 10)
    return any(a.startswith("sm_") and divmod(int(a[3:]), 10)[0] == major
               and divmod(int(a[3:]), 10)[1] <= minor
               for e in sources.values() for a in e.get("kernels", {}))


def build_kernels_ahead(target: Path) -> None:
    """Compile the kernels for the local GPU into ``target`` (see the module's docstring)."""
    if os.environ.get("XCORR_BUILD_KERNELS", "1") == "0" or shutil.which("nvcc") is None:
        return
    arch = local_gpu_arch()
    if arch is None or ships_for(target, arch):
        return
    how = f"python -m xcorr_app._cuda.compile_check --arch {arch} --keep"
    if (target / "index.json").is_file():  # (kept: the kernels built for other GPUs)
        print(f"xcorr: the GPU kernels are not built for this GPU ({arch}); after the "
              f"install, build them with: {how}", file=sys.stderr)
        return
    print(f"xcorr: building the GPU kernels ahead for this GPU ({arch}) with nvcc; "
          "XCORR_BUILD_KERNELS=0 skips it", file=sys.stderr)
    # the checkout's package, run by this interpreter with its own packages (not the build's)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    res = subprocess.run([sys.executable, "-m", "xcorr_app._cuda.compile_check", "--arch",
                          arch, "--keep", str(target)], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    if res.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)  # (no half-built index)
        why = (res.stderr.strip().splitlines() or ["the compile check failed"])[-1]
        print(f"xcorr: the GPU kernels were not built ahead ({why}); after the install, build "
              f"them with: {how}", file=sys.stderr)


setup(cmdclass={"build_py": BuildWithKernels},
      ext_modules=[Extension("xcorr_app._cuda._fastlaunch", SOURCES,
                             depends=["xcorr_app/_cuda/_fastlaunch.h"],
                             libraries=["dl"], optional=True, extra_compile_args=FLAGS),
                   Extension("xcorr_app._cuda._plancall", ["xcorr_app/_cuda/_plancall.c"],
                             optional=True, extra_compile_args=FLAGS)])
