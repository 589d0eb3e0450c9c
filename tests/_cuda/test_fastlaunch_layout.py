"""The compiled call's checks of arrays read in place (``xcorr_app/_cuda/_fastlaunch_layout.c``),
on the CPU: a stand-in array type compiled here with the object layout CuPy documents for its
ndarray (8-14.3), run against the stub libcuda of ``test_fastlaunch.py``: the layout confirmed
on the first array, the pointers read in place, an array reshaped in place or made
non-contiguous, another dtype or device refused (``NotImplemented``, nothing launched), an equal
dtype object accepted, a type whose attributes disagree with its layout read through its
attributes, reference counts unchanged. The GPU test with CuPy's own arrays is
``tests/correlate/test_correlation_plan_fastlaunch.py``."""

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

HERE = Path(__file__).resolve().parent

#: a stand-in for cupy.ndarray with its documented object layout (and a MemoryPointer's)
ARRAYS = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct { PyObject_HEAD void *vtab; Py_ssize_t ptr; int device_id; PyObject *mem; } MemPtr;
typedef struct { Py_ssize_t *begin, *end, *cap; } Vec;
typedef struct {
    PyObject_HEAD void *vtab; PyObject *weakrefs; Py_ssize_t size; Vec shape, strides;
    int c_contiguous, f_contiguous, index_32_bits; PyObject *dtype; MemPtr *data; PyObject *base;
    Py_ssize_t dims[8]; PyObject *shown_data;
} Arr;

static PyMemberDef memptr_members[] = {
    {"ptr", T_PYSSIZET, offsetof(MemPtr, ptr), 0, NULL},
    {"device_id", T_INT, offsetof(MemPtr, device_id), 0, NULL}, {NULL}};
static PyType_Slot memptr_slots[] = {{Py_tp_members, memptr_members}, {0, NULL}};
static PyType_Spec memptr_spec = {"arrays.MemPtr", sizeof(MemPtr), 0, Py_TPFLAGS_DEFAULT,
                                  memptr_slots};
static PyObject *MemPtrType;

static PyObject *new_memptr(Py_ssize_t ptr, int device)
{
    MemPtr *m = PyObject_New(MemPtr, (PyTypeObject *)MemPtrType);
    if (m) { m->vtab = NULL; m->ptr = ptr; m->device_id = device; m->mem = NULL; }
    return (PyObject *)m;
}

static int set_dims(Arr *a, PyObject *shape)
{
    Py_ssize_t n = PyTuple_Size(shape), size = 1;
    if (n < 0 || n > 8) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        a->dims[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        size *= a->dims[i];
    }
    a->shape.begin = a->dims; a->shape.end = a->dims + n; a->shape.cap = a->dims + 8;
    a->size = size;
    return PyErr_Occurred() ? -1 : 0;
}

/* Arr(shape, ptr, device_id, dtype, shown_ptr=-1): with shown_ptr >= 0, its data attribute
 * is another MemoryPointer than the one in its layout (a type whose layout is not CuPy's) */
static PyObject *arr_new(PyTypeObject *t, PyObject *args, PyObject *kw)
{
    PyObject *shape, *dtype; Py_ssize_t ptr, shown = -1; int device;
    if (!PyArg_ParseTuple(args, "O!niO|n", &PyTuple_Type, &shape, &ptr, &device, &dtype, &shown))
        return NULL;
    Arr *a = (Arr *)t->tp_alloc(t, 0);
    if (!a) return NULL;
    if (set_dims(a, shape) < 0) { Py_DECREF(a); return NULL; }
    a->c_contiguous = 1;
    a->dtype = Py_NewRef(dtype);
    a->data = (MemPtr *)new_memptr(ptr, device);
    a->shown_data = shown >= 0 ? new_memptr(shown, device) : Py_NewRef((PyObject *)a->data);
    return (PyObject *)a;
}

