/* The compiled launch path of correlation plans: a plan call's checks and its
 * driver launches in one C call.
 *
 * A CorrelationPlan call from Python cost about twice the driver's cuLaunchKernel in host
 * time (docs/kernels.md, measurements); the rest was Python: the
 * checks of the arrays (type, shape, dtype, contiguity, device), the stream lookup, the
 * pointer writes into the packed parameter buffer under a lock, and the wrapper of the driver
 * call.  A FastCall does the same checks in C, writes the pointers and calls the driver
 * through the function pointers dlsym'd from libcuda.so.1 at import (_fastlaunch.h).  The
 * other sources: _fastlaunch_steps.c (the steps read from Python), _fastlaunch_graph.c (the
 * steps as one CUDA graph, updated and launched each call), _fastlaunch_layout.c (CuPy
 * arrays read in place).  Importing it raises ImportError
 * where libcuda.so.1 cannot be loaded.
 *
 * FastCall(ndarray_type, left_shape, right_shape, out_shape, dtype, device_id, steps,
 *          keep=None, graph=False)
 *   steps: a sequence of
 *     ("memset", nbytes)  -- cuMemsetD8Async(out, 0, nbytes, stream)
 *     ("launch", function_ptr, grid3, block3, shared_mem, buffer, param_size, slots)
 *        -- cuLaunchKernel with CU_LAUNCH_PARAM_BUFFER_POINTER = buffer (a writable buffer
 *           object, kept here), CU_LAUNCH_PARAM_BUFFER_SIZE = param_size; slots: for each
 *           leading 8-byte pointer slot, which pointer goes there (0 left, 1 right, 2 out,
 *           3 workspace).
 *   numbers are Python ints; keep: any object held as long as this one (what owns the
 *   functions and the device arrays among the packed constants); graph: make the steps one
 *   CUDA graph in the current context where that can be (the ``graph`` attribute says).
 * fc(left, right, out, stream_ptr[, workspace_ptr])
 *   checks left/right/out (isinstance of ndarray_type, shape == the expected tuple, dtype is
 *   (or equals) the expected dtype, _c_contiguous true, data.device_id == device_id): read in
 *   place where the type's object layout is CuPy's (_fastlaunch_layout.c, confirmed on the
 *   first array of the type), else through the attributes (for the same live array as the
 *   last call's in its role, shape and _c_contiguous only: a CuPy array's data, dtype and
 *   device are read-only), and
 *   returns NotImplemented without raising if any check fails (the caller then runs its
 *   checked path, which says what is wrong); also NotImplemented where the calling thread
 *   has no current CUDA context yet (the Python path, through the runtime, goes on as it
 *   always did); else writes the pointers, runs the steps on the stream and returns out.  A
 *   driver error raises RuntimeError naming the CUresult.
 *
 * Threads: a call copies each step's packed parameters (at most MAX_PARAM_BYTES, checked when
 * made) into buffers of its own on the C stack, writes the pointers there and releases the
 * GIL around the driver calls, which may block while the launch queue is full (CuPy's own
 * launch releases it too: other threads, and host callbacks that need the GIL, go on).  The
 * steps' buffers are only read after construction, so calls from several threads need no
 * lock (the driver copies the parameters at the launch); the graph has a lock of its own.
 */
#include <dlfcn.h>
#include <string.h>

#include "_fastlaunch.h"

Driver drv;

static PyObject *str_shape, *str_dtype, *str_c_contiguous, *str_data, *str_device_id, *str_ptr;

/* ------------------------------------------------------------------ construction */

static PyObject *fastcall_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames);

