"""The compiled launch path of correlation plans (``plan.fast_call``) on the GPU: every form,
bounded and full, and every kind of fast launch, bit for bit the Python path's result (the
same plan with ``fast_call = None``) and the float64 definition's, outputs poisoned first; the
same InputError for every bad input, with nothing launched; caller streams; many threads on
one plan; reference counts unchanged over many calls; ``XCORR_FASTLAUNCH=0``; the one-graph
launches, new pointers every call, on the graph's stream, another stream and back.

They need the extension built (``python3 setup.py build_ext --inplace``) and skip, saying
so, without it.  The CPU tests of the extension: ``tests/_cuda/test_fastlaunch.py``.
"""

import os
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest

from xcorr_app.correlate import _direct as reference  # the definition, in float64
from xcorr_app.correlate import correlation_plan
from xcorr_app.errors import InputError

from conftest import in_threads, poisoned, rel_error

#: one problem per form, odd, non-square, left and right of other sizes
CASES = [("one_to_one", (13, 11), (9, 7)),
         ("one_to_many", (12, 17), (5, 10, 13)),
         ("n_to_mn", (3, 11, 9), (3, 4, 11, 9)),
         ("n_to_m", (2, 10, 15), (3, 7, 15))]
BOUNDS = [None, 3, (4, 1)]
#: each kind of fast launch: the planner's, plain stores, a zeroed output with atomic adds,
#: register tiles (zeroed), the rearranged right matrices (pair_tiled), the tensor cores
SPECS = ["auto", "warp_per_shift:shared=1", "warp_shuffle:shifts=2",
         "warp_shuffle:distribution=triangle,rows_per_worker=3", "tiled:tile_y=3,tile_x=3",
         "pair_tiled:tile_y=4,tile_x=8,rows_per_chunk=5", "mma:tile_y=2,tile_x=16"]
MANY_ONLY = ("pair_tiled", "mma")  # kernels for many right matrices per left
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def compiled():
    from xcorr_app._cuda.launch import fastlaunch

    module, why = fastlaunch()
    if module is None:
        pytest.skip(f"compiled launch path of plans: {why}")


def inputs(rng, lshape, rshape, cp):
    return (cp.asarray(rng.standard_normal(lshape).astype(np.float32)),
            cp.asarray(rng.standard_normal(rshape).astype(np.float32)))


def definition(a, b, form, bound):
    return reference.xcorr_direct(a.get().astype(np.float64), b.get().astype(np.float64), form,
                                  bound)


def twins(lshape, rshape, form, bound, spec):
    """A plan with its compiled call (counting its calls) and the same plan without."""
    plan = correlation_plan(lshape, rshape, form, bound, device="gpu", method=spec)
    python = correlation_plan(lshape, rshape, form, bound, device="gpu", method=plan.method)
    python.fast_call = None
    calls = []
    if plan.fast_call is not None:
        compiled_call = plan.fast_call

        def counted(*args):
            got = compiled_call(*args)
            calls.append(got is not NotImplemented)
            return got

        plan.fast_call = counted
    return plan, python, calls


