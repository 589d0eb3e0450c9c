"""Alignment and filtering on a Dask cluster (``pip install 'xcorr-app[dask]'``).

The single-GPU chunk functions of :mod:`xcorr_app.alignment._pipeline` and
:mod:`xcorr_app.filters._api` are mapped over ranges of frames, one Dask task each
(:mod:`xcorr_app.distributed._dask_tasks`: what runs on a worker; this module: the client).
A TIFF path is never read by the client beyond its header: every task opens the file and reads
its own frames, so a stack larger than one machine's memory is shared out.  A dask array is used block by block (whole
frames per block).  The reference is prepared and the correlation plan chosen once, in one
task, and that task's result is shared by every measuring task; ``reference="mean"`` is summed
by the tasks and added up in frame order.  Every frame is measured as a single-process run
measures it, so the shifts are those of :func:`xcorr_app.align` (on the CPU bit for bit).

On a worker with GPUs a task runs on the GPU numbered by the worker's name modulo the GPU
count (one worker per GPU in :func:`local_client`); dask-cuda's workers each see one GPU.

Examples
--------
>>> import numpy as np
>>> import dask.array as da
>>> from scipy import ndimage as ndi
>>> base = ndi.gaussian_filter(np.random.default_rng(0).random((48, 64)), 2)
>>> frames = np.stack([base, np.roll(base, (1, -2), axis=(0, 1))])
>>> res = align(da.from_array(frames, chunks=(1, 48, 64)), max_shift=4, device="cpu",
...             scheduler="sync")
>>> np.round(res.shifts).tolist()
[[0.0, 0.0], [-1.0, 2.0]]
"""

from __future__ import annotations

import collections
import contextlib
import importlib
from pathlib import Path

import numpy as np

from .. import backend
from ..errors import InputError, XcorrError
from ..streaming import chunk_bounds
from ._dask_tasks import (WORKER_GPU_ENV, aligned_sum_task, channels_block, channels_task,
                          filter_task, frame_sum, mean_of_sums, measure_task, patch_setup_task,
                          patch_task, read_frame, reference_task, shift_task)
INSTALL_HINT = "pip install 'xcorr-app[dask]' (dask[array] and distributed)"
#: frames per task when the input is a path
TASK_FRAMES = 128
#: ``reference="refined"`` on a cluster: its template passes run on one device only
REFINED_NOTE = ("reference refined on Dask: the rigid shifts are measured in one pass against "
                "the first frame (the template passes of xcorr_app.align run on one device "
                "only)")


def _require_dask():
    try:
        importlib.import_module("dask.array")
    except ImportError:
        raise XcorrError(f"Dask is not installed; {INSTALL_HINT}") from None


def is_dask_array(a) -> bool:
    """True for a dask array (without importing Dask)."""
    return type(a).__module__.startswith("dask.array")

def filter_channels(stack_or_path, *, bank=None, mix=None, device="auto", task_frames=None):
    """A bank (``xcorr filter --bank``) or a mix (``--mix``) over every channel, as a lazy
    float32 (N, F, H, W) dask array: each task reads its frames of every channel of the TIFF
    (or takes a block of an (N, C, H, W) dask array)."""
    _require_dask()
    import dask.array as da
    from dask import delayed

    from ..filters._banks import channel_filter
    from ..io import ChannelStack

    if isinstance(stack_or_path, (str, Path)):
        with ChannelStack(stack_or_path) as src:  # the header only
            n, shape, channels = src.n_frames, src.frame_shape, src.n_channels
        n_out, _ = channel_filter(bank, mix, channels)
        step = max(1, int(task_frames or TASK_FRAMES))
        blocks = [da.from_delayed(delayed(channels_task)(stack_or_path, a, b, bank, mix, device),
                                  shape=(b - a, n_out, *shape), dtype=np.float32)
                  for a, b in chunk_bounds(0, n, step)]
        return da.concatenate(blocks, axis=0)
    arr = stack_or_path if is_dask_array(stack_or_path) else da.from_array(stack_or_path)
    if arr.ndim != 4:
        raise InputError(f"a multi-channel stack must be (N, C, H, W), got shape {arr.shape}")
    n_out, _ = channel_filter(bank, mix, arr.shape[1])
    arr = arr.rechunk((task_frames or arr.chunks[0], -1, -1, -1))
    return arr.map_blocks(channels_block, bank, mix, device, dtype=np.float32,
                          chunks=(arr.chunks[0], (n_out,), (arr.shape[2],), (arr.shape[3],)))

