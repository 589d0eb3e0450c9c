"""The compiled parts of xcorr-app: the launch path of correlation plans
(``xcorr_app/_cuda/_fastlaunch*.c``) and the plans' call (``_plancall.c``); and the CUDA
kernel sources, copied from the top-level ``kernels/`` into the package (``xcorr_app/kernels/``)
when a wheel is built.  The metadata lives in ``pyproject.toml``; setuptools reads both.

An editable install (``pip install -e .``) copies no kernels: the loader reads the checkout's
``kernels/`` (:mod:`xcorr_app._cuda.loader`).

The extensions are optional: ``pip install .`` builds them where a C compiler and Python's
headers exist and goes on without them otherwise (plans then launch and are called from
Python).  They need nothing of CUDA to build (``_fastlaunch`` loads libcuda.so.1 when
imported).  In a source tree, for development and
on the device: ``python3 setup.py build_ext --inplace``.
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.errors import FileError

KERNELS = Path(__file__).resolve().parent / "kernels"

SOURCES = [f"xcorr_app/_cuda/_fastlaunch{part}.c" for part in ("", "_steps", "_graph", "_layout")]

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]


class BuildWithKernels(build_py):
    """``build_py`` that also puts every ``kernels/<family>/*.cu`` and ``kernels/include/*.cuh``
    into the built package's ``kernels/`` folder (the wheel's copy of the sources)."""

    def kernel_files(self) -> list:
        """``[(source, destination)]`` of the kernel sources."""
        found = sorted(p for pattern in ("*/*.cu", "*/*.cuh") for p in KERNELS.glob(pattern))
        if not found:
            raise FileError(f"no CUDA kernel sources in {KERNELS}: build from a checkout or an "
                            "sdist that carries kernels/")
        target = Path(self.build_lib, "xcorr_app", "kernels")
        return [(str(p), str(target / p.relative_to(KERNELS))) for p in found]

    def run(self):
        super().run()
        if not self.editable_mode:
            # a build folder kept from an earlier build must not ship a source since removed
            shutil.rmtree(Path(self.build_lib, "xcorr_app", "kernels"), ignore_errors=True)
            for src, dst in self.kernel_files():
                self.mkpath(str(Path(dst).parent))
                self.copy_file(src, dst)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return outputs + [dst for _, dst in self.kernel_files()]


setup(cmdclass={"build_py": BuildWithKernels},
      ext_modules=[Extension("xcorr_app._cuda._fastlaunch", SOURCES,
                             depends=["xcorr_app/_cuda/_fastlaunch.h"],
                             libraries=["dl"], optional=True, extra_compile_args=FLAGS),
                   Extension("xcorr_app._cuda._plancall", ["xcorr_app/_cuda/_plancall.c"],
                             optional=True, extra_compile_args=FLAGS)])
