"""Reading stacks (a folder of TIFFs or one multi-page TIFF; Zarr, OME-Zarr, HDF5, NWB, CZI, ND2), writing
outputs safely (a run's outputs apart from its inputs, locked, and committed together).  Below every other subpackage: it imports none of them.
"""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_background": ["BackgroundWrites", "PIECE_BYTES"],
    "_formats": ["ArrayFrames", "FORMAT_EXTRAS", "format_of", "source_path", "split_source"],
    "_json": ["json_number", "strict_json"],
    "_lock": ["OutputLock"],
    "_outputs": ["Interrupted", "OutputRun", "check_apart"],
    "_pread": ["PreadFile", "preadable"],
    "_describe": ["describe"],
    "_reader": ["ArraySource", "ChannelStack", "FrameRange", "OffsetFrames", "TIFF_SUFFIXES",
                "open_source", "open_stack", "read_image"],
    "_stack_writers": ["OUT_FORMATS", "aligned_name", "as_dtype", "stack_writer"],
    "_tiff": ["SUPPORTED_DTYPES", "plural", "readable_frames"],
    "_writer": ["StagedOutputs", "TiffStackWriter", "atomic_path", "prepare_outputs",
                "remove_stale_temps", "write_text", "write_tiff"],
})

__all__ = ["FORMAT_EXTRAS", "OUT_FORMATS", "SUPPORTED_DTYPES", "TIFF_SUFFIXES",
           "ArrayFrames", "ArraySource", "BackgroundWrites", "ChannelStack", "FrameRange",
           "Interrupted", "OffsetFrames", "OutputLock", "OutputRun", "PIECE_BYTES", "PreadFile",
           "StagedOutputs",
           "TiffStackWriter", "aligned_name", "as_dtype", "atomic_path", "check_apart",
           "describe", "format_of", "json_number", "open_source",
           "open_stack", "plural",
           "preadable", "prepare_outputs", "read_image", "readable_frames", "remove_stale_temps",
           "source_path", "split_source", "stack_writer", "strict_json", "write_text",
           "write_tiff"]