# ----------------------------------------------------------------------------- on the client

class _Input:
    """What the client knows of the input: size, frame names, and one source per task."""

    def __init__(self, stack_or_path, channel, task_frames):
        from ..io import open_source

        _require_dask()
        if isinstance(stack_or_path, (str, Path)):
            with open_source(stack_or_path, channel) as src:  # the header only
                self.n, self.frame_shape, self.dtype = src.n_frames, src.frame_shape, src.dtype
                self.sources = [src.source_name(i) for i in range(self.n)]
                self.notes = list(src.notes)
            step = max(1, int(task_frames or TASK_FRAMES))
            self.ranges = chunk_bounds(0, self.n, step)
            self._path = ("path", stack_or_path, channel)
            self.array = None
            return
        if not is_dask_array(stack_or_path):
            import dask.array as da

            stack_or_path = da.from_array(np.asarray(stack_or_path),
                                          chunks=(task_frames or TASK_FRAMES, -1, -1)
                                          if np.ndim(stack_or_path) == 3 else -1)
        arr = stack_or_path[None] if stack_or_path.ndim == 2 else stack_or_path
        if arr.ndim != 3 or 0 in arr.shape:
            raise InputError(f"a stack must be (N, H, W) or one (H, W) frame, got shape "
                             f"{stack_or_path.shape}")
        if task_frames:
            arr = arr.rechunk((int(task_frames), -1, -1))
        self.array = arr = arr.rechunk({1: -1, 2: -1})  # whole frames per block
        self.n, self.frame_shape, self.dtype = arr.shape[0], tuple(arr.shape[1:]), arr.dtype
        self.sources, self.notes = ["array"] * self.n, []
        bounds = np.cumsum((0,) + arr.chunks[0])
        self.ranges = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
        self._blocks = arr.to_delayed().ravel()

    def source(self, k, with_before=False):
        """Task ``k``'s source (a delayed block of a dask array, or the path)."""
        if self.array is None:
            return self._path
        start = self.ranges[k][0]
        before = self.array[start - 1] if with_before and start > 0 else None
        return (self._blocks[k], before, self.n)

    def frame(self, i):
        """Frame ``i`` as a delayed value (for a reference)."""
        from dask import delayed

        if self.array is not None:
            return self.array[i]
        return delayed(read_frame)(self._path, i)

def _reference_image(opts, inp):
    """The reference image as a delayed value, or ``None`` where the reference task reads it
    itself (a path input and a frame index, or an image file)."""
    from dask import delayed

    from ..alignment._references import mean_count, reference_index

    if opts.previous:
        return None
    ref = opts.reference
    count = mean_count(ref, inp.n)
    if count is not None:
        parts = [delayed(frame_sum)(inp.source(k), a, min(b, count))
                 for k, (a, b) in enumerate(inp.ranges) if a < count]
        return delayed(mean_of_sums)(parts, count)
    if inp.array is None:
        return None
    idx = 0 if isinstance(ref, str) and ref == "first" else reference_index(ref)
    if idx is not None:
        if not -inp.n <= idx < inp.n:
            raise InputError(f"reference index {idx} is out of range for {inp.n} frames")
        return inp.frame(idx % inp.n)
    return None  # a file or an array: read as the single-process run reads it


