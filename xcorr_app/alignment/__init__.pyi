# The public names of xcorr_app.alignment, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._api import align, estimate_shifts
from ._apply import aligned_channels, apply_shifts
from .warp import RESAMPLE, check_fill, common_area, shift_frames
from ._executors import Executor, reads_again
from ._limits import check_limits, limit_devices
from .piecewise import FIELD_RESAMPLE, apply_field, field_area, measure_field, parse_patches
from ._options import AlignOptions, BOUNDARIES, DEFAULT_UPSAMPLE, LUCAS_KANADE
from ._options import MODELS
from .rigid import (MAX_BIDI, NORMALIZATIONS, SUBPIXEL, WINDOWS, correct_bidi, estimate_bidi,
                    parse_bidi, parse_prefilter, shared_plan)
from ._prebuild import PREBUILD_STAGES, prebuild
from ._result import AlignResult
from ._sessions import (SAVE_OPTIONS, SESSION_COLUMNS, SESSIONS_TABLE, Session, align_sessions,
                        finished_run, is_pattern, session_folder, session_paths, sessions_csv)
from ._run import run_alignment
from .volume import VolumeOptions, VolumeResult, align_volumes