static PyObject *fastcall_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"ndarray_type", "left_shape", "right_shape", "out_shape",
                             "dtype", "device_id", "steps", "keep", "graph", NULL};
    PyObject *nd, *ls, *rs, *os, *dtype, *steps, *seq, *keep = Py_None;
    long device_id;
    int graph = 0;
    FastCall *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O!OlO|Op:FastCall", kwlist,
                                     &PyType_Type, &nd, &PyTuple_Type, &ls, &PyTuple_Type, &rs,
                                     &PyTuple_Type, &os, &dtype, &device_id, &steps, &keep,
                                     &graph))
        return NULL;
    if (device_id < 0) {
        PyErr_SetString(PyExc_ValueError, "device_id must be >= 0");
        return NULL;
    }
    seq = PySequence_Fast(steps, "steps must be a sequence of step tuples");
    if (seq == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(seq) < 1 || PySequence_Fast_GET_SIZE(seq) > MAX_STEPS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "steps must be 1 to %d steps", MAX_STEPS);
        return NULL;
    }
    self = (FastCall *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    self->vectorcall = fastcall_vectorcall;
    self->ndarray_type = Py_NewRef(nd);
    self->left_shape = Py_NewRef(ls);
    self->right_shape = Py_NewRef(rs);
    self->out_shape = Py_NewRef(os);
    self->dtype = Py_NewRef(dtype);
    self->keep = Py_NewRef(keep);
    self->device_id = device_id;
    self->steps = PyMem_Calloc((size_t)PySequence_Fast_GET_SIZE(seq), sizeof(Step));
    if (self->steps == NULL) {
        Py_DECREF(seq);
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->nsteps = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < self->nsteps; i++) {
        Step *st = &self->steps[i];
        if (parse_step(PySequence_Fast_GET_ITEM(seq, i), st, i) < 0) {
            Py_DECREF(seq);
            Py_DECREF(self); /* releases the views taken so far */
            return NULL;
        }
        for (int k = 0; st->is_launch && k < st->nslots; k++)
            if (st->slots[k] == ROLE_WORKSPACE)
                self->needs_workspace = 1;
    }
    Py_DECREF(seq);
    PyObject *shapes[3] = {ls, rs, os};
    for (int r = 0; r < 3 && self->layout == 0; r++) {  /* the shapes as numbers */
        if (PyTuple_GET_SIZE(shapes[r]) > MAX_DIMS) {
            self->layout = -1;
            break;
        }
        self->ndim[r] = (int)PyTuple_GET_SIZE(shapes[r]);
        for (int i = 0; i < self->ndim[r]; i++) {
            self->dims[r][i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shapes[r], i));
            if (self->dims[r][i] == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                self->layout = -1;  /* (not numbers: no array will match them anyway) */
            }
        }
    }
    if (graph)
        self->graph = graph_make(self);  /* NULL where it cannot be: launches one by one */
    return (PyObject *)self;
}

