"""Alignment and filtering on a Dask cluster (``pip install 'xcorr-app[dask]'``).

:func:`align` runs the one pipeline of :func:`xcorr_app.align`
(:func:`~xcorr_app.alignment.run_alignment`) with :class:`DaskExecutor`: every range of frames
(a task) is measured by a worker, which opens its own frames (a TIFF path is never read by the
client beyond its header and the few frames the pipeline's decisions read; a dask array is used
block by block) on its own device; the reference, the templates and every decision are made on
the client, once.  So the shifts are those of one process.  The filters and
:func:`apply_shifts` map their single-device functions over blocks of frames
(:mod:`xcorr_app.distributed._dask_tasks`: what runs on a worker).

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
import dataclasses
import functools
import importlib
import uuid
from pathlib import Path

import numpy as np

from .. import backend
from .._run_options import options_signature
from ..alignment import AlignOptions, Executor, reads_again, run_alignment
from ..errors import InputError, XcorrError
from ..io import parse_axes, with_axes
from ..streaming import DEFAULT_CHUNK, chunk_bounds
from ._dask_tasks import (WORKER_GPU_ENV, channels_block, channels_task, drop_kept, filter_task,
                          plan_task, range_task, session_task, shift_task)
INSTALL_HINT = "pip install 'xcorr-app[dask]' (dask[array] and distributed)"
#: frames per task when the input is a path and no cluster says how many workers share it
TASK_FRAMES = 128
def _require_dask(module="dask"):
    """``module`` imported, or an :class:`XcorrError` saying what to install.  A run from a
    path needs only Dask's core: importing ``dask.array`` took about half a second of such a
    one-shot run, so only the calls that make dask arrays ask for it."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise XcorrError(f"Dask is not installed; {INSTALL_HINT}") from None


def is_dask_array(a) -> bool:
    """True for a dask array (without importing Dask)."""
    return type(a).__module__.startswith("dask.array")

def absolute_source(path) -> str:
    """``path`` (``FILE``, ``FILE:/DATASET``, ``FILE?z=K&axes=TZYX``) with its file made
    absolute, as a worker started elsewhere must open it.

    >>> absolute_source("/data/movie.h5:/data?z=2")
    '/data/movie.h5:/data?z=2'
    """
    from ..io import source_parts, source_path

    file, dataset, z, axes = source_parts(path)
    return source_path(Path(file).absolute(), dataset=dataset, z=z, axes=axes)


def filter_channels(stack_or_path, *, bank=None, mix=None, device="auto", task_frames=None):
    """A bank (``xcorr filter --bank``) or a mix (``--mix``) over every channel, as a lazy
    float32 (N, F, H, W) dask array: each task reads its frames of every channel of the TIFF
    (or takes a block of an (N, C, H, W) dask array)."""
    _require_dask("dask.array")
    import dask.array as da
    from dask import delayed

    from ..filters import channel_filter
    from ..io import ChannelStack

    task_frames = check_task_frames(task_frames)

    if isinstance(stack_or_path, (str, Path)):
        with ChannelStack(stack_or_path) as src:  # the header only
            n, shape, channels = src.n_frames, src.frame_shape, src.n_channels
        n_out, _ = channel_filter(bank, mix, channels, shape)  # (checked against the frames)
        step = max(1, int(task_frames or TASK_FRAMES))
        path = absolute_source(stack_or_path)  # (a worker opens it from its own folder)
        blocks = [da.from_delayed(delayed(channels_task)(path, a, b, bank, mix, device),
                                  shape=(b - a, n_out, *shape), dtype=np.float32)
                  for a, b in chunk_bounds(0, n, step)]
        return da.concatenate(blocks, axis=0)
    arr = stack_or_path if is_dask_array(stack_or_path) else da.from_array(stack_or_path)
    if arr.ndim != 4:
        raise InputError(f"a multi-channel stack must be (N, C, H, W), got shape {arr.shape}")
    n_out, _ = channel_filter(bank, mix, arr.shape[1], arr.shape[2:])
    arr = arr.rechunk((task_frames or arr.chunks[0], -1, -1, -1))
    return arr.map_blocks(channels_block, bank, mix, device, dtype=np.float32,
                          chunks=(arr.chunks[0], (n_out,), (arr.shape[2],), (arr.shape[3],)))

