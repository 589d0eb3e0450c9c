"""Piecewise-rigid registration (patches): the grid, the patch pass, the motion field and its warp."""

from ._motion_field import FIELD_RESAMPLE, apply_field, field_area, warp_chunk
from ._patch_pass import check_grid, measure_field
from ._patches import check_deviation, check_template_passes, common_area, parse_patches
from ._spline import field_weights

__all__ = ["FIELD_RESAMPLE", "apply_field", "check_deviation", "check_grid",
           "check_template_passes", "common_area", "field_area", "field_weights",
           "measure_field", "parse_patches", "warp_chunk"]
