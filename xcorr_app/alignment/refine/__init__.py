"""Template passes and the Lucas-Kanade refinement: the template of the aligned frames, the wrap-
around test, the noise judgement of lucas_kanade auto."""

from ._template import (LucasKanadeFit, TemplateAccumulator, TemplateSums, decide_lucas_kanade,
                        kept_rows, periodic_frames, relative_to_first, template_of)

__all__ = ["LucasKanadeFit", "TemplateAccumulator", "TemplateSums", "decide_lucas_kanade",
           "kept_rows", "periodic_frames", "relative_to_first", "template_of"]
