"""Where ``device="auto"`` measures a stack: on the GPU, unless the whole job is so small that the
CPU is done before a GPU run would be.

A GPU run first pays for CuPy, the CUDA context and loading its kernels (a one-shot ``xcorr
align`` of the cell sample, 12 frames of 120x160, is no faster on the GPU than on the CPU:
docs/performance.md, first runs), and on a machine where its kernels were never built, for
compiling them.  The CPU path measures about 10 million pixels a second on 2 cores, more on more.
So ``auto`` measures on the CPU a job of at most :data:`SMALL_JOB_PIXELS` pixels, or of at most
:data:`FIRST_RUN_PIXELS` when this run's GPU kernels are not built yet
(:func:`xcorr_app.alignment._prebuild.kernels_built`), and says so in the result's notes.
``device="gpu"`` always uses the GPU; CuPy input always stays on the GPU.

Examples
--------
>>> auto_device(12, (120, 160), kernels_built=True)[0]
'cpu'
>>> auto_device(512, (2048, 2048), kernels_built=False)
('gpu', None)
"""

from __future__ import annotations

from ..backend import SMALL_JOB_PIXELS  # (its home: the CLI reads it before importing this)

#: the same when this run's GPU kernels are not built yet (about 3 s on 2 cores, against 5-14 s
#: of compiling on a first GPU run)
FIRST_RUN_PIXELS = 32 * 2**20


def small_job_note(n_frames, frame_shape):
    """The note of a job of at most :data:`SMALL_JOB_PIXELS` on a machine where a GPU is likely
    (:func:`xcorr_app.backend.gpu_likely`): ``auto`` measures it on the CPU without importing
    CuPy or looking at the GPU (which would cost more than the job); else ``None``."""
    h, w = frame_shape
    if int(n_frames) * int(h) * int(w) > SMALL_JOB_PIXELS:
        return None
    from ..backend import gpu_likely

    return auto_device(n_frames, frame_shape, kernels_built=True)[1] if gpu_likely() else None


def auto_device(n_frames, frame_shape, kernels_built) -> tuple:
    """``("cpu", note)`` for a job small enough for the CPU, else ``("gpu", None)``."""
    h, w = frame_shape
    pixels = int(n_frames) * int(h) * int(w)
    limit = SMALL_JOB_PIXELS if kernels_built else FIRST_RUN_PIXELS
    if pixels > limit:
        return "gpu", None
    why = ("than starting the GPU" if kernels_built else
           "than compiling this run's GPU kernels, not built yet on this machine "
           "(xcorr info --compile builds them ahead)")
    return "cpu", (f"measured on the CPU: {n_frames} frame{'s' if n_frames != 1 else ''} of "
                   f"{h}x{w} take less there {why}; device='gpu' uses the GPU")
