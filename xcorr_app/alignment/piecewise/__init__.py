"""Piecewise-rigid registration (patches): the grid, the patch pass, the motion field and its warp."""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
