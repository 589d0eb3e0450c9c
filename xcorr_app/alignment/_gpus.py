"""Alignment on several GPUs of one host without a cluster: ``align(..., gpus=[0, 1])``.

One worker thread per GPU (:func:`xcorr_app.streaming.run_on_gpus`), each with its own reader
of the input (file handle, read-ahead thread, pinned buffers) and its own CUDA streams, so that
the reads, copies and kernels of the GPUs overlap.  Each GPU gets one contiguous range of
frames (:func:`xcorr_app.streaming.frame_ranges`); the reference is prepared and the
correlation plan chosen once, on the first GPU, and copied to the others, so every frame is
measured exactly as a run on one GPU measures it.  With ``patches`` the patch pass
(:func:`field_on_gpus`) shares out the same ranges, one thread per GPU.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future

import numpy as np

from .. import backend
from ..errors import InputError
from ..io import open_source
from ..streaming import Cancelled, frame_ranges, parse_gpus, run_on_gpus
from ._options import auto_notes, check_frame_shape, resolve_auto, search_range
from ._patch_pass import measure_field
from ._pipeline import Measurer, measure_frames, prepared_reference, shared_plan
from ._result import result_from_table


def align_on_gpus(opts, stack_or_path, gpus, *, chunk_frames=64, budget=None, progress=None):
    """:func:`xcorr_app.align` with the frames shared out over ``gpus``; ``budget`` (bytes) is
    split evenly between them.  The GPUs start reading their frames while the first one
    prepares the reference."""
    import cupy

    ids = parse_gpus(gpus)
    if backend.is_cupy_array(stack_or_path):
        raise InputError("--gpus shares out frames read from a file or a NumPy stack; this "
                         "CuPy stack is already on one GPU")
    lock = threading.Lock()
    share = None if budget is None else max(1, budget // len(ids))

    def chunk_for(src):  # one frame checked against the share and this GPU's free memory
        return Measurer.memory_plan(opts, src, cupy, chunk_frames, share)

    with open_source(stack_or_path, opts.channel) as src:
        check_frame_shape(src.frame_shape)
        opts, why = resolve_auto(opts, src)  # prefilter "auto", decided once for every GPU
        n = src.n_frames
        ranges = frame_ranges(n, len(ids))
        ids = ids[:len(ranges)]
        with cupy.cuda.Device(ids[0]):
            chunk, bands = chunk_for(src)  # before anything is read
        setup = Future()  # (reference on the host, plan), made by this thread on GPU ids[0]

        def prepare():
            try:
                with cupy.cuda.Device(ids[0]):
                    ref = prepared_reference(opts, src, cupy, chunk)
                    plan = bands if bands is not None else \
                        shared_plan(opts, cupy, src.frame_shape, min(chunk, n), ref)
                    ref = None if ref is None else tuple(cupy.asnumpy(a) for a in ref)
                setup.set_result((ref, plan))
            except BaseException as exc:
                setup.set_exception(exc)
                raise

        def work(k, stop):
            def tick(done):
                if stop.is_set():
                    raise Cancelled
                if progress is not None:
                    with lock:
                        progress(done)

            # a memory-mapped file is shared (reads are copies out of one map); others are
            # opened again, one reader per GPU
            own = contextlib.nullcontext(src) if getattr(src, "concurrent_reads", False) \
                else open_source(stack_or_path, opts.channel)
            with own as frames:
                return measure_frames(opts, frames, cupy, chunk_for(frames)[0], setup,
                                      start=ranges[k][0], stop=ranges[k][1], progress=tick)

        def unblock():  # workers waiting for the reference must not wait for ever
            if not setup.done():
                setup.set_exception(Cancelled())

        parts = run_on_gpus(ids, work, prepare, unblock)
        shape = src.frame_shape
        sources = [src.source_name(i) for i in range(n)]
        notes = list(src.notes)
    table = np.concatenate([t for t, _ in parts])
    settings = {"search_range": list(search_range(shape, opts.max_shift)), "device": "gpu",
                "gpus": list(ids), "chunk_frames": chunk, "max_memory": budget, "notes": notes,
                "prefilter_auto": why}
    res = result_from_table(opts, table, sources, settings, parts[0][1], stack_or_path)
    res.notes[:0] = auto_notes(opts, why)
    return res


def field_on_gpus(opts, stack_or_path, rigid, gpus, chunk, patches, patch_overlap,
                  max_deviation, template_passes=0):
    """The patch pass of ``align(..., gpus=..., patches=...)`` (:func:`~._patch_pass.
    measure_field` with ``ranges``): the rigid pass's ranges of frames, one worker thread per
    GPU with its own reader; the grid and the template made on the first GPU.  ``opts``: the
    rigid pass's (``prefilter="auto"`` is decided again from the same few frames)."""
    import cupy

    ids = parse_gpus(gpus)
    with open_source(stack_or_path, opts.channel) as src:
        opts, _ = resolve_auto(opts, src)
    ranges = frame_ranges(len(rigid), len(ids))
    ids = ids[:len(ranges)]

    def run(fn):
        def work(k, stop):
            if stop.is_set():
                raise Cancelled
            return fn(k)

        return run_on_gpus(ids, work)

    with cupy.cuda.Device(ids[0]):
        return measure_field(opts, stack_or_path, rigid, cupy, chunk, patches, patch_overlap,
                             max_deviation, template_passes, ranges=ranges, run=run)
