"""Reading stacks (a folder of TIFFs or one multi-page TIFF), writing outputs safely (a run's
outputs apart from its inputs, locked, and committed together), and the drift plot.  Below every
other subpackage: it imports none of them.
"""

from ._lock import OutputLock
from ._outputs import Interrupted, OutputRun, check_apart
from ._reader import (ArraySource, ChannelStack, FrameRange, OffsetFrames, open_source, open_stack,
                      read_image)
from ._writer import (StagedOutputs, TiffStackWriter, atomic_path, prepare_outputs,
                      remove_stale_temps, write_text, write_tiff)

__all__ = ["ArraySource", "ChannelStack", "FrameRange", "OffsetFrames", "open_source", "open_stack",
           "read_image", "TiffStackWriter", "atomic_path", "prepare_outputs", "write_text", "write_tiff",
           "Interrupted", "OutputLock", "OutputRun", "StagedOutputs", "check_apart",
           "remove_stale_temps"]
