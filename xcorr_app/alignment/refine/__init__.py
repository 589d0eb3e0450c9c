"""Template passes and the Lucas-Kanade refinement: the template of the aligned frames, the wrap-
around test, the noise judgement of lucas_kanade auto."""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
