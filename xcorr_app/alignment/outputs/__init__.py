"""What a run leaves behind: its outputs folder (:class:`RunOutputs`, behind
:meth:`AlignResult.save <xcorr_app.alignment.AlignResult.save>` and ``xcorr align``), the aligned
stack's writers, the plots (``drift.png``, ``quality.png``) and the motion field's files."""

import lazy_loader

# the names are imported at first use: a run that writes no plot never imports Pillow's parts
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "_plots": ["PNG_LEVEL", "plot_drift", "plot_quality", "nice_ticks", "COLORS", "PANELS",
               "PLOT_SIZE", "SUPERSAMPLE", "Panel", "curve", "font", "frame_and_labels",
               "grid_lines"],
    "_motion_field": ["plot_motion_field", "write_motion_field"],
    "_save": ["AlignedSink", "RunOutputs", "aligned_as", "aligned_of", "channel_metadata",
              "check_save", "output_names", "result_document", "write_chunks"],
})

__all__ = ["PNG_LEVEL", "AlignedSink", "RunOutputs", "aligned_as", "aligned_of",
           "channel_metadata", "check_save", "output_names", "plot_drift", "plot_motion_field",
           "plot_quality", "result_document", "write_chunks", "write_motion_field"]
