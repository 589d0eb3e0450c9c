/* The call of a correlation plan without a Python frame: the base class of
 * CorrelationPlan where this extension is built (xcorr_app/_cuda/launch.py, PlanCallBase).
 *
 * A plan call from Python is the plan's __call__, then its compiled call (_fastlaunch.c: the
 * checks and the driver's launch in C).  The GPU runs a 16x16 pair in 3.1 us, about the host
 * time of a whole plan call, so on a slower host the calls are paced by the host: every
 * fraction of a microsecond counts there.  Here the call goes from the caller straight to
 * the compiled call, without the Python method's frame and attribute reads (4-5% of a call:
 * docs/kernels.md, measurements).
 *
 *   plan(left, right, out[, stream=None])
 *     where the plan has a _direct_call (a callable dc(left, right, out, stream_ptr) that
 *     returns out, or NotImplemented when a check fails) and _stream_ptr (a callable that
 *     returns the current stream's pointer), out is given and stream is None or not given:
 *     returns dc(left, right, out, _stream_ptr()) unless that is NotImplemented or raises
 *     RuntimeError (the driver refused);
 *   otherwise, and in those two cases: returns plan._call(left, right, out, stream, True)
 *     (the Python path; True: the direct call was tried).
 *
 * Nothing of CUDA is used here; the module has no other dependency (it builds and imports
 * where _fastlaunch, which loads libcuda.so.1, may not).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *direct_call;
    PyObject *stream_ptr;
} PlanCall;

static PyObject *str_call;

static int plancall_traverse(PlanCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->direct_call);
    Py_VISIT(self->stream_ptr);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int plancall_clear(PlanCall *self)
{
    Py_CLEAR(self->direct_call);
    Py_CLEAR(self->stream_ptr);
    return 0;
}

static void plancall_dealloc(PlanCall *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    plancall_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);  /* a heap type's instances hold a reference to it */
}

/* the arguments as the Python signature (left, right, out=None, stream=None) takes them */
static int parse(PyObject *args, PyObject *kwargs, PyObject **v)
{
    static char *kwlist[] = {"left", "right", "out", "stream", NULL};
    Py_ssize_t n = PyTuple_GET_SIZE(args);

    v[2] = v[3] = Py_None;
    if (kwargs == NULL && n >= 2 && n <= 4) {  /* the usual call: positional */
        for (Py_ssize_t i = 0; i < n; i++)
            v[i] = PyTuple_GET_ITEM(args, i);
        return 1;
    }
    return PyArg_ParseTupleAndKeywords(args, kwargs, "OO|OO:__call__", kwlist,
                                       &v[0], &v[1], &v[2], &v[3]);
}

static PyObject *plancall_call(PlanCall *self, PyObject *args, PyObject *kwargs)
{
    PyObject *v[4];
    PyObject *got = NULL;

    if (!parse(args, kwargs, v))
        return NULL;
    if (self->direct_call != NULL && self->direct_call != Py_None && self->stream_ptr != NULL &&
        self->stream_ptr != Py_None && v[2] != Py_None && v[3] == Py_None) {
        /* held for the call: another thread (or the stream lookup) may set the plan's
         * attributes meanwhile, and the compiled call runs partly without the GIL */
        PyObject *dc = Py_NewRef(self->direct_call), *sp = Py_NewRef(self->stream_ptr);
        PyObject *s = PyObject_CallNoArgs(sp);
        Py_DECREF(sp);
        if (s == NULL) {
            Py_DECREF(dc);
            return NULL;
        }
        PyObject *stack[4] = {v[0], v[1], v[2], s};
        got = PyObject_Vectorcall(dc, stack, 4, NULL);
        Py_DECREF(dc);
        Py_DECREF(s);
        if (got == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
                return NULL;
            PyErr_Clear();  /* the Python path says what the driver refused */
        } else if (got != Py_NotImplemented) {
            return got;
        } else {
            Py_DECREF(got);
        }
        got = Py_True;
    } else {
        got = Py_False;
    }
    PyObject *stack[6] = {(PyObject *)self, v[0], v[1], v[2], v[3], got};
    return PyObject_VectorcallMethod(str_call, stack, 6, NULL);
}

static PyMemberDef plancall_members[] = {
    {"_direct_call", T_OBJECT, offsetof(PlanCall, direct_call), 0,
     "dc(left, right, out, stream_ptr): the compiled call the plan's call goes to, or None"},
    {"_stream_ptr", T_OBJECT, offsetof(PlanCall, stream_ptr), 0,
     "a callable returning the current stream's pointer, or None"},
    {NULL}};

static PyType_Slot plancall_slots[] = {
    {Py_tp_doc, "The base of a correlation plan whose call goes to its compiled call "
                "without a Python frame (xcorr_app/_cuda/_plancall.c)."},
    {Py_tp_call, plancall_call},
    {Py_tp_members, plancall_members},
    {Py_tp_traverse, plancall_traverse},
    {Py_tp_clear, plancall_clear},
    {Py_tp_dealloc, plancall_dealloc},
    {0, NULL}};

static PyType_Spec plancall_spec = {
    "xcorr_app._cuda._plancall.PlanCall", sizeof(PlanCall), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, plancall_slots};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plancall",
                                    "The call of a correlation plan without a Python frame.",
                                    -1, NULL};

PyMODINIT_FUNC PyInit__plancall(void)
{
    PyObject *m, *type;

    if ((str_call = PyUnicode_InternFromString("_call")) == NULL)
        return NULL;
    if ((m = PyModule_Create(&module)) == NULL)
        return NULL;
    if ((type = PyType_FromSpec(&plancall_spec)) == NULL ||
        PyModule_AddObject(m, "PlanCall", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
