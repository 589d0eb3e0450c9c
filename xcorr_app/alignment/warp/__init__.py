"""Shifting frames: the bilinear and Fourier warps, their sums, the area shifted frames cover."""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_warp": ["RESAMPLE", "add_shifted", "check_fill", "check_out", "common_area", "frames_type",
              "shift_frames"],
})

__all__ = ["RESAMPLE", "add_shifted", "check_fill", "check_out", "common_area", "frames_type",
           "shift_frames"]
