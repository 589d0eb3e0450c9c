# The public names of xcorr_app.alignment.outputs, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._plots import PNG_LEVEL, plot_drift, plot_quality
from ._motion_field import plot_motion_field, write_motion_field
from ._saved import TABLE, check_fits, load_saved
from ._save import (RUN_FILES, AlignedSink, RunOutputs, aligned_as, aligned_of,
                    channel_metadata, channels_of, check_channels, check_save, check_stale,
                    output_names, result_document, stale_outputs, write_chunks)
