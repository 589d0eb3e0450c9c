"""The compiled launch path of plans (``xcorr_app/_cuda/_fastlaunch*.c``), on the CPU.

The extension is compiled here from its sources with the machine's C compiler and loaded in a
subprocess against a stub ``libcuda.so.1`` (compiled here too) that records every driver call:
the pointers written into each step's parameter buffer, the grid, block, shared memory, stream
and memset; ``NotImplemented`` without an error for every input the Python path refuses; the
driver's errors; the constructor's validation; reference counts unchanged over many calls;
the one-graph launches (parameters set, then the graph launched; another stream or a refused
update launches one by one).
Then the Python side: ``fastlaunch()`` without libcuda or with ``XCORR_FASTLAUNCH=0``, and the
``xcorr info`` line.  The GPU tests are in ``tests/correlate/test_correlation_plan_fastlaunch.py``.
"""

import ctypes.util
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import traceback
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).resolve().parents[2] / "xcorr_app" / "_cuda" / "_fastlaunch.c"
SOURCES = [SOURCE] + [SOURCE.with_name(f"_fastlaunch_{part}.c")
                      for part in ("steps", "graph", "layout")]

#: a libcuda.so.1 of the three functions the extension takes, recording each call
STUB = r"""
#include <stddef.h>
#include <string.h>
typedef struct {
    int kind, had_kernel_params;
    unsigned long long fn, stream, ptr, n, param_size;
    unsigned int grid[3], block[3], shared, value;
    unsigned char params[64];
} Rec;
Rec stub_log[16];
int stub_count, stub_fail_launch, stub_fail_memset, stub_no_context, stub_fail_set;
int stub_nodes, stub_destroyed, stub_capturing, stub_fail_graph_launch;

typedef struct {  /* CUDA_KERNEL_NODE_PARAMS_v2 */
    void *func;
    unsigned int grid[3], block[3], shared;
    void **kernel_params, **extra;
    void *kern, *ctx;
} KNP;

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **kp, void **extra)
{
    void *buf = NULL;
    size_t size = 0;
    if (stub_fail_launch)
        return stub_fail_launch;
    for (int i = 0; extra && extra[i]; i += 2) {
        if (extra[i] == (void *)1) buf = extra[i + 1];
        else if (extra[i] == (void *)2) size = *(size_t *)extra[i + 1];
        else return 1;
    }
    Rec *r = &stub_log[stub_count++ % 16];
    memset(r, 0, sizeof *r);
    r->kind = 1; r->fn = (unsigned long long)f; r->stream = (unsigned long long)stream;
    r->grid[0] = gx; r->grid[1] = gy; r->grid[2] = gz;
    r->block[0] = bx; r->block[1] = by; r->block[2] = bz;
    r->shared = shared; r->had_kernel_params = kp != NULL; r->param_size = size;
    if (buf) memcpy(r->params, buf, size < 64 ? size : 64);
    return 0;
}

static Rec *record_node(int kind, unsigned long long id, const KNP *p)
{
    void *buf = NULL;
    size_t size = 0;
    for (int i = 0; p->extra && p->extra[i]; i += 2) {
        if (p->extra[i] == (void *)1) buf = p->extra[i + 1];
        else if (p->extra[i] == (void *)2) size = *(size_t *)p->extra[i + 1];
    }
    Rec *r = &stub_log[stub_count++ % 16];
    memset(r, 0, sizeof *r);
    r->kind = kind; r->fn = id; r->ptr = (unsigned long long)p->func;
    memcpy(r->grid, p->grid, sizeof r->grid); memcpy(r->block, p->block, sizeof r->block);
    r->shared = p->shared; r->had_kernel_params = p->kernel_params != NULL;
    r->param_size = size;
    if (buf) memcpy(r->params, buf, size < 64 ? size : 64);
    return r;
}

int cuGraphCreate(void **g, unsigned flags) { *g = (void *)0x6A; return 0; }

/* CUDA 12's drivers have the _v2 entry points, which the extension takes first */
int cuGraphAddKernelNode_v2(void **node, void *g, void *const *deps, size_t n, const KNP *p)
{
    *node = (void *)(unsigned long long)(0x100 + stub_nodes++);
    Rec *r = record_node(5, (unsigned long long)*node, p);
    r->n = n;
    r->stream = n ? (unsigned long long)deps[0] : 0;  /* the node it follows */
    return 0;
}

int cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long f)
{
    *e = (void *)0xE0;
    return 0;
}

int cuGraphExecKernelNodeSetParams_v2(void *e, void *node, const KNP *p)
{
    if (stub_fail_set)
        return stub_fail_set;
    record_node(3, (unsigned long long)node, p);
    return 0;
}

int cuGraphLaunch(void *e, void *stream)
{
    if (stub_fail_graph_launch)
        return stub_fail_graph_launch;
    Rec *r = &stub_log[stub_count++ % 16];
    memset(r, 0, sizeof *r);
    r->kind = 4; r->fn = (unsigned long long)e; r->stream = (unsigned long long)stream;
    return 0;
}

int cuGraphExecDestroy(void *e) { stub_destroyed++; return 0; }
int cuStreamIsCapturing(void *stream, int *status) { *status = stub_capturing; return 0; }
int cuGraphDestroy(void *g) { stub_destroyed++; return 0; }

int cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void *stream)
{
    if (stub_fail_memset)
        return stub_fail_memset;
    Rec *r = &stub_log[stub_count++ % 16];
    memset(r, 0, sizeof *r);
    r->kind = 2; r->ptr = p; r->value = v; r->n = n; r->stream = (unsigned long long)stream;
    return 0;
}

int cuCtxGetCurrent(void **ctx)
{
    *ctx = stub_no_context ? NULL : (void *)0xC0;
    return 0;
}

int cuGetErrorName(int rc, const char **name)
{
    *name = rc == 700 ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
"""

