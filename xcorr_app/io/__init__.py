"""Reading stacks (a folder of TIFFs or one multi-page TIFF; Zarr, OME-Zarr, HDF5, NWB, CZI, ND2), writing
outputs safely (a run's outputs apart from its inputs, locked, and committed together).  Below every other subpackage: it imports none of them.
"""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run imports only the modules it needs
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