static void fastcall_dealloc(FastCall *self)
{
    graph_free(self->graph);
    self->graph = NULL;
    for (int i = 0; i < 3; i++)
        Py_XDECREF(self->seen[i]);
    Py_XDECREF(self->memptr_type);
    free_steps(self);
    Py_XDECREF(self->ndarray_type);
    Py_XDECREF(self->left_shape);
    Py_XDECREF(self->right_shape);
    Py_XDECREF(self->out_shape);
    Py_XDECREF(self->dtype);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------ the call */

/* 1: ``a``'s shape equals ``shape`` and it is C-contiguous; 0: not (no error set) */
static int layout_ok(PyObject *a, PyObject *shape)
{
    PyObject *v;
    int ok;

    if ((v = PyObject_GetAttr(a, str_shape)) == NULL)
        goto fail;
    ok = PyObject_RichCompareBool(v, shape, Py_EQ);
    Py_DECREF(v);
    if (ok != 1)
        goto fail;
    if ((v = PyObject_GetAttr(a, str_c_contiguous)) == NULL)
        goto fail;
    ok = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (ok != 1)
        goto fail;
    return 1;
fail:
    PyErr_Clear();
    return 0;
}

/* 1 if ``ref`` (a weak reference or NULL) refers to ``a``, alive */
static int is_seen(PyObject *ref, PyObject *a)
{
    if (ref == NULL)
        return 0;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(ref, &obj) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_XDECREF(obj);  /* only its identity is compared */
    return obj == a;
#else
    return PyWeakref_GetObject(ref) == a;
#endif
}

/* 1: the array passes the checks and *ptr is its device pointer; 0: it does not (no error
 * set: whatever went wrong, the caller's checked path says it) */
static int check_array(FastCall *self, int role, PyObject *a, PyObject *shape, CUdeviceptr *ptr)
{
    PyObject *v, *data, *ref;
    int ok;
    long dev;

    if (self->layout == 1 || (self->layout == 0 && layout_confirm(self, a)))
        return layout_check(self, role, a, ptr);  /* a CuPy array read in place */
    if (is_seen(self->seen[role], a)) {  /* the same live array as the last call's */
        if (!layout_ok(a, shape))
            return 0;
        *ptr = self->seen_ptr[role];
        return 1;
    }
    if (!PyObject_TypeCheck(a, (PyTypeObject *)self->ndarray_type) || !layout_ok(a, shape))
        return 0;
    if ((v = PyObject_GetAttr(a, str_dtype)) == NULL)
        goto fail;
    ok = v == self->dtype ? 1 : PyObject_RichCompareBool(v, self->dtype, Py_EQ);
    Py_DECREF(v);
    if (ok != 1)
        goto fail;
    if ((data = PyObject_GetAttr(a, str_data)) == NULL)
        goto fail;
    if ((v = PyObject_GetAttr(data, str_device_id)) == NULL) {
        Py_DECREF(data);
        goto fail;
    }
    dev = PyLong_AsLong(v);
    Py_DECREF(v);
    if (dev != self->device_id) { /* also -1 with an error set */
        Py_DECREF(data);
        goto fail;
    }
    v = PyObject_GetAttr(data, str_ptr);
    Py_DECREF(data);
    if (v == NULL)
        goto fail;
    *ptr = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (*ptr == (CUdeviceptr)-1 && PyErr_Occurred())
        goto fail;
    if ((ref = PyWeakref_NewRef(a, NULL)) == NULL) {
        PyErr_Clear();  /* not weakly referenceable: checked in full every call */
    } else {
        PyObject *old = self->seen[role];
        self->seen[role] = ref;
        self->seen_ptr[role] = *ptr;
        Py_XDECREF(old);
    }
    return 1;
fail:
    PyErr_Clear();
    return 0;
}

static PyObject *driver_error(const char *call, CUresult rc)
{
    const char *name = NULL;
    if (drv.get_error_name == NULL || drv.get_error_name(rc, &name) != 0 || name == NULL)
        name = "CUDA_ERROR";
    return PyErr_Format(PyExc_RuntimeError, "%s failed: %s (CUresult %d)", call, name, rc);
}

PyObject *fastcall_run(FastCall *self, PyObject *left, PyObject *right, PyObject *out,
                       unsigned long long stream, CUdeviceptr workspace)
{
    CUdeviceptr ptrs[N_ROLES] = {0, 0, 0, workspace};
    CUcontext ctx = NULL;
    CUresult rc = 0;

    if (!check_array(self, ROLE_LEFT, left, self->left_shape, &ptrs[ROLE_LEFT]) ||
        !check_array(self, ROLE_RIGHT, right, self->right_shape, &ptrs[ROLE_RIGHT]) ||
        !check_array(self, ROLE_OUT, out, self->out_shape, &ptrs[ROLE_OUT]))
        Py_RETURN_NOTIMPLEMENTED;
    if (drv.ctx_get_current != NULL) { /* a thread that has not touched CUDA yet */
        if (drv.ctx_get_current(&ctx) != 0 || ctx == NULL)
            Py_RETURN_NOTIMPLEMENTED;
    }
    /* each launch's parameters in buffers of this call (the steps' own are only read), then
     * the driver calls without the GIL */
    uint64_t params[MAX_STEPS][MAX_PARAM_BYTES / 8];
    size_t sizes[MAX_STEPS];
    void *extra[MAX_STEPS][5];
    const char *failed = NULL;
    for (Py_ssize_t i = 0; i < self->nsteps; i++) {
        Step *st = &self->steps[i];
        if (!st->is_launch)
            continue;
        memcpy(params[i], st->view.buf, st->param_size);
        for (int k = 0; k < st->nslots; k++)
            memcpy((char *)params[i] + 8 * k, &ptrs[st->slots[k]], 8);
        sizes[i] = st->param_size;
        extra[i][0] = PARAM_BUFFER_POINTER;
        extra[i][1] = params[i];
        extra[i][2] = PARAM_BUFFER_SIZE;
        extra[i][3] = &sizes[i];
        extra[i][4] = PARAM_END;
    }
    Py_BEGIN_ALLOW_THREADS
    if (self->graph == NULL || !graph_launch(self->graph, self, extra, ctx, stream, &rc,
                                             &failed)) {
        for (Py_ssize_t i = 0; i < self->nsteps && rc == 0; i++) {
            Step *st = &self->steps[i];
            if (!st->is_launch) {
                rc = drv.memset_d8_async(ptrs[ROLE_OUT], 0, st->memset_bytes,
                                         (CUstream)(uintptr_t)stream);
                failed = "cuMemsetD8Async";
            } else {
                rc = drv.launch_kernel(st->fn, st->grid[0], st->grid[1], st->grid[2],
                                       st->block[0], st->block[1], st->block[2], st->shared,
                                       (CUstream)(uintptr_t)stream, NULL, extra[i]);
                failed = "cuLaunchKernel";
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return driver_error(failed, rc);
    return Py_NewRef(out);
}

static PyObject *fastcall_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames)
{
    FastCall *self = (FastCall *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    unsigned long long stream;
    CUdeviceptr workspace = 0;

    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) || nargs < 4 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "FastCall takes (left, right, out, stream_ptr"
                        "[, workspace_ptr]), positionally");
        return NULL;
    }
    if (self->needs_workspace != (nargs == 5)) {
        PyErr_SetString(PyExc_TypeError, self->needs_workspace ?
                        "this FastCall needs a workspace pointer" :
                        "this FastCall takes no workspace pointer");
        return NULL;
    }
    stream = PyLong_AsUnsignedLongLong(args[3]);
    if (stream == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (nargs == 5) {
        workspace = PyLong_AsUnsignedLongLong(args[4]);
        if (workspace == (CUdeviceptr)-1 && PyErr_Occurred())
            return NULL;
    }
    return fastcall_run(self, args[0], args[1], args[2], stream, workspace);
}

static PyObject *fastcall_repr(FastCall *self)
{
    return PyUnicode_FromFormat("<FastCall of %zd steps, %R x %R -> %R on device %ld>",
                                self->nsteps, self->left_shape, self->right_shape,
                                self->out_shape, self->device_id);
}

static PyObject *fastcall_get_nsteps(FastCall *self, void *closure)
{
    return PyLong_FromSsize_t(self->nsteps);
}

static PyObject *fastcall_get_needs_workspace(FastCall *self, void *closure)
{
    return PyBool_FromLong(self->needs_workspace);
}

static PyObject *fastcall_get_graph(FastCall *self, void *closure)
{
    return PyBool_FromLong(graph_used(self->graph));
}

static PyObject *fastcall_get_in_place(FastCall *self, void *closure)
{
    return PyBool_FromLong(self->layout == 1);
}

static PyGetSetDef fastcall_getset[] = {
    {"in_place", (getter)fastcall_get_in_place, NULL,
     "whether the arrays are read in place (CuPy's layout, confirmed on the first array of "
     "ndarray_type a call met; else through their attributes)", NULL},
    {"graph", (getter)fastcall_get_graph, NULL,
     "whether a call launches its kernels as one CUDA graph (made with graph=True, where the "
     "driver has the entry points, no memset comes first and the graph could be made)", NULL},
    {"nsteps", (getter)fastcall_get_nsteps, NULL, "the number of steps", NULL},
    {"needs_workspace", (getter)fastcall_get_needs_workspace, NULL,
     "whether a call takes a workspace pointer (a fifth argument)", NULL},
    {NULL},
};

PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "xcorr_app._cuda._fastlaunch.FastCall",
    .tp_basicsize = sizeof(FastCall),
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_vectorcall_offset = offsetof(FastCall, vectorcall),
    .tp_repr = (reprfunc)fastcall_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "FastCall(ndarray_type, left_shape, right_shape, out_shape, dtype, device_id, "
              "steps, keep=None, graph=False): a plan call's checks and launches in C (with "
              "graph, as one CUDA graph where it can); "
              "fc(left, right, out, stream_ptr[, workspace_ptr]) -> out or NotImplemented.",
    .tp_getset = fastcall_getset,
    .tp_new = fastcall_new,
};

/* ------------------------------------------------------------------ the module */

static struct PyModuleDef fastlaunch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fastlaunch",
    .m_doc = "A correlation plan's checks and driver launches in one C call.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fastlaunch(void)
{
    PyObject *m;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL) {
        const char *why = dlerror();
        PyErr_Format(PyExc_ImportError, "libcuda.so.1 could not be loaded (%s)",
                     why ? why : "no reason given");
        return NULL;
    }
    drv.launch_kernel = (__typeof__(drv.launch_kernel))dlsym(lib, "cuLaunchKernel");
    drv.memset_d8_async = (__typeof__(drv.memset_d8_async))dlsym(lib, "cuMemsetD8Async");
    drv.get_error_name = (__typeof__(drv.get_error_name))dlsym(lib, "cuGetErrorName");
    drv.ctx_get_current = (__typeof__(drv.ctx_get_current))dlsym(lib, "cuCtxGetCurrent");
    /* the graph entry points (all or none used): the _v2 ones where the driver has them (the
     * struct is v2's, which v1's entry points read as well) */
    drv.graph_create = (__typeof__(drv.graph_create))dlsym(lib, "cuGraphCreate");
    drv.graph_add_kernel_node = (__typeof__(drv.graph_add_kernel_node))dlsym(
        lib, "cuGraphAddKernelNode_v2");
    if (drv.graph_add_kernel_node == NULL)
        drv.graph_add_kernel_node = (__typeof__(drv.graph_add_kernel_node))dlsym(
            lib, "cuGraphAddKernelNode");
    drv.graph_instantiate = (__typeof__(drv.graph_instantiate))dlsym(lib,
                                                                 "cuGraphInstantiateWithFlags");
    drv.graph_exec_kernel_set = (__typeof__(drv.graph_exec_kernel_set))dlsym(
        lib, "cuGraphExecKernelNodeSetParams_v2");
    if (drv.graph_exec_kernel_set == NULL)
        drv.graph_exec_kernel_set = (__typeof__(drv.graph_exec_kernel_set))dlsym(
            lib, "cuGraphExecKernelNodeSetParams");
    drv.graph_launch = (__typeof__(drv.graph_launch))dlsym(lib, "cuGraphLaunch");
    drv.graph_exec_destroy = (__typeof__(drv.graph_exec_destroy))dlsym(lib, "cuGraphExecDestroy");
    drv.graph_destroy = (__typeof__(drv.graph_destroy))dlsym(lib, "cuGraphDestroy");
    drv.stream_is_capturing = (__typeof__(drv.stream_is_capturing))dlsym(lib,
                                                                         "cuStreamIsCapturing");
    if (drv.launch_kernel == NULL || drv.memset_d8_async == NULL) {
        dlclose(lib);
        PyErr_SetString(PyExc_ImportError, "libcuda.so.1 lacks cuLaunchKernel or "
                        "cuMemsetD8Async");
        return NULL;
    }
    /* libcuda stays loaded for the life of the process (CuPy loads it anyway) */
    if ((str_shape = PyUnicode_InternFromString("shape")) == NULL ||
        (str_dtype = PyUnicode_InternFromString("dtype")) == NULL ||
        (str_c_contiguous = PyUnicode_InternFromString("_c_contiguous")) == NULL ||
        (str_data = PyUnicode_InternFromString("data")) == NULL ||
        (str_device_id = PyUnicode_InternFromString("device_id")) == NULL ||
        (str_ptr = PyUnicode_InternFromString("ptr")) == NULL)
        return NULL;
    if (PyType_Ready(&FastCallType) < 0)
        return NULL;
    m = PyModule_Create(&fastlaunch_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastCallType);
    if (PyModule_AddObject(m, "FastCall", (PyObject *)&FastCallType) < 0) {
        Py_DECREF(&FastCallType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "LEFT", ROLE_LEFT) < 0 ||
        PyModule_AddIntConstant(m, "RIGHT", ROLE_RIGHT) < 0 ||
        PyModule_AddIntConstant(m, "OUT", ROLE_OUT) < 0 ||
        PyModule_AddIntConstant(m, "WORKSPACE", ROLE_WORKSPACE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
