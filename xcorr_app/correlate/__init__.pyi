# The public names of xcorr_app.correlate, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._api import METHODS, choose_method, correlate_checked, cross_correlate
from ._band import band_fits
from ._correlation_plan import CorrelationPlan, correlation_plan
from ._cost_model import useful_macs
from ._fft import (conj_product, fft_geometry, fft_of, irfftn_unnormalized, next_smooth,
                   padded_spectra, xcorr_fft)
from ._fft_window import correlation_window, window_applies
from ._forms import FORMS, form_layout
from ._overlap import as_float32, overlap_xcorr
from ._plan_cache import clear_plan_cache
from ._plan_graph import CorrelationGraph
from ._planner import cache_path, decide, heuristic, run_plan, set_on_measure
from ._plans import Plan
from ._shifts import first_shift, normalize_max_shift, output_shape, shift_origin