static void arr_dealloc(Arr *a)
{
    PyTypeObject *t = Py_TYPE(a);
    Py_XDECREF(a->dtype); Py_XDECREF(a->data); Py_XDECREF(a->shown_data);
    t->tp_free((PyObject *)a);
    Py_DECREF(t);
}

static PyObject *arr_shape(Arr *a, void *c)
{
    PyObject *t = PyTuple_New(a->shape.end - a->shape.begin);
    for (Py_ssize_t i = 0; t && i < a->shape.end - a->shape.begin; i++)
        PyTuple_SET_ITEM(t, i, PyLong_FromSsize_t(a->shape.begin[i]));
    return t;
}
static PyObject *arr_contiguous(Arr *a, void *c) { return PyBool_FromLong(a->c_contiguous); }
static PyObject *arr_data(Arr *a, void *c) { return Py_NewRef(a->shown_data); }
static PyObject *arr_size(Arr *a, void *c) { return PyLong_FromSsize_t(a->size); }
static PyObject *arr_set_shape(Arr *a, PyObject *shape)  /* in place, as CuPy's setter */
{
    if (!PyTuple_Check(shape) || set_dims(a, shape) < 0) return NULL;
    Py_RETURN_NONE;
}
static PyObject *arr_set_contiguous(Arr *a, PyObject *v)
{
    a->c_contiguous = PyObject_IsTrue(v);
    Py_RETURN_NONE;
}
static PyGetSetDef arr_getset[] = {
    {"shape", (getter)arr_shape, NULL, NULL, NULL},
    {"_c_contiguous", (getter)arr_contiguous, NULL, NULL, NULL},
    {"data", (getter)arr_data, NULL, NULL, NULL},
    {"size", (getter)arr_size, NULL, NULL, NULL}, {NULL}};
static PyMemberDef arr_members[] = {{"dtype", T_OBJECT, offsetof(Arr, dtype), READONLY, NULL},
                                    {NULL}};
static PyMethodDef arr_methods[] = {
    {"set_shape", (PyCFunction)arr_set_shape, METH_O, NULL},
    {"set_contiguous", (PyCFunction)arr_set_contiguous, METH_O, NULL}, {NULL}};
static PyType_Slot arr_slots[] = {
    {Py_tp_new, arr_new}, {Py_tp_dealloc, arr_dealloc}, {Py_tp_getset, arr_getset},
    {Py_tp_members, arr_members}, {Py_tp_methods, arr_methods}, {0, NULL}};
