"""Piecewise-rigid registration (patches): the grid, the patch pass, the motion field and its warp."""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_field_resample": ["FIELD_RESAMPLE"],
    "_motion_field": ["apply_field", "field_area", "warp_chunk"],
    "_patch_pass": ["check_grid", "measure_field"],
    "_patches": ["check_deviation", "check_template_passes", "common_area", "parse_patches"],
    "_spline": ["field_weights"],
})

__all__ = ["FIELD_RESAMPLE", "apply_field", "check_deviation", "check_grid",
           "check_template_passes", "common_area", "field_area", "field_weights",
           "measure_field", "parse_patches", "warp_chunk"]
