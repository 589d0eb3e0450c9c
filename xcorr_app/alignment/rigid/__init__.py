"""The rigid measuring pass: frames prepared, correlated with the reference, the peak refined and
checked against the FFT reference, a row a frame."""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_columns": ["COLUMN", "COLUMNS"],
    "_frame_stats": ["area_float", "converted_stats", "demeaned", "precision_sums"],
    "_measure": ["Measurer", "frames_per_chunk", "measure_frames", "prepared_reference",
                 "quiet_if_nonfinite", "shared_plan"],
    "_methods": ["CPU_REFERENCE_COARSE", "FFT_REFERENCE_LOWPASS", "FFT_REFERENCE_UPSAMPLE",
                 "NORMALIZATIONS", "SUBPIXEL", "check_choices", "fft_reference", "prefilter_for",
                 "search_range"],
    "_prepared": ["PreparedFrames", "patch_key"],
    "_preprocess": ["AUTO_LOWPASS", "WINDOWS", "choose_prefilter", "parse_prefilter", "prepare",
                    "scale_free", "spread_frames", "window"],
    "_references": ["CHOICES", "is_previous", "mean_count", "reference_frame", "refined_passes"],
})

__all__ = ["AUTO_LOWPASS", "CHOICES", "COLUMN", "COLUMNS", "CPU_REFERENCE_COARSE",
           "FFT_REFERENCE_LOWPASS", "FFT_REFERENCE_UPSAMPLE", "Measurer", "NORMALIZATIONS",
           "PreparedFrames", "SUBPIXEL", "WINDOWS", "area_float", "check_choices",
           "choose_prefilter", "converted_stats", "demeaned", "fft_reference", "frames_per_chunk",
           "is_previous", "mean_count", "measure_frames", "parse_prefilter", "patch_key",
           "precision_sums", "prefilter_for", "prepare", "prepared_reference",
           "quiet_if_nonfinite", "reference_frame", "refined_passes", "scale_free", "search_range",
           "shared_plan", "spread_frames", "window"]
