# The public names of xcorr_app.alignment.refine, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._template import (LucasKanadeFit, TemplateAccumulator, TemplateSums, decide_lucas_kanade,
                        kept_rows, periodic_frames, relative_to_first, template_of)
