"""Work spread over several GPUs of one host (``--gpus``) or a Dask cluster (``--workers``)."""