def same_bits(cp, got, want) -> bool:
    return bool((got.view(cp.uint32) == want.view(cp.uint32)).all())


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("form,lshape,rshape", CASES)
@pytest.mark.parametrize("bound", BOUNDS)
def test_gpu_compiled_call_equals_the_python_path_and_the_definition(compiled, rng, spec, form,
                                                                     lshape, rshape, bound):
    import cupy as cp

    if spec.startswith(MANY_ONLY) and form == "one_to_one":
        return  # refused at creation (tests/correlate/test_correlation_plan.py)
    plan, python, calls = twins(lshape, rshape, form, bound, spec)
    assert (plan.fast_call is not None) == plan.fast, plan
    if not plan.fast:  # the planner chose the FFT: nothing compiled
        return
    a, b = inputs(rng, lshape, rshape, cp)
    want = definition(a, b, form, bound)
    out, out_python = poisoned(cp, plan.out_shape), poisoned(cp, plan.out_shape)
    assert plan(a, b, out) is out
    assert python(a, b, out_python) is out_python
    got = plan(a, b)  # allocated
    assert got.shape == plan.out_shape and got.dtype == cp.float32
    assert calls == [True, True]  # both calls went through the compiled path
    # atomic adds (a zeroed output) sum in any order: equal to rounding, else bit for bit
    exact = not plan._launch.zero_first
    for result in (out, got):
        if exact:
            assert same_bits(cp, result, out_python), plan
        else:
            assert rel_error(result.get(), out_python.get()) <= 1e-6, plan
        assert rel_error(result.get(), want) <= 1e-5, plan


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("form,lshape,rshape", CASES)
def test_gpu_compiled_call_with_graph_launches(compiled, rng, spec, form, lshape, rshape):
    import cupy as cp

    if spec.startswith(MANY_ONLY) and form == "one_to_one":
        return
    plan = correlation_plan(lshape, rshape, form, 3, device="gpu", method=spec)
    if not plan.fast:
        return
    python = correlation_plan(lshape, rshape, form, 3, device="gpu", method=plan.method)
    python.fast_call = None
    assert plan.fast_call.graph == (not plan._zero), plan  # a graph unless a memset is first
    exact = not plan._launch.zero_first
    other = cp.cuda.Stream(non_blocking=True)
    for where in (nullcontext(), other, nullcontext()):  # the graph's stream, another, back
        with where:
            jobs = []
            for _ in range(3):  # new arrays each call: the graph's parameters set each time
                a, b = inputs(rng, lshape, rshape, cp)
                out, want = poisoned(cp, plan.out_shape), poisoned(cp, plan.out_shape)
                assert plan(a, b, out) is out
                python(a, b, want)
                jobs.append((a, b, out, want))
            cp.cuda.get_current_stream().synchronize()
        for a, b, out, want in jobs:
            if exact:
                assert same_bits(cp, out, want), plan
            assert rel_error(out.get(), definition(a, b, form, 3)) <= 1e-5, plan
    # two sets of arrays in turn (the graph updated every call), then the same arrays twice
    # with new contents (not updated: the kernel reads the new data)
    (a, b), (c, d) = inputs(rng, lshape, rshape, cp), inputs(rng, lshape, rshape, cp)
    x, y = poisoned(cp, plan.out_shape), poisoned(cp, plan.out_shape)
    for _ in range(2):
        plan(a, b, x)
        plan(c, d, y)
    cp.cuda.get_current_stream().synchronize()
    assert rel_error(x.get(), definition(a, b, form, 3)) <= 1e-5, plan
    assert rel_error(y.get(), definition(c, d, form, 3)) <= 1e-5, plan
    for _ in range(2):
        cp.copyto(a, cp.asarray(rng.standard_normal(lshape).astype(np.float32)))
        plan(a, b, x)
        cp.cuda.get_current_stream().synchronize()
        assert rel_error(x.get(), definition(a, b, form, 3)) <= 1e-5, plan


def bad_calls(cp, plan):
    """(label, left, right, out) of every input a call refuses."""
    ls, rs, os_ = plan.left_shape, plan.right_shape, plan.out_shape
    a, b = cp.zeros(ls, cp.float32), cp.zeros(rs, cp.float32)
    out = poisoned(cp, os_)
    strided = lambda shape: cp.full(shape + (2,), cp.nan, cp.float32)[..., 0]  # noqa: E731
    return [("right shape", a, cp.zeros(rs[:-1] + (rs[-1] - 1,), cp.float32), out),
            ("left 3-D", a[None], b, out),
            ("left float64", a.astype(cp.float64), b, out),
            ("right float16", a, b.astype(cp.float16), out),
            ("right strided", a, strided(rs), out),
            ("left numpy", a.get(), b, out),
            ("right a list", a, b.get().tolist(), out),
            ("out shape", a, b, cp.zeros(os_[:-1] + (os_[-1] + 1,), cp.float32)),
            ("out float64", a, b, cp.full(os_, cp.nan, cp.float64)),  # poisoned: not written
            ("out strided", a, b, strided(os_)),
            ("out numpy", a, b, np.zeros(os_, np.float32))]


