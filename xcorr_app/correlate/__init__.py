"""Cross-correlation of many matrices: the four forms, the kernels, and the planner.

The forms (``one_to_one``, ``one_to_many``, ``n_to_mn``, ``n_to_m``) are described in
:mod:`xcorr_app.correlate._forms`; :func:`cross_correlate` computes any of them over a full or
bounded shift range, on the CPU (direct sums or FFT) or the GPU (a kernel chosen by the planner);
:func:`correlation_plan` prepares one problem once for pipelines that repeat it (calls of a few
microseconds of host time, batches of pairs in one launch, CUDA-graph replay).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.correlate import cross_correlate
>>> a = np.arange(12.0).reshape(3, 4)
>>> bool(cross_correlate(a, a, max_shift=1, device="cpu")[1, 1] == (a * a).sum())
True
"""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_api": ["METHODS", "choose_method", "correlate_checked", "cross_correlate"],
    "_band": ["band_fits"],
    "_correlation_plan": ["CorrelationPlan", "correlation_plan"],
    "_cost_model": ["useful_macs"],
    "_fft": ["conj_product", "fft_geometry", "fft_of", "irfftn_unnormalized", "padded_spectra",
             "xcorr_fft"],
    "_fft_window": ["correlation_window", "window_applies"],
    "_forms": ["FORMS", "form_layout"],
    "_overlap": ["as_float32", "overlap_xcorr"],
    "_plan_cache": ["clear_plan_cache"],
    "_plan_graph": ["CorrelationGraph"],
    "_planner": ["cache_path", "decide", "heuristic", "run_plan", "set_on_measure"],
    "_plans": ["Plan"],
    "_shifts": ["first_shift", "normalize_max_shift", "output_shape", "shift_origin"],
})

__all__ = ["FORMS", "METHODS", "CorrelationGraph", "CorrelationPlan", "Plan", "as_float32",
           "band_fits", "cache_path", "choose_method", "clear_plan_cache", "conj_product",
           "correlation_plan", "correlation_window", "correlate_checked", "cross_correlate", "decide", "fft_geometry",
           "fft_of", "first_shift", "form_layout", "heuristic", "irfftn_unnormalized",
           "normalize_max_shift", "output_shape", "overlap_xcorr", "padded_spectra", "run_plan",
           "set_on_measure", "shift_origin", "useful_macs", "window_applies", "xcorr_fft"]
