"""Work spread over a Dask cluster (``--workers``, ``--scheduler``, :mod:`xcorr_app.dask`)."""

from ._dask import (align, apply_shifts, filter, filter_channels, is_dask_array, iter_blocks,
                    local_client)

__all__ = ["align", "apply_shifts", "filter", "filter_channels", "is_dask_array", "iter_blocks",
           "local_client"]
