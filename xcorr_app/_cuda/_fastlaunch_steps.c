/* A FastCall's steps read from their Python description (see _fastlaunch.c): a memset of the
 * output, or a kernel launch with its packed parameters and the pointers' slots in them. */
#include "_fastlaunch.h"

static int parse_dims(PyObject *obj, unsigned int dims[3], const char *what)
{
    PyObject *seq = PySequence_Fast(obj, "");
    if (seq == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of 3 positive ints", what);
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(seq) != 3) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s must be a tuple of 3 positive ints", what);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == (unsigned long)-1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (v == 0 || v > 0xFFFFFFFFUL) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s must be a tuple of 3 positive ints", what);
            return -1;
        }
        dims[i] = (unsigned int)v;
    }
    Py_DECREF(seq);
    return 0;
}

int parse_step(PyObject *item, Step *st, Py_ssize_t index)
{
    PyObject *kind, *fn, *grid, *block, *buffer, *slots, *seq;
    unsigned long long fnptr, shared, param_size, nbytes;

    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1 ||
        !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))) {
        PyErr_Format(PyExc_TypeError, "step %zd must be a tuple ('memset', nbytes) or "
                     "('launch', ...)", index);
        return -1;
    }
    kind = PyTuple_GET_ITEM(item, 0);
    if (PyUnicode_CompareWithASCIIString(kind, "memset") == 0) {
        if (PyTuple_GET_SIZE(item) != 2) {
            PyErr_Format(PyExc_TypeError, "step %zd: ('memset', nbytes)", index);
            return -1;
        }
        nbytes = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 1));
        if (nbytes == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        st->is_launch = 0;
        st->memset_bytes = (size_t)nbytes;
        return 0;
    }
    if (PyUnicode_CompareWithASCIIString(kind, "launch") != 0 || PyTuple_GET_SIZE(item) != 8) {
        PyErr_Format(PyExc_TypeError, "step %zd must be ('memset', nbytes) or ('launch', "
                     "function, grid, block, shared_mem, buffer, param_size, slots)", index);
        return -1;
    }
    fn = PyTuple_GET_ITEM(item, 1);
    grid = PyTuple_GET_ITEM(item, 2);
    block = PyTuple_GET_ITEM(item, 3);
    buffer = PyTuple_GET_ITEM(item, 5);
    slots = PyTuple_GET_ITEM(item, 7);
    fnptr = PyLong_AsUnsignedLongLong(fn);
    if (fnptr == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (fnptr == 0) {
        PyErr_Format(PyExc_ValueError, "step %zd: the function pointer is 0", index);
        return -1;
    }
    if (parse_dims(grid, st->grid, "grid") < 0 || parse_dims(block, st->block, "block") < 0)
        return -1;
    shared = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 4));
    if (shared == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (shared > 0xFFFFFFFFULL) {
        PyErr_Format(PyExc_ValueError, "step %zd: shared_mem too large", index);
        return -1;
    }
    param_size = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 6));
    if (param_size == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    seq = PySequence_Fast(slots, "slots must be a sequence of ints (0 left, 1 right, 2 out, "
                                 "3 workspace)");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > MAX_SLOTS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "step %zd: 1 to %d pointer slots, got %zd", index,
                     MAX_SLOTS, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long role = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if (role == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (role < 0 || role >= N_ROLES) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "step %zd: slot role %ld is not 0 (left), 1 "
                         "(right), 2 (out) or 3 (workspace)", index, role);
            return -1;
        }
        st->slots[i] = (int)role;
    }
    Py_DECREF(seq);
    st->nslots = (int)n;
    if (PyObject_GetBuffer(buffer, &st->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    st->has_view = 1;
    if (param_size < 8 * (unsigned long long)n || param_size > (unsigned long long)st->view.len
        || param_size > MAX_PARAM_BYTES) {
        PyErr_Format(PyExc_ValueError, "step %zd: param_size %llu must hold the %zd pointers, "
                     "fit the buffer of %zd bytes and be at most %d", index, param_size, n,
                     st->view.len, MAX_PARAM_BYTES);
        return -1;
    }
    st->is_launch = 1;
    st->fn = (CUfunction)(uintptr_t)fnptr;
    st->shared = (unsigned int)shared;
    st->param_size = (size_t)param_size;
    return 0;
}

void free_steps(FastCall *self)
{
    if (self->steps != NULL) {
        for (Py_ssize_t i = 0; i < self->nsteps; i++)
            if (self->steps[i].has_view)
                PyBuffer_Release(&self->steps[i].view);
        PyMem_Free(self->steps);
        self->steps = NULL;
    }
    self->nsteps = 0;
}
