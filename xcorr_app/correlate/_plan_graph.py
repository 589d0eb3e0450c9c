"""CUDA graphs of correlation plans: a plan's launch recorded once, bound to fixed buffers,
replayed for the cost of one ``cudaGraphLaunch`` (:meth:`CorrelationPlan.graph
<xcorr_app.correlate._correlation_plan.CorrelationPlan.graph>` makes one).

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> from xcorr_app import correlation_plan  # doctest: +SKIP
>>> plan = correlation_plan((32, 32), (32, 32), max_shift=4)  # doctest: +SKIP
>>> ref, mov = cp.zeros((32, 32), cp.float32), cp.zeros((32, 32), cp.float32)  # doctest: +SKIP
>>> g = plan.graph(ref, mov)  # doctest: +SKIP
>>> mov[...] = cp.random.rand(32, 32, dtype=cp.float32)  # doctest: +SKIP
>>> g.replay().shape  # doctest: +SKIP
(9, 9)
"""

from __future__ import annotations

from contextlib import nullcontext

from ..errors import InputError, XcorrError

__all__ = ["CorrelationGraph"]


class CorrelationGraph:
    """A plan's launch (and its memset and rearrangement, if any) recorded once in a CUDA graph
    (CuPy's stream capture), **bound to fixed buffers** :attr:`left`, :attr:`right` and
    :attr:`out`: :meth:`replay` runs it again on whatever those arrays hold.

    To correlate new data, copy it into the bound inputs on the stream of the replay, then
    replay::

        g = plan.graph(left_buf, right_buf)
        for frame in frames:
            right_buf[...] = frame  # or cupy.copyto(right_buf, frame)
            g.replay()              # g.out holds the surface when the stream gets there

    A replay costs one ``cudaGraphLaunch`` of host time, whatever the plan launches.  Replays
    on one stream are ordered; replays on different streams at once would share the bound
    buffers (and race on ``out``): use one graph per stream.  The graph keeps the plan, the
    buffers and every temporary the recorded work uses (FFT plans record their temporaries
    from a memory pool of their own, kept with the graph).
    """

    def __init__(self, plan, left, right, out=None):
        if plan.device != "gpu":
            raise InputError("CUDA graphs need a GPU plan (device='gpu' or 'auto' with a GPU)")
        import cupy as cp

        plan.check_inputs(left, right)
        if out is not None:
            plan.check_out(out)
        self.plan, self.left, self.right = plan, left, right
        self._stream = stream = cp.cuda.Stream(non_blocking=True)
        # the inputs are complete where the caller's stream is now
        stream.wait_event(cp.cuda.get_current_stream().record())
        self.out = out if out is not None else plan.allocate(plan.out_shape, stream)
        self._pool = None
        if plan.fast:
            self._workspace = plan.new_workspace(stream)
            ptrs = (left.data.ptr, right.data.ptr, self.out.data.ptr, stream.ptr)

            def work():
                plan.enqueue(*ptrs, self._workspace)
        else:
            def work():
                plan.execute(left, right, self.out)

            with stream:
                work()  # cuFFT plans and compiled kernels made once, in the usual pool
            self._pool = cp.cuda.MemoryPool()  # the recorded work's temporaries: kept here
        allocator = nullcontext() if self._pool is None else \
            cp.cuda.using_allocator(self._pool.malloc)
        try:
            with stream, allocator:
                work()  # warm: compiled, and the pool holds the blocks the capture takes
                stream.synchronize()
                stream.begin_capture()
                try:
                    work()
                finally:
                    graph = stream.end_capture()
        except Exception as exc:  # noqa: BLE001 - say which plan could not be recorded
            raise XcorrError(f"the launch of plan {plan.method} could not be recorded in a "
                             f"CUDA graph ({type(exc).__name__}: {exc})") from exc
        self._graph = graph

    def replay(self, stream=None):
        """Run the recorded work again on ``stream`` (default: the current stream), without
        synchronizing; returns :attr:`out` (ready when the stream gets there)."""
        self._graph.launch(stream)
        return self.out

    launch = replay
