# The public names of xcorr_app.filters, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._api import (box, convolve2d, correlate2d, dog, gaussian, gaussian_light, gaussian_taps,
                   laplace, parse_kernel_spec, sobel, taps_along)
from ._banks import bank_weights, channel_filter, feature_prefilter
from ._gradient import gradient
from ._host_separable import host_separable, host_separable_fits
from ._modes import MODES
from ._reuse import PAPER_SIZES, reuse_correlate
from ._separable import SEPARABLE_SIZES, separable_correlate
from ._validation import check_radius
