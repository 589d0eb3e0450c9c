/* A CuPy array's checks read from the array object itself: its shape, contiguity,
 * dtype, device and pointer as CuPy keeps them, instead of through its attributes.
 *
 * Through the attributes a check cost a tenth of a plan call an array (CuPy builds the shape
 * tuple anew at each `a.shape`; docs/kernels.md, measurements), three arrays a call. CuPy
 * documents its ndarray's object layout as stable from CuPy 8 to 14.3 (its public C API header,
 * cupy_public_c_api.h, reads arrays through it for those versions; 14.3 adds a capsule):
 * after the Python object's head, the Cython vtable pointer, the weak reference list, size,
 * the shape and strides (C++ vectors: begin, end and capacity pointers), three ints
 * (C-contiguous, F-contiguous, 32-bit indexing), dtype, data (a MemoryPointer: after its head
 * and vtable, ptr and device_id) and base. The structs below are that layout, declared here.
 *
 * Nothing is read through them before it is confirmed on a real array of the FastCall's
 * ndarray type (layout_confirm): the object at least as large as the struct, the pointers at
 * the data and dtype places the very objects its attributes give (compared, not followed),
 * then the size, the shape vector, the contiguity flag, the MemoryPointer's type, pointer and
 * device equal to the attributes'. A type that fails is read through its attributes, as
 * before (a newer CuPy of another layout, a stand-in type of the tests). */
#include "_fastlaunch.h"

typedef struct {
    Py_ssize_t *begin, *end, *capacity;
} VecLayout;

typedef struct {
    PyObject_HEAD
    void *vtable;
    intptr_t ptr;
    int device_id;
    PyObject *mem;
} MemoryPointerLayout;

typedef struct {
    PyObject_HEAD
    void *vtable;
    PyObject *weakrefs;
    Py_ssize_t size;
    VecLayout shape, strides;
    int c_contiguous, f_contiguous, index_32_bits;
    PyObject *dtype;
    MemoryPointerLayout *data;
    PyObject *base;
} ArrayLayout;

/* a.<name> as a C long (1) or not (0, no error set) */
static int long_attr(PyObject *a, const char *name, long long *out)
{
    PyObject *v = PyObject_GetAttrString(a, name);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int confirm(PyObject *a)
{
    const ArrayLayout *o = (const ArrayLayout *)a;
    PyObject *data = NULL, *dtype = NULL, *shape = NULL;
    long long v, size, contiguous;
    int ok = 0;

    if (Py_TYPE(a)->tp_basicsize < (Py_ssize_t)sizeof(ArrayLayout))
        return 0;
    if ((data = PyObject_GetAttrString(a, "data")) == NULL ||
        (dtype = PyObject_GetAttrString(a, "dtype")) == NULL ||
        (shape = PyObject_GetAttrString(a, "shape")) == NULL || !PyTuple_Check(shape))
        goto done;
    /* the places first, by identity (nothing followed yet) */
    if ((PyObject *)o->data != data || o->dtype != dtype)
        goto done;
    if (Py_TYPE(data)->tp_basicsize < (Py_ssize_t)sizeof(MemoryPointerLayout))
        goto done;
    if (!long_attr(a, "size", &size) || o->size != size ||
        !long_attr(a, "_c_contiguous", &contiguous) || o->c_contiguous != (contiguous != 0))
        goto done;
    if (o->shape.begin == NULL || o->shape.end - o->shape.begin != PyTuple_GET_SIZE(shape))
        goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        if (n == -1 && PyErr_Occurred())
            goto done;
        if (o->shape.begin[i] != n)
            goto done;
    }
    if (!long_attr(data, "ptr", &v) || (long long)o->data->ptr != v ||
        !long_attr(data, "device_id", &v) || o->data->device_id != v)
        goto done;
    ok = 1;
done:
    PyErr_Clear();
    Py_XDECREF(data);
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    return ok;
}

int layout_confirm(FastCall *self, PyObject *a)
{
    if (self->layout == 0 && PyObject_TypeCheck(a, (PyTypeObject *)self->ndarray_type)) {
        self->layout = confirm(a) ? 1 : -1;
        if (self->layout == 1)
            self->memptr_type = Py_NewRef((PyObject *)Py_TYPE(((ArrayLayout *)a)->data));
    }
    return self->layout == 1;
}

int layout_check(const FastCall *self, int role, PyObject *a, CUdeviceptr *ptr)
{
    const ArrayLayout *o = (const ArrayLayout *)a;
    const MemoryPointerLayout *d;
    const int nd = self->ndim[role];

    if (!PyObject_TypeCheck(a, (PyTypeObject *)self->ndarray_type) || !o->c_contiguous ||
        o->shape.end - o->shape.begin != nd)
        return 0;
    for (int i = 0; i < nd; i++)
        if (o->shape.begin[i] != self->dims[role][i])
            return 0;
    if (o->dtype != self->dtype) {  /* the dtype object is NumPy's own float32 in practice */
        int eq = PyObject_RichCompareBool(o->dtype, self->dtype, Py_EQ);
        if (eq != 1) {
            PyErr_Clear();
            return 0;
        }
    }
    d = o->data;
    if (d == NULL || (PyObject *)Py_TYPE(d) != self->memptr_type || d->device_id != self->device_id)
        return 0;
    *ptr = (CUdeviceptr)d->ptr;
    return 1;
}
