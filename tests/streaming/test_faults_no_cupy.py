"""Asking for the GPU where CuPy is missing (backend.py, streaming/_gpus.py): one
InputError (a ValueError) that says what to install, from every entry point, never a raw
ModuleNotFoundError.  Simulated here by a CuPy import that fails, whatever this machine has."""

import builtins
import subprocess
import sys

import numpy as np
import pytest

from cli_helpers import ROOT, assert_clean_error
from xcorr_app import align, backend, cross_correlate
from xcorr_app._first_run import probe_gpu
from xcorr_app.errors import InputError
from xcorr_app.streaming import map_chunks, parse_gpus, run_on_gpus


@pytest.fixture
def no_cupy(monkeypatch):
    real = builtins.__import__

    def importing(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ModuleNotFoundError("No module named 'cupy'", name="cupy")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", importing)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    probe_gpu.cache_clear()
    yield
    probe_gpu.cache_clear()


STACK = np.zeros((3, 16, 16), np.float32)


@pytest.mark.parametrize("call", [
    lambda: align(STACK, gpus="0"),
    lambda: align(STACK, gpus=[0, 1]),
    lambda: align(STACK, device="gpu"),
    lambda: cross_correlate(STACK[0], STACK[0], device="gpu"),
    lambda: parse_gpus("all"),
    lambda: run_on_gpus([0], lambda k, stop: None),
    lambda: list(map_chunks(lambda: None, 2, lambda a, f: f, gpus="0")),
    lambda: backend.xp_for("gpu"),
])
def test_the_gpu_without_cupy_is_one_input_error_saying_what_to_install(no_cupy, call):
    with pytest.raises(InputError, match="pip install cupy-cuda12x or cupy-cuda13x") as err:
        call()
    assert isinstance(err.value, ValueError)
    assert "\n" not in str(err.value)


def test_cli_says_what_to_install():
    code = ("import builtins, sys; real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name.split('.')[0] == 'cupy': raise ModuleNotFoundError(name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "from xcorr_app.cli._main import main; sys.argv[0] = 'xcorr'; main()")
    for args in (["--gpus", "0"], ["--device", "gpu"]):
        res = subprocess.run([sys.executable, "-c", code, "align",
                              str(ROOT / "sample_data" / "cell_drift.tif"), "--out",
                              "/nonexistent/never-written", *args],
                             capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert_clean_error(res, "cupy-cuda12x")
        assert res.returncode == 2