PLANS = [("one_to_one", (16, 16), (16, 16), "warp_per_shift"),
         ("one_to_many", (16, 16), (4, 16, 16), "pair_tiled:tile_y=4,tile_x=8"),
         ("one_to_one", (16, 16), (16, 16), "warp_shuffle:shifts=2")]


@pytest.mark.gpu
@pytest.mark.parametrize("form,lshape,rshape,spec", PLANS)
def test_gpu_compiled_call_refuses_what_the_python_path_refuses(compiled, form, lshape, rshape,
                                                               spec):
    import cupy as cp

    plan, python, calls = twins(lshape, rshape, form, 2, spec)
    assert plan.fast_call is not None
    for label, left, right, out in bad_calls(cp, plan):
        with pytest.raises(InputError) as want:
            python(left, right, out)
        with pytest.raises(InputError) as got:
            plan(left, right, out)
        assert str(got.value) == str(want.value), label
        if getattr(out, "shape", None) == plan.out_shape and isinstance(out, cp.ndarray):
            assert bool(cp.isnan(out).all()), f"{label}: launched"
    assert calls and not any(calls)  # each refused in C, then said by the Python path
    if cp.cuda.runtime.getDeviceCount() < 2:
        return
    with cp.cuda.Device(1):
        other = cp.zeros(lshape, cp.float32)
    a, b = cp.zeros(lshape, cp.float32), cp.zeros(rshape, cp.float32)
    for args in [(other, b), (a, b, None)]:
        msgs = []
        for p in (python, plan):
            if len(args) == 3:  # the plan's arrays, another device current
                with cp.cuda.Device(1), pytest.raises(InputError) as exc:
                    p(a, b)
            else:
                with pytest.raises(InputError) as exc:
                    p(*args)
            msgs.append(str(exc.value))
        assert msgs[0] == msgs[1] and "GPU 1" in msgs[0], msgs


@pytest.mark.gpu
def test_gpu_compiled_call_same_array_reshaped_in_place(compiled, rng):
    """The compiled call reads only the shape and contiguity of the array it saw last: an
    array reshaped in place is refused as before, and the same arrays again still work."""
    import cupy as cp

    plan = correlation_plan((12, 20), (12, 20), max_shift=3, device="gpu",
                            method="warp_per_shift:shared=1")
    a, b = inputs(rng, (12, 20), (12, 20), cp)
    out = poisoned(cp, plan.out_shape)
    assert plan(a, b, out) is out
    a.shape = (20, 12)
    with pytest.raises(InputError, match="left has shape"):
        plan(a, b, out)
    a.shape = (12, 20)
    again = poisoned(cp, plan.out_shape)
    assert plan(a, b, again) is again
    assert rel_error(again.get(), definition(a, b, "one_to_one", 3)) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("form,lshape,rshape,spec", PLANS)
def test_gpu_compiled_call_on_caller_streams(compiled, rng, form, lshape, rshape, spec):
    import cupy as cp

    plan, _, calls = twins(lshape, rshape, form, 3, spec)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(3)]
    jobs = []
    for rounds in range(2):
        for stream in streams:  # the current stream a caller's: one workspace each
            with stream:
                a, b = inputs(rng, lshape, rshape, cp)
                out = poisoned(cp, plan.out_shape)
                jobs.append((a, b, plan(a, b, out), plan(a, b)))
    for stream in streams:
        stream.synchronize()
    assert len(calls) == 12 and all(calls)
    for a, b, out, got in jobs:
        want = definition(a, b, form, 3)
        assert rel_error(out.get(), want) <= 1e-5 and rel_error(got.get(), want) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("form,lshape,rshape,spec", PLANS[:2])
