"""``xcorr bench align --floor``: the rigid default run against the hardware's floor, in process.

For stacks of uint16 frames already in memory (the drifting scene of
:class:`~xcorr_app.bench._align_data.SyntheticStack`), measured in one run on one GPU:

* **pinned copy**: the stack copied chunk by chunk from page-locked host memory to the device,
  CUDA events;
* **padded FFT correlation** (the floor of the unbounded default from CuPy): every chunk
  converted to float32, ``rfft2`` zero-padded to the transform the exact search over shifts up
  to half the frame needs (1.5 N per axis, rounded up to a 5-smooth size: ``fft_geometry``),
  multiplied by the reference's conjugate spectrum, ``irfft2``; cuFFT plans made once (warm),
  CUDA events;
* **unpadded FFT correlation** (the floor of a bounded run: ``max_shift=16`` needs no padding
  to speak of): the same at the frame's own size;
* **xcorr_app.align** with the defaults (FFT verification and the quality report on), from NumPy
  and from CuPy, and ``max_shift=16`` from both: wall clock, warm, the median of ``repeat``
  runs;

and each align row's share of its floor (the floor's seconds over the row's): from CuPy the
correlation its search needs (padded unbounded, unpadded bounded); from NumPy the larger of that
and the pinned copy, which can overlap.

Run it as ``xcorr bench align --floor [--frames N[,N...]] [--size H[,H...]] [--repeat K]``.
"""

from __future__ import annotations

import numpy as np

from ._common import warm_median

#: the default stacks: frames and square frame sides
FLOOR_FRAMES = (128, 1024)
FLOOR_SIDES = (512, 1024, 2048)
#: frames per chunk of the floors (the run's own chunking is its own)
FLOOR_CHUNK = 64


def _events_seconds(work, repeat):
    """The median over ``repeat`` of ``work()``'s GPU time between CUDA events (one untimed
    warm-up first), in seconds."""
    from .._cuda import time_gpu

    return time_gpu(work, warmup=1, repeat=repeat) / 1e3


def pinned_copy_seconds(stack, repeat=5):
    """Seconds to copy ``stack`` (host, uint16) to the device from page-locked memory, a chunk
    of :data:`FLOOR_CHUNK` frames at a time (one device buffer a chunk, as a run uploads)."""
    import cupy as cp

    pinned = cp.cuda.alloc_pinned_memory(stack.nbytes)
    host = np.frombuffer(pinned, stack.dtype, stack.size).reshape(stack.shape)
    host[...] = stack
    dev = cp.empty((FLOOR_CHUNK, *stack.shape[1:]), stack.dtype)

    def work():
        for a in range(0, len(stack), FLOOR_CHUNK):
            part = host[a:a + FLOOR_CHUNK]
            dev[:len(part)].set(part)

    return _events_seconds(work, repeat)


def fft_correlation_seconds(stack_gpu, repeat=5, size=None):
    """Seconds of the batched FFT correlation of a device stack against its first frame, a
    chunk of :data:`FLOOR_CHUNK` frames at a time, its transforms ``size`` (zero-padded; None:
    the frame's own size); cuFFT plans made by the warm-up."""
    import cupy as cp

    size = tuple(size or stack_gpu.shape[-2:])
    ref = cp.fft.rfft2(stack_gpu[0].astype(cp.float32), s=size).conj()

    def work():
        for a in range(0, len(stack_gpu), FLOOR_CHUNK):
            f = stack_gpu[a:a + FLOOR_CHUNK].astype(cp.float32)
            cp.fft.irfft2(cp.fft.rfft2(f, s=size) * ref, s=size)

    return _events_seconds(work, repeat)


def padded_size(frame_shape) -> tuple:
    """The transform of the exact linear search over every shift up to half the frame (the
    unbounded default), per axis: 1.5 N rounded up to a fast size.

    >>> padded_size((1024, 1000))
    (1536, 1500)
    """
    from ..correlate import fft_geometry

    h, w = frame_shape
    return tuple(fft_geometry((h, w), (h, w), (h // 2, w // 2)).size)


#: the bounded rows' search
BOUND = 16


def floor_rows(frames=FLOOR_FRAMES, sides=FLOOR_SIDES, repeat=3, echo=print) -> list:
    """The rows of every stack: dicts of ``stack``, ``row``, ``seconds``, ``fps`` and ``share``
    (of the row's floor; None for the floors)."""
    import cupy as cp

    from ..alignment import align
    from ._align_data import SyntheticStack

    rows = []
    for side in sides:
        for n in frames:
            stack = SyntheticStack(n, (side, side), seed=55).frames(0, n, workers=4)
            label = f"{n}x{side}x{side}"
            reps = max(repeat, 5)
            copy = pinned_copy_seconds(stack, reps)
            gpu = cp.asarray(stack)
            size = padded_size(stack.shape[1:])
            padded = fft_correlation_seconds(gpu, reps, size)
            plain = fft_correlation_seconds(gpu, reps)

            def timed(source, **kw):
                return warm_median(lambda: align(source, device="gpu", **kw), repeat)[0]

            measured = {
                "pinned copy": (copy, None),
                f"FFT correlation padded to {size[0]}x{size[1]} (CuPy floor, unbounded)":
                    (padded, None),
                "FFT correlation unpadded (CuPy floor, bounded)": (plain, None),
                "align from NumPy": (timed(stack), max(copy, padded)),
                "align from CuPy": (timed(gpu), padded),
                f"align max_shift={BOUND} from NumPy": (timed(stack, max_shift=BOUND),
                                                        max(copy, plain)),
                f"align max_shift={BOUND} from CuPy": (timed(gpu, max_shift=BOUND), plain),
            }
            for name, (seconds, floor) in measured.items():
                row = {"stack": label, "row": name, "seconds": seconds, "fps": n / seconds,
                       "share": None if floor is None else floor / seconds}
                rows.append(row)
                echo(format_floor_row(row))
            gpu = None  # (its memory back to the pool below)
            cp.get_default_memory_pool().free_all_blocks()
    return rows


def format_floor_row(row) -> str:
    share = "" if row["share"] is None else f"{100 * row['share']:5.1f}% of its floor"
    return (f"| {row['stack']} | {row['row']} | {row['seconds'] * 1e3:9.2f} ms | "
            f"{row['fps']:10.0f} frames/s | {share} |")


def floor_main(frames=None, sides=None, repeat=3, echo=print, json_path=None) -> int:
    """``xcorr bench align --floor``: print the table (and write it as JSON); 0.  Without a
    usable GPU an :class:`~xcorr_app.errors.XcorrError` says why."""
    from .. import backend
    from ..errors import XcorrError

    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench align --floor needs a GPU "
                         f"({backend.gpu_unavailable_reason()})")
    echo("| stack | row | time | rate | share |")
    echo("| --- | --- | --- | --- | --- |")
    rows = floor_rows(frames or FLOOR_FRAMES, sides or FLOOR_SIDES, repeat, echo)
    if json_path is not None:
        import json

        from ..io import write_text

        write_text(json_path, json.dumps(rows, indent=1) + "\n")
    return 0