F32 = np.dtype(np.float32)
LEFT, RIGHT, OUT, WS = 0x1000, 0x2000, 0x3000, 0x4000


# --------------------------------------------------------------------------- in the subprocess

class Rec(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("had_kernel_params", ctypes.c_int),
                ("fn", ctypes.c_ulonglong), ("stream", ctypes.c_ulonglong),
                ("ptr", ctypes.c_ulonglong), ("n", ctypes.c_ulonglong),
                ("param_size", ctypes.c_ulonglong), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint), ("value", ctypes.c_uint),
                ("params", ctypes.c_ubyte * 64)]


class Data:
    def __init__(self, ptr, device_id=0):
        self.ptr, self.device_id = ptr, device_id


class FakeArray:
    """What the C checks read of a cupy.ndarray."""

    def __init__(self, shape, ptr, dtype=F32, contiguous=True, device=0):
        self.shape, self.dtype, self._c_contiguous = shape, dtype, contiguous
        self.data = Data(ptr, device)


class SubArray(FakeArray):
    pass


class Raising(FakeArray):
    def __getattribute__(self, name):
        if name == "shape":
            raise KeyError("no shape today")
        return super().__getattribute__(name)


class Stub:
    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1")  # the one the extension loaded
        self.count = ctypes.c_int.in_dll(lib, "stub_count")
        self.fail_launch = ctypes.c_int.in_dll(lib, "stub_fail_launch")
        self.fail_memset = ctypes.c_int.in_dll(lib, "stub_fail_memset")
        self.no_context = ctypes.c_int.in_dll(lib, "stub_no_context")
        self.fail_set = ctypes.c_int.in_dll(lib, "stub_fail_set")
        self.destroyed = ctypes.c_int.in_dll(lib, "stub_destroyed")
        self.capturing = ctypes.c_int.in_dll(lib, "stub_capturing")
        self.fail_graph_launch = ctypes.c_int.in_dll(lib, "stub_fail_graph_launch")
        self.log = (Rec * 16).in_dll(lib, "stub_log")

    def since(self, start):
        return [self.log[i % 16] for i in range(start, self.count.value)]


def params(rec, n):
    return list(np.frombuffer(bytes(rec.params[:8 * n]), np.uint64))


