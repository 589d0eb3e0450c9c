"""CUDA plumbing shared by every kernel family: the loader (sources, instantiations, per-device
cache), prepared launches, GPU timing, helper processes that build a run's later kernels
ahead, and the CI compile check.  The kernel sources live in the
top-level ``kernels/`` (``kernels/<family>/*.cu``, shared headers in ``kernels/include/``)."""

from .device import (Limits, device_limits, kept_on_device, own_stream, stream_counters,
                     upload_shared)
from .helpers import EXIT_GRACE as HELPER_EXIT_GRACE
from .helpers import marker as built_marker
from .helpers import start_helpers
from .launch import (PlanCallBase, PreparedLaunch, compiled_call, current_stream_ptr_getter,
                     fastlaunch, stream_pointer, stride_blocks)
from .loader import (PIXEL_C_TYPES, KernelFamily, compile_together, kernel_pixels, kernel_sources,
                     kernels_dir, shipped_here, shipped_kernels_usable)
from .shipped import describe as describe_shipped
from .shipped import summary as shipped_summary
from .timing import device_name, fp32_fma_peak_flops, time_gpu
from .tuning import cache_file, device_fingerprint, fastest, recall, remember

__all__ = ["HELPER_EXIT_GRACE", "KernelFamily", "Limits", "PIXEL_C_TYPES", "PlanCallBase",
           "PreparedLaunch", "built_marker", "cache_file", "compile_together", "compiled_call",
           "current_stream_ptr_getter", "describe_shipped", "device_fingerprint", "device_limits",
           "device_name", "fastest", "fastlaunch", "fp32_fma_peak_flops", "kept_on_device",
           "kernel_pixels", "kernel_sources", "kernels_dir", "own_stream", "recall", "remember",
           "shipped_here", "shipped_kernels_usable", "shipped_summary", "start_helpers",
           "stream_counters", "stream_pointer", "stride_blocks", "time_gpu", "upload_shared"]
