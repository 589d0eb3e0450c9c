# The public names of xcorr_app.alignment.warp, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._warp import (RESAMPLE, add_shifted, check_fill, check_out, check_shifts, common_area,
                    frames_type, shift_frames, shift_into)
from ._rigid_body import check_rotation, corner_displacement, rigid_body_field, rotation_matrix
