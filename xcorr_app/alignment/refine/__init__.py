"""Template passes and the Lucas-Kanade refinement: the template of the aligned frames, the wrap-
around test, the noise judgement of lucas_kanade auto."""

import lazy_loader

# the names are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_template": ["LucasKanadeFit", "TemplateAccumulator", "TemplateSums", "decide_lucas_kanade",
                  "kept_rows", "periodic_frames", "relative_to_first", "template_of"],
})

__all__ = ["LucasKanadeFit", "TemplateAccumulator", "TemplateSums", "decide_lucas_kanade",
           "kept_rows", "periodic_frames", "relative_to_first", "template_of"]
