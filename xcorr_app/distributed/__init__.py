"""Work spread over a Dask cluster (``--workers``, ``--scheduler``, :mod:`xcorr_app.dask`)."""

from ._dask import (align, aligned_blocks, apply_shifts, filter, filter_channels, is_dask_array, iter_blocks,
                    local_client, save)

__all__ = ["align", "aligned_blocks", "apply_shifts", "filter", "filter_channels", "is_dask_array", "iter_blocks",
           "local_client", "save"]
