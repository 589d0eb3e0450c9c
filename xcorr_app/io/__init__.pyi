# The public names of xcorr_app.io, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._background import BackgroundWrites, PIECE_BYTES
from ._axes import AXES_LETTERS, AxesUnknown, parse_axes
from ._formats import (ArrayFrames, FORMAT_EXTRAS, format_of, micrometers, source_parts,
                       source_path, split_source, with_axes)
from ._json import json_number, json_numbers, json_text, strict_json
from ._lock import OutputLock
from ._outputs import Interrupted, OutputRun, check_apart, stopped_by_signals
from ._pread import PreadFile, preadable
from ._describe import calibration, describe
from ._reader import (ArraySource, ChannelStack, FrameRange, OffsetFrames, SourceArray,
                      TIFF_SUFFIXES, open_array, open_source, open_stack, read_image)
from ._frame_order import time_order, z_first
from ._nwb_out import check_nwb_out
from ._stack_writers import (HDF5_DATASET, OUT_FORMATS, aligned_name, as_dtype, check_keep,
                             imagej_calibration, out_format, parse_out_format, parse_out_path,
                             stack_writer, usable_pixel_size)
from ._tiff import SUPPORTED_DTYPES, HoldsVolumes, check_planes, plural, readable_frames
from ._writer import (StagedOutputs, TiffStackWriter, atomic_path, prepare_outputs,
                      remove_stale_temps, write_text, write_tiff)
