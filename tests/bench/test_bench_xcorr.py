"""The benchmark's bookkeeping (CPU) and its peers against the float64 reference (GPU)."""

import itertools

import numpy as np
import pytest
import scipy.signal

from xcorr_app.bench import _xcorr as bench
from xcorr_app.correlate import _direct as reference
from xcorr_app.correlate import FORMS, first_shift, form_layout, output_shape

from conftest import rel_error

SHAPE_PAIRS = [((5, 7), (5, 7)), ((9, 4), (3, 6)), ((2, 3), (7, 5)), ((1, 1), (4, 3))]
BOUNDS = [None, 0, 2, (1, 3), (9, 11)]  # (9, 11) is larger than every image


def inputs(rng, form, lshape, rshape, n=3, m=2, dtype=np.float64):
    shapes = {"one_to_one": (lshape, rshape), "one_to_many": (lshape, (m,) + rshape),
              "n_to_mn": ((n,) + lshape, (n, m) + rshape), "n_to_m": ((n,) + lshape, (m,) + rshape)}
    return tuple(rng.standard_normal(s).astype(dtype) for s in shapes[form])


def brute_force_macs(layout, max_shift):
    """Count every (shift, right pixel) whose left pixel exists, one by one."""
    (lh, lw), (rh, rw) = layout.left_shape, layout.right_shape
    ho, wo = output_shape(layout.left_shape, layout.right_shape, max_shift)
    ky0, kx0 = first_shift(layout.left_shape, layout.right_shape, max_shift)
    count = 0
    for ky, kx in itertools.product(range(ky0, ky0 + ho), range(kx0, kx0 + wo)):
        for y, x in itertools.product(range(rh), range(rw)):
            count += 0 <= y + ky < lh and 0 <= x + kx < lw
    return layout.n_results * count


# ------------------------------------------------------------------------------ CPU tests

@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("max_shift", BOUNDS)
def test_macs_equals_brute_force(rng, form, max_shift):
    for _ in range(4):
        lshape = tuple(int(v) for v in rng.integers(1, 8, 2))
        rshape = tuple(int(v) for v in rng.integers(1, 8, 2))
        left, right = inputs(rng, form, lshape, rshape, n=int(rng.integers(1, 4)),
                             m=int(rng.integers(1, 4)))
        lay = form_layout(form, left.shape, right.shape)
        assert bench.macs(lay, max_shift) == brute_force_macs(lay, max_shift)


def test_macs_known_values():
    lay = form_layout("one_to_many", (1024, 1024), (64, 1024, 1024))
    assert bench.macs(lay, 0) == 64 * 1024 * 1024
    assert bench.macs(form_layout("one_to_one", (3, 3), (3, 3)), None) == 81  # (1+2+3+2+1)^2


def test_problems_of_the_issue():
    by_name = {p.name: p for p in bench.PROBLEMS}
    assert len(by_name) == len(bench.PROBLEMS) == 21
    for side in (16, 32, 48, 64, 96, 128):
        assert by_name[f"one_to_one {side}x{side}, full"].shapes() == ((side, side),) * 2
    for m, side in itertools.product((8, 256, 4000), (16, 32, 64)):
        p = by_name[f"one_to_many 1x{m} at {side}x{side}, full"]
        assert p.shapes() == ((side, side), (m, side, side)) and p.max_shift is None
    assert by_name["n_to_m 16x64 at 32x32, full"].shapes() == ((16, 32, 32), (64, 32, 32))
    assert by_name["n_to_m 8x8 at 32x32, full"].layout().batch_shape == (8, 8)
    assert by_name["n_to_mn 4x64 at 32x32, full"].shapes() == ((4, 32, 32), (4, 64, 32, 32))
    for s in (4, 8, 16):
        p = by_name[f"one_to_many 1x64 at 1024x1024, max_shift {s}"]
        assert p.shapes() == ((1024, 1024), (64, 1024, 1024)) and p.max_shift == s
    for p in bench.PROBLEMS + bench.QUICK:
        assert p.layout().form == p.form  # valid shapes for the form
    assert 3 <= len(bench.QUICK) <= 8
    assert all(np.prod(p.shapes()[1]) <= 1 << 20 for p in bench.QUICK)  # small