def buffer(nbytes=32, int_at=None):
    buf = np.zeros(nbytes // 8, np.uint64)
    if int_at is not None:
        buf.view(np.int32)[int_at // 4] = 7
    return buf


def arrays(shape=(4, 5), out_shape=(3, 3)):
    return FakeArray(shape, LEFT), FakeArray(shape, RIGHT), FakeArray(out_shape, OUT)


def simple(mod, steps=None, **kw):
    steps = steps if steps is not None else [
        ("memset", 124), ("launch", 0xABC, (2, 1, 1), (32, 4, 1), 100, buffer(32, 24), 28,
                          (0, 1, 2))]
    args = dict(ndarray_type=FakeArray, left_shape=(4, 5), right_shape=(4, 5),
                out_shape=(3, 3), dtype=F32, device_id=0, steps=steps)
    args.update(kw)
    return mod.FastCall(**args)


def check_launch_and_memset(mod, stub):
    buf = buffer(32, 24)
    fc = simple(mod, [("memset", 124), ("launch", 0xABC, (2, 1, 1), (32, 4, 1), 100, buf, 28,
                                        (0, 1, 2))])
    assert fc.nsteps == 2 and not fc.needs_workspace and "(4, 5)" in repr(fc)
    left, right, out = arrays()
    start = stub.count.value
    assert fc(left, right, out, 0x77) is out
    assert not fc.in_place  # a stand-in type: not CuPy's layout, read through its attributes
    mem, launch = stub.since(start)
    assert (mem.kind, mem.ptr, mem.value, mem.n, mem.stream) == (2, OUT, 0, 124, 0x77)
    assert (launch.kind, launch.fn, launch.stream, launch.shared) == (1, 0xABC, 0x77, 100)
    assert list(launch.grid) == [2, 1, 1] and list(launch.block) == [32, 4, 1]
    assert launch.param_size == 28 and not launch.had_kernel_params
    assert params(launch, 3) == [LEFT, RIGHT, OUT]
    assert bytes(launch.params[24:28]) == np.int32(7).tobytes()  # the constants stay
    assert not buf[:3].any()  # the buffer given is only read: each call writes its own copy
    sub = SubArray((4, 5), 0x5000)  # a subclass is an ndarray too (isinstance)
    assert fc(sub, right, out, 0) is out
    assert params(stub.since(start)[-1], 1) == [0x5000]


def check_arrange_with_workspace(mod, stub):
    fc = simple(mod, [("launch", 0x1, (1, 1, 1), (64, 1, 1), 0, buffer(16), 16, (1, 3)),
                      ("launch", 0x2, (3, 2, 1), (32, 1, 1), 0, buffer(32), 24, [0, 3, 2])])
    assert fc.needs_workspace
    left, right, out = arrays()
    start = stub.count.value
    assert fc(left, right, out, 0, WS) is out
    arrange, kernel = stub.since(start)
    assert arrange.fn == 1 and params(arrange, 2) == [RIGHT, WS]
    assert kernel.fn == 2 and params(kernel, 3) == [LEFT, WS, OUT]
    for bad in [(left, right, out, 0), (left, right, out, 0, "ws")]:
        try:
            fc(*bad)
        except TypeError:
            continue
        raise AssertionError(f"{bad!r} accepted")
    assert stub.count.value == start + 2


def check_bad_inputs_not_implemented(mod, stub):
    fc = simple(mod)
    left, right, out = arrays()
    bad = {"numpy array": np.zeros((4, 5), np.float32), "None": None,
           "shape": FakeArray((4, 6), LEFT), "3-D shape": FakeArray((1, 4, 5), LEFT),
           "list shape": FakeArray([4, 5], LEFT), "float64": FakeArray((4, 5), LEFT, np.float64),
           "not contiguous": FakeArray((4, 5), LEFT, contiguous=False),
           "other device": FakeArray((4, 5), LEFT, device=1),
           "raising attribute": Raising((4, 5), LEFT), "pointer not an int":
           FakeArray((4, 5), "0x1000")}
    start = stub.count.value
    for name, a in bad.items():
        for args in [(a, right, out), (left, a, out)]:
            assert fc(*args, 0) is NotImplemented, name
            assert sys.exc_info() == (None, None, None), name
    for name, o in [("out shape", FakeArray((3, 4), OUT)), ("out numpy", np.zeros((3, 3))),
                    ("out float64", FakeArray((3, 3), OUT, np.float64)),
                    ("out not contiguous", FakeArray((3, 3), OUT, contiguous=False))]:
        assert fc(left, right, o, 0) is NotImplemented, name
    stub.no_context.value = 1  # a thread without a CUDA context: the Python path's
    try:
        assert fc(left, right, out, 0) is NotImplemented
    finally:
        stub.no_context.value = 0
    assert stub.count.value == start  # nothing launched
    # an equal dtype that is not the same object passes
    named = simple(mod, dtype="".join(["float", "32"]))
    strs = [FakeArray((4, 5), LEFT, "float32"), FakeArray((4, 5), RIGHT, "float32"),
            FakeArray((3, 3), OUT, "float32")]
    assert named(*strs, 0) is strs[2]


def check_same_array_again(mod, stub):
    """The same live array again: only its shape and contiguity read (they may change in
    place); a new array is checked in full; a dead one's successor is not taken for it."""
    fc = simple(mod, [("launch", 0xABC, (1, 1, 1), (32, 1, 1), 0, buffer(32), 28, (0, 1, 2))])
    left, right, out = arrays()
    start = stub.count.value
    assert fc(left, right, out, 0) is out
    left.dtype = np.float64  # what a CuPy array cannot do: not read again for the same array
    assert fc(left, right, out, 0) is out
    left.shape = (5, 4)  # reshaped in place: refused
    assert fc(left, right, out, 0) is NotImplemented
    left.shape = (4, 5)
    left._c_contiguous = False
    assert fc(left, right, out, 0) is NotImplemented
    other = FakeArray((4, 5), 0x7000, np.float64)  # a new array: checked in full
    assert fc(other, right, out, 0) is NotImplemented
    del left
    fresh = FakeArray((4, 5), 0x7100)
    assert fc(fresh, right, out, 0) is out
    launches = stub.since(start)
    assert [params(r, 1)[0] for r in launches] == [LEFT, LEFT, 0x7100]


def check_driver_errors(mod, stub):
    fc = simple(mod)
    left, right, out = arrays()
    start = stub.count.value
    for flag, code, text in [(stub.fail_launch, 700, "cuLaunchKernel failed: "
                                                     "CUDA_ERROR_ILLEGAL_ADDRESS (CUresult 700)"),
                             (stub.fail_memset, 1, "cuMemsetD8Async failed: CUDA_ERROR_UNKNOWN "
                                                   "(CUresult 1)")]:
        flag.value = code
        try:
            fc(left, right, out, 0)
        except RuntimeError as exc:
            assert str(exc) == text, exc
        else:
            raise AssertionError("no error")
        finally:
            flag.value = 0
    assert [r.kind for r in stub.since(start)] == [2]  # the memset before the failed launch


def check_refcounts_unchanged(mod, stub):
    buf = buffer(32, 24)
    shapes, dtype = ((4, 5), (4, 5), (3, 3)), np.dtype(np.float32)
    left, right, out = arrays()
    stream = int("123456789012345")  # a big int (not cached), made once
    bad = FakeArray((4, 6), LEFT)
    before_build = [sys.getrefcount(x) for x in (buf, dtype) + shapes]
    fc = mod.FastCall(FakeArray, *shapes, dtype, 0,
                      [("memset", 8), ("launch", 0xABC, (1, 1, 1), (1, 1, 1), 0, buf, 28,
                        (0, 1, 2))])
    objs = [left, right, out, stream, bad, fc, left.shape, left.data, left.data.ptr]
    counts = [sys.getrefcount(x) for x in objs]
    for _ in range(10000):
        fc(left, right, out, stream)
        fc(bad, right, out, stream)
        fc(left, right, bad, stream)
    stub.fail_launch.value = 700
    for _ in range(1000):
        try:
            fc(left, right, out, stream)
        except RuntimeError:
            pass
    stub.fail_launch.value = 0
    assert [sys.getrefcount(x) for x in objs] == counts
    del fc, objs, counts
    after = [sys.getrefcount(x) for x in (buf, dtype) + shapes]
    assert after == before_build, (after, before_build)


def check_constructor_validation(mod, stub):
    ok = ("launch", 0xABC, (1, 1, 1), (32, 1, 1), 0, buffer(32), 28, (0, 1, 2))

    def launch(**change):
        fields = dict(zip(["kind", "fn", "grid", "block", "shared", "buf", "size", "slots"], ok))
        fields.update(change)
        return tuple(fields.values())

    cases = [
        (dict(ndarray_type="ndarray"), TypeError, "must be type"),
        (dict(left_shape=[4, 5]), TypeError, "must be tuple"),
        (dict(device_id=-1), ValueError, "device_id must be >= 0"),
        (dict(steps=[]), ValueError, "steps must be 1 to 4 steps"),
        (dict(steps=[("memset", 8)] * 5), ValueError, "steps must be 1 to 4 steps"),
        (dict(steps=5), TypeError, "steps must be a sequence"),
        (dict(steps=[5]), TypeError, "step 0 must be a tuple"),
        (dict(steps=[("memset", 8), ("copy", 1)]), TypeError, "step 1 must be ('memset'"),
        (dict(steps=[("memset",)]), TypeError, "('memset', nbytes)"),
        (dict(steps=[("memset", -1)]), OverflowError, ""),
        (dict(steps=[ok[:-1]]), TypeError, "step 0 must be"),
        (dict(steps=[launch(fn=0)]), ValueError, "the function pointer is 0"),
        (dict(steps=[launch(grid=(1, 1))]), ValueError, "grid must be a tuple of 3"),
        (dict(steps=[launch(block=(0, 1, 1))]), ValueError, "block must be a tuple of 3"),
        (dict(steps=[launch(block=5)]), TypeError, "block must be a tuple of 3"),
        (dict(steps=[launch(shared=2**40)]), ValueError, "shared_mem too large"),
        (dict(steps=[launch(slots=(0, 4))]), ValueError, "slot role 4 is not"),
        (dict(steps=[launch(slots=())]), ValueError, "1 to 8 pointer slots"),
        (dict(steps=[launch(buf=bytes(32))]), BufferError, ""),
        (dict(steps=[launch(size=40)]), ValueError, "param_size 40 must hold"),
        (dict(steps=[launch(size=16)]), ValueError, "param_size 16 must hold the 3 pointers"),
        (dict(steps=[launch(buf=buffer(8192), size=8192)]), ValueError, "be at most 4096"),
    ]
    for change, kind, text in cases:
        try:
            simple(mod, **change)
        except kind as exc:
            assert text in str(exc), (change, exc)
        else:
            raise AssertionError(f"{change} accepted")
    buf = buffer(32)  # a failed construction lets go of the buffers it took
    count = sys.getrefcount(buf)
    for _ in range(100):
        try:
            simple(mod, steps=[launch(buf=buf), launch(buf=buf, size=99)])
        except ValueError:
            pass
    assert sys.getrefcount(buf) == count
    fc = simple(mod)
    for args, kwargs in [((1, 2, 3), {}), ((1, 2, 3, 4, 5, 6), {}), ((1, 2, 3), {"s": 4})]:
        try:
            fc(*args, **kwargs)
        except TypeError as exc:
            assert "positionally" in str(exc)
        else:
            raise AssertionError(args)
    left, right, out = arrays()
    for extra in [(0, 5), ("stream",)]:
        try:
            fc(left, right, out, *extra)
        except TypeError:
            pass
        else:
            raise AssertionError(extra)


def check_compiled_call_from_prepared_launches(mod, stub):
    """launch.compiled_call and PreparedLaunch.fast_step, CuPy replaced by a stand-in."""
    import types

    cuda = types.SimpleNamespace(get_current_stream=None,
                                 driver=types.SimpleNamespace(launchKernel=print))
    sys.modules["cupy"] = types.SimpleNamespace(cuda=cuda)
    from xcorr_app._cuda import launch

    launch.fastlaunch = lambda: (mod, "available")  # the extension built by the test

    def fn(ptr):
        return types.SimpleNamespace(max_dynamic_shared_size_bytes=0,
                                     kernel=types.SimpleNamespace(ptr=ptr))

    # NumPy integers in the grid, as the configure functions give them: made Python ints
    kernel = launch.PreparedLaunch(fn(0xF00), (np.int64(3), np.int32(2)), (np.int64(128),), 3,
                                   (np.int32(9),), np.int64(64))
    arrange = launch.PreparedLaunch(fn(0xA00), (5,), (64,), 2)
    fc = launch.compiled_call(FakeArray, ([4, 5], (4, 5), (3, np.int64(3))), np.int64(0), 36,
                              kernel, arrange)
    left, right, out = arrays()
    start = stub.count.value
    assert fc.needs_workspace and fc(left, right, out, 9, WS) is out
    mem, arr, ker = stub.since(start)
    assert (mem.kind, mem.ptr, mem.n, mem.stream) == (2, OUT, 36, 9)
    assert arr.fn == 0xA00 and params(arr, 2) == [RIGHT, WS] and list(arr.grid) == [5, 1, 1]
    assert ker.fn == 0xF00 and params(ker, 3) == [LEFT, WS, OUT] and ker.param_size == 28
    assert list(ker.grid) == [3, 2, 1] and list(ker.block) == [128, 1, 1] and ker.shared == 64
    assert bytes(ker.params[24:28]) == np.int32(9).tobytes()
    assert not kernel._buf[:3].any()  # the compiled call writes a copy of its own
    plain = launch.compiled_call(FakeArray, ((4, 5), (4, 5), (3, 3)), 0, 0, kernel)
    assert not plain.needs_workspace and plain.nsteps == 1 and plain.graph  # a graph's call
    assert plain(left, right, out, 0) is out
    set_params, graph_launch = stub.since(start)[-2:]
    assert set_params.kind == 3 and params(set_params, 3) == [LEFT, RIGHT, OUT]
    assert set_params.ptr == 0xF00 and graph_launch.kind == 4
    one_by_one = launch.compiled_call(FakeArray, ((4, 5), (4, 5), (3, 3)), 0, 0, kernel,
                                      graph=False)
    assert not one_by_one.graph and one_by_one(left, right, out, 0) is out
    assert stub.since(start)[-1].kind == 1
    zeros = launch.compiled_call(FakeArray, ((4, 5), (4, 5), (3, 3)), 0, 36, None)
    assert zeros.nsteps == 1 and zeros(left, right, out, 0) is out
    assert stub.since(start)[-1].kind == 2
    refs = sys.getrefcount(kernel)
    del plain
    assert sys.getrefcount(kernel) == refs - 1  # held by the compiled call (keep)


def check_graph_launches(mod, stub):
    kernel = ("launch", 0xABC, (2, 1, 1), (32, 4, 1), 100, buffer(32, 24), 28, (0, 1, 2))
    start = stub.count.value
    fc = simple(mod, [kernel], graph=True)
    assert fc.graph
    (node,) = stub.since(start)  # made once: one kernel node
    assert node.kind == 5 and node.n == 0 and node.ptr == 0xABC and node.param_size == 28
    left, right, out = arrays()
    start = stub.count.value
    assert fc(left, right, out, 0x77) is out
    set_params, launch = stub.since(start)
    assert (set_params.kind, set_params.fn, set_params.ptr) == (3, node.fn, 0xABC)
    assert params(set_params, 3) == [LEFT, RIGHT, OUT] and set_params.param_size == 28
    assert bytes(set_params.params[24:28]) == np.int32(7).tobytes()  # the constants stay
    assert list(set_params.grid) == [2, 1, 1] and list(set_params.block) == [32, 4, 1]
    assert set_params.shared == 100 and not set_params.had_kernel_params
    assert (launch.kind, launch.fn, launch.stream) == (4, 0xE0, 0x77)
    # another stream: one by one (the graph stays on its stream); its stream again: the graph,
    # not updated where the pointers are those it holds; new pointers: updated
    start = stub.count.value
    fc(left, right, out, 0x88)
    fc(left, right, out, 0x77)
    other = FakeArray((3, 3), 0x3100)
    assert fc(left, right, other, 0x77) is other
    assert [(r.kind, r.stream) for r in stub.since(start)] == [(1, 0x88), (4, 0x77), (3, 0),
                                                                (4, 0x77)]
    assert params(stub.since(start)[2], 3) == [LEFT, RIGHT, 0x3100]
    # the per-thread default stream (one handle, a stream per thread) and a stream being
    # captured: one by one, and the graph stays where it was
    start = stub.count.value
    fc(left, right, out, 0x2)
    stub.capturing.value = 1
    try:
        fc(left, right, out, 0x77)
    finally:
        stub.capturing.value = 0
    fc(left, right, out, 0x77)  # (its parameters updated: its last launch had other's)
    assert [(r.kind, r.stream) for r in stub.since(start)] == [(1, 0x2), (1, 0x77), (3, 0),
                                                                (4, 0x77)]
    # a parameter update refused: this call and every later one launched one by one
    start = stub.count.value
    stub.fail_set.value = 1
    try:
        assert fc(left, right, other, 0x77) is other  # new pointers: an update
    finally:
        stub.fail_set.value = 0
    assert fc(left, right, out, 0x77) is out and not fc.graph
    assert [r.kind for r in stub.since(start)] == [1, 1]
    # no graph where a memset comes first or no context is current
    assert not simple(mod, graph=True).graph
    stub.no_context.value = 1
    try:
        assert not simple(mod, [kernel], graph=True).graph
    finally:
        stub.no_context.value = 0
    # a rearrangement and the kernel: two nodes in a chain, both set, one launch
    start = stub.count.value
    two = simple(mod, [("launch", 0x1, (1, 1, 1), (64, 1, 1), 0, buffer(16), 16, (1, 3)),
                       ("launch", 0x2, (3, 2, 1), (32, 1, 1), 0, buffer(32), 24, [0, 3, 2])],
                 graph=True)
    first, second = stub.since(start)
    assert (first.n, second.n, second.stream) == (0, 1, first.fn)
    start = stub.count.value
    assert two(left, right, out, 5, WS) is out
    arrange, main, launch = stub.since(start)
    assert (arrange.kind, arrange.fn, main.kind, main.fn) == (3, first.fn, 3, second.fn)
    assert params(arrange, 2) == [RIGHT, WS] and params(main, 3) == [LEFT, WS, OUT]
    assert (launch.kind, launch.stream) == (4, 5)
    # a graph launch refused: the driver's error raised, later calls launched one by one
    three = simple(mod, [kernel], graph=True)
    stub.fail_graph_launch.value = 700
    try:
        three(left, right, out, 9)
    except RuntimeError as exc:
        assert "cuGraphLaunch failed: CUDA_ERROR_ILLEGAL_ADDRESS" in str(exc), exc
    else:
        raise AssertionError("no error")
    finally:
        stub.fail_graph_launch.value = 0
    start = stub.count.value
    assert three(left, right, out, 9) is out and not three.graph
    assert [(r.kind, r.stream) for r in stub.since(start)] == [(1, 9)]
    destroyed = stub.destroyed.value
    del fc, two, three
    assert stub.destroyed.value == destroyed + 6  # each graph and its executable


def check_graph_on_the_legacy_stream_and_capture_errors(mod, stub):
    """The legacy default stream (0, or its handle 0x1) is never captured: its calls do not
    ask (a query answering "capturing" there is not heeded); a launch refused with a stream
    capture's error (900-908) raises and leaves the graph in use, any other error ends it."""
    kernel = ("launch", 0xABC, (2, 1, 1), (32, 4, 1), 100, buffer(32, 24), 28, (0, 1, 2))
    left, right, out = arrays()
    for legacy in (0, 0x1):
        fc = simple(mod, [kernel], graph=True)
        start = stub.count.value
        stub.capturing.value = 1
        try:
            assert fc(left, right, out, legacy) is out
        finally:
            stub.capturing.value = 0
        # its parameters set (the node was made with no pointers), then the graph launched
        assert [(r.kind, r.stream) for r in stub.since(start)] == [(3, 0), (4, legacy)]
    fc = simple(mod, [kernel], graph=True)
    assert fc(left, right, out, 0) is out
    for rc, stays in [(906, True), (901, True), (700, False)]:
        stub.fail_graph_launch.value = rc
        try:
            fc(left, right, out, 0)
            raise AssertionError("no error raised")
        except RuntimeError as exc:
            assert f"CUresult {rc}" in str(exc) and "cuGraphLaunch" in str(exc), exc
        finally:
            stub.fail_graph_launch.value = 0
        assert fc.graph == stays
    start = stub.count.value
    assert fc(left, right, out, 0) is out
    assert [r.kind for r in stub.since(start)] == [1]  # after the 700: one by one


CHECKS = [name for name in list(globals()) if name.startswith("check_")]


def main(path):
    spec = importlib.util.spec_from_file_location("_fastlaunch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    stub = Stub()
    results = {}
    for name in CHECKS:
        try:
            globals()[name](mod, stub)
            results[name] = None
        except Exception:  # noqa: BLE001 - reported to the test
            results[name] = traceback.format_exc()
    print(json.dumps(results))


# --------------------------------------------------------------------------- the tests

if __name__ != "__main__":
    import pytest

    def _compiler():
        cc = shutil.which("gcc") or shutil.which("cc")
        include = sysconfig.get_paths()["include"]
        if cc is None or not (Path(include) / "Python.h").exists():
            pytest.skip("no C compiler or no Python headers")
        return cc, include

    def _build(tmp, cc, include):
        """The stub libcuda.so.1 and the extension built from this tree's source in ``tmp``."""
        stub_dir = tmp / "stub"
        stub_dir.mkdir()
        (tmp / "stub.c").write_text(STUB)
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o",
                        str(stub_dir / "libcuda.so.1"), str(tmp / "stub.c")], check=True)
        ext = tmp / ("_fastlaunch" + sysconfig.get_config_var("EXT_SUFFIX"))
        res = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra",
                              "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                              f"-I{include}", "-o", str(ext)] + [str(p) for p in SOURCES]
                             + ["-ldl"],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert "warning" not in res.stderr, res.stderr
        return stub_dir, ext

    @pytest.fixture(scope="module")
    def built(tmp_path_factory):
        return _build(tmp_path_factory.mktemp("fastlaunch"), *_compiler())

    @pytest.fixture(scope="module")
    def stub_results(built):
        stub_dir, ext = built
        env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(
            [str(stub_dir)] + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(
                os.pathsep) if p]), "PYTHONPATH": os.pathsep.join(
            [str(SOURCE.parents[2])] + [p for p in os.environ.get("PYTHONPATH", "").split(
                os.pathsep) if p])}
        res = subprocess.run([sys.executable, __file__, str(ext)], capture_output=True,
                             text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout.strip().splitlines()[-1])

    @pytest.mark.parametrize("check", CHECKS)
    def test_compiled_call_against_a_stub_driver(stub_results, check):
        assert stub_results[check] is None, stub_results[check]

    def test_extension_import_without_libcuda_is_an_import_error(built):
        if ctypes.util.find_library("cuda"):
            pytest.skip("this machine has libcuda")
        res = subprocess.run([sys.executable, "-c", (
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('_fastlaunch', {str(built[1])!r})\n"
            "try:\n"
            "    importlib.util.module_from_spec(spec)\n"
            "except ImportError as exc:\n"
            "    print('ImportError:', exc)\n")], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and not res.stderr, res.stderr
        assert res.stdout.startswith("ImportError: libcuda.so.1 could not be loaded ("), res.stdout

    def _fresh_fastlaunch(monkeypatch, value):
        from xcorr_app._cuda import launch

        if value is None:
            monkeypatch.delenv(launch.FASTLAUNCH_ENV, raising=False)
        else:
            monkeypatch.setenv(launch.FASTLAUNCH_ENV, value)
        launch.fastlaunch.cache_clear()
        try:
            return launch.fastlaunch()
        finally:
            launch.fastlaunch.cache_clear()

    def test_fastlaunch_off_by_the_variable(monkeypatch):
        from xcorr_app._cuda import launch

        assert _fresh_fastlaunch(monkeypatch, "0") == (None, "off (XCORR_FASTLAUNCH=0)")
        monkeypatch.setattr(launch, "fastlaunch", lambda: (None, "off"))
        assert launch.compiled_call(object, ((1,), (1,), (1,)), 0, 4, None) is None

    def test_fastlaunch_not_available_without_libcuda(monkeypatch):
        if ctypes.util.find_library("cuda"):
            pytest.skip("this machine has libcuda")
        module, why = _fresh_fastlaunch(monkeypatch, None)
        assert module is None
        assert why.startswith(("not built (python3 setup.py build_ext --inplace",
                               "built, not usable here: libcuda.so.1 could not be loaded")), why
        assert _fresh_fastlaunch(monkeypatch, "1")[1] == why

    def test_xcorr_info_says_whether_the_compiled_path_is_there():
        from cli_helpers import xcorr

        res = xcorr("info")
        assert res.returncode == 0, res.stderr
        line = [ln for ln in res.stdout.splitlines()
                if ln.startswith("compiled launch path of plans: ")]
        assert len(line) == 1, res.stdout
        assert line[0].split(": ", 1)[1].startswith(("available", "not built", "built, not",
                                                     "off")), line

if __name__ == "__main__":
    main(sys.argv[1])
