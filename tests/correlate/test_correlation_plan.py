"""Correlation plans (``xcorr_app.correlation_plan``): validation, the NumPy plans, the plan
cache of ``cross_correlate`` (CPU); every form, bounded and full, against ``cross_correlate``
and the float64 definition, with poisoned outputs, caller streams, ``many`` and CUDA-graph
replay (GPU)."""


import numpy as np
import pytest

import xcorr_app
from xcorr_app import cross_correlate
from xcorr_app.correlate import CorrelationPlan, FORMS, clear_plan_cache, correlation_plan
from xcorr_app.correlate import _direct as reference  # the definition, in float64
from xcorr_app.correlate import _plan_cache as plan_cache  # the module under test
from xcorr_app.errors import InputError

from conftest import in_threads, rel_error

#: one problem per form, odd, non-square, not powers of two, left and right of other sizes
CASES = [("one_to_one", (13, 11), (9, 7)),
         ("one_to_many", (12, 17), (5, 10, 13)),
         ("n_to_mn", (3, 11, 9), (3, 4, 11, 9)),
         ("n_to_m", (2, 10, 15), (3, 7, 15))]
BOUNDS = [None, 3, (4, 1)]


def inputs(rng, lshape, rshape, xp=np):
    a = rng.standard_normal(lshape).astype(np.float32)
    b = rng.standard_normal(rshape).astype(np.float32)
    return xp.asarray(a), xp.asarray(b)


def definition(a, b, form, bound):
    """The float64 definition of the float32 inputs."""
    a, b = (np.asarray(x, np.float32).astype(np.float64) for x in (a, b))
    return reference.xcorr_direct(a, b, form, bound)


# --------------------------------------------------------------------------- CPU

@pytest.mark.parametrize("args,kwargs,msg", [
    (((8, 8), (8, 8)), {"form": "one_to_all"}, "unknown form"),
    (((8, 8), (2, 8, 8)), {}, "needs a 2-D left and a 2-D right"),
    (((2, 8, 8), (3, 1, 8, 8)), {"form": "n_to_mn"}, "n_to_mn needs right"),
    (((8, 0), (8, 8)), {}, "empty images"),
    (((8, 8), (8, 8)), {"max_shift": -1}, "max_shift must be >= 0"),
    (((8, 8), (8, 8)), {"max_shift": (1, 2, 3)}, "max_shift must be an int or a pair"),
    (((8, 8), (8, 8)), {"dtype": "complex64"}, "real number type"),
    (((8, 8), (8, 8)), {"dtype": "float33"}, "unknown dtype"),
    (((8, 8), (8, 8)), {"device": "tpu"}, "unknown device"),
    (((8, 8), (8, 8)), {"method": "fastest"}, "unknown method"),
    (((8, 8), (8, 8)), {"method": "warp_shuffle", "device": "cpu"}, "is a GPU kernel"),
    ((8, (8, 8)), {}, "left_shape must be a tuple of ints"),
    (((8, 8), ("a", 8)), {}, "right_shape must be a tuple of ints"),
])
def test_plan_validation(args, kwargs, msg):
    with pytest.raises(InputError, match=msg):
        correlation_plan(*args, **{"device": "cpu", **kwargs})


@pytest.mark.parametrize("form,lshape,rshape", CASES)
@pytest.mark.parametrize("bound", BOUNDS)
def test_numpy_plan_equals_cross_correlate(rng, form, lshape, rshape, bound):
    a, b = inputs(rng, lshape, rshape)
    plan = correlation_plan(lshape, rshape, form, bound, device="cpu")
    assert plan.device == "cpu" and plan.device_id is None and not plan.fast
    got = plan(a, b)
    want = cross_correlate(a, b, form, bound, device="cpu")
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == plan.out_shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert rel_error(got, definition(a, b, form, bound)) <= 1e-5
    out = np.full(plan.out_shape, np.nan, np.float32)
    assert plan(a, b, out) is out
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("form,lshape,rshape", CASES)
def test_numpy_many_equals_a_loop(rng, form, lshape, rshape):
    n = 3
    a, b = inputs(rng, (n,) + lshape, (n,) + rshape)
    plan = correlation_plan(lshape, rshape, form, 2, device="cpu")
    want = np.stack([plan(a[i], b[i]) for i in range(n)])
    got = plan.many(a, b)
    assert got.shape == (n,) + plan.out_shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    out = np.full(got.shape, np.nan, np.float32)
    assert plan.many(a, b, out) is out
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)