# ----------------------------------------------------------------------------- on the client

def check_task_frames(task_frames):
    """``task_frames`` as the entry points take it: None (each its default) or a whole number
    of frames, 1 or more; anything else an :class:`InputError` naming it (Dask refused a
    negative or fractional one in its own words, and took 0 for the default)."""
    if task_frames is None:
        return None
    if isinstance(task_frames, (bool, np.bool_)) or not isinstance(
            task_frames, (int, np.integer)) or task_frames < 1:
        raise InputError(f"task_frames must be a whole number of frames, 1 or more (or None "
                         f"for the default); got {task_frames!r}")
    return int(task_frames)


class _Input:
    """What the client knows of the input: its size, its ranges of frames and one source per
    task."""

    def __init__(self, stack_or_path, channel, task_frames, workers=0):
        from ..io import open_source

        _require_dask("dask" if isinstance(stack_or_path, (str, Path)) else "dask.array")
        if isinstance(stack_or_path, (str, Path)):
            with open_source(stack_or_path, channel) as src:  # the header only
                self.n, self.frame_shape, self.dtype = src.n_frames, src.frame_shape, src.dtype
            # one contiguous range per worker on a cluster, as --gpus gives each GPU one
            step = max(1, int(task_frames or (-(-self.n // workers) if workers
                                              else TASK_FRAMES)))
            self.ranges = chunk_bounds(0, self.n, step)
            # absolute: a worker opens it from its own working directory
            self._path = ("path", absolute_source(stack_or_path), channel)
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


def _compute(tasks, client, scheduler, sizes=None, progress=None):
    """The tasks' results (delayed objects, or a client's futures); with a client,
    ``progress(size)`` as each task finishes."""
    import dask

    if client is None:
        return dask.compute(*tasks, scheduler=scheduler)
    futures = [t if _is_future(t) else client.compute(t) for t in tasks]
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


def _is_future(t) -> bool:
    return type(t).__name__ == "Future" and type(t).__module__.startswith("distributed")


def _workers_of(client) -> list:
    """The addresses of ``client``'s workers, in the order of their names (``local_client``'s
    are 0, 1, ...: worker k uses GPU k)."""
    try:
        info = client.scheduler_info(n_workers=-1).get("workers", {})
    except TypeError:  # (distributed before 2025.4: every worker without asking)
        info = client.scheduler_info().get("workers", {})
    return [a for a, _ in sorted(info.items(), key=lambda kv: (str(kv[1].get("name")), kv[0]))]


class DaskExecutor(Executor):
    """The ranges of a run as Dask tasks (:func:`~xcorr_app.distributed._dask_tasks.range_task`:
    each opens its own frames and runs on its worker's device); the pipeline's own steps run on
    the client: on its GPU where it has one and the run is not on the CPU, else with NumPy."""

    name = "dask"
    remote = True
    local = False

    def __init__(self, client=None, scheduler=None, task_frames=None):
        super().__init__()
        self.client, self.scheduler, self.task_frames = client, scheduler, task_frames
        self.workers = []  # the client's workers' addresses: range k's task on worker k
        self.run_id = uuid.uuid4().hex  # (the key of what its workers keep between passes)

    @contextlib.contextmanager
    def open(self, stack_or_path, opts):
        from ..io import check_planes, open_source

        self.stack, self.opts = stack_or_path, opts
        if opts.channel is not None and not isinstance(stack_or_path, (str, Path)):
            raise InputError(f"channel {opts.channel} picks a channel of a multi-channel file; "
                             "an array is one channel: pass stack[:, channel]")
        if self.client is not None:
            self.workers = _workers_of(self.client)
        self.inp = _Input(stack_or_path, opts.channel, self.task_frames, len(self.workers))
        src = open_source(stack_or_path, opts.channel) if self.inp.array is None \
            else _ClientFrames(self.inp.array)
        try:
            with src:
                check_planes(src)  # (a T x Z TIFF's planes are not frames to register)
                self.src = src  # (the client reads a few frames: the reference, decisions)
                yield src
        finally:
            if self.workers:  # (the ranges its workers kept on their GPUs: given back)
                with contextlib.suppress(Exception):
                    self.client.run(drop_kept, self.run_id, on_error="ignore")

    def check_out(self, out, shape):
        if out is not None:
            raise InputError("out is filled by runs in one process; on Dask, write the aligned "
                             "stack with xcorr_app.dask.apply_shifts")

    def start(self, opts, src, out):
        from dask import delayed

        self.device = opts.device
        # the client's own steps (a few frames: the reference, the wrap-around test) on its
        # GPU where it has one: on the CPU they took most of a 4-worker run (docs/performance.md,
        # several GPUs); a client without one keeps NumPy
        if opts.device != "cpu" and backend.gpu_available():
            self.xp = backend.xp_for("gpu")
        self.chunk = opts.chunk_frames or DEFAULT_CHUNK
        self.budget_per_range = opts.max_memory
        if opts.device != "cpu":  # one plan for every worker, chosen on one of them
            self.plan = self._compute([delayed(plan_task)(opts, src.frame_shape,
                                                          min(self.chunk, src.n_frames),
                                                          opts.device)])[0]

    def map(self, fn, progress, before=False, upto=None):
        from dask import delayed

        ks = [k for k, (a, _) in enumerate(self.inp.ranges) if upto is None or a < upto]
        sizes = [b - a for a, b in (self.inp.ranges[k] for k in ks)]
        if not self.workers or self.inp.array is not None:  # (an array's blocks: the graph's)
            shared = delayed(fn, pure=True)  # one node of the graph, sent once to each worker
            tasks = [delayed(range_task)(shared, self.inp.source(k, with_before=before),
                                         *self.inp.ranges[k], self.opts.device) for k in ks]
            return self._compute(tasks, sizes, progress)
        # on every worker before the tasks: a task waiting for one worker's copy would be
        # placed there, and the ranges ran one after the other
        shared = self.client.scatter(fn, broadcast=True, hash=False)
        # range k on the same worker every pass, so that a worker keeps its ranges on its GPU
        # from the first pass on (a path's frames), as a GPU of --gpus does
        per = -(-len(self.inp.ranges) // len(self.workers))
        # (kept where each worker has one range: several would each take a share of its GPU)
        keep = self.run_id if per == 1 and reads_again(self.opts, None) else None
        tasks = [self.client.submit(range_task, shared, self.inp.source(k, with_before=before),
                                    *self.inp.ranges[k], self.opts.device, keep,
                                    workers=[self.workers[k // per]], allow_other_workers=True,
                                    pure=False) for k in ks]
        return self._compute(tasks, sizes, progress)

    def _compute(self, tasks, sizes=None, progress=None):
        return _compute(tasks, self.client, self.scheduler, sizes, progress)

    def settings(self) -> dict:
        ranges = self.inp.ranges
        # the device as resolved (device auto: the GPU where the client has one, as its
        # workers do), which shifts.json's environment and the aligned stack's warp read
        resolved = "gpu" if self.xp is not np else "cpu" if self.device == "auto" else self.device
        return {**super().settings(), "device": resolved, "dask": {"tasks": len(ranges),
                                               "task_frames": [b - a for a, b in ranges]}}

    def field(self, opts, rigid, out, quality=None, progress=None):
        from ..alignment import measure_field

        return measure_field(opts, self.stack, rigid, np, self.chunk, executor=self,
                             quality=quality, progress=progress)


class _ClientFrames:
    """The few frames the client reads of a dask array (the reference, the decisions), as
    NumPy arrays whatever its blocks are (CuPy blocks too)."""

    def __new__(cls, array):
        from ..io import ArraySource

        class Frames(ArraySource):
            def read(self, start, stop, out=None):
                frames = backend.to_numpy(self.stack[start:stop].compute())
                if out is None:
                    return frames
                out[...] = frames
                return out

        return Frames(array)


def align(stack_or_path, reference=None, *, client=None, scheduler=None, task_frames=None,
          progress=None, options=None, _limits_checked=None, **keywords):
    """:func:`xcorr_app.align` on a Dask cluster: the same options, the same pipeline, the
    same shifts (on the CPU bit for bit where no template sums are added up over tasks; else
    within float64 rounding).

    Parameters
    ----------
    stack_or_path : dask array, ndarray, str or Path
        A (N, H, W) dask array (its blocks along the first axis become tasks; NumPy blocks), an
        in-memory stack, or a file or folder (TIFF, OME-Zarr, HDF5...) that the workers read
        themselves (a relative path is made absolute here).
    reference, **options
        As :func:`xcorr_app.align` (:class:`~xcorr_app.alignment.AlignOptions`);
        ``chunk_frames`` and ``max_memory`` apply to each task, and ``device`` is resolved on
        each worker (``auto``: the worker's GPU where it has one).  ``out`` and ``gpus`` are
        not available (``apply_shifts`` writes the aligned stack).
    task_frames : int, optional
        Frames per task (default for a path: one contiguous range per worker of ``client``'s
        cluster, each sent to its own worker every pass, which keeps it on its GPU between
        passes; 128 without a client; an array's own blocks otherwise).
    client : distributed.Client, optional
        Run on this client's cluster; default: Dask's current scheduler (an active client, or
        ``scheduler``).
    scheduler : str, optional
        A Dask scheduler name (``"threads"``, ``"processes"``, ``"sync"``) when there is no
        client.
    progress : callable(int), optional
        With a client: called with the number of frames of each task as it finishes.

    Returns
    -------
    AlignResult
        With ``settings["dask"]`` set; ``apply`` of it reads the input again.
    """
    _require_dask()
    opts = AlignOptions.from_arguments(reference, options, **keywords)
    task_frames = check_task_frames(task_frames)
    # (_limits_checked: xcorr align's, checked before its cluster started; not public)
    return run_alignment(opts, stack_or_path, DaskExecutor(client, scheduler, task_frames),
                         progress=progress, limits_checked=_limits_checked)


align.__signature__ = options_signature(align, AlignOptions, ("stack_or_path", "reference"),
                                        ("client", "scheduler", "task_frames", "progress",
                                         "options"))


def align_sessions(paths, out=None, *, client=None, scheduler=None, force=False,
                   progress=None, options=None, **keywords):
    """:func:`xcorr_app.align_sessions` on a Dask cluster: each recording is a task that a
    worker aligns and saves on its own device (one worker per GPU: several recordings at
    once), reading the file itself; the same rows, folders and files as in one process, and
    the table written here.  The recordings and ``out`` must be where every worker sees them
    (a shared filesystem; relative paths are made absolute here).  A recording that fails,
    or whose worker is lost, is its ``failed`` row; the others go on.

    Parameters
    ----------
    paths, out, force, options, **keywords
        As :func:`xcorr_app.align_sessions`; ``device`` is resolved on each worker (``auto``:
        its GPU where it has one); ``gpus`` is not available (the workers are the GPUs).
    client : distributed.Client, optional
        Run on this client's cluster (:func:`local_client` starts one); default: Dask's
        active client, else ``scheduler``, else one recording after another here.
    scheduler : str, optional
        A Dask scheduler name (``"threads"``, ``"processes"``, ``"sync"``) when there is no
        client.
    progress : callable(int), optional
        Called with 1 as each recording is done, skipped or failed (with another scheduler
        than a client or ``"sync"``, after them all).

    Returns
    -------
    list of dict
        One row a recording, in order (:data:`~xcorr_app.alignment.SESSION_COLUMNS`).

    Examples
    --------
    >>> import tempfile
    >>> from scipy import ndimage as ndi
    >>> from xcorr_app.io import write_tiff
    >>> folder = Path(tempfile.mkdtemp())
    >>> base = ndi.gaussian_filter(np.random.default_rng(0).random((40, 48)), 2)
    >>> for name in ("a", "b"):
    ...     write_tiff(folder / f"{name}.tif", np.stack([base, np.roll(base, (1, -2), (0, 1))]))
    >>> rows = align_sessions(str(folder / "*.tif"), folder / "out", max_shift=4,
    ...                       device="cpu", quality=False, aligned=False, scheduler="sync")
    >>> [(Path(r["folder"]).name, r["status"], r["frames"]) for r in rows]
    [('a_xcorr', 'done', 2), ('b_xcorr', 'done', 2)]
    """
    _require_dask()
    from ..alignment import Session

    return run_session(Session.plan(paths, out, force, options, keywords, executor="dask"),
                       client, scheduler, progress)


def run_session(session, client=None, scheduler=None, progress=None) -> list:
    """The rows of :func:`align_sessions` of a session planned before
    (:meth:`Session.plan <xcorr_app.alignment.Session.plan>` with ``executor="dask"``: the
    command line plans it before its cluster starts), its table written.  Without a client
    or a scheduler: Dask's active client, else one recording after another here (threads
    would run several at once on one device)."""
    import dask

    if client is None and scheduler is None:
        try:
            from distributed import default_client

            client = default_client()
        except (ImportError, ValueError):  # (no active client)
            scheduler = "sync"
    n = len(session.recordings)
    # each task its own recording, by absolute paths (a worker started elsewhere opens the
    # file and writes the folder)
    tasks = [dask.delayed(session_task, pure=False)(
        dataclasses.replace(session, recordings=[absolute_source(session.recordings[k])],
                            folders=[Path(session.folders[k]).absolute()]),
        dask_key_name=f"xcorr-session-{uuid.uuid4().hex}") for k in range(n)]
    if client is None and scheduler == "sync":  # (one after another: progress as each ends)
        rows = []
        for task in tasks:
            rows.append(dask.compute(task, scheduler=scheduler)[0])
            if progress is not None:
                progress(1)
    elif client is None:
        rows = list(dask.compute(*tasks, scheduler=scheduler))
        for _ in rows if progress is not None else ():
            progress(1)
    else:
        from distributed import as_completed

        futures = client.compute(tasks)
        at = {f.key: k for k, f in enumerate(futures)}
        rows = [None] * n
        for fut in as_completed(futures):
            k = at[fut.key]
            try:
                rows[k] = fut.result()
            except Exception as exc:  # noqa: BLE001 - (a worker lost: its recording fails)
                rows[k] = session.failed(k, exc)
            if progress is not None:
                progress(1)
    for k, row in enumerate(rows):  # (the rows name them as given, as one process's do)
        given = {str(absolute_source(session.recordings[k])): str(session.recordings[k]),
                 str(Path(session.folders[k]).absolute()): str(session.folders[k])}
        for long, short in given.items():
            row["reason"] = (row["reason"] or "").replace(long, short) or row["reason"]
        row.update(path=str(session.recordings[k]), folder=str(session.folders[k]))
    return session.finish(rows)


def _as_array(inp, task, frame_shape, *args):
    """A lazy float32 dask array of ``task(source, start, stop, *args)`` per range of frames
    (CuPy blocks where the input's blocks are CuPy)."""
    _require_dask("dask.array")
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
           task_frames=None, axes=None):
    """The filtered stack as a lazy float32 dask array (one task per block of frames).

    ``kernel`` is a spec of :func:`xcorr_app.filters._api.parse_kernel_spec` (``gaussian:2``,
    ``dog:1,4``, ``FILE.npy``...); each task runs the reuse kernels on its worker's GPU, or
    scipy.ndimage on the CPU, on its own frames.  ``axes``: a file's axes, as for
    :func:`xcorr_app.align`.
    """
    from ..filters import MODES, check_radius, parse_kernel_spec

    fn = parse_kernel_spec(kernel)  # a bad spec fails here, not in every task
    task_frames = check_task_frames(task_frames)
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    inp = _Input(with_axes(stack_or_path, parse_axes(axes)), channel, task_frames)
    check_radius(getattr(fn, "radius", 0), inp.frame_shape, f"kernel {kernel}")
    return _as_array(inp, filter_task, inp.frame_shape, kernel, mode, cval, device)


def apply_shifts(stack_or_path, shifts, *, channel=None, fill=0.0, resample="bilinear",
                 crop=False, device="auto", task_frames=None, axes=None):
    """The aligned stack as a lazy float32 dask array: :func:`xcorr_app.apply_shifts` per
    block of frames (the same shifts refused; ``axes``: a file's, as there)."""
    return _shifted_array(with_axes(stack_or_path, parse_axes(axes)), shifts, channel, fill,
                          resample, crop, device, check_task_frames(task_frames))


def _shifted_array(stack_or_path, shifts, channel, fill, resample, crop, device, task_frames):
    """:func:`apply_shifts` of a source already given its axes."""
    from ..alignment import RESAMPLE, check_fill, common_area
    from ..alignment.warp import check_shifts

    fill = check_fill(fill)  # (here, not in every task)
    if resample not in RESAMPLE:
        raise InputError(f"unknown resampling {resample!r}; use {' or '.join(RESAMPLE)}")
    inp = _Input(stack_or_path, channel, task_frames)
    shifts = check_shifts(shifts, inp.n)
    h, w = inp.frame_shape
    box = common_area(shifts, inp.frame_shape) if crop else (0, h, 0, w)
    from dask import delayed

    shared = delayed(shifts, pure=True)  # one node of the graph, sent once to each worker
    return _as_array(inp, shift_task, (box[1] - box[0], box[3] - box[2]), shared, fill,
                     resample, box, device)


def aligned_blocks(result, client=None, *, resample, crop, fill, device="auto",
                   task_frames=None):
    """The aligned frames of ``result`` (its channel) warped by ``client``'s cluster, as
    ``(start, chunk)`` in order (:func:`iter_blocks` of :func:`apply_shifts`), or ``None``
    where its cluster does not warp them (a motion field: warped where they are written);
    :meth:`AlignResult.save <xcorr_app.alignment.AlignResult.save>`'s ``warp``."""
    if result.motion_field is not None:
        return None
    return iter_blocks(_shifted_array(result.source, result.shifts,
                                      result.settings.get("channel"), fill, resample, crop,
                                      device, task_frames), client)


def save(result, folder, *, client=None, **options):
    """:meth:`AlignResult.save <xcorr_app.alignment.AlignResult.save>` with the aligned stack
    warped on ``client``'s cluster (rigid shifts; a motion field is warped here).

    Examples
    --------
    >>> res = xcorr_app.dask.align("movie.tif", client=client)  # doctest: +SKIP
    >>> xcorr_app.dask.save(res, "movie_xcorr", client=client)  # doctest: +SKIP
    """
    return result.save(folder, warp=functools.partial(aligned_blocks, result, client),
                       **options)


def iter_blocks(array, client=None, window=4):
    """Yield ``(start, block as NumPy)`` of a dask array's blocks along the first axis, in
    order, with at most ``window`` blocks computed ahead (written as they come, e.g. to a
    TIFF)."""
    if not hasattr(array, "to_delayed") or not getattr(array, "ndim", 0):
        raise InputError(f"iter_blocks takes a dask array (as xcorr_app.dask.filter gives), "
                         f"got {type(array).__module__}.{type(array).__name__}")
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
    uses its own GPU).  More workers than GPUs, or CPU cores, are an InputError
    (:func:`~xcorr_app.streaming.check_workers`), before anything starts."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise XcorrError(f"workers and scheduler need Dask's distributed scheduler; "
                         f"{INSTALL_HINT}") from None
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise XcorrError(f"cannot reach the Dask scheduler at {scheduler} ({exc})") from None
        with client:
            yield client
        return
    from ..streaming import check_workers, cuda_cluster, machine_cpus

    # (before anything starts: more workers than this host runs are refused, not started)
    n = None if workers is None else check_workers(workers)
    import tempfile

    import dask

    # the scratch space of the scheduler and workers (dask-scratch-space, its lock files) in a
    # folder of this run, removed at the end (the setting applies now, undone at the end)
    scratch = tempfile.TemporaryDirectory(prefix="xcorr-dask-", ignore_cleanup_errors=True)
    scratch_config = dask.config.set({"temporary-directory": scratch.name})
    if cuda_cluster():  # (check_workers' rule: the same test)
        from dask_cuda import LocalCUDACluster
        import cupy

        devices = list(range(cupy.cuda.runtime.getDeviceCount()))[:n]
        cluster = LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, dashboard_address=":0")
    else:
        cluster = LocalCluster(n_workers=n or min(2, machine_cpus()), threads_per_worker=1,
                               processes=True, dashboard_address=":0",
                               env={WORKER_GPU_ENV: "1"})
    with scratch, scratch_config, cluster, Client(cluster) as client:
        # a task's user error (say, a NaN frame) reaches the client as one error; the
        # workers of our own cluster need not log it with its traceback too
        client.run(_quiet_worker_logs)
        yield client


def _quiet_worker_logs():
    import logging

    logging.getLogger("distributed.worker").setLevel(logging.CRITICAL)
    # (tifffile logs a damaged page itself; the run's one error line says it, as in one process)
    logging.getLogger("tifffile").setLevel(logging.CRITICAL)
