"""Shifting frames: the bilinear and Fourier warps, their sums, the area shifted frames cover."""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