def test_numpy_plan_call_errors(rng):
    plan = correlation_plan((8, 9), (8, 9), max_shift=1, device="cpu")
    a = np.zeros((8, 9), np.float32)
    with pytest.raises(InputError, match=r"left has shape \(9, 8\); this plan was made for"):
        plan(a.T.copy(), a)
    with pytest.raises(InputError, match="right has dtype float64; this plan was made for "
                                         "float32"):
        plan(a, a.astype(np.float64))
    with pytest.raises(InputError, match="left must be a NumPy array for this cpu plan, "
                                         "got list"):
        plan(a.tolist(), a)
    with pytest.raises(InputError, match=r"out must be a C-contiguous float32 NumPy array "
                                         r"of shape \(3, 3\), got float64 \(3, 3\)"):
        plan(a, a, np.zeros((3, 3)))
    with pytest.raises(InputError, match="many.. takes lefts of shape"):
        plan.many(np.zeros((2, 8, 9), np.float32), np.zeros((3, 8, 9), np.float32))
    with pytest.raises(InputError, match="CUDA graphs need a GPU plan"):
        plan.graph(a, a)


def test_plan_repr_names_its_method():
    plan = correlation_plan((16, 16), (16, 16), max_shift=2, device="cpu", method="fft")
    assert "method=fft" in repr(plan) and "cpu" in repr(plan)
    assert isinstance(plan, CorrelationPlan)
    assert xcorr_app.correlation_plan is correlation_plan
    assert xcorr_app.CorrelationPlan is CorrelationPlan


def test_cross_correlate_reuses_its_plans(rng, monkeypatch):
    clear_plan_cache()
    a, b = inputs(rng, (12, 10), (4, 12, 10))
    first = cross_correlate(a, b, "one_to_many", 2, device="cpu")
    assert plan_cache.cache_size() == 1
    made = []
    real = plan_cache.CorrelationPlan
    monkeypatch.setattr(plan_cache, "CorrelationPlan",
                        lambda *args, **kw: made.append(args) or real(*args, **kw))
    again = cross_correlate(a * 2, b, "one_to_many", 2, device="cpu")
    assert made == [] and plan_cache.cache_size() == 1  # the same problem: the kept plan
    np.testing.assert_allclose(again, 2 * first, rtol=1e-6, atol=1e-5)
    cross_correlate(a, b, "one_to_many", (2, 3), device="cpu")  # another range: another plan
    cross_correlate(a, b, "one_to_many", 2, method="fft", device="cpu")  # another method
    cross_correlate(a.astype(np.float64), b, "one_to_many", 2, device="cpu")  # another dtype
    assert len(made) == 3 and plan_cache.cache_size() == 4
    clear_plan_cache()
    assert plan_cache.cache_size() == 0


def test_plan_cache_drops_the_least_recently_used(rng, monkeypatch):
    monkeypatch.setattr(plan_cache, "PLAN_CACHE_SIZE", 2)
    clear_plan_cache()
    a = np.zeros((6, 6), np.float32)
    for bound in (1, 2, 1, 3):  # 1 used again before 3 comes: 2 is the one dropped
        plan_cache._CALLS.clear()  # (the fast path's table aside: test_fast_path.py)
        cross_correlate(a, a, max_shift=bound, device="cpu")
    keys = [k[5] for k in plan_cache._CACHE]
    assert keys == [(1, 1), (3, 3)]
    clear_plan_cache()


