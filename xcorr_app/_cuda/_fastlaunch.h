/* What the sources of the compiled launch path share (_fastlaunch.c: the module, the driver's
 * entry points and FastCall; _fastlaunch_steps.c: its steps read from Python;
 * _fastlaunch_graph.c: FastCall's one-graph launches; _fastlaunch_layout.c: CuPy arrays read
 * in place).  Nothing of CUDA is needed to build
 * it: the few driver types and prototypes are declared here (CUresult = int, handles = void*,
 * CUdeviceptr = unsigned long long, as in cuda.h on 64-bit hosts).
 */
#ifndef XCORR_FASTLAUNCH_H
#define XCORR_FASTLAUNCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUcontext;
typedef void *CUgraph;
typedef void *CUgraphNode;
typedef void *CUgraphExec;
typedef unsigned long long CUdeviceptr;

/* cuda.h's CUDA_KERNEL_NODE_PARAMS_v2; its first fields are v1's, so the entry points of
 * either version read it (kern and ctx NULL: the function, in the current context) */
typedef struct {
    CUfunction func;
    unsigned int grid_x, grid_y, grid_z, block_x, block_y, block_z, shared;
    void **kernel_params;
    void **extra;
    void *kern;
    CUcontext ctx;
} KernelNodeParams;

/* the driver's entry points, dlsym'd from libcuda.so.1 when the module is imported; the
 * graph ones may be NULL (then every call launches its kernels one by one) */
typedef struct {
    CUresult (*launch_kernel)(CUfunction, unsigned int, unsigned int, unsigned int,
                              unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
                              void **, void **);
    CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*get_error_name)(CUresult, const char **);      /* optional */
    CUresult (*ctx_get_current)(CUcontext *);                 /* optional */
    CUresult (*graph_create)(CUgraph *, unsigned int);
    CUresult (*graph_add_kernel_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                      const KernelNodeParams *);
    CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*graph_exec_kernel_set)(CUgraphExec, CUgraphNode, const KernelNodeParams *);
    CUresult (*graph_launch)(CUgraphExec, CUstream);
    CUresult (*graph_exec_destroy)(CUgraphExec);
    CUresult (*graph_destroy)(CUgraph);
    CUresult (*stream_is_capturing)(CUstream, int *);        /* optional */
} Driver;

/* cuda.h's CU_STREAM_PER_THREAD handle */
#define STREAM_PER_THREAD 0x2ULL
/* cuda.h's CU_STREAM_LEGACY handle (the legacy default stream, as 0 is) */
#define STREAM_LEGACY 0x1ULL
/* cuda.h's CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED .. CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD */
#define CAPTURE_ERRORS_FIRST 900
#define CAPTURE_ERRORS_LAST 908

extern Driver drv;

/* cuda.h's markers in the ``extra`` array of cuLaunchKernel */
#define PARAM_BUFFER_POINTER ((void *)(uintptr_t)1)
#define PARAM_BUFFER_SIZE ((void *)(uintptr_t)2)
#define PARAM_END ((void *)(uintptr_t)0)

#define MAX_SLOTS 8
#define MAX_DIMS 8             /* the arrays' dimensions the in-place checks read */
#define MAX_STEPS 4            /* a memset, a rearrangement, the kernel: 3 at most today */
#define MAX_PARAM_BYTES 4096   /* the driver's own limit on kernel parameters */
enum { ROLE_LEFT, ROLE_RIGHT, ROLE_OUT, ROLE_WORKSPACE, N_ROLES };

typedef struct {
    int is_launch;
    size_t memset_bytes;
    CUfunction fn;
    unsigned int grid[3], block[3], shared;
    Py_buffer view;  /* holds the buffer object (view.obj) */
    int has_view;
    size_t param_size;
    int nslots;
    int slots[MAX_SLOTS];
} Step;

/* A one-graph launch of a FastCall's kernels (_fastlaunch_graph.c) */
typedef struct GraphLaunch GraphLaunch;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *ndarray_type;
    PyObject *left_shape, *right_shape, *out_shape;
    PyObject *dtype;
    PyObject *keep;
    long device_id;
    int needs_workspace;
    Py_ssize_t nsteps;
    Step *steps;
    GraphLaunch *graph;  /* NULL: the kernels are launched one by one */
    /* the last array checked in each role (a weak reference) and its device pointer: the
     * same live array again has only its shape and contiguity read (what may change in place;
     * a CuPy array's data, dtype and device may not) */
    PyObject *seen[3];
    CUdeviceptr seen_ptr[3];
    /* CuPy arrays read in place (_fastlaunch_layout.c): 0 not tried yet, 1 confirmed on an
     * array of ndarray_type, -1 not this type's layout (its attributes are read); the
     * expected shapes of left, right, out as numbers; the data's MemoryPointer type */
    int layout;
    int ndim[3];
    Py_ssize_t dims[3][MAX_DIMS];
    PyObject *memptr_type;
} FastCall;

extern PyTypeObject FastCallType;

/* One call's work after its arguments are parsed: ``out``, NotImplemented (a check failed, or
 * no current context: nothing launched, no error set), or NULL with RuntimeError (the driver
 * refused). */
PyObject *fastcall_run(FastCall *self, PyObject *left, PyObject *right, PyObject *out,
                       unsigned long long stream, CUdeviceptr workspace);

/* _fastlaunch_steps.c: read step ``index`` (0, or -1 with an error set); release the steps */
int parse_step(PyObject *item, Step *st, Py_ssize_t index);
void free_steps(FastCall *self);

/* _fastlaunch_layout.c: whether ``a`` confirms (or confirmed) that arrays of the FastCall's
 * ndarray type may be read in place (with the GIL; sets self->layout on the first array of
 * that type); then the checks of ``a`` in ``role`` read in place: 1 and *ptr set, or 0 */
int layout_confirm(FastCall *self, PyObject *a);
int layout_check(const FastCall *self, int role, PyObject *a, CUdeviceptr *ptr);

/* _fastlaunch_graph.c */
int graph_entry_points(void);  /* 1 where the driver has every graph entry point */
GraphLaunch *graph_make(const FastCall *fc);  /* NULL: not possible here (no error set) */
/* Without the GIL: launch the steps as the graph, their parameters in extra[i]; 1 if it did
 * (*rc the driver's answer, *failed the call that gave it), 0 if the caller must launch them
 * one by one (another context current, another stream than the graph's last launch, or a
 * parameter update the driver refused). */
int graph_launch(GraphLaunch *g, const FastCall *fc, void *extra[][5], CUcontext ctx,
                 unsigned long long stream, CUresult *rc, const char **failed);
int graph_used(const GraphLaunch *g);
void graph_free(GraphLaunch *g);

#endif
