"""The compiled parts of xcorr-app: the launch path of correlation plans
(``xcorr_app/_cuda/_fastlaunch*.c``, issue 24) and the plans' call (``_plancall.c``).  The
metadata lives in ``pyproject.toml``; setuptools reads both.

The extensions are optional: ``pip install .`` builds them where a C compiler and Python's
headers exist and goes on without them otherwise (plans then launch and are called from
Python).  They need nothing of CUDA to build (``_fastlaunch`` loads libcuda.so.1 when
imported).  In a source tree, for development and
on the device: ``python3 setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

SOURCES = [f"xcorr_app/_cuda/_fastlaunch{part}.c" for part in ("", "_steps", "_graph", "_layout")]

FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(ext_modules=[Extension("xcorr_app._cuda._fastlaunch", SOURCES,
                             depends=["xcorr_app/_cuda/_fastlaunch.h"],
                             libraries=["dl"], optional=True, extra_compile_args=FLAGS),
                   Extension("xcorr_app._cuda._plancall", ["xcorr_app/_cuda/_plancall.c"],
                             optional=True, extra_compile_args=FLAGS)])
