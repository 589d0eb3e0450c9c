"""The rigid measuring pass: frames prepared, correlated with the reference, the peak refined and
checked against the FFT reference, a row a frame."""

from ._columns import COLUMN, COLUMNS
from ._frame_stats import area_float, converted_stats, demeaned, precision_sums
from ._measure import (Measurer, frames_per_chunk, measure_frames, prepared_reference,
                       quiet_if_nonfinite, shared_plan)
from ._methods import (CPU_REFERENCE_COARSE, FFT_REFERENCE_LOWPASS, FFT_REFERENCE_UPSAMPLE,
                       NORMALIZATIONS, SUBPIXEL, check_choices, fft_reference, prefilter_for,
                       search_range)
from ._prepared import PreparedFrames, patch_key
from ._preprocess import (AUTO_LOWPASS, WINDOWS, choose_prefilter, parse_prefilter, prepare,
                          scale_free, spread_frames, window)
from ._references import CHOICES, is_previous, mean_count, reference_frame, refined_passes

__all__ = ["AUTO_LOWPASS", "CHOICES", "COLUMN", "COLUMNS", "CPU_REFERENCE_COARSE",
           "FFT_REFERENCE_LOWPASS", "FFT_REFERENCE_UPSAMPLE", "Measurer", "NORMALIZATIONS",
           "PreparedFrames", "SUBPIXEL", "WINDOWS", "area_float", "check_choices",
           "choose_prefilter", "converted_stats", "demeaned", "fft_reference", "frames_per_chunk",
           "is_previous", "mean_count", "measure_frames", "parse_prefilter", "patch_key",
           "precision_sums", "prefilter_for", "prepare", "prepared_reference",
           "quiet_if_nonfinite", "reference_frame", "refined_passes", "scale_free", "search_range",
           "shared_plan", "spread_frames", "window"]
