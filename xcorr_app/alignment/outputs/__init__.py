"""What a run leaves behind: its outputs folder (:class:`RunOutputs`, behind
:meth:`AlignResult.save <xcorr_app.alignment.AlignResult.save>` and ``xcorr align``), the aligned
stack's writers, the plots (``drift.png``, ``quality.png``) and the motion field's files."""

import lazy_loader

# the names (__init__.pyi) are imported at first use: a run that writes no plot never imports
# Pillow's parts
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
