"""Streaming a stack chunk by chunk in bounded memory, on one device or several GPUs: the one
chunk loop (:func:`map_chunks`, :class:`DeviceChunks`), the read-ahead thread
(:class:`ChunkPrefetcher`), the chunk arithmetic (:func:`frame_ranges`), a stack kept on the GPU between passes
(:class:`StashedSource`), the GPUs of
``--gpus`` (:func:`parse_gpus`, :func:`run_on_gpus`) and the memory budget
(:func:`parse_memory`, :func:`frame_need`, :func:`plan_memory`).  Generic: it knows frame sources (io), not
what is computed on the chunks.

Examples
--------
>>> from xcorr_app.streaming import frame_ranges, parse_memory
>>> frame_ranges(5, 2), parse_memory("2K")
([(0, 2), (2, 5)], 2048)
"""

from ._chunks import DeviceChunks, map_chunks
from ._gpus import (SCALE_OUT_MIN_BYTES, Cancelled, check_workers, cuda_cluster, machine_cpus,
                    need_gpus, parse_gpus, run_on_gpus)
from ._memory_budget import (DEFAULT_CHUNK, READ_AHEAD, FrameNeed, MemoryPlan,
                             auto_chunk_frames, check_bound, check_frame_memory, frame_need, host_free_bytes,
                             human, parse_memory, plan_memory)
from ._prefetch import (ChunkPrefetcher, HostCopy, copy_to_host_async, host_buffer,
                        host_copies)
from ._ranges import chunk_bounds, frame_ranges, piece_bounds
from ._stash import (STASH_SHARE, DeviceStash, StashedSource, WrappedSource, keep_on_gpu,
                     source_names_of, stash_fits)
from ._threads import cpu_threads, frame_slices, keep_freed_memory, one_blas_thread

__all__ = ["map_chunks", "DeviceChunks", "ChunkPrefetcher", "HostCopy", "host_copies",
           "copy_to_host_async", "host_buffer", "chunk_bounds",
           "piece_bounds", "frame_ranges", "need_gpus", "parse_gpus", "run_on_gpus",
           "check_workers", "cuda_cluster", "machine_cpus",
           "SCALE_OUT_MIN_BYTES", "Cancelled", "parse_memory",
           "check_bound", "check_frame_memory", "host_free_bytes", "frame_need", "plan_memory", "auto_chunk_frames", "DEFAULT_CHUNK", "FrameNeed", "MemoryPlan", "human", "READ_AHEAD",
           "cpu_threads", "frame_slices", "keep_freed_memory", "one_blas_thread",
           "DeviceStash", "StashedSource", "WrappedSource", "keep_on_gpu", "source_names_of",
           "stash_fits",
           "STASH_SHARE"]