def test_select():
    assert bench.select(quick=True) == bench.QUICK
    assert [p.name for p in bench.select(only="max_shift 8")] == [
        "one_to_many 1x64 at 1024x1024, max_shift 8"]


def fake_row(name, ours, fft, torch, error=0.0, na_torch=""):
    row = {"problem": name, "plan": "warp_shuffle:rights=4,shifts=1", "macs": 10**9,
           "ms": {"ours": ours, "overlap": 2.0, "cupy_fft": fft, "torch": torch},
           "rel_error": {"ours": error, "overlap": 0.0, "cupy_fft": None, "torch": None},
           "na": {"ours": "", "overlap": "", "cupy_fft": "", "torch": na_torch}}
    return bench.summarise(row, check=True, peak=50e12)


def test_summarise_ratio_and_status():
    row = fake_row("a", ours=0.5, fft=1.0, torch=0.8)
    assert row["peer_ms"] == 0.8 and row["ratio"] == pytest.approx(1.6)
    assert row["peak_share"] == pytest.approx(2e9 / 0.5e-3 / 50e12)
    assert row["status"] == "ok"
    assert fake_row("b", 0.5, 1.0, None, na_torch="OutOfMemoryError: x")["ratio"] == 2.0
    assert fake_row("c", 0.5, 1.0, 1.0, error=2e-3)["status"] == "MISMATCH"
    assert fake_row("d", 0.5, 1.0, 1.0, error=float("nan"))["status"] == "MISMATCH"
    err = fake_row("e", None, 1.0, 1.0, error=None)
    assert err["status"] == "ERROR" and err["ratio"] is None and err["peak_share"] is None


def test_format_table_one_line_per_row():
    rows = [fake_row("one_to_one 16x16, full", 0.01, 0.02, 0.03),
            fake_row("one_to_many 1x64 at 1024x1024, max_shift 8", 5.0, 6.0, None,
                     na_torch="OutOfMemoryError: CUDA | out of memory"),
            fake_row("n_to_m 8x8 at 32x32, full", 0.5, 1.0, 1.0, error=0.5)]
    lines = bench.format_table(rows).splitlines()
    assert len(lines) == len(rows) + 2
    assert lines[0].startswith("| problem |") and set(lines[1]) <= set("|- ")
    ncols = lines[0].count(" | ")
    assert all(line.replace("\\|", "").count(" | ") == ncols for line in lines)
    assert "n/a" in lines[3] and "OutOfMemoryError" in lines[3]
    assert "MISMATCH" in lines[4]
    assert "`warp_shuffle:rights=4,shifts=1`" in lines[2]


def test_explain_lines_top_candidates():
    row = {"plan_source": "measured", "reason": "fastest of 12",
           "candidates": [[f"plan{i}", 1.0 + i] for i in range(12)]}
    lines = bench.explain_lines(row)
    assert "fastest of 12" in lines[0]
    assert len(lines) == 1 + bench.EXPLAIN_TOP + 1 and "4 other" in lines[-1]
    assert "1.00x" in lines[1] and "2.00x" in lines[2]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("lshape,rshape", SHAPE_PAIRS)
@pytest.mark.parametrize("max_shift", BOUNDS)
def test_fft_peer_math_on_numpy(rng, form, lshape, rshape, max_shift):
    """The FFT peer is array-module generic: its crop and alias-free size, checked on NumPy.

    A float32 FFT's rounding scales with the sums of |left| x |right|, not with the result
    (which cancellation can make small: 1 in a few thousand runs exceeded 1e-5 of max |ref|),
    so the error is measured against those sums; a wrong crop or aliasing errs by O(1).
    """
    left, right = inputs(rng, form, lshape, rshape, dtype=np.float32)
    want = reference.xcorr_direct(left, right, form, max_shift)
    scale = np.abs(reference.xcorr_direct(np.abs(left), np.abs(right), form, max_shift)).max()
    got = bench.cupy_fft_peer(left, right, form, max_shift)()
    assert got.dtype == np.float32 and got.shape == want.shape
    err = np.abs(got.astype(np.float64) - want).max() / scale
    assert np.isfinite(got).all() and err <= 1e-5, err


