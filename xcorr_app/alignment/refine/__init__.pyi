# The public names of xcorr_app.alignment.refine, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._template import (LucasKanadeFit, TemplateAccumulator, TemplateSums, decide_lucas_kanade,
                        kept_from_first, kept_rows, lucas_kanade_choice, periodic_frames,
                        relative_to_first, template_of)
from ._refine_reference import ReferenceFit, fit_margin, reference_coefficients
