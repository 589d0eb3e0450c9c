"""Alignment and filtering on a Dask cluster (``pip install 'xcorr-app[dask]'``).

The public home of :mod:`xcorr_app.distributed`'s functions: ``xcorr_app.dask.align``,
``xcorr_app.dask.filter``, ``xcorr_app.dask.apply_shifts`` and friends.
"""

from .distributed import (align, align_sessions, aligned_blocks, apply_shifts, filter, filter_channels, is_dask_array, iter_blocks,
                          local_client, save)

__all__ = ["align", "align_sessions", "aligned_blocks", "apply_shifts", "filter", "filter_channels", "is_dask_array", "iter_blocks",
           "local_client", "save"]
