# The public names of xcorr_app.alignment.piecewise, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._field_resample import FIELD_RESAMPLE, WARP_GX, device_weights, keys_weights
from ._motion_field import apply_field, check_field, field_area, warp_chunk
from ._patch_pass import check_grid, measure_field, next_image, patch_grid, patch_preparer
from ._patches import (axis_patches, check_deviation, check_template_passes, common_area,
                       common_box, integer_parts, parse_overlap, parse_patches, taper_axis)
from ._spline import field_weights, spline_weights
from ._rotation import (ROTATED_PX, ROTATED_SIGNIFICANCE, RotationProbe, fit_rigid_body,
                        grid_box, rigid_body_mean_part, rigid_body_part, rigid_body_weights,
                        rotated_frames, whole_frame_part)