@pytest.mark.parametrize("lshape,rshape", SHAPE_PAIRS)
@pytest.mark.parametrize("max_shift", BOUNDS)
def test_conv_pads_give_the_layout(rng, lshape, rshape, max_shift):
    """Emulate the torch peer: crop/pad the left, then a 'valid' correlation (conv2d)."""
    left, right = rng.standard_normal(lshape), rng.standard_normal(rshape)
    lay = form_layout("one_to_one", lshape, rshape)
    top, bottom, pl, pr = bench.conv_pads(lay, max_shift)
    x = left[:lshape[0] + min(bottom, 0), :lshape[1] + min(pr, 0)]
    x = np.pad(x, ((top, max(bottom, 0)), (pl, max(pr, 0))))
    got = scipy.signal.correlate(x, right, mode="valid")
    want = reference.xcorr_direct(left, right, "one_to_one", max_shift)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-12)


# ------------------------------------------------------------------------------ GPU tests

GPU_SHAPES = [((13, 9), (13, 9)), ((17, 11), (5, 7)), ((5, 7), (17, 11))]


def gpu_peer_check(rng, make_peer, form, lshape, rshape, max_shift):
    import cupy as cp

    left, right = inputs(rng, form, lshape, rshape, n=3, m=5)
    want = reference.xcorr(left, right, form, max_shift)
    fn = make_peer(cp.asarray(left, cp.float32), cp.asarray(right, cp.float32), form, max_shift)
    if fn is None:
        pytest.skip(bench.torch_unavailable_reason())
    got = fn()
    assert isinstance(got, cp.ndarray) and got.dtype == cp.float32
    assert got.shape == want.shape
    assert rel_error(got.get(), want) <= 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("lshape,rshape", GPU_SHAPES)
@pytest.mark.parametrize("max_shift", [None, 3, (2, 9)])
def test_cupy_fft_peer(rng, form, lshape, rshape, max_shift):
    gpu_peer_check(rng, bench.cupy_fft_peer, form, lshape, rshape, max_shift)


@pytest.mark.gpu
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("lshape,rshape", GPU_SHAPES)
@pytest.mark.parametrize("max_shift", [None, 3, (2, 9)])
def test_torch_peer(rng, form, lshape, rshape, max_shift):
    pytest.importorskip("torch")
    gpu_peer_check(rng, bench.torch_peer, form, lshape, rshape, max_shift)


@pytest.mark.gpu
def test_make_inputs_shapes():
    import cupy as cp

    p = bench.problem("n_to_mn", 2, 3, 8)
    left, right = bench.make_inputs(p, seed=1)
    assert left.shape == (2, 8, 8) and right.shape == (2, 3, 8, 8)
    assert left.dtype == right.dtype == cp.float32
    assert bool((bench.make_inputs(p, seed=1)[1] == right).all())


@pytest.mark.gpu
def test_run_small_problems():
    pytest.importorskip("xcorr_app.correlate._planner")
    lines = []
    problems = [bench.problem("one_to_many", 1, 3, 12), bench.problem("n_to_m", 2, 3, 9, 2)]
    rows = bench.run(problems, explain=True, echo=lines.append)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert all(r["ms"]["ours"] > 0 and r["ms"]["cupy_fft"] > 0 for r in rows)
    # the correctness check ran (a measured error against the float64 reference, within the
    # tolerance) and the share of the FP32 peak is a share
    for r in rows:
        errors = [e for e in r["rel_error"].values() if e is not None]
        assert errors and max(errors) <= bench.TOLERANCE, r["rel_error"]
        assert 0 < r["peak_share"] <= 1, r["peak_share"]
    assert "FP32 FMA peak" in lines[0]
    # one line in the main table, one in the pipeline table (a small one-to-many row)
    assert sum(line.startswith("| one_to_many 1x3") for line in lines) == 2
    assert "pipeline" in rows[0] and "pipeline" not in rows[1]
    pipe = rows[0]["pipeline"]
    assert all(pipe["ms"][p] > 0 for p in ("plan", "graph", "cupy_fft")), pipe
    assert max(e for e in pipe["rel_error"].values() if e is not None) <= bench.TOLERANCE