def test_gpu_compiled_call_from_many_threads(compiled, rng, form, lshape, rshape, spec):
    import cupy as cp

    plan = correlation_plan(lshape, rshape, form, 3, device="gpu", method=spec)
    assert plan.fast_call is not None
    pairs = [inputs(rng, lshape, rshape, cp) for _ in range(8)]
    outs = [poisoned(cp, plan.out_shape) for _ in pairs]
    cp.cuda.get_current_stream().synchronize()
    def work(i):
        with cp.cuda.Device(plan.device_id), cp.cuda.Stream(non_blocking=True) as stream:
            for _ in range(200):
                plan(*pairs[i], outs[i])
            stream.synchronize()

    errors = in_threads(work, len(pairs))
    assert not errors, errors
    for (a, b), out in zip(pairs, outs):
        assert rel_error(out.get(), definition(a, b, form, 3)) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("form,lshape,rshape,spec", PLANS[:2])
def test_gpu_compiled_call_keeps_reference_counts(compiled, rng, form, lshape, rshape, spec):
    import cupy as cp

    plan = correlation_plan(lshape, rshape, form, 2, device="gpu", method=spec)
    assert plan.fast_call is not None
    a, b = inputs(rng, lshape, rshape, cp)
    out = cp.empty(plan.out_shape, cp.float32)
    bad = cp.zeros(lshape, cp.float64)
    plan(a, b, out)
    objs = [a, b, out, bad, plan.fast_call]
    counts = [sys.getrefcount(x) for x in objs]
    for k in range(10000):
        plan(a, b, out)
        if k % 10 == 0:
            plan(a, b)  # allocated
        if k % 100 == 0:
            try:
                plan(bad, b, out)
            except InputError:
                pass
            cp.cuda.get_current_stream().synchronize()
    cp.cuda.get_current_stream().synchronize()
    assert [sys.getrefcount(x) for x in objs] == counts
    assert rel_error(out.get(), definition(a, b, form, 2)) <= 1e-5


@pytest.mark.gpu
def test_gpu_fastlaunch_variable_turns_it_off(compiled):
    code = ("from xcorr_app import correlation_plan\n"
            "p = correlation_plan((16, 16), (16, 16), max_shift=2, device='gpu', "
            "method='warp_per_shift')\n"
            "print(p.fast, p.fast_call is None)\n")
    for value, want in [("0", "True True"), ("1", "True False")]:
        env = {**os.environ, "XCORR_FASTLAUNCH": value,
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == want.split(), (value, res.stdout)


@pytest.mark.gpu
def test_gpu_compiled_call_reads_cupy_arrays_in_place(compiled):
    """CuPy's arrays are read in place (their layout confirmed on the first one): results as
    the definition; an array reshaped in place, a transposed view, another dtype refused as
    the Python path refuses them, nothing launched (the output stays poisoned)."""
    import cupy as cp

    rng = np.random.default_rng(11)
    plan = correlation_plan((16, 16), (16, 16), "one_to_one", 3, method="warp_per_shift")
    a, b = inputs(rng, (16, 16), (16, 16), cp)
    out = poisoned(cp, plan.out_shape)
    assert plan(a, b, out) is out
    assert plan.fast_call.in_place
    assert rel_error(out.get(), definition(a, b, "one_to_one", 3)) < 1e-5
    a.shape = (8, 32)  # the same array, reshaped in place after the call above
    for left, right in [(a, b), (b.T, a.reshape(16, 16)), (b.astype(cp.float64), b)]:
        out = poisoned(cp, plan.out_shape)
        with pytest.raises(InputError):
            plan(left, right, out)
        assert bool(cp.isnan(out).all())
    a.shape = (16, 16)
    out = poisoned(cp, plan.out_shape)
    assert plan(a, b, out) is out
    assert rel_error(out.get(), definition(a, b, "one_to_one", 3)) < 1e-5