static PyType_Spec arr_spec = {"arrays.Arr", sizeof(Arr), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, arr_slots};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "arrays", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_arrays(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m || !(MemPtrType = PyType_FromSpec(&memptr_spec))) return NULL;
    PyObject *arr = PyType_FromSpec(&arr_spec);
    if (!arr || PyModule_AddObject(m, "Arr", arr) < 0) return NULL;
    return m;
}
"""

F32 = np.dtype(np.float32)


# --------------------------------------------------------------------------- in the subprocess

def run_checks(fastlaunch_path, arrays_path):
    sys.path.insert(0, str(HERE))
    from test_fastlaunch import Stub, buffer, params  # the stub's reader (same folder)

    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    mod, arrays = load("_fastlaunch", fastlaunch_path), load("arrays", arrays_path)
    stub, Arr = Stub(), arrays.Arr
    step = ("launch", 0xABC, (1, 1, 1), (32, 1, 1), 0, buffer(32), 28, (0, 1, 2))

    def fast_call(**kw):
        return mod.FastCall(ndarray_type=Arr, left_shape=(4, 5), right_shape=(4, 5),
                            out_shape=(3, 3), dtype=F32, device_id=0, steps=[step], **kw)

    fc = fast_call()
    left, right, out = Arr((4, 5), 0x1000, 0, F32), Arr((4, 5), 0x2000, 0, F32), \
        Arr((3, 3), 0x3000, 0, F32)
    assert not fc.in_place  # nothing met yet
    start = stub.count.value
    assert fc(left, right, out, 0x77) is out and fc.in_place
    assert params(stub.since(start)[-1], 3) == [0x1000, 0x2000, 0x3000]
    refused = {"left reshaped in place": lambda: left.set_shape((5, 4)),
               "left 3-D in place": lambda: left.set_shape((1, 4, 5)),
               "right not contiguous": lambda: right.set_contiguous(False)}
    for name, change in refused.items():
        change()
        start = stub.count.value
        assert fc(left, right, out, 0x77) is NotImplemented, name
        assert stub.count.value == start and sys.exc_info() == (None, None, None), name
        left.set_shape((4, 5))
        right.set_contiguous(True)
    for name, args in {"float64": (Arr((4, 5), 0x1000, 0, np.dtype(np.float64)), right, out),
                       "device 1": (left, Arr((4, 5), 0x2000, 1, F32), out),
                       "out shape": (left, right, Arr((3, 4), 0x3000, 0, F32)),
                       "not the type": (left, right, object())}.items():
        assert fc(*args, 0x77) is NotImplemented, name
    equal = Arr((4, 5), 0x5000, 0, "float32")  # an equal dtype, another object
    start = stub.count.value
    assert fc(equal, right, out, 0x77) is out
    assert params(stub.since(start)[-1], 1) == [0x5000]
    # a type whose attributes disagree with its layout (another data object, even one of the
    # same pointer, or another pointer): read through its attributes
    for shown in (0x1000, 0x9000):
        other = fast_call()
        liar = Arr((4, 5), 0x1000, 0, F32, shown)
        start = stub.count.value
        assert other(liar, right, out, 0x77) is out and not other.in_place
        assert params(stub.since(start)[-1], 1) == [shown]
    # references: nothing held or lost over many calls
    objs = [left, right, out, F32, equal]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(2000):
        fc(left, right, out, 0x77)
        fc(equal, right, out, 0x77)
        fc(left, Arr((4, 5), 0x2000, 1, F32), out, 0x77)
    assert [sys.getrefcount(o) for o in objs] == before


def main(fastlaunch_path, arrays_path):
    try:
        run_checks(fastlaunch_path, arrays_path)
        print(json.dumps({"error": None}))
    except Exception:  # noqa: BLE001 - reported to the test
        print(json.dumps({"error": traceback.format_exc()}))


# --------------------------------------------------------------------------- the test

if __name__ != "__main__":
    import pytest

    def test_arrays_read_in_place_against_a_stub_driver(tmp_path):
        cc = shutil.which("gcc") or shutil.which("cc")
        include = sysconfig.get_paths()["include"]
        if cc is None or not (Path(include) / "Python.h").exists():
            pytest.skip("no C compiler or no Python headers")
        from test_fastlaunch import SOURCES, STUB

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        (tmp_path / "stub").mkdir()
        (tmp_path / "stub.c").write_text(STUB)
        (tmp_path / "arrays.c").write_text(ARRAYS)
        builds = [
            ["-Wl,-soname,libcuda.so.1", "-o", tmp_path / "stub" / "libcuda.so.1",
             tmp_path / "stub.c"],
            [f"-I{include}", "-o", tmp_path / ("_fastlaunch" + suffix)] + SOURCES + ["-ldl"],
            [f"-I{include}", "-o", tmp_path / ("arrays" + suffix), tmp_path / "arrays.c"]]
        for args in builds:
            res = subprocess.run([cc, "-shared", "-fPIC", "-O2"] + [str(a) for a in args],
                                 capture_output=True, text=True)
            assert res.returncode == 0, res.stderr
        env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(
            [str(tmp_path / "stub")] + [p for p in os.environ.get("LD_LIBRARY_PATH", "")
                                        .split(os.pathsep) if p])}
        res = subprocess.run([sys.executable, __file__, str(tmp_path / ("_fastlaunch" + suffix)),
                              str(tmp_path / ("arrays" + suffix))], capture_output=True,
                             text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stderr
        got = json.loads(res.stdout.strip().splitlines()[-1])
        assert got["error"] is None, got["error"]

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
