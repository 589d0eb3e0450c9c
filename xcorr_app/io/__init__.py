"""Reading stacks (a folder of TIFFs or one multi-page TIFF), writing outputs safely, and the
drift plot.  Below every other subpackage: it imports none of them.
"""

from ._reader import (ArraySource, ChannelStack, FrameRange, OffsetFrames, open_source, open_stack,
                      read_image)
from ._writer import TiffStackWriter, atomic_path, prepare_outputs, write_text, write_tiff

__all__ = ["ArraySource", "ChannelStack", "FrameRange", "OffsetFrames", "open_source", "open_stack",
           "read_image", "TiffStackWriter", "atomic_path", "prepare_outputs", "write_text", "write_tiff"]