def _compute(tasks, client, scheduler, sizes=None, progress=None):
    """The tasks' results; with a client, ``progress(size)`` as each task finishes."""
    import dask

    if client is None:
        return dask.compute(*tasks, scheduler=scheduler)
    futures = client.compute(list(tasks))
    if progress is not None:
        from distributed import as_completed

        size = dict(zip(futures, sizes))
        for fut in as_completed(futures):
            if fut.status == "error":  # the first failure: stop the rest, raise it here
                exc = fut.exception()
                client.cancel([f for f in futures if f is not fut])
                raise exc
            progress(size[fut])
    return client.gather(futures)


def align(stack_or_path, reference="first", *, max_shift=None, normalization="zncc",
          subpixel="gaussian", upsample=20, prefilter="auto", window="none", verify=True,
          min_confidence=None, interpolate_low=False, channel=None, chunk_frames=64,
          max_memory=None, device="auto", task_frames=None, client=None, scheduler=None,
          progress=None, features=None, tune=False, patches=None, patch_overlap=None,
          max_deviation=4, patch_template_passes=0):
    """:func:`xcorr_app.align` on a Dask cluster.

    Parameters
    ----------
    stack_or_path : dask array, ndarray, str or Path
        A (N, H, W) dask array (its blocks along the first axis become tasks; NumPy blocks), an
        in-memory stack, or a TIFF file / folder read by the workers themselves.
    reference, max_shift, normalization, subpixel, upsample, prefilter, window, verify, \
min_confidence, interpolate_low, channel, features
        As :func:`xcorr_app.align`.
    chunk_frames, max_memory
        Per task, as :func:`xcorr_app.align` (``max_memory`` applies to each worker).
    device : {"auto", "gpu", "cpu"}
        Resolved on each worker: ``auto`` uses the worker's GPU where it has one.
    task_frames : int, optional
        Frames per task (default: 128 for a path, the array's own blocks otherwise).
    client : distributed.Client, optional
        Run on this client's cluster; default: Dask's current scheduler (an active client, or
        ``scheduler``).
    scheduler : str, optional
        A Dask scheduler name (``"threads"``, ``"processes"``, ``"sync"``) when there is no
        client.
    progress : callable(int), optional
        With a client: called with the number of frames of each task as it finishes (the
        rigid pass).
    patches, patch_overlap, max_deviation, patch_template_passes
        As :func:`xcorr_app.align`: after the rigid pass, the patch pass (:func:`_patch_field`):
        the same motion field as one process (on the CPU bit for bit where every task starts at
        a multiple of the chunk's frames, as with a path's tasks of :data:`TASK_FRAMES`: the
        template sums are added chunk by chunk in frame order; else within rounding).

    Returns
    -------
    AlignResult
        With ``settings["dask"]`` set; ``apply`` of it reads the input again.
    """
    _require_dask()
    from dask import delayed

    from ..alignment._options import AlignOptions, auto_notes, check_frame_shape, search_range
    from ..alignment._result import result_from_table
    from ..streaming import parse_memory

    opts = AlignOptions(reference, max_shift, normalization, subpixel, upsample, prefilter,
                        window, verify, min_confidence, interpolate_low, channel, features, tune)
    budget = None if max_memory is None else parse_memory(max_memory)
    if chunk_frames < 1:
        raise InputError(f"chunk_frames must be >= 1, got {chunk_frames}")
    inp = _Input(stack_or_path, channel, task_frames)
    check_frame_shape(inp.frame_shape)
    if patches is not None:  # the options and a grid that cannot fit fail before any pass
        from ..alignment._patch_pass import check_patch_reference, check_template_passes, \
            patch_grid

        check_patch_reference(opts)
        check_template_passes(patch_template_passes)
        patch_grid(inp.frame_shape, [[0.0, 0.0]], patches, patch_overlap, max_deviation)
    opts, why = _resolve_auto(opts, stack_or_path, inp, channel)
    image = _reference_image(opts, inp)
    ref = delayed(reference_task)(opts, inp.source(0), image, device, chunk_frames, budget)
    tasks = [delayed(measure_task)(opts, inp.source(k, with_before=opts.previous), a, b, ref,
                                    device, chunk_frames, budget)
             for k, (a, b) in enumerate(inp.ranges)]
    parts = _compute(tasks, client, scheduler, [b - a for a, b in inp.ranges], progress)
    table = np.concatenate([t for t, _ in parts])
    settings = {"search_range": list(search_range(inp.frame_shape, opts.max_shift)),
                "device": device, "chunk_frames": chunk_frames, "max_memory": budget,
                "notes": inp.notes, "dask": {"tasks": len(tasks),
                                             "task_frames": [b - a for a, b in inp.ranges]}}
    settings["prefilter_auto"] = why
    res = result_from_table(opts, table, inp.sources, settings, parts[0][1] or None,
                            stack_or_path)
    res.notes[:0] = auto_notes(opts, why)
    if opts.refined:  # (said, not silent: the result is not the one-device run's)
        res.notes.append(REFINED_NOTE)
    if patches is not None:
        res.set_field(_patch_field(opts, inp, res.shifts, (patches, patch_overlap, max_deviation),
                                   int(patch_template_passes), (device, chunk_frames, budget),
                                   client, scheduler))
        res.settings["patches"]["template_passes"] = int(patch_template_passes)
    return res


