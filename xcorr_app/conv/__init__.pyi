# The public names of xcorr_app.conv, each imported at its first use (__init__.py:
# lazy_loader.attach_stub reads the `from .module import name` lines below).

from ._api import METHODS, chosen_method, conv2d, pointwise
from ._im2win import im2win_conv2d
from ._validation import REAL_KINDS