def test_cross_correlate_errors_unchanged_by_the_cache():
    a = np.zeros((8, 8), np.float32)
    for _ in range(2):  # the second call finds the problem's plan kept
        cross_correlate(a, a, max_shift=1, device="cpu")
        with pytest.raises(InputError, match="must hold real numbers"):
            cross_correlate(a.astype(complex), a, max_shift=1, device="cpu")
        with pytest.raises(InputError, match="is a GPU kernel"):
            cross_correlate(a, a, max_shift=1, method="overlap", device="cpu")


# --------------------------------------------------------------------------- GPU

#: a plan of each kind of launch: the planner's, plain stores, a zeroed output with atomic
#: adds, register tiles (zeroed), the overlap baseline and the FFT (no prepared launch), the
#: rearranged right matrices (pair_tiled), the tensor cores
SPECS = ["auto", "warp_per_shift:shared=1", "warp_shuffle:shifts=2",
         "warp_shuffle:distribution=triangle,rows_per_worker=3", "tiled:tile_y=3,tile_x=3",
         "overlap", "fft", "pair_tiled:tile_y=4,tile_x=8,rows_per_chunk=5",
         "mma:tile_y=2,tile_x=16"]
MANY_ONLY = ("pair_tiled", "mma")  # kernels for many right matrices per left


def runs(spec, form):
    return not (spec.startswith(MANY_ONLY) and form == "one_to_one")


def poisoned(cp, shape):
    return cp.full(shape, cp.nan, cp.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("form,lshape,rshape", CASES)
@pytest.mark.parametrize("bound", BOUNDS)
def test_gpu_plan_equals_cross_correlate_and_the_definition(rng, spec, form, lshape, rshape,
                                                            bound):
    import cupy as cp

    if not runs(spec, form):
        with pytest.raises(InputError, match="many right matrices"):
            correlation_plan(lshape, rshape, form, bound, device="gpu", method=spec)
        return
    a, b = inputs(rng, lshape, rshape, cp)
    plan = correlation_plan(lshape, rshape, form, bound, device="gpu", method=spec)
    assert plan.device == "gpu" and plan.device_id == cp.cuda.runtime.getDevice()
    assert plan.fast == (plan.method.method not in ("overlap", "fft"))
    want = definition(a.get(), b.get(), form, bound)
    via_api = cross_correlate(a, b, form, bound, method=plan.method)
    out = poisoned(cp, plan.out_shape)
    assert plan(a, b, out) is out
    got = plan(a, b)  # allocated
    assert got.shape == plan.out_shape and got.dtype == cp.float32
    for result in (out, got):
        assert rel_error(result.get(), want) <= 1e-5, plan
        assert rel_error(result.get(), via_api.get()) <= 1e-6, plan
    # on a caller's stream, without synchronizing (the output poisoned first, on that stream)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        out2 = poisoned(cp, plan.out_shape)
    assert plan(a, b, out2, stream=stream) is out2
    got2 = plan(a, b, stream=stream)
    stream.synchronize()
    assert rel_error(out2.get(), want) <= 1e-5 and rel_error(got2.get(), want) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["auto", "warp_shuffle:distribution=triangle,rows_per_worker=3",
                                  "pair_tiled:tile_y=4,tile_x=8", "overlap", "fft"])