def _patch_field(opts, inp, rigid, grid_args, passes, run, client, scheduler):
    """The patch pass of :func:`align` (one process: :func:`~xcorr_app.alignment._patch_pass.
    measure_field`): the grid on the client; the template in one task (``refined``: of the
    tasks' aligned sums, added up in frame order); every pass one task per range of frames
    (:func:`patch_task`), whose warped sums (``passes``) are added up in frame order into the
    next pass's template (:func:`patch_setup_task`); one graph, computed at once."""
    from dask import delayed

    from ..alignment._patch_pass import fold_parts, patch_grid
    from ..alignment._patch_rows import field_from_rows

    grid = delayed(patch_grid(inp.frame_shape, rigid, *grid_args), pure=True)
    shared = delayed(rigid, pure=True)  # one node of the graph, sent once to each worker
    sums = None
    if opts.refined:
        for k, (a, b) in enumerate(inp.ranges):
            sums = delayed(fold_parts)(sums, delayed(aligned_sum_task)(
                opts, inp.source(k), a, b, shared, *run))
    image = None if opts.refined else _reference_image(opts, inp)
    setup = delayed(patch_setup_task)(opts, inp.source(0), grid, image, None, sums, *run)
    for k in range(passes + 1):
        rows, sums = [], None
        for j, (a, b) in enumerate(inp.ranges):
            r, parts = delayed(patch_task, nout=2)(opts, inp.source(j), a, b, setup, shared,
                                                  k < passes, *run)
            rows.append(r)
            if k < passes:
                sums = delayed(fold_parts)(sums, parts)
        if k < passes:
            setup = delayed(patch_setup_task)(opts, inp.source(0), grid, None, setup, sums,
                                              *run)
    *rows, setup = _compute([*rows, setup], client, scheduler)
    return field_from_rows(np.concatenate(rows), setup)


def _resolve_auto(opts, stack_or_path, inp, channel):
    """``prefilter="auto"`` decided on the client from a few frames, as :func:`xcorr_app.align`
    does (:func:`xcorr_app.alignment._options.resolve_auto`): ``(opts, why)``."""
    from ..alignment._options import resolve_auto
    from ..io import ArraySource, open_source

    if opts.prefilter != "auto":
        return opts, None
    src = open_source(stack_or_path, channel) if inp.array is None else ArraySource(inp.array)
    with src:
        return resolve_auto(opts, src)


def _as_array(inp, task, frame_shape, *args):
    """A lazy float32 dask array of ``task(source, start, stop, *args)`` per range of frames
    (CuPy blocks where the input's blocks are CuPy)."""
    import dask.array as da
    from dask import delayed

    meta = None
    if inp.array is not None and backend.is_cupy_array(inp.array._meta):
        meta = backend.array_module_of(inp.array._meta).empty((0, 0, 0), np.float32)
    blocks = [da.from_delayed(delayed(task)(inp.source(k), a, b, *args),
                              shape=(b - a, *frame_shape), dtype=np.float32, meta=meta)
              for k, (a, b) in enumerate(inp.ranges)]
    return da.concatenate(blocks, axis=0)


