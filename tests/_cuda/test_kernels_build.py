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


def _declared() -> dict:
    """``{module: {(source file name, kernel name)}}`` of every ``KernelFamily(...)`` call in
    the package's source (read as text: no import)."""
    root = kernel_loader.PACKAGE_DIR
    found = {}
    for p in root.rglob("*.py"):
        if p.name == "loader.py" or "built" in p.parts:
            continue
        tree = ast.parse(p.read_text())
        strings = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                   and isinstance(n.value, ast.Constant) for t in n.targets
                   if isinstance(t, ast.Name)}  # (a source named by a module constant)
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "KernelFamily":
                mod = ".".join(("xcorr_app", *p.relative_to(root).with_suffix("").parts))
                src, name = (a.value if isinstance(a, ast.Constant) else strings.get(a.id, "?")
                             for a in n.args[:2])
                found.setdefault(mod, set()).add((src, name))
    return found


def manifest_problems(manifest, declared, on_disk) -> list:
    """What the kernels' manifest gets wrong against the families the package declares
    (``declared``: :func:`_declared`'s) and the files of ``kernels/`` (``on_disk``: relative
    paths): every source and header listed, each source's modules and kernels exactly the
    declaring ones."""
    problems = []
    listed = set(manifest["families"]) | set(manifest["headers"])
    problems += [f"not in the manifest: {p}" for p in sorted(on_disk - listed)]
    problems += [f"listed but missing: {p}" for p in sorted(listed - on_disk)]
    want = {}
    for mod, fams in declared.items():
        for src, name in fams:
            rel = next((p for p in on_disk if p.endswith("/" + src)), src)
            entry = want.setdefault(rel, {"kernels": set(), "modules": set()})
            entry["kernels"].add(name)
            entry["modules"].add(mod)
    for rel in sorted(set(want) | set(manifest["families"])):
        got = manifest["families"].get(rel, {"kernels": [], "modules": []})
        w = want.get(rel, {"kernels": set(), "modules": set()})
        for key in ("kernels", "modules"):
            if set(got[key]) != w[key]:
                problems.append(f"{rel} {key}: manifest {sorted(got[key])}, code {sorted(w[key])}")
    return problems


def test_the_manifest_lists_every_kernel_and_the_modules_that_declare_it():
    """kernels/manifest.json, read by the loader (the modules it imports), the compile check
    and setup.py (the wheel's files), against the sources on disk and the package's
    ``KernelFamily`` declarations."""
    root = kernel_loader.CHECKOUT_KERNELS
    on_disk = {p.relative_to(root).as_posix() for pattern in ("*/*.cu", "*/*.cuh")
               for p in root.glob(pattern)}
    declared = _declared()
    assert "xcorr_app.correlate._overlap" in declared
    assert manifest_problems(kernel_loader.manifest(), declared, on_disk) == []
    assert list(kernel_loader.family_modules()) == sorted(declared)


def test_the_manifest_check_can_fail():
    good = {"families": {"a/k.cu": {"kernels": ["k"], "modules": ["xcorr_app.a._k"]}},
            "headers": ["include/h.cuh"]}
    declared = {"xcorr_app.a._k": {("k.cu", "k")}}
    disk = {"a/k.cu", "include/h.cuh"}
    assert manifest_problems(good, declared, disk) == []
    assert manifest_problems(good, declared, disk | {"a/new.cu"}) == [
        "not in the manifest: a/new.cu"]
    assert manifest_problems(good, {"xcorr_app.a._k": {("k.cu", "k"), ("k.cu", "k2")}},
                             disk) == ["a/k.cu kernels: manifest ['k'], code ['k', 'k2']"]
    assert manifest_problems(good, {"xcorr_app.b._k": {("k.cu", "k")}}, disk) == [
        "a/k.cu modules: manifest ['xcorr_app.a._k'], code ['xcorr_app.b._k']"]


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