@pytest.mark.parametrize("form,lshape,rshape", CASES)
@pytest.mark.parametrize("bound", [None, (4, 1)])
def test_gpu_graph_replays_on_new_data_in_its_buffers(rng, spec, form, lshape, rshape, bound):
    import cupy as cp

    if not runs(spec, form):
        return
    plan = correlation_plan(lshape, rshape, form, bound, device="gpu", method=spec)
    left, right = inputs(rng, lshape, rshape, cp)
    out = poisoned(cp, plan.out_shape)
    g = plan.graph(left, right, out)
    assert g.left is left and g.right is right and g.out is out
    stream = cp.cuda.Stream(non_blocking=True)
    for step in range(3):
        with stream:
            a, b = inputs(rng, lshape, rshape, cp)  # copied to the GPU on this stream
            left[...] = a  # the documented pattern: new data into the bound buffers
            right[...] = b
            out.fill(cp.nan)
            if step == 1:
                assert g.launch() is out  # the current stream: this one
            else:
                assert g.replay(stream) is out
        stream.synchronize()
        assert rel_error(out.get(), definition(a.get(), b.get(), form, bound)) <= 1e-5, step
    g2 = plan.graph(left, right)  # its own output
    cp.cuda.get_current_stream().synchronize()
    g2.replay()
    cp.cuda.get_current_stream().synchronize()
    assert rel_error(g2.out.get(), definition(left.get(), right.get(), form, bound)) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["auto", "warp_per_shift:shared=1", "tiled:tile_y=3,tile_x=3",
                                  "pair_tiled:tile_y=4,tile_x=8", "fft"])
@pytest.mark.parametrize("form,lshape,rshape", CASES)
@pytest.mark.parametrize("bound", [None, 3])
def test_gpu_many_equals_a_loop(rng, spec, form, lshape, rshape, bound):
    import cupy as cp

    if not runs(spec, form):
        return
    n = 5
    a, b = inputs(rng, (n,) + lshape, (n,) + rshape, cp)
    plan = correlation_plan(lshape, rshape, form, bound, device="gpu", method=spec)
    want = cp.stack([plan(a[i], b[i]) for i in range(n)]).get()
    out = poisoned(cp, (n,) + plan.out_shape)
    assert plan.many(a, b, out) is out
    got = plan.many(a, b)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        out2 = poisoned(cp, (n,) + plan.out_shape)
    plan.many(a, b, out2, stream=stream)
    stream.synchronize()
    for result in (out, got, out2):
        assert result.shape == (n,) + plan.out_shape
        assert rel_error(result.get(), want) <= 5e-6, plan
    ref = np.stack([definition(a[i].get(), b[i].get(), form, bound) for i in range(n)])
    assert rel_error(got.get(), ref) <= 1e-5


@pytest.mark.gpu
def test_gpu_call_errors_say_what_is_wrong(rng):
    import cupy as cp

    plan = correlation_plan((16, 16), (16, 16), max_shift=2, device="gpu",
                            method="warp_per_shift")
    assert plan.fast
    a = cp.zeros((16, 16), cp.float32)
    with pytest.raises(InputError, match=r"right has shape \(16, 15\)"):
        plan(a, a[:, :15].copy())
    with pytest.raises(InputError, match="left has dtype float64"):
        plan(a.astype(cp.float64), a)
    with pytest.raises(InputError, match="must be C-contiguous"):
        plan(a, cp.asfortranarray(cp.arange(256, dtype=cp.float32).reshape(16, 16)))
    with pytest.raises(InputError, match="must be a CuPy array for this gpu plan"):
        plan(a.get(), a)
    with pytest.raises(InputError, match=r"out must be a C-contiguous float32 CuPy array on "
                                         r"GPU \d+ of shape \(5, 5\)"):
        plan(a, a, cp.zeros((5, 6), cp.float32))
    with pytest.raises(InputError, match="stream must be a cupy.cuda.Stream"):
        plan(a, a, stream="default")


@pytest.mark.gpu
def test_gpu_plan_of_another_dtype_converts(rng):
    import cupy as cp

    a = cp.asarray(rng.integers(0, 4000, (14, 12)), cp.uint16)
    b = cp.asarray(rng.integers(0, 4000, (3, 14, 12)), cp.uint16)
    plan = correlation_plan(a.shape, b.shape, "one_to_many", 3, dtype="uint16", device="gpu")
    assert not plan.fast
    got = plan(a, b, poisoned(cp, plan.out_shape))
    assert rel_error(got.get(), definition(a.get(), b.get(), "one_to_many", 3)) <= 1e-5