def filter(stack_or_path, kernel, *, mode="reflect", cval=0.0, channel=None, device="auto",
           task_frames=None):
    """The filtered stack as a lazy float32 dask array (one task per block of frames).

    ``kernel`` is a spec of :func:`xcorr_app.filters._api.parse_kernel_spec` (``gaussian:2``,
    ``dog:1,4``, ``FILE.npy``...); each task runs the reuse kernels on its worker's GPU, or
    scipy.ndimage on the CPU, on its own frames.
    """
    from ..filters import MODES, parse_kernel_spec

    parse_kernel_spec(kernel)  # a bad spec fails here, not in every task
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    inp = _Input(stack_or_path, channel, task_frames)
    return _as_array(inp, filter_task, inp.frame_shape, kernel, mode, cval, device)


def apply_shifts(stack_or_path, shifts, *, channel=None, fill=0.0, resample="bilinear",
                 crop=False, device="auto", task_frames=None):
    """The aligned stack as a lazy float32 dask array: :func:`xcorr_app.apply_shifts` per
    block of frames."""
    from ..alignment._apply import common_area

    inp = _Input(stack_or_path, channel, task_frames)
    shifts = np.asarray(shifts, dtype=np.float64)
    if shifts.shape != (inp.n, 2):
        raise InputError(f"shifts of shape {shifts.shape} do not match {inp.n} frames")
    h, w = inp.frame_shape
    box = common_area(shifts, inp.frame_shape) if crop else (0, h, 0, w)
    from dask import delayed

    shared = delayed(shifts, pure=True)  # one node of the graph, sent once to each worker
    return _as_array(inp, shift_task, (box[1] - box[0], box[3] - box[2]), shared, fill,
                     resample, box, device)


def iter_blocks(array, client=None, window=4):
    """Yield ``(start, block as NumPy)`` of a dask array's blocks along the first axis, in
    order, with at most ``window`` blocks computed ahead (written as they come, e.g. to a
    TIFF)."""
    blocks = array.to_delayed().ravel()
    starts = np.cumsum((0,) + array.chunks[0])[:-1].tolist()
    if client is None:
        for a, b in zip(starts, blocks):
            yield a, b.compute()
        return
    pending = collections.deque()
    k = 0
    while k < len(blocks) or pending:
        while k < len(blocks) and len(pending) < window:
            pending.append((starts[k], client.compute(blocks[k])))
            k += 1
        a, fut = pending.popleft()
        yield a, fut.result()
        fut.release()


@contextlib.contextmanager
def local_client(workers=None, scheduler=None):
    """A ``distributed.Client`` (context manager; a cluster it started is closed at the end):
    to the scheduler at ``scheduler``, or on a new local cluster of ``workers`` processes
    (dask-cuda's LocalCUDACluster, one worker per GPU, where it is installed and there are
    GPUs; otherwise a LocalCluster of single-threaded processes, named 0, 1, ... so that each
    uses its own GPU)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise XcorrError(f"--workers and --scheduler need Dask's distributed scheduler; "
                         f"{INSTALL_HINT}") from None
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise XcorrError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        with client:
            yield client
        return
    n = None if workers is None else int(workers)
    if n is not None and n < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    cluster = None
    if backend.gpu_available():
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            pass
        else:
            import cupy

            devices = list(range(cupy.cuda.runtime.getDeviceCount()))[:n]
            cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, dashboard_address=":0")
    if cluster is None:
        cluster = LocalCluster(n_workers=n or 2, threads_per_worker=1, processes=True,
                               dashboard_address=":0", env={WORKER_GPU_ENV: "1"})
    with cluster, Client(cluster) as client:
        # a task's user error (say, a NaN frame) reaches the client as one error; the
        # workers of our own cluster need not log it with its traceback too
        client.run(_quiet_worker_logs)
        yield client


def _quiet_worker_logs():
    import logging

    logging.getLogger("distributed.worker").setLevel(logging.CRITICAL)
