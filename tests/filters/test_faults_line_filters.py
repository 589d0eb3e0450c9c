"""1-D filters longer than the 31 taps of the 2-D reuse kernels (up to ``LINE_MAX_TAPS`` = 63):
the passes of gaussians of sigma up to 7.75 (truncate 4), of long boxes, and filters of one row
or one column run on the reuse kernels, not on ``cupyx.scipy.ndimage``, whose first import (cupyx,
its linalg, SciPy) cost a one-shot ``xcorr align`` with the default ``dog:1,4`` prefilter about
half a second.  2-D filters keep the 31-tap limit; longer ones still go to cupyx.

The GPU tests compare with float64 scipy.ndimage: odd, non-square frames smaller than a warp
and larger than a block (128 columns, over 224 rows), several boundary modes; outputs poisoned.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import poisoned, rel_error
from xcorr_app import filters
from xcorr_app.errors import InputError
from xcorr_app.filters import _api
from xcorr_app.filters._reference import correlate_reference
from xcorr_app.filters._reuse import (CAPACITIES, LINE_CAPACITIES, LINE_MAX_TAPS, MAX_TAPS,
                                      REUSE_CORRELATE, capacity)

TOL = 1e-5  # as tests/filters/test_gpu_reuse_conv.py
#: (2, 13, 21): smaller than a warp's 32 columns and than the filters; (2, 263, 301): wider
#: than a block's 128 columns and taller than the 224 rows of sigma 7's column pass
SHAPES = [(2, 13, 21), (2, 263, 301)]
MODES = ("reflect", "constant", "nearest", "mirror", "wrap")


# ---- CPU: the compiled extents and the route (no GPU needed) --------------------------------

def test_one_dimensional_extents_reach_63_taps():
    assert LINE_MAX_TAPS == 63 and MAX_TAPS == 31
    assert LINE_CAPACITIES == (35, 39, 43, 47, 51, 55, 59, 63)
    # a column pass is compiled at every height, a row pass on the next capacity
    assert [capacity(n, exact=True, line=True) for n in (32, 33, 40, 63)] == [32, 33, 40, 63]
    assert [capacity(n, line=True) for n in (3, 13, 32, 33, 35, 36, 57, 63)] == \
        [3, 15, 35, 35, 35, 39, 59, 63]
    # 2-D filters: as before
    assert [capacity(n) for n in (11, 12, 31)] == [11, 15, 31]
    assert capacity(31, exact=True) == 31


@pytest.mark.parametrize("call,words", [
    (lambda: capacity(32), "larger than the 31 taps the GPU kernels hold for a 2-D filter "
                           "(63 for one row or one column)"),
    (lambda: capacity(40, exact=True), "31 taps"),
    (lambda: capacity(64, line=True), "larger than the 63 taps the GPU kernels hold for a 1-D"),
    (lambda: capacity(65, exact=True, line=True), "filter extent 65 is larger than the 63"),
])
def test_an_extent_beyond_the_kernels_says_which_limit(call, words):
    with pytest.raises(InputError, match=re.escape(words)):
        call()


def test_the_instantiations_add_only_one_dimensional_passes():
    """Beyond 31 taps: the column passes (fh, 1) of every height 32..63 and the row passes
    (1, fw) of the 8 line capacities, float32, register loads; no 2-D combination."""
    inst = REUSE_CORRELATE.instantiations
    assert len(inst) == len(set(inst))
    long = [t for t in inst if max(t[1], t[2]) > MAX_TAPS]
    assert sorted(long) == sorted([(0, fh, 1, False, 1, False) for fh in range(32, 64)]
                                  + [(0, 1, fw, False, 1, False) for fw in LINE_CAPACITIES])
    # every extent a launch can ask for is registered (KernelFamily.get refuses others)
    for n in range(1, LINE_MAX_TAPS + 1):
        assert (0, capacity(n, exact=True, line=True), 1, False, 1, False) in inst
        assert (0, 1, capacity(n, line=True), False, 1, False) in inst
    # the 2-D part is unchanged: capacities squared, none beyond 31
    assert {(t[1], t[2]) for t in inst if t[1] > 1 and t[2] > 1} <= \
        {(a, b) for a in CAPACITIES for b in CAPACITIES if a > 1 and b > 1}


class _GpuStandIn:
    """What the filters read of a CuPy float32 stack before they launch (no GPU here)."""
    dtype = np.dtype(np.float32)
    ndim = 3
    shape = (2, 64, 80)

    def __sub__(self, other):
        return self


@pytest.fixture
def routes(monkeypatch):
    """The path each filter call of a (stand-in) CuPy stack takes: the reuse kernels (with the
    1-D tap counts) or cupyx.scipy.ndimage (with the function's name)."""
    taken = []
    monkeypatch.setattr(_api, "checked_stack", lambda s, mode, cval=0.0: s)
    monkeypatch.setattr(_api, "array_module_of", lambda *a: np)
    monkeypatch.setattr(_api, "_separable", lambda st, ty, tx, mode, cval:
                        taken.append(("kernels", len(ty), len(tx))) or st)
    monkeypatch.setattr(_api, "_reuse", lambda st, w, mode, cval, org:
                        taken.append(("kernels",) + np.shape(w)) or st)

    class Cupyx:
        def __getattr__(self, name):
            return lambda st, *a, **k: taken.append(("cupyx", name)) or st

    monkeypatch.setattr(_api, "_ndimage", lambda xp: Cupyx())
    return taken


def test_long_separable_filters_of_a_gpu_stack_go_to_the_kernels(routes):
    s = _GpuStandIn()
    filters.dog(s, 1.0, 4.0)  # the auto prefilter's band-pass: 9 and 33 taps
    filters.gaussian(s, 7.0)  # 57 taps
    filters.gaussian(s, 7.75)  # 63 taps: the longest
    filters.box(s, 40)
    assert routes == [("kernels", 9, 9), ("kernels", 33, 33), ("kernels", 57, 57),
                      ("kernels", 63, 63), ("kernels", 40, 40)]


def test_filters_beyond_the_kernels_still_go_to_cupyx(routes):
    s = _GpuStandIn()
    filters.gaussian(s, 8.0)  # 65 taps
    filters.box(s, 64)
    filters.correlate2d(s, np.ones((33, 3)))  # 2-D: 31 taps at most
    filters.correlate2d(s, np.ones((1, 64)))
    assert routes == [("cupyx", "gaussian_filter"), ("cupyx", "uniform_filter"),
                      ("cupyx", "correlate"), ("cupyx", "correlate")]


def test_a_row_or_column_filter_goes_to_the_kernels(routes):
    s = _GpuStandIn()
    filters.correlate2d(s, np.ones((1, 50)))
    filters.correlate2d(s, np.ones((63, 1)))
    filters.convolve2d(s, np.ones((45, 1)))
    filters.correlate2d(s, np.ones((31, 31)))
    assert routes == [("kernels", 1, 50), ("kernels", 63, 1), ("kernels", 45, 1),
                      ("kernels", 31, 31)]


def test_the_cpu_path_stays_scipys(rng):
    """NumPy in: scipy.ndimage, bit for bit, for the long gaussians too."""
    import scipy.ndimage as ndi

    stack = rng.random((2, 40, 53))
    got = filters.dog(stack, 1.0, 4.0, mode="mirror")
    want = np.stack([ndi.gaussian_filter(f, 1.0, mode="mirror")
                     - ndi.gaussian_filter(f, 4.0, mode="mirror") for f in stack])
    assert np.array_equal(got, want)


# ---- GPU: against float64 scipy.ndimage --------------------------------------------------------

def _stack(rng, shape, dtype):
    if np.dtype(dtype).kind == "u":
        return rng.integers(0, 4000, size=shape).astype(dtype)
    return (rng.standard_normal(shape) + 0.5).astype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("sigma", [4.0, 7.0])
@pytest.mark.parametrize("mode", MODES)
def test_gaussian_on_the_gpu_matches_scipy(rng, mode, sigma):
    import cupy as cp

    for shape in SHAPES:
        for dtype in (np.float32, np.uint16):
            stack = _stack(rng, shape, dtype)
            got = filters.gaussian(cp.asarray(stack), sigma, mode=mode, cval=0.25)
            assert isinstance(got, cp.ndarray) and got.dtype == np.float32
            want = filters.gaussian(stack.astype(np.float64), sigma, mode=mode, cval=0.25)
            err = rel_error(got.get(), want)
            assert err <= TOL, f"sigma {sigma} {mode} {shape} {dtype.__name__}: {err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("sigmas", [(1.0, 4.0), (4.0, 7.0), (2.0, 7.75)])
@pytest.mark.parametrize("mode", MODES)
def test_dog_on_the_gpu_matches_scipy(rng, mode, sigmas):
    import cupy as cp

    for shape in SHAPES:
        stack = _stack(rng, shape, np.float32)
        got = filters.dog(cp.asarray(stack), *sigmas, mode=mode, cval=0.25)
        want = filters.dog(stack.astype(np.float64), *sigmas, mode=mode, cval=0.25)
        err = rel_error(got.get(), want)
        assert err <= TOL, f"dog {sigmas} {mode} {shape}: relative error {err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("size", [32, 40, 63])
def test_long_box_on_the_gpu_matches_scipy(rng, size):
    import cupy as cp

    for shape, mode in zip(SHAPES, ("nearest", "wrap")):
        stack = _stack(rng, shape, np.float32)
        got = filters.box(cp.asarray(stack), size, mode=mode)
        want = filters.box(stack.astype(np.float64), size, mode=mode)
        assert rel_error(got.get(), want) <= TOL, f"box {size} {mode} {shape}"


LINES = [(32, 1), (33, 1), (50, 1), (63, 1), (1, 33), (1, 36), (1, 50), (1, 63)]


@pytest.mark.gpu
@pytest.mark.parametrize("edges", ["reuse", "direct"])
@pytest.mark.parametrize("fshape", LINES, ids=[f"{h}x{w}" for h, w in LINES])
def test_row_and_column_filters_on_the_kernels(rng, fshape, edges):
    """Every kind of line extent (exact column heights, padded row capacities, even ones), both
    edge paths, an origin off the centre, against float64 scipy.ndimage.correlate."""
    import cupy as cp

    from xcorr_app.filters import reuse_correlate

    for k, shape in enumerate(SHAPES + [(1, 70, 97)]):
        mode = MODES[(k + sum(fshape)) % len(MODES)]
        stack = _stack(rng, shape, np.float32)
        w = (rng.standard_normal(fshape) * 0.5 + 0.5).astype(np.float32)
        origin = (0, -(fshape[1] // 2)) if fshape[0] == 1 else ((fshape[0] - 1) // 2, 0)
        for org in ((0, 0), origin):
            out = poisoned(cp, shape)
            reuse_correlate(cp.asarray(stack), w, mode=mode, cval=0.75, origin=org,
                            edges=edges, out=out)
            err = rel_error(out.get(), correlate_reference(stack, w, mode, 0.75, org))
            assert err <= TOL, f"{fshape} {edges} {mode} {shape} origin {org}: {err:.3g}"


@pytest.mark.gpu
def test_nan_outside_a_padded_row_never_reaches_an_output(rng):
    """A row of 33 taps runs on the 35 capacity: the 2 taps past it are never multiplied."""
    import cupy as cp

    from xcorr_app.filters import reuse_correlate

    stack = rng.random((1, 40, 200)).astype(np.float32)
    stack[0, 20, 100] = np.nan
    w = rng.random((1, 33)).astype(np.float32)
    for edges in ("reuse", "direct"):
        got = reuse_correlate(cp.asarray(stack), w, mode="nearest", edges=edges).get()
        want = correlate_reference(stack, w, "nearest")
        assert np.array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        assert rel_error(got[ok], want[ok]) <= TOL


@pytest.mark.gpu
def test_a_gpu_dog_of_sigma_4_imports_no_cupyx():
    """``dog:1,4`` (the auto prefilter) of a CuPy stack loads neither cupyx.scipy.ndimage nor
    cupyx.linalg (``import cupy`` puts a lazy ``cupyx`` in sys.modules: what counts is whether
    it was loaded)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import sys, cupy, numpy as np; from xcorr_app import filters; "
            "s = cupy.asarray(np.random.default_rng(0).random((3, 64, 80), np.float32)); "
            "g = filters.dog(s, 1.0, 4.0); h = filters.gaussian(s, 7.0); "
            "assert g.dtype == np.float32 and g.shape == s.shape and h.shape == s.shape; "
            "assert bool(cupy.isfinite(g).all()) and bool(cupy.isfinite(h).all()); "
            "print(sorted(m for m in ('cupyx.linalg', 'cupyx.scipy.ndimage') "
            "if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
