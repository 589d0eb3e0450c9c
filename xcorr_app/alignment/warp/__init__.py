"""Shifting frames: the bilinear and Fourier warps, their sums, the area shifted frames cover."""

from ._warp import RESAMPLE, add_shifted, check_fill, check_out, common_area, shift_frames

__all__ = ["RESAMPLE", "add_shifted", "check_fill", "check_out", "common_area", "shift_frames"]
