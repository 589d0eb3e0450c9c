"""The one compiled part of xcorr-app: the launch path of correlation plans
(``xcorr_app/_cuda/_fastlaunch*.c``, issue 24).  The metadata lives in ``pyproject.toml``;
setuptools reads both.

The extension is optional: ``pip install .`` builds it where a C compiler and Python's headers
exist and goes on without it otherwise (plans then launch from Python).  It needs nothing of
CUDA to build (it loads libcuda.so.1 when imported).  In a source tree, for development and
on the device: ``python3 setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

SOURCES = [f"xcorr_app/_cuda/_fastlaunch{part}.c" for part in ("", "_steps", "_graph")]

setup(ext_modules=[Extension("xcorr_app._cuda._fastlaunch", SOURCES,
                             depends=["xcorr_app/_cuda/_fastlaunch.h"],
                             libraries=["dl"], optional=True,
                             extra_compile_args=["-O2", "-Wall", "-Wextra",
                                                 "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers"])])
