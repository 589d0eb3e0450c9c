/* A FastCall's kernels as one CUDA graph whose parameters are set before each launch (the
 * launch recorded once and replayed with new pointers).
 *
 * Why: enqueueing a kernel with new pointers as a graph (cuGraphExecKernelNodeSetParams +
 * cuGraphLaunch) costs the host about as much as cuLaunchKernel with a packed buffer, but the
 * GPU takes graph launches faster back to back (docs/pipelines.md has the figures).
 *
 * A graph launch is ordered behind the graph's previous launch, whichever stream that was
 * on: to keep calls on different streams independent, the graph serves the stream of its first
 * launch, and a call on another stream launches its kernels one by one (as fast as before
 * graphs).  So do calls on the per-thread default stream (one handle, a stream per thread),
 * calls on a stream being captured (the kernels go into the capture as before), and every
 * call after the driver refused a parameter update or a graph launch.  The parameter update and the launch are one step
 * under a lock (threads share the graph).  Plans whose call zeroes the output first (a
 * memset) launch one by one.  A call whose parameters are those of the graph's last launch
 * (a pipeline that refills the same buffers) launches the graph without updating it.
 */
#include <string.h>

#include "_fastlaunch.h"

struct GraphLaunch {
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode nodes[MAX_STEPS];
    CUcontext ctx;              /* the context it was made in */
    unsigned long long stream;  /* of its last launch */
    int launched;               /* launched at least once */
    int broken;                 /* an update or a launch was refused: not used any more */
    PyThread_type_lock lock;
    void *last[MAX_STEPS];      /* each node's parameters as last set (param_size bytes) */
};

int graph_entry_points(void)
{
    return drv.graph_create && drv.graph_add_kernel_node && drv.graph_instantiate &&
           drv.graph_exec_kernel_set && drv.graph_launch && drv.graph_exec_destroy &&
           drv.graph_destroy && drv.ctx_get_current;
}

static KernelNodeParams node_params(const Step *st, void **extra)
{
    KernelNodeParams kp;
    memset(&kp, 0, sizeof kp);
    kp.func = st->fn;
    kp.grid_x = st->grid[0];
    kp.grid_y = st->grid[1];
    kp.grid_z = st->grid[2];
    kp.block_x = st->block[0];
    kp.block_y = st->block[1];
    kp.block_z = st->block[2];
    kp.shared = st->shared;
    kp.extra = extra;
    return kp;
}

void graph_free(GraphLaunch *g)
{
    if (g == NULL)
        return;
    /* the driver keeps whatever launch is still running; errors at exit are of no use */
    if (g->exec != NULL)
        (void)drv.graph_exec_destroy(g->exec);
    if (g->graph != NULL)
        (void)drv.graph_destroy(g->graph);
    if (g->lock != NULL)
        PyThread_free_lock(g->lock);
    for (int i = 0; i < MAX_STEPS; i++)
        PyMem_Free(g->last[i]);
    PyMem_Free(g);
}

GraphLaunch *graph_make(const FastCall *fc)
{
    GraphLaunch *g;
    CUcontext ctx = NULL;

    if (!graph_entry_points() || fc->nsteps < 1 || fc->nsteps > MAX_STEPS)
        return NULL;
    for (Py_ssize_t i = 0; i < fc->nsteps; i++)
        if (!fc->steps[i].is_launch)
            return NULL;  /* a memset first: launched one by one */
    if (drv.ctx_get_current(&ctx) != 0 || ctx == NULL)
        return NULL;
    g = PyMem_Calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    g->ctx = ctx;
    g->lock = PyThread_allocate_lock();
    if (g->lock == NULL || drv.graph_create(&g->graph, 0) != 0) {
        graph_free(g);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < fc->nsteps; i++) {
        const Step *st = &fc->steps[i];
        uint64_t params[MAX_PARAM_BYTES / 8];
        size_t size = st->param_size;
        void *extra[5] = {PARAM_BUFFER_POINTER, params, PARAM_BUFFER_SIZE, &size, PARAM_END};
        KernelNodeParams kp = node_params(st, extra);
        memcpy(params, st->view.buf, st->param_size);  /* its pointers are set at each call */
        g->last[i] = PyMem_Malloc(st->param_size);
        if (g->last[i] == NULL) {
            graph_free(g);
            return NULL;
        }
        memcpy(g->last[i], params, st->param_size);  /* what the node holds */
        if (drv.graph_add_kernel_node(&g->nodes[i], g->graph, i ? &g->nodes[i - 1] : NULL,
                                      i ? 1 : 0, &kp) != 0) {
            graph_free(g);
            return NULL;
        }
    }
    if (drv.graph_instantiate(&g->exec, g->graph, 0) != 0) {
        g->exec = NULL;
        graph_free(g);
        return NULL;
    }
    return g;
}

int graph_launch(GraphLaunch *g, const FastCall *fc, void *extra[][5], CUcontext ctx,
                 unsigned long long stream, CUresult *rc, const char **failed)
{
    int launched = 0;

    if (ctx != g->ctx || stream == STREAM_PER_THREAD)
        return 0;
    /* the legacy default stream (0, or its handle) is never captured: no query (a call on
     * it while another stream captures in global mode fails at the launch, below) */
    if (drv.stream_is_capturing != NULL && stream != 0 && stream != STREAM_LEGACY) {
        int status = 0;
        if (drv.stream_is_capturing((CUstream)(uintptr_t)stream, &status) != 0 || status != 0)
            return 0;  /* being captured (or unknown): the kernels, one by one */
    }
    PyThread_acquire_lock(g->lock, WAIT_LOCK);
    if (!__atomic_load_n(&g->broken, __ATOMIC_RELAXED) &&
        (!g->launched || g->stream == stream)) {
        CUresult r = 0;
        for (Py_ssize_t i = 0; i < fc->nsteps && r == 0; i++) {
            const size_t size = fc->steps[i].param_size;
            if (memcmp(g->last[i], extra[i][1], size) == 0)
                continue;  /* the node holds these already */
            KernelNodeParams kp = node_params(&fc->steps[i], extra[i]);
            r = drv.graph_exec_kernel_set(g->exec, g->nodes[i], &kp);
            if (r == 0)
                memcpy(g->last[i], extra[i][1], size);
        }
        if (r != 0) {
            /* the caller launches one by one, now and from now on */
            __atomic_store_n(&g->broken, 1, __ATOMIC_RELAXED);
        } else {
            *rc = drv.graph_launch(g->exec, (CUstream)(uintptr_t)stream);
            *failed = "cuGraphLaunch";
            launched = 1;
            if (*rc == 0) {
                g->launched = 1;
                g->stream = stream;
            } else if (*rc < CAPTURE_ERRORS_FIRST || *rc > CAPTURE_ERRORS_LAST) {
                /* the error goes to the caller; later calls launch one by one (a capture's
                 * error, of the caller's capture elsewhere, leaves the graph as it was) */
                __atomic_store_n(&g->broken, 1, __ATOMIC_RELAXED);
            }
        }
    }
    PyThread_release_lock(g->lock);
    return launched;
}

int graph_used(const GraphLaunch *g)
{
    return g != NULL && !__atomic_load_n(&g->broken, __ATOMIC_RELAXED);
}
