"""Kernels that ship built (xcorr_app._cuda.shipped): the index, when it applies, and a built
kernel against the definition."""

import json
import shutil

import numpy as np
import pytest

from xcorr_app._cuda import compile_check, loader, shipped


class FakeModule:
    def __init__(self, path):
        self.path = path

    def get_function(self, mangled):
        return (self.path.name, mangled)


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A folder with an index for the frame statistics' source as the package holds it now."""
    monkeypatch.setattr(shipped, "_module", lambda path, dev: FakeModule(path))
    text = loader.read_source("frame_stats.cu")
    entry = {"digest": shipped.source_digest(text, loader.COMPILE_OPTIONS),
             "kernels": {"sm_90": {"frame_totals<256>": ["a.cubin", "_Z12frame_totalsILi256EEv"]},
                         "sm_80": {"frame_totals<256>": ["b.cubin", "_Z12frame_totalsILi256EEv"]}}}
    shipped.write_index(tmp_path, {"frame_stats.cu": entry})
    yield tmp_path, text
    shipped.load_index.cache_clear()


def lookup(folder, text, capability=(9, 0), source="frame_stats.cu", exprs=("frame_totals<256>",)):
    return shipped.shipped_functions(source, text, loader.COMPILE_OPTIONS, list(exprs),
                                     capability, 0, folder=folder)


def test_a_listed_kernel_is_loaded_for_a_gpu_that_runs_it(index):
    folder, text = index
    assert lookup(folder, text) == {"frame_totals<256>": ("a.cubin", "_Z12frame_totalsILi256EEv")}
    assert lookup(folder, text, (9, 0), exprs=["frame_totals<512>"]) == {}  # not built
    assert lookup(folder, text, (8, 9))["frame_totals<256>"][0] == "b.cubin"  # sm_80 on 8.9
    assert lookup(folder, text, (7, 5)) == {}  # no cubin this GPU can run
    assert lookup(folder, text, (10, 0)) == {}


def test_an_edited_source_or_the_switch_falls_back_to_nvrtc(index, monkeypatch):
    folder, text = index
    assert lookup(folder, text + "\n// edited") == {}
    assert lookup(folder, text, source="peak_math.cu") == {}
    monkeypatch.setenv(shipped.ENV, "0")
    assert lookup(folder, text) == {}


def test_no_index_means_nothing_ships(tmp_path):
    assert shipped.load_index(str(tmp_path)) == {}
    assert lookup(tmp_path, "x") == {}
    (tmp_path / shipped.INDEX).write_text("{not json")
    shipped.load_index.cache_clear()
    assert shipped.load_index(str(tmp_path)) == {}
    shipped.load_index.cache_clear()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_keep_indexes_every_instantiation(tmp_path):
    from xcorr_app.correlate._fft import CONJ_PRODUCT, FFT_CROP, FFT_PAD
    from xcorr_app.filters._separable import SEPARABLE

    families = [CONJ_PRODUCT, FFT_PAD, FFT_CROP]
    assert compile_check.check(families=families + [SEPARABLE], keep=tmp_path,
                               portable=shipped.PORTABLE_CODES) == 0
    index = json.loads((tmp_path / shipped.INDEX).read_text())
    entry = index["sources"]["fft_steps.cu"]
    assert entry["digest"] == shipped.source_digest(loader.read_source("fft_steps.cu"),
                                                    loader.COMPILE_OPTIONS)
    assert sorted(entry["kernels"]) == sorted(shipped.WHEEL_ARCHS)
    table = entry["kernels"]["sm_90"]
    assert set(table) == {shipped.normalized(e) for f in families for e in f.expressions()}
    for cubin, mangled in table.values():
        assert (tmp_path / cubin).is_file() and mangled.startswith("_Z")
    for arch in shipped.PORTABLE_CODES:  # one fatbin of every code, the same kernels
        files = {f for f, _ in entry["kernels"][arch].values()}
        assert len(files) == 1 and files.pop().endswith(".portable.fatbin")
        assert set(entry["kernels"][arch]) == set(table)
    # a filter's source (not the planner's or the pipeline's) ships for sm_90 only
    assert list(index["sources"]["separable_conv.cu"]["kernels"]) == ["sm_90"]
    with pytest.raises(ValueError, match="no kdir"):
        compile_check.check(kdir=tmp_path, keep=tmp_path)
    with pytest.raises(ValueError, match="give keep"):
        compile_check.check(portable=shipped.PORTABLE_CODES)


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_a_shipped_kernel_computes_what_nvrtc_s_does(tmp_path, rng):
    """conj_product loaded from a cubin built by nvcc, against NumPy (outputs poisoned)."""
    import cupy as cp

    from xcorr_app.correlate._fft import CONJ_PRODUCT

    assert compile_check.check(families=[CONJ_PRODUCT], keep=tmp_path) == 0
    cc = cp.cuda.Device().compute_capability
    shipped.load_index.cache_clear()
    fns = shipped.shipped_functions("fft_steps.cu", loader.read_source("fft_steps.cu"),
                                    loader.COMPILE_OPTIONS, ["conj_product<float, unsigned int>"],
                                    (int(cc[:-1]), int(cc[-1])), cp.cuda.Device().id,
                                    folder=tmp_path)
    shipped.load_index.cache_clear()
    if cc[:-1] != "9":
        assert fns == {}
        return
    fn = fns["conj_product<float, unsigned int>"]
    left = (rng.standard_normal((3, 5, 7)) + 1j * rng.standard_normal((3, 5, 7))).astype(np.complex64)
    right = (rng.standard_normal((3, 5, 7)) + 1j * rng.standard_normal((3, 5, 7))).astype(np.complex64)
    out = cp.full(left.shape, np.nan, np.complex64)
    u = np.uint32
    # batch axes (1, 3) of planes of 35: strides (0, 35) for both operands
    fn((1,), (128,), (cp.asarray(left), cp.asarray(right), out, u(3), u(35), u(105),
                      u(0), u(35), u(0), u(35), np.float32(0.25)))
    np.testing.assert_allclose(out.get(), 0.25 * left * np.conj(right), rtol=1e-6, atol=1e-6)


