"""Work spread over a Dask cluster (``--workers``, ``--scheduler``, :mod:`xcorr_app.dask`)."""

from ._dask import (align, align_sessions, aligned_blocks, apply_shifts, filter, filter_channels, is_dask_array, iter_blocks,
                    local_client, run_session, save)

__all__ = ["align", "align_sessions", "aligned_blocks", "apply_shifts", "filter", "filter_channels", "is_dask_array", "iter_blocks",
           "local_client", "run_session", "save"]
