"""The rigid measuring pass: frames prepared, correlated with the reference, the peak refined and
checked against the FFT reference, a row a frame."""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
