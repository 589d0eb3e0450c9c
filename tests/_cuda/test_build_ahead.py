"""setup.py's build of the kernels ahead for the local GPU: skipped at once without nvcc or a
GPU, run for the local architecture where they do not ship built for it, one line saying how
where it cannot run."""

import json
import runpy
import subprocess
from pathlib import Path

import pytest
import setuptools

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def setup_py(monkeypatch):
    """setup.py's functions (its setup() call made a no-op)."""
    monkeypatch.setattr(setuptools, "setup", lambda **kw: None)
    build = runpy.run_path(str(ROOT / "setup.py"))["build_kernels_ahead"]
    return build.__globals__


def _index(folder: Path, arch: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.json").write_text(json.dumps(
        {"version": 1, "sources": {"a.cu": {"digest": "x", "kernels": {arch: {}}}}}))


def test_ships_for_the_same_major_and_a_lower_minor(setup_py, tmp_path):
    _index(tmp_path, "sm_80")
    assert setup_py["ships_for"](tmp_path, "sm_86") and setup_py["ships_for"](tmp_path, "sm_80")
    assert not setup_py["ships_for"](tmp_path, "sm_90")
    assert not setup_py["ships_for"](tmp_path / "none", "sm_80")


@pytest.mark.parametrize("nvcc, arch", [(None, "sm_90"), ("/usr/bin/nvcc", None)])
def test_skipped_without_nvcc_or_a_gpu(setup_py, monkeypatch, tmp_path, nvcc, arch):
    monkeypatch.setitem(setup_py, "local_gpu_arch", lambda: arch)
    monkeypatch.setattr(setup_py["shutil"], "which", lambda name: nvcc)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("ran the build"))
    setup_py["build_kernels_ahead"](tmp_path / "built")
    assert not (tmp_path / "built").exists()


def test_builds_for_the_local_gpu_or_says_how(setup_py, monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(setup_py, "local_gpu_arch", lambda: "sm_89")
    monkeypatch.setattr(setup_py["shutil"], "which", lambda name: "/usr/bin/" + name)
    ran = []

    def compile_check(cmd, **kw):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ModuleNotFoundError: No module named x")

    monkeypatch.setattr(subprocess, "run", compile_check)
    setup_py["build_kernels_ahead"](tmp_path / "built")
    assert ran[0][1:] == ["-m", "xcorr_app._cuda.compile_check", "--arch", "sm_89", "--keep",
                          str(tmp_path / "built")]
    err = capsys.readouterr().err.splitlines()
    assert err[-1].endswith("python -m xcorr_app._cuda.compile_check --arch sm_89 --keep")
    assert "No module named x" in err[-1]
    _index(tmp_path / "built", "sm_80")  # ships built for it: nothing to do
    setup_py["build_kernels_ahead"](tmp_path / "built")
    assert len(ran) == 1
    monkeypatch.setenv("XCORR_BUILD_KERNELS", "0")
    setup_py["build_kernels_ahead"](tmp_path / "other")
    assert len(ran) == 1