@pytest.mark.gpu
def test_gpu_cross_correlate_keeps_its_plans(rng):
    import cupy as cp

    clear_plan_cache()
    a, b = inputs(rng, (16, 16), (8, 16, 16), cp)
    first = cross_correlate(a, b, "one_to_many", 3)
    kept = list(plan_cache._CACHE.values())
    out = poisoned(cp, first.shape)
    assert cross_correlate(a, b, "one_to_many", 3, out=out) is out
    assert list(plan_cache._CACHE.values()) == kept and len(kept) == 1
    assert rel_error(out.get(), definition(a.get(), b.get(), "one_to_many", 3)) <= 1e-5
    with pytest.raises(InputError, match="out must be"):
        cross_correlate(a, b, "one_to_many", 3, out=cp.zeros((8, 7, 8), cp.float32))


@pytest.mark.gpu
def test_gpu_plan_from_several_threads(rng):
    import cupy as cp

    plan = correlation_plan((20, 20), (20, 20), device="gpu")
    pairs = [inputs(rng, (20, 20), (20, 20), cp) for _ in range(8)]
    cp.cuda.get_current_stream().synchronize()
    results = [None] * len(pairs)

    def work(i):
        stream = cp.cuda.Stream(non_blocking=True)
        for _ in range(50):
            results[i] = plan(*pairs[i], stream=stream)
        stream.synchronize()

    assert not in_threads(work, len(pairs))
    for (a, b), got in zip(pairs, results):
        assert rel_error(got.get(), definition(a.get(), b.get(), "one_to_one", None)) <= 1e-5


def test_forms_all_covered():
    assert [c[0] for c in CASES] == list(FORMS)


@pytest.mark.gpu
def test_gpu_threads_on_one_default_stream_keep_their_own_workspace(rng):
    """A pair_tiled plan rearranges the right matrices into a workspace first: threads sharing
    the default stream's pointer must not share it (one thread's rearrangement would land
    between another's and its kernel)."""
    import cupy as cp

    plan = correlation_plan((16, 16), (4, 16, 16), "one_to_many", max_shift=2,
                            method="pair_tiled:tile_y=4,tile_x=8")
    pairs = [(rng.random((16, 16), np.float32), rng.random((4, 16, 16), np.float32))
             for _ in range(4)]
    want = [cross_correlate(a, b, "one_to_many", 2, device="cpu") for a, b in pairs]
    gpu = [(cp.asarray(a), cp.asarray(b)) for a, b in pairs]
    outs = [cp.full(plan.out_shape, cp.nan, cp.float32) for _ in pairs]

    def work(i):
        with cp.cuda.Device(plan.device_id):  # (a plan's device current, as documented)
            for _ in range(100):
                plan(*gpu[i], outs[i])  # the default stream, each thread's current one

    assert not in_threads(work, len(pairs))
    cp.cuda.Device().synchronize()
    for out, ref in zip(outs, want):
        assert rel_error(out.get(), ref) <= 1e-5


def test_plans_copy_and_pickle_on_the_cpu():
    """A plan's state includes its base class's members (the compiled base keeps them out of
    ``__dict__``): copies and pickles of a CPU plan compute what it does."""
    import copy
    import pickle

    rng = np.random.default_rng(7)
    a, b = rng.random((5, 7), np.float32), rng.random((5, 7), np.float32)
    plan = correlation_plan((5, 7), (5, 7), "one_to_one", max_shift=2, device="cpu")
    want = plan(a, b)
    for other in (copy.copy(plan), copy.deepcopy(plan), pickle.loads(pickle.dumps(plan))):
        assert type(other) is type(plan) and other.out_shape == plan.out_shape
        np.testing.assert_array_equal(other(a, b), want)
        assert other.fast_call is None and getattr(other, "_direct_call") is None
