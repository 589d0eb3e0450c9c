# The public names of xcorr_app.registration, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._bands import Bands, band_plan, banded_surface
from ._fft_register import fft_shifts, periodic_spectrum, phase_surface
from ._masked import masked_zncc_surfaces
from ._normalize import ZnccLeft, zncc, zncc_left
from ._peak_math import phase_ramps, surface_argmax, wrapped_correlations
from ._peaks import SUBPIXEL_METHODS, find_shifts, on_border, refined_shifts
from ._phase_cross_correlation import phase_cross_correlation
from ._surfaces import GpuSurfaces, summed_area_tables, surface_peaks, table_layout
from ._upsampled import DEFAULT_UPSAMPLE, MAX_UPSAMPLE, refine_upsampled
