"""The ``xcorr bench`` benchmarks: ours against the peers, cold and warm, with CUDA events.

Each benchmark's ``main`` is what its ``xcorr bench`` command runs (the command line is
:mod:`xcorr_app.cli`); it returns the exit status and raises
:class:`~xcorr_app.errors.XcorrError` for a bad option or no usable GPU.
"""

from ._accuracy import main as accuracy_bench
from ._align import main as align_bench
from ._align_first_runs import main as align_first_runs_bench
from ._align_floor import floor_main as align_floor_bench
from ._align_formats import main as align_formats_bench
from ._align_gpus import main as align_gpus_bench
from ._align_volumes import main as align_volumes_bench
from ._align_volumes_patches import main as align_volumes_patches_bench
from ._common import free_gpu_memory, parse_size
from ._conv import main as conv_bench
from ._filter import main as filter_bench
from ._xcorr import PROBLEMS, Problem, make_inputs
from ._xcorr import main as xcorr_bench

__all__ = ["PROBLEMS", "Problem", "accuracy_bench", "align_bench", "align_first_runs_bench",
           "align_floor_bench", "align_formats_bench", "align_gpus_bench",
           "align_volumes_bench", "align_volumes_patches_bench",
           "conv_bench", "filter_bench",
           "free_gpu_memory", "make_inputs", "parse_size", "xcorr_bench"]
