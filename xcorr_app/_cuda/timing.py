"""The one home of GPU timing: CUDA events, warm-up runs and medians.

Used by the autotuner (:mod:`xcorr_app._cuda.tuning`, which measures candidate kernels once per
problem) and by ``xcorr bench``.
Timed tests are not a thing in this project: speed is shown by the benchmark only.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> a = cp.ones(1 << 20, cp.float32)  # doctest: +SKIP
>>> ms = time_gpu(lambda: a * 2)  # doctest: +SKIP
"""

from __future__ import annotations

import statistics

from ..backend import gpu_name


def time_gpu(fn, warmup: int = 3, repeat: int = 15, min_total_ms: float = 0.0) -> float:
    """Median milliseconds of ``fn()`` on the current CUDA stream, by CUDA events.

    ``fn`` is called ``warmup`` times untimed, then ``repeat`` times, each between its own pair
    of events; with ``min_total_ms`` more runs are added until their sum reaches it (so very
    short kernels get enough samples).
    """
    import cupy as cp

    stream = cp.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    times = []
    total = 0.0
    while len(times) < repeat or (total < min_total_ms and len(times) < 50 * repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        ms = cp.cuda.get_elapsed_time(start, stop)
        times.append(ms)
        total += ms
    return statistics.median(times)


def device_name() -> str:
    """Name of the current CUDA device (``"cpu"`` when CuPy has none)."""
    return gpu_name()


def fp32_fma_peak_flops() -> float:
    """FP32 peak of the current device in FLOP/s: 2 x FP32 lanes x SMs x clock.

    FP32 lanes per SM come from the compute capability (128 on sm_80 GA10x/sm_86+, 64 on
    sm_80/A100 and sm_60/70; 128 on sm_90 Hopper).
    """
    import cupy as cp

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    major, minor = props["major"], props["minor"]
    lanes = {(6, 0): 64, (7, 0): 64, (7, 5): 64, (8, 0): 64}.get((major, minor), 128)
    khz = props.get("clockRate") or dev.attributes.get("ClockRate")  # CUDA 13 dropped the field
    clock_hz = float(khz) * 1e3
    return 2.0 * lanes * props["multiProcessorCount"] * clock_hz