def test_demangling_without_a_demangler_program():
    """A toolkit without cu++filt on a host without binutils (the device machines): libstdc++
    demangles; a name it cannot read stays as it is."""
    got = compile_check._cxa_demangle("_Z15frame_row_statsIhLb1ELi256EEvPKT_PfPdPiii")
    assert got.startswith("void frame_row_stats<unsigned char, true, 256>(")
    assert compile_check._cxa_demangle("im2win_transform") == "im2win_transform"


@pytest.mark.parametrize("expr,mangled", [
    ("frame_row_stats<unsigned char, true, 256>", "_Z15frame_row_statsIhLb1ELi256EEvPKT_PfPdPiii"),
    ("phase_cross_power<float2, float>", "_Z17phase_cross_powerI6float2fEvPKT_xPS1_xT0_"),
    ("pack_rows", "_Z9pack_rowsPKvS0_S0_S0_S0_S0_S0_S0_ixPd"),
    ("im2win_transform", "im2win_transform"),
    ("k<-3, 4>", "_Z1kILin3ELj4EEvPf"),
])
def test_mangled_patterns_find_their_kernel_only(expr, mangled):
    others = ["_Z15frame_row_statsIhLb0ELi256EEvPKT_PfPdPiii",
              "_Z17phase_cross_powerI7double2dEvPKT_xPS1_xT0_",
              "_Z9pack_rowsIiEvPf", "_Z1kILi3ELj4EEvPf", "_Z16im2win_transformIiEvPf"]
    pattern = shipped.mangled_pattern(expr)
    assert pattern.match(mangled)
    assert not any(pattern.match(o) for o in others if o != mangled)


def test_usable_only_when_every_source_ships_for_the_gpu(tmp_path, monkeypatch):
    """shipped_kernels_usable: every kernel source (each a family's: test_kernels_build) listed
    with its current text and a cubin the GPU runs (then a run starts no helper for xcorr's
    own kernels)."""
    names = {fam.source for fam in loader.all_families()}
    entries = {n: {"digest": shipped.source_digest(loader.read_source(n), loader.COMPILE_OPTIONS),
                   "kernels": {"sm_90": {}}} for n in names}
    monkeypatch.setattr(loader, "BUILT_DIR", tmp_path)
    shipped.write_index(tmp_path, entries)
    try:
        assert loader.shipped_kernels_usable((9, 0))
        assert not loader.shipped_kernels_usable((8, 0))
        monkeypatch.setenv(shipped.ENV, "0")
        assert not loader.shipped_kernels_usable((9, 0))
        monkeypatch.delenv(shipped.ENV)
        shipped.write_index(tmp_path, {n: e for n, e in entries.items() if n != "fft_steps.cu"})
        assert not loader.shipped_kernels_usable((9, 0))
    finally:
        shipped.load_index.cache_clear()


