"""Alignment and filtering on a Dask cluster (``pip install 'xcorr-app[dask]'``).

The public home of :mod:`xcorr_app.distributed`'s functions: ``xcorr_app.dask.align``,
``xcorr_app.dask.filter``, ``xcorr_app.dask.apply_shifts`` and friends.
"""

from .distributed import (align, apply_shifts, filter, filter_channels, is_dask_array, iter_blocks,
                          local_client)

__all__ = ["align", "apply_shifts", "filter", "filter_channels", "is_dask_array", "iter_blocks",
           "local_client"]
