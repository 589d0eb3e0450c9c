"""Kernel sources are found, and the compile check reads ptxas reports correctly."""

import ast
import shutil
import textwrap

import pytest

from xcorr_app._cuda import compile_check as compile_check
from xcorr_app._cuda import loader as kernel_loader


def test_sources_found_and_registered():
    names = {p.name for p in kernel_loader.kernel_sources()}
    assert "overlap_xcorr.cu" in names
    for fam in kernel_loader.all_families():
        assert fam.source in names
        assert fam.instantiations


def test_every_module_that_declares_kernels_is_found():
    """The compile check and the shipped cubins see the families of the modules that discovery
    finds: a module declaring one that discovery missed would be checked by nobody."""
    root = kernel_loader.PACKAGE_DIR
    declaring = sorted(
        ".".join(("xcorr_app", *p.relative_to(root).with_suffix("").parts))
        for p in root.rglob("*.py") if p.name != "loader.py" and any(
            isinstance(n, ast.Call) and getattr(n.func, "id", None) == "KernelFamily"
            for n in ast.walk(ast.parse(p.read_text()))))
    assert "xcorr_app.correlate._overlap" in declaring
    assert list(kernel_loader.family_modules()) == declaring


def test_a_new_family_module_is_discovered(tmp_path, monkeypatch):
    """A module that declares a family anywhere in the package is found, with no list to edit;
    a folder without ``__init__.py`` (the built cubins') is not walked."""
    pkg = tmp_path / "xcorr_app"
    (pkg / "newfam").mkdir(parents=True)
    (pkg / "built").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "newfam" / "__init__.py").write_text("")
    (pkg / "newfam" / "_kern.py").write_text('K = KernelFamily("k.cu", "k", [()])\n')
    (pkg / "newfam" / "_other.py").write_text("X = 1\n")
    (pkg / "built" / "_stray.py").write_text('K = KernelFamily("k.cu", "k", [()])\n')
    monkeypatch.setattr(kernel_loader, "PACKAGE_DIR", pkg)
    kernel_loader.family_modules.cache_clear()
    try:
        assert kernel_loader.family_modules() == ("xcorr_app.newfam._kern",)
    finally:
        kernel_loader.family_modules.cache_clear()


def test_kernels_live_in_one_folder_per_family():
    """kernels/<family>/*.cu and kernels/include/*.cuh; source names are unique (families
    name their source by file name)."""
    root = kernel_loader.kernels_dir()
    sources = kernel_loader.kernel_sources()
    assert len({p.name for p in sources}) == len(sources)
    assert kernel_loader.include_dir() == root / "include"
    for p in sources:
        rel = p.relative_to(root)
        assert len(rel.parts) == 2, rel
        assert (rel.parts[0] == "include") == (p.suffix == ".cuh"), rel
    used = {fam.source for fam in kernel_loader.all_families()}
    assert {p.name for p in sources if p.suffix == ".cu"} == used


def test_unregistered_instantiation_refused():
    from xcorr_app.correlate._overlap import OVERLAP

    with pytest.raises(ValueError):
        OVERLAP.get(99)


def test_parse_resource_usage():
    text = textwrap.dedent("""\
        ptxas info    : Function properties for _Z3fooILi1EEvPf
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 20 registers, used 0 barriers, 360 bytes cmem[0]
        ptxas info    : Function properties for _Z3barv
            64 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
        """)
    assert compile_check.parse_resource_usage(text) == {"_Z3fooILi1EEvPf": (0, 0, 0),
                                                        "_Z3barv": (64, 8, 4)}
    # one kernel built for two architectures: its worst figures
    again = text.replace("64 bytes stack frame, 8", "0 bytes stack frame, 16")
    assert compile_check.parse_resource_usage(text + again)["_Z3barv"] == (64, 16, 4)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_check_fails_on_a_stack_frame(tmp_path, capsys):
    """A kernel that indexes a register array at run time gets a stack frame: the check fails."""
    (tmp_path / "bad.cu").write_text(textwrap.dedent("""\
        __global__ void bad(float* out, const int* idx) {
            float a[64];
            for (int k = 0; k < 64; ++k) a[k] = out[k * 7];
            for (int k = 0; k < 64; ++k) a[idx[k] & 63] += 1.0f;
            float s = 0.0f;
            for (int k = 0; k < 64; ++k) s += a[idx[k + 64] & 63];
            out[threadIdx.x] = s;
        }
        """))
    assert compile_check.check(kdir=tmp_path, families=[]) == 1
    assert "bad" in capsys.readouterr().err


def test_a_changed_header_changes_every_source(tmp_path, monkeypatch):
    """CuPy caches compiled kernels by source text: a header's change must reach that text."""
    (tmp_path / "a.cu").write_text('#include "h.cuh"\n')
    (tmp_path / "h.cuh").write_text("#define X 1\n")
    monkeypatch.setenv(kernel_loader.KERNEL_DIR_ENV, str(tmp_path))
    kernel_loader.headers_digest.cache_clear()
    before = kernel_loader.read_source("a.cu")
    (tmp_path / "h.cuh").write_text("#define X 2\n")
    kernel_loader.headers_digest.cache_clear()
    after = kernel_loader.read_source("a.cu")
    kernel_loader.headers_digest.cache_clear()
    assert before.startswith('#include "h.cuh"\n') and before != after