def test_summary_counts_the_index(index):
    folder, _ = index
    (folder / "a.cubin").write_bytes(b"x" * 10)
    assert shipped.summary(folder) == (2, ["sm_80", "sm_90"], 10)
    assert shipped.summary(folder / "none") == (0, [], 0)


def test_ptx_serves_newer_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "_module", lambda path, dev: FakeModule(path))
    text = loader.read_source("frame_stats.cu")
    hit = ["p.portable.fatbin", "_Z12frame_totalsILi256EEv"]
    entry = {"digest": shipped.source_digest(text, loader.COMPILE_OPTIONS),
             "kernels": {a: {"frame_totals<256>": hit} for a in ("sm_80", "compute_80")}}
    shipped.write_index(tmp_path, {"frame_stats.cu": entry})
    try:
        for cc in ((8, 6), (10, 0), (12, 0)):  # sm_80's SASS, then the PTX for Blackwell
            assert lookup(tmp_path, text, cc)["frame_totals<256>"][0] == hit[0]
        assert lookup(tmp_path, text, (7, 5)) == {}
    finally:
        shipped.load_index.cache_clear()


def test_info_lists_the_architectures_the_wheel_ships(tmp_path, monkeypatch):
    """The lines of ``xcorr info`` from a wheel's index (every kernel for sm_90, the planner's
    and the pipeline's for the portable codes), and CI's check of them in the built wheel."""
    sources = {"a.cu": {"digest": "x", "kernels": {
        "sm_90": {"k<1>": ["a.0.sm_90.cubin", "_Z1kILi1EEv"],
                  "k<2>": ["a.0.sm_90.cubin", "_Z1kILi2EEv"]},
        **{c: {"k<1>": ["a.1.portable.fatbin", "_Z1kILi1EEv"]} for c in shipped.PORTABLE_CODES}}}}
    shipped.write_index(tmp_path, sources)
    (tmp_path / "a.1.portable.fatbin").write_bytes(b"x" * 2**20)
    try:
        lines = shipped.describe(tmp_path)
    finally:
        shipped.load_index.cache_clear()
    assert lines[0].startswith("kernels shipped built: 2 for sm_90; 1 for sm_80, sm_86, sm_89; "
                               "1 as PTX of compute_80 (newer GPUs")
    assert "(1.0 MiB;" in lines[0]
    assert lines[1] == "architectures shipped: " + ", ".join(shipped.WHEEL_ARCHS)
    assert shipped.describe(tmp_path / "none") == []
    assert sorted(shipped.WHEEL_ARCHS) == sorted(("sm_90",) + shipped.PORTABLE_CODES)
    ci = (loader.PACKAGE_DIR.parent / ".ci" / "run").read_text()
    assert f"--portable {','.join(shipped.PORTABLE_CODES)}" in ci
    assert f'"architectures shipped: {", ".join(shipped.WHEEL_ARCHS)}"' in ci


def test_a_missing_cubin_is_left_to_nvrtc(tmp_path):
    """An index whose cubin is gone (a build cut short) loads nothing: NVRTC compiles instead
    of every launch of the source failing."""
    text = loader.read_source("frame_stats.cu")
    entry = {"digest": shipped.source_digest(text, loader.COMPILE_OPTIONS),
             "kernels": {"sm_90": {"frame_totals<256>": ["gone.cubin", "_Z12frame_totalsILi256EEv"]}}}
    shipped.write_index(tmp_path, {"frame_stats.cu": entry})
    try:
        assert lookup(tmp_path, text) == {}
    finally:
        shipped.load_index.cache_clear()


@pytest.mark.gpu
def test_every_source_compiles_with_nvrtc():
    """Where no cubin ships for the GPU (another architecture, a checkout without nvcc), NVRTC
    compiles the sources, without the host headers nvcc brings (math.h's INFINITY, say): each
    source's families, one instantiation each, in one RawModule."""
    import cupy as cp

    by_source = {}
    for fam in loader.all_families():
        by_source.setdefault(fam.source, []).append(fam.expression(*fam.instantiations[0]))
    for source, exprs in sorted(by_source.items()):
        mod = cp.RawModule(code=loader.read_source(source),
                           options=loader.COMPILE_OPTIONS
                           + loader.include_options(loader.source_path(source)),
                           name_expressions=exprs)
        for expr in exprs:
            assert mod.get_function(expr) is not None, (source, expr)  # (compiles the module)
