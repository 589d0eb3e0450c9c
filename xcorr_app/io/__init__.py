"""Reading stacks (a folder of TIFFs or one multi-page TIFF; Zarr, OME-Zarr, HDF5, NWB, CZI, ND2), writing
outputs safely (a run's outputs apart from its inputs, locked, and committed together), and the
drift plot.  Below every other subpackage: it imports none of them.
"""

from ._background import BackgroundWrites
from ._formats import EXTRAS as FORMAT_EXTRAS, ArrayFrames, format_of, \
    source_path, split_source
from ._field_outputs import plot_motion_field, write_motion_field
from ._lock import OutputLock
from ._outputs import Interrupted, OutputRun, check_apart
from ._plot import PNG_LEVEL, plot_drift, plot_quality
from ._pread import PreadFile, preadable
from ._describe import describe
from ._reader import (TIFF_SUFFIXES, ArraySource, ChannelStack, FrameRange, OffsetFrames,
                      open_source, open_stack, read_image)
from ._stack_writers import OUT_FORMATS, aligned_name, as_dtype, stack_writer
from ._tiff import SUPPORTED_DTYPES, plural, readable_frames
from ._writer import (StagedOutputs, TiffStackWriter, atomic_path, prepare_outputs,
                      remove_stale_temps, write_text, write_tiff)

__all__ = ["FORMAT_EXTRAS", "OUT_FORMATS", "SUPPORTED_DTYPES", "TIFF_SUFFIXES",
           "ArrayFrames", "ArraySource", "BackgroundWrites", "ChannelStack", "FrameRange",
           "Interrupted", "OffsetFrames", "OutputLock", "OutputRun", "PreadFile",
           "StagedOutputs",
           "TiffStackWriter", "aligned_name", "as_dtype", "atomic_path", "check_apart",
           "describe", "format_of", "open_source",
           "open_stack", "PNG_LEVEL", "plot_drift", "plot_quality", "plot_motion_field", "plural",
           "preadable", "prepare_outputs", "read_image", "readable_frames", "remove_stale_temps",
           "source_path", "split_source", "stack_writer", "write_motion_field", "write_text",
           "write_tiff"]
