# The public names of xcorr_app.alignment.rigid, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._bidi import (BIDI_THRESHOLD, MAX_BIDI, BidiSource, bidi_source, correct_bidi,
                    decide_bidi, estimate_bidi, parse_bidi)
from ._columns import COLUMN, COLUMNS
from ._despike import (DESPIKE, DespikedSource, decide_despike, decide_specks, despiked,
                       floating, opened)
from ._frame_stats import area_float, converted_stats, demeaned, frame_stats, precision_sums
from ._mask import (NAN_MASK, check_mask_shape, fill_masked, filter_reach, measured_mask,
                    measured_masks, read_mask)
from ._measure import (Measurer, frames_per_chunk, measure_frames, prepared_reference,
                       quiet_if_nonfinite, shared_plan)
from ._methods import (CPU_REFERENCE_COARSE, FFT_REFERENCE_LOWPASS, FFT_REFERENCE_UPSAMPLE,
                       MIN_FRAME_SIDE, NORMALIZATIONS, SUBPIXEL, check_choices,
                       check_frame_shape, fft_reference, prefilter_for, search_range)
from ._prepared import PreparedFrames, patch_key
from ._preprocess import (AUTO_LOWPASS, GPU_FLOAT32_RANGE, WINDOWS, Prefilter,
                          brightness_change, check_filtered_range, check_float32_range,
                          check_gpu_float32, choose_prefilter, parse_prefilter, prepare,
                          scale_free, scaled_by, spread_frames, stack_exponent, window)
from ._references import (CHOICES, check_reference, finite_sums, is_previous, mean_count,
                          mean_of, own_frame, reference_frame, reference_index, refined_passes)
from ._static import (STATIC, STATIC_PREFILTER, StaticSource, decide_static, fit_static,
                      parse_static, refined_or_first, remove_static, static_possible,
                      static_source, still_locked)
