/* Dispatch(function): a correlation plan's ``__call__`` in C (issue 24).
 *
 * Set as the class attribute ``CorrelationPlan.__call__`` in place of the Python method
 * ``function`` (by xcorr_app._cuda.launch.compiled_dispatch).  A call ``plan(left, right, out)``
 * (``out`` given, no stream, positionally: a pipeline's call) reads the plan's ``fast_call``
 * (a FastCall without a workspace) and ``_stream_ptr`` (the current stream's pointer getter),
 * and runs the FastCall: no Python frame between the caller and the driver.  Every other
 * call, and a call whose checks fail or whose launch the driver refuses, is ``function``'s
 * (the Python path, which says what is wrong).  It binds as a method does (a method
 * descriptor: ``plan.__call__`` is a bound method, ``CorrelationPlan.__call__(plan, ...)`` a
 * call).
 *
 * Why: the Python method between the caller and the compiled call cost 0.9-1.1 us of a 5-7 us
 * plan call on the H100 servers measured (tools/fastcall_probe.py, 2026-11-23).
 */
#include "_fastlaunch.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *func;
} Dispatch;

static PyObject *str_fast_call, *str_stream_ptr;

/* plan(left, right, out) by the plan's FastCall: its result, or NotImplemented (the Python
 * path's turn, no error set), or NULL with an error that is not the driver's */
static PyObject *compiled_path(PyObject *plan, PyObject *left, PyObject *right, PyObject *out)
{
    PyObject *fc, *getter, *s, *got;
    unsigned long long stream;

    if ((fc = PyObject_GetAttr(plan, str_fast_call)) == NULL) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (!Py_IS_TYPE(fc, &FastCallType) || ((FastCall *)fc)->needs_workspace) {
        Py_DECREF(fc);
        Py_RETURN_NOTIMPLEMENTED;
    }
    if ((getter = PyObject_GetAttr(plan, str_stream_ptr)) == NULL) {
        Py_DECREF(fc);
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    s = PyObject_CallNoArgs(getter);
    Py_DECREF(getter);
    if (s == NULL) {
        Py_DECREF(fc);
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    stream = PyLong_AsUnsignedLongLong(s);
    Py_DECREF(s);
    if (stream == (unsigned long long)-1 && PyErr_Occurred()) {
        Py_DECREF(fc);
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    got = fastcall_run((FastCall *)fc, left, right, out, stream, 0);
    Py_DECREF(fc);
    if (got == NULL && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        PyErr_Clear();  /* the driver refused: the Python path tries again and says why */
        Py_RETURN_NOTIMPLEMENTED;
    }
    return got;
}

static PyObject *dispatch_vectorcall(PyObject *callable, PyObject *const *args,
                                     size_t nargsf, PyObject *kwnames)
{
    Dispatch *self = (Dispatch *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);

    if (nargs == 4 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0) &&
        args[3] != Py_None) {
        PyObject *got = compiled_path(args[0], args[1], args[2], args[3]);
        if (got != Py_NotImplemented)
            return got;
        Py_DECREF(got);
    }
    return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
}

static PyObject *dispatch_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *func;
    Dispatch *self;

    if (!PyArg_ParseTuple(args, "O:Dispatch", &func))
        return NULL;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Dispatch(function) takes no keyword arguments");
        return NULL;
    }
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "Dispatch(function): function must be callable");
        return NULL;
    }
    self = (Dispatch *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = dispatch_vectorcall;
    self->func = Py_NewRef(func);
    return (PyObject *)self;
}

static int dispatch_traverse(Dispatch *self, visitproc visit, void *arg)
{
    Py_VISIT(self->func);
    return 0;
}

static int dispatch_clear(Dispatch *self)
{
    Py_CLEAR(self->func);
    return 0;
}

static void dispatch_dealloc(Dispatch *self)
{
    PyObject_GC_UnTrack(self);
    dispatch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *dispatch_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *dispatch_get_wrapped(Dispatch *self, void *closure)
{
    if (self->func == NULL)
        Py_RETURN_NONE;
    return Py_NewRef(self->func);
}

static PyObject *dispatch_get_doc(Dispatch *self, void *closure)
{
    if (self->func == NULL)
        Py_RETURN_NONE;
    return PyObject_GetAttrString(self->func, "__doc__");
}

static PyObject *dispatch_repr(Dispatch *self)
{
    return PyUnicode_FromFormat("<Dispatch of %R>", self->func);
}

static PyGetSetDef dispatch_getset[] = {
    {"__wrapped__", (getter)dispatch_get_wrapped, NULL, "the Python method it stands for", NULL},
    {"__doc__", (getter)dispatch_get_doc, NULL, NULL, NULL},
    {NULL},
};

PyTypeObject DispatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xcorr_app._cuda._fastlaunch.Dispatch",
    .tp_basicsize = sizeof(Dispatch),
    .tp_dealloc = (destructor)dispatch_dealloc,
    .tp_vectorcall_offset = offsetof(Dispatch, vectorcall),
    .tp_repr = (reprfunc)dispatch_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)dispatch_traverse,
    .tp_clear = (inquiry)dispatch_clear,
    .tp_getset = dispatch_getset,
    .tp_descr_get = dispatch_get,
    .tp_new = dispatch_new,
};

int dispatch_ready(void)
{
    if ((str_fast_call = PyUnicode_InternFromString("fast_call")) == NULL ||
        (str_stream_ptr = PyUnicode_InternFromString("_stream_ptr")) == NULL)
        return -1;
    return PyType_Ready(&DispatchType);
}
